package xgress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	pool := NewPool()
	var stream bytes.Buffer
	for _, tc := range []struct {
		typ    Type
		flags  uint8
		origin Origin
		data   []byte
	}{
		{Payload, 0, Initiator, []byte("hello")},
		{Payload, FlagEOF, Terminator, nil},
		{Ack, 0, Terminator, nil},
		{Payload, 0, Initiator, bytes.Repeat([]byte{7}, MaxData)},
		{Close, 0, Initiator, []byte("service unreachable")},
		{Probe, 0, Initiator, nil},
	} {
		f := pool.Get(len(tc.data))
		f.Type, f.Flags, f.Origin, f.Circuit, f.Seq = tc.typ, tc.flags, tc.origin, 1<<40+3, 1<<33+9
		if err := f.SetData(tc.data); err != nil {
			t.Fatal(err)
		}
		stream.Write(f.Bytes())
		f.Release()
	}
	r := NewReader(bufio.NewReader(&stream), pool)
	for i, want := range []struct {
		typ  Type
		n    int
		flag uint8
		orig Origin
	}{{Payload, 5, 0, Initiator}, {Payload, 0, FlagEOF, Terminator}, {Ack, 0, 0, Terminator}, {Payload, MaxData, 0, Initiator}, {Close, 19, 0, Initiator}, {Probe, 0, 0, Initiator}} {
		f, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Type != want.typ || len(f.Data) != want.n || f.Flags != want.flag || f.Origin != want.orig || f.Circuit != 1<<40+3 || f.Seq != 1<<33+9 {
			t.Fatalf("frame %d: %+v", i, f)
		}
		if want.n <= SmallData && cap(f.buf) != HeaderSize+SmallData {
			t.Errorf("frame %d of %d bytes is not small", i, want.n)
		}
		f.Release()
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
}

func TestMalformedFrames(t *testing.T) {
	t.Parallel()
	pool := NewPool()
	good := func() []byte {
		f := pool.Get(3)
		f.Type, f.Circuit = Payload, 1
		f.SetData([]byte("abc"))
		return append([]byte(nil), f.Bytes()...)
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"unknown type":   func(b []byte) []byte { b[0] = 9; return b },
		"zero type":      func(b []byte) []byte { b[0] = 0; return b },
		"unknown origin": func(b []byte) []byte { b[2] = 2; return b },
		"too long":       func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0, 1, 0, 1; return b },
	} {
		if _, err := NewReader(bytes.NewReader(mutate(good())), pool).Read(); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := NewReader(bytes.NewReader(good()[:HeaderSize+1]), pool).Read(); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated data: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(good()[:10]), pool).Read(); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated header: %v", err)
	}
	big := pool.Get(SmallData)
	if err := big.SetData(make([]byte, SmallData+1)); !errors.Is(err, ErrFrame) {
		t.Errorf("data larger than a small frame: %v", err)
	}
}

// BenchmarkFrameReadWrite encodes and decodes 16 KiB payloads through a pool: no allocation
// per frame in steady state.
func BenchmarkFrameReadWrite(b *testing.B) {
	pool := NewPool()
	data := bytes.Repeat([]byte{1}, 16<<10)
	var buf bytes.Buffer
	r := NewReader(bufio.NewReaderSize(&buf, 64<<10), pool)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		f := pool.Get(len(data))
		f.Type, f.Circuit = Payload, 42
		f.SetData(data)
		buf.Write(f.Bytes())
		f.Release()
		g, err := r.Read()
		if err != nil {
			b.Fatal(err)
		}
		g.Release()
	}
}

// A frame released twice would be handed to two owners by the pool: the second release is
// refused and counted, and the pool hands the frame out once.
func TestFrameReleasedTwiceIsRefused(t *testing.T) {
	t.Parallel()
	pool := NewPool()
	for i, size := range []int{0, MaxData} {
		f := pool.Get(size)
		f.Release()
		f.Release()
		if got := pool.DoubleReleases(); got != uint64(i+1) {
			t.Fatalf("double releases counted: %d, want %d", got, i+1)
		}
		g, h := pool.Get(size), pool.Get(size)
		if g == h {
			t.Fatalf("the pool handed one frame of %d bytes to two owners", size)
		}
		g.Release()
		h.Release()
	}
}
