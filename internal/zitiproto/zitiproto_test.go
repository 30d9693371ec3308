package zitiproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
)

// wire builds a message the way channel v2 lays it out, independently of Writer.
func wire(ct, seq int32, headers [][2][]byte, body []byte) []byte {
	var h []byte
	for _, kv := range headers {
		h = append(h, kv[0]...)
		h = binary.LittleEndian.AppendUint32(h, uint32(len(kv[1])))
		h = append(h, kv[1]...)
	}
	b := append([]byte{3, 6, 9, 12}, le32(uint32(ct))...)
	b = append(b, le32(uint32(seq))...)
	b = append(b, le32(uint32(len(h)))...)
	b = append(b, le32(uint32(len(body)))...)
	return append(append(b, h...), body...)
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestReadWireFormat(t *testing.T) {
	raw := wire(ContentConnect, 7, [][2][]byte{{le32(uint32(HeaderConnID)), le32(42)}, {le32(uint32(HeaderPublicKey)), []byte("key")}}, []byte("token"))
	var m Message
	if err := NewReader(bytes.NewReader(raw), nil).Read(&m); err != nil {
		t.Fatal(err)
	}
	id, ok := m.Uint32(HeaderConnID)
	key, _ := m.String(HeaderPublicKey)
	if m.ContentType != ContentConnect || m.Sequence != 7 || !ok || id != 42 || key != "key" || string(m.Body) != "token" {
		t.Fatalf("read %+v conn %d key %q", m, id, key)
	}
	if _, ok := m.Header(HeaderAppData); ok {
		t.Fatal("absent header found")
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var req Message
	req.Reset(ContentLatency)
	req.Sequence = 3
	req.PutUint64(HeaderProbeTime, 123456789)
	req.PutString(HeaderCallerID, "alice")
	if err := w.Write(&req); err != nil {
		t.Fatal(err)
	}
	var got Message
	rd := NewReader(&buf, nil)
	if err := rd.Read(&got); err != nil {
		t.Fatal(err)
	}
	var reply Message
	reply.Reset(ContentResult)
	reply.PutBool(HeaderResultSuccess, true)
	reply.ReplyTo(&got)
	reply.Body = []byte("ok")
	if err := w.Write(&reply); err != nil {
		t.Fatal(err)
	}
	var back Message
	if err := rd.Read(&back); err != nil {
		t.Fatal(err)
	}
	rf, isReply := back.ReplyFor()
	pt, _ := back.Uint64(HeaderProbeTime)
	if !isReply || rf != 3 || pt != 123456789 || !back.Bool(HeaderResultSuccess) || string(back.Body) != "ok" {
		t.Fatalf("reply %+v: replyFor %d probe %d", back, rf, pt)
	}
	if _, ok := back.Header(HeaderCallerID); ok {
		t.Fatal("a header below 128 was reflected")
	}
	if err := rd.Read(&back); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v", err)
	}
}

// TestReadSkipsMagicAlreadyRead: a listener that read the magic to tell the protocol hands
// it back.
func TestReadSkipsMagicAlreadyRead(t *testing.T) {
	raw := wire(ContentHello, -1, nil, []byte("id"))
	var m Message
	if err := NewReader(bytes.NewReader(raw[4:]), raw[:4]).Read(&m); err != nil || m.ContentType != ContentHello || m.Sequence != -1 || string(m.Body) != "id" {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestReadRefuses(t *testing.T) {
	big := wire(ContentData, 1, nil, nil)
	binary.LittleEndian.PutUint32(big[16:], MaxBody+1)
	bigHeaders := wire(ContentData, 1, nil, nil)
	binary.LittleEndian.PutUint32(bigHeaders[12:], MaxHeaders+1)
	overrun := wire(ContentData, 1, [][2][]byte{{le32(1000), []byte("abcd")}}, nil)
	binary.LittleEndian.PutUint32(overrun[20+4:], 5)
	short := wire(ContentData, 1, [][2][]byte{{le32(1000), nil}}, nil)
	binary.LittleEndian.PutUint32(short[12:], 7)
	short = short[:len(short)-1]
	bad := wire(ContentData, 1, nil, nil)
	bad[3] = 0x0d
	for name, c := range map[string]struct {
		raw  []byte
		want error
	}{
		"body":     {big, ErrTooLarge},
		"headers":  {bigHeaders, ErrTooLarge},
		"overrun":  {overrun, ErrMalformed},
		"short":    {short, ErrMalformed},
		"magic":    {bad, ErrBadMagic},
		"truncate": {wire(ContentData, 1, nil, []byte("body"))[:22], io.ErrUnexpectedEOF},
	} {
		var m Message
		if err := NewReader(bytes.NewReader(c.raw), nil).Read(&m); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestPutReplacesHeader(t *testing.T) {
	var m Message
	m.Reset(ContentData)
	m.PutUint32(HeaderFlags, 1)
	m.PutUint32(HeaderFlags, FlagFIN|FlagMultipart)
	n := 0
	m.Each(func(int32, []byte) { n++ })
	if v, _ := m.Uint32(HeaderFlags); v != FlagFIN|FlagMultipart || n != 1 {
		t.Fatalf("flags %d in %d headers", v, n)
	}
}

func FuzzRead(f *testing.F) {
	f.Add(wire(ContentConnect, 7, [][2][]byte{{le32(1000), le32(42)}}, []byte("token")))
	f.Add(wire(ContentData, 1, nil, nil))
	f.Add([]byte{3, 6, 9, 12, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m Message
		rd := NewReader(bytes.NewReader(raw), nil)
		for rd.Read(&m) == nil {
			// What was read writes back as a message that reads the same.
			var buf bytes.Buffer
			if err := NewWriter(&buf).Write(&m); err != nil {
				t.Fatal(err)
			}
			var again Message
			if err := NewReader(&buf, nil).Read(&again); err != nil {
				t.Fatalf("rewritten message unreadable: %v", err)
			}
			if again.ContentType != m.ContentType || again.Sequence != m.Sequence || !bytes.Equal(again.Body, m.Body) || len(again.hdrs) != len(m.hdrs) {
				t.Fatalf("rewritten %+v, read %+v", again, m)
			}
		}
	})
}

// BenchmarkDataMessage writes and reads one Data message per op, as the router's circuit
// adapters do.
func BenchmarkDataMessage(b *testing.B) {
	payload := make([]byte, 32<<10)
	var pipe bytes.Buffer
	w, rd := NewWriter(&pipe), NewReader(&pipe, nil)
	var out, in Message
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		out.Reset(ContentData)
		out.Sequence = 1
		out.PutUint32(HeaderConnID, 5)
		out.PutUint32(HeaderSeq, 9)
		out.Body = payload
		if err := w.Write(&out); err != nil {
			b.Fatal(err)
		}
		if err := rd.Read(&in); err != nil {
			b.Fatal(err)
		}
		pipe.Reset()
	}
}

// TestReuseReadMessage: a message read and then rebuilt keeps its headers and body apart.
func TestReuseReadMessage(t *testing.T) {
	raw := wire(ContentLatency, 9, [][2][]byte{{le32(uint32(HeaderProbeTime)), []byte("12345678")}}, []byte("some body"))
	var req, m Message
	rd := NewReader(bytes.NewReader(append(raw, raw...)), nil)
	if err := rd.Read(&m); err != nil {
		t.Fatal(err)
	}
	if err := rd.Read(&req); err != nil {
		t.Fatal(err)
	}
	m.SetResult(&req, false, "refused: a long enough reason")
	rf, _ := m.ReplyFor()
	pt, _ := m.Header(HeaderProbeTime)
	if m.ContentType != ContentResult || m.Bool(HeaderResultSuccess) || rf != 9 || string(pt) != "12345678" || string(m.Body) != "refused: a long enough reason" {
		t.Fatalf("result %+v", m)
	}
	m.SetState(ContentStateClosed, 7, "gone")
	if id, _ := m.Uint32(HeaderConnID); id != 7 || string(m.Body) != "gone" || len(m.hdrs) != 1 {
		t.Fatalf("state %+v", m)
	}
}

// Readers of 64 peers that each declare the largest body and send 1 KiB of it hold about
// what arrived, not what was declared; a message that then arrives whole reads intact, and
// ReadMax refuses a hello larger than MaxHello before reading it.
func TestReadGrowsAsBytesArrive(t *testing.T) {
	const peers = 64
	section := wire(ContentData, 1, nil, nil)
	binary.LittleEndian.PutUint32(section[16:], MaxBody)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var readers sync.WaitGroup
	var pipes []*io.PipeWriter
	for range peers {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		readers.Go(func() {
			var m Message
			NewReader(pr, nil).Read(&m)
		})
		// A pipe's Write returns once the reader took every byte.
		if _, err := pw.Write(append(append([]byte(nil), section...), make([]byte, 1<<10)...)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	for _, pw := range pipes {
		pw.Close()
	}
	readers.Wait()
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("%d stalled peers that declared %d-byte bodies hold %d MiB", peers, MaxBody, grew>>20)
	}

	body := bytes.Repeat([]byte("0123456789abcdef"), 300_000)
	var m Message
	if err := NewReader(bytes.NewReader(wire(ContentData, 2, nil, body)), nil).Read(&m); err != nil || !bytes.Equal(m.Body, body) {
		t.Fatalf("a %d-byte body read as %d bytes (%v)", len(body), len(m.Body), err)
	}
	hello := wire(ContentHello, -1, nil, make([]byte, MaxHello+1))
	if err := NewReader(bytes.NewReader(hello[:SectionSize]), nil).ReadMax(&m, MaxHello, MaxHello); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a hello of %d bytes read: %v", MaxHello+1, err)
	}
}

// A clone keeps the request's headers and body when the message it came from is read into
// again, and is sized to the request, not to the storage it came from.
func TestCloneOwnsItsStorage(t *testing.T) {
	rd := NewReader(io.MultiReader(
		bytes.NewReader(wire(ContentData, 1, nil, make([]byte, 1<<20))),
		bytes.NewReader(wire(ContentConnect, 2, [][2][]byte{{le32(uint32(HeaderConnID)), le32(9)}, {le32(uint32(HeaderAppData)), []byte(`{"a":1}`)}}, []byte("token"))),
		bytes.NewReader(wire(ContentData, 3, [][2][]byte{{le32(uint32(HeaderConnID)), le32(5)}}, []byte("other bytes"))),
	), nil)
	var m Message
	for range 2 {
		if err := rd.Read(&m); err != nil {
			t.Fatal(err)
		}
	}
	c := m.Clone()
	if err := rd.Read(&m); err != nil {
		t.Fatal(err)
	}
	id, _ := c.Uint32(HeaderConnID)
	app, _ := c.String(HeaderAppData)
	if c.ContentType != ContentConnect || c.Sequence != 2 || id != 9 || app != `{"a":1}` || string(c.Body) != "token" {
		t.Fatalf("the clone changed with its origin: %+v conn %d app %q", c, id, app)
	}
	if cap(c.buf) > 64 {
		t.Fatalf("a clone of a small request holds %d bytes", cap(c.buf))
	}
}
