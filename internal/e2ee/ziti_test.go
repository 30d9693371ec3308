package e2ee

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openziti/secretstream"
	"github.com/openziti/secretstream/kx"
)

// zitiPair returns the two ends of OpenZiti's scheme over loopback TCP.
func zitiPair(t testing.TB) (client, server *ZitiConn) {
	t.Helper()
	cc, sc := tcpPair(t)
	ck, err := NewZitiKey()
	if err != nil {
		t.Fatal(err)
	}
	sk, err := NewZitiKey()
	if err != nil {
		t.Fatal(err)
	}
	// Each end sends its header at once and reads the peer's on its first Read.
	if client, err = ZitiClient(cc, ck, sk.Public()); err != nil {
		t.Fatal(err)
	}
	if server, err = ZitiServer(sc, sk, ck.Public()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); sc.Close() })
	return client, server
}

// TestZitiRoundTrip: both roles exchange data both ways, in writes larger than a frame and
// smaller, with half-close.
func TestZitiRoundTrip(t *testing.T) {
	client, server := zitiPair(t)
	request := randomBytes(t, 3*zitiWriteChunk+5)
	reply := randomBytes(t, 1<<20)
	errc := make(chan error, 1)
	go func() {
		got, err := io.ReadAll(server)
		switch {
		case err != nil:
			errc <- err
		case !bytes.Equal(got, request):
			errc <- errors.New("the server read other bytes than the client wrote")
		default:
			if _, err := server.Write(reply[:1]); err != nil {
				errc <- err
				return
			}
			if _, err := server.Write(reply[1:]); err != nil {
				errc <- err
				return
			}
			errc <- server.CloseWrite()
		}
	}()
	for _, part := range [][]byte{request[:1], request[1:100], request[100:]} {
		if _, err := client.Write(part); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); !errors.Is(err, errWriteClosed) {
		t.Errorf("write after CloseWrite: %v", err)
	}
	got, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(got, reply) {
		t.Fatalf("the client read %d bytes (%v), want the %d of the reply", len(got), err, len(reply))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// readFrame reads one frame of the scheme off a raw conn.
func readFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFrame(t *testing.T, w io.Writer, msg []byte) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	if _, err := w.Write(append(b, msg...)); err != nil {
		t.Fatal(err)
	}
}

// sdkPeer is the far end of a circuit done with the secretstream and kx API the way
// sdk-golang's edge conn does it: session keys from the key pair, an encryptor whose header
// is the first message, a decryptor made from the peer's first message.
type sdkPeer struct {
	conn net.Conn
	enc  secretstream.Encryptor
	rx   []byte
	dec  secretstream.Decryptor
}

func newSDKPeer(t *testing.T, conn net.Conn, kp *kx.KeyPair, peerKey []byte, dialer bool) *sdkPeer {
	t.Helper()
	var rx, tx []byte
	var err error
	if dialer {
		rx, tx, err = kp.ClientSessionKeys(peerKey)
	} else {
		rx, tx, err = kp.ServerSessionKeys(peerKey)
	}
	if err != nil {
		t.Fatal(err)
	}
	enc, header, err := secretstream.NewEncryptor(tx)
	if err != nil {
		t.Fatal(err)
	}
	writeFrame(t, conn, header)
	return &sdkPeer{conn: conn, enc: enc, rx: rx}
}

func (p *sdkPeer) send(t *testing.T, msg string) {
	t.Helper()
	ct, err := p.enc.Push([]byte(msg), secretstream.TagMessage)
	if err != nil {
		t.Fatal(err)
	}
	writeFrame(t, p.conn, ct)
}

func (p *sdkPeer) receive(t *testing.T) string {
	t.Helper()
	if p.dec == nil {
		header := readFrame(t, p.conn)
		if len(header) != secretstream.StreamHeaderBytes {
			t.Fatalf("the first frame is %d bytes, not a %d-byte header", len(header), secretstream.StreamHeaderBytes)
		}
		var err error
		if p.dec, err = secretstream.NewDecryptor(p.rx, header); err != nil {
			t.Fatal(err)
		}
	}
	msg, tag, err := p.dec.Pull(readFrame(t, p.conn))
	if err != nil || tag != secretstream.TagMessage {
		t.Fatalf("pull: tag %d, %v", tag, err)
	}
	return string(msg)
}

// zitiEnd returns zmesh's end of OpenZiti's scheme over loopback TCP (the hosting end if
// hosts), with its key, and the peer's raw connection and key pair.
func zitiEnd(t *testing.T, hosts bool) (zc *ZitiConn, raw net.Conn, key *ZitiKey, kp *kx.KeyPair) {
	t.Helper()
	cc, sc := tcpPair(t)
	t.Cleanup(func() { cc.Close(); sc.Close() })
	key, err := NewZitiKey()
	if err != nil {
		t.Fatal(err)
	}
	if kp, err = kx.NewKeyPair(); err != nil {
		t.Fatal(err)
	}
	if hosts {
		zc, err = ZitiServer(cc, key, kp.Public())
	} else {
		zc, err = ZitiClient(cc, key, kp.Public())
	}
	if err != nil {
		t.Fatal(err)
	}
	return zc, sc, key, kp
}

// TestZitiMatchesSecretstream: each role talks to a peer driven directly by the secretstream
// and kx API as sdk-golang drives it, in the other role.
func TestZitiMatchesSecretstream(t *testing.T) {
	for _, zmeshDials := range []bool{true, false} {
		name := "zmesh dials"
		if !zmeshDials {
			name = "zmesh hosts"
		}
		t.Run(name, func(t *testing.T) {
			zc, sc, key, kp := zitiEnd(t, !zmeshDials)
			peer := newSDKPeer(t, sc, kp, key.Public(), !zmeshDials)
			peer.send(t, "from the OpenZiti end")
			peer.send(t, "and more")
			buf := make([]byte, 100)
			var got []byte
			for len(got) < len("from the OpenZiti endand more") {
				n, err := zc.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, buf[:n]...)
			}
			if string(got) != "from the OpenZiti endand more" {
				t.Fatalf("zmesh's end read %q", got)
			}
			if _, err := zc.Write([]byte("from the zmesh end")); err != nil {
				t.Fatal(err)
			}
			if got := peer.receive(t); got != "from the zmesh end" {
				t.Fatalf("the OpenZiti end read %q", got)
			}
		})
	}
}

// TestZitiTampering: what a router on the path alters, drops, replays, truncates or
// malforms is refused, with an error that says what failed.
func TestZitiTampering(t *testing.T) {
	seal := func(t *testing.T, enc secretstream.Encryptor, msg string) []byte {
		ct, err := enc.Push([]byte(msg), secretstream.TagMessage)
		if err != nil {
			t.Fatal(err)
		}
		return ct
	}
	cases := []struct {
		name string
		// send writes to raw what the host's end "sent"; header is its genuine header.
		send func(t *testing.T, raw net.Conn, header []byte, enc secretstream.Encryptor)
		want string
		auth bool
	}{
		{"a flipped bit", func(t *testing.T, raw net.Conn, header []byte, enc secretstream.Encryptor) {
			writeFrame(t, raw, header)
			ct := seal(t, enc, "hello")
			ct[3] ^= 1
			writeFrame(t, raw, ct)
		}, "message 0 of 22 bytes", true},
		{"a dropped message", func(t *testing.T, raw net.Conn, header []byte, enc secretstream.Encryptor) {
			writeFrame(t, raw, header)
			seal(t, enc, "dropped")
			writeFrame(t, raw, seal(t, enc, "hello"))
		}, "message 0", true},
		{"a replayed message", func(t *testing.T, raw net.Conn, header []byte, enc secretstream.Encryptor) {
			writeFrame(t, raw, header)
			ct := seal(t, enc, "hello")
			writeFrame(t, raw, ct)
			writeFrame(t, raw, ct)
		}, "message 1", true},
		{"a short header", func(t *testing.T, raw net.Conn, header []byte, _ secretstream.Encryptor) {
			writeFrame(t, raw, header[:23])
		}, "bad stream header: a first frame of 23 bytes", true},
		{"another header", func(t *testing.T, raw net.Conn, header []byte, enc secretstream.Encryptor) {
			other := bytes.Clone(header)
			other[0] ^= 1
			writeFrame(t, raw, other)
			writeFrame(t, raw, seal(t, enc, "hello"))
		}, "message 0", true},
		{"an oversize frame", func(t *testing.T, raw net.Conn, header []byte, _ secretstream.Encryptor) {
			writeFrame(t, raw, header)
			raw.Write(binary.BigEndian.AppendUint32(nil, MaxZitiFrame+1))
		}, "oversize frame of 16777234 bytes", true},
		{"an empty frame", func(t *testing.T, raw net.Conn, header []byte, _ secretstream.Encryptor) {
			writeFrame(t, raw, header)
			writeFrame(t, raw, nil)
		}, "empty frame", true},
		{"a truncated frame", func(t *testing.T, raw net.Conn, header []byte, enc secretstream.Encryptor) {
			writeFrame(t, raw, header)
			ct := seal(t, enc, "hello")
			raw.Write(binary.BigEndian.AppendUint32(nil, uint32(len(ct))))
			raw.Write(ct[:len(ct)-1])
			raw.(*net.TCPConn).CloseWrite()
		}, "ended inside a frame", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			zc, sc, key, kp := zitiEnd(t, false)
			_, tx, err := kp.ServerSessionKeys(key.Public())
			if err != nil {
				t.Fatal(err)
			}
			enc, header, err := secretstream.NewEncryptor(tx)
			if err != nil {
				t.Fatal(err)
			}
			c.send(t, sc, header, enc)
			buf := make([]byte, 64)
			var rerr error
			for rerr == nil {
				var n int
				n, rerr = zc.Read(buf)
				if n > 0 && string(buf[:n]) != "hello" {
					t.Fatalf("read %q", buf[:n])
				}
			}
			if !strings.Contains(rerr.Error(), c.want) || errors.Is(rerr, ErrAuthentication) != c.auth {
				t.Fatalf("error %q; want one saying %q (authentication: %v)", rerr, c.want, c.auth)
			}
			if _, again := zc.Read(buf); again == nil || again.Error() != rerr.Error() {
				t.Fatalf("the error is not sticky: %v", again)
			}
		})
	}
}

// TestZitiReadTimeoutResumes: a read deadline that passes inside a frame loses nothing: the
// next Read goes on with the frame.
func TestZitiReadTimeoutResumes(t *testing.T) {
	zc, sc, key, kp := zitiEnd(t, false)
	peer := newSDKPeer(t, sc, kp, key.Public(), false)
	ct, err := peer.enc.Push([]byte("in two parts"), secretstream.TagMessage)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(ct)))
	frame = append(frame, ct...)
	buf := make([]byte, 64)
	for _, cut := range []int{2, 10} { // inside the length, then inside the message
		sc.Write(frame[:cut])
		zc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := zc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read of a partial frame: %v", err)
		}
		sc.Write(frame[cut:])
		zc.SetReadDeadline(time.Time{})
		n, err := zc.Read(buf)
		if err != nil || string(buf[:n]) != "in two parts" {
			t.Fatalf("read after the deadline: %q (%v)", buf[:n], err)
		}
		if ct, err = peer.enc.Push([]byte("in two parts"), secretstream.TagMessage); err != nil {
			t.Fatal(err)
		}
		frame = append(binary.BigEndian.AppendUint32(nil, uint32(len(ct))), ct...)
	}
}

// bytesConn is a net.Conn that reads a fixed stream and discards what is written.
type bytesConn struct {
	net.Conn // nil: only Read and Write are called
	r        io.Reader
}

func (c bytesConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c bytesConn) Write(p []byte) (int, error) { return len(p), nil }

// FuzzZitiRead feeds the frame reader any stream after a genuine header: it returns no
// more plaintext than the stream could hold and ends with an error, never a panic.
func FuzzZitiRead(f *testing.F) {
	key, err := NewZitiKey()
	if err != nil {
		f.Fatal(err)
	}
	kp, err := kx.NewKeyPair()
	if err != nil {
		f.Fatal(err)
	}
	_, tx, err := kp.ServerSessionKeys(key.Public())
	if err != nil {
		f.Fatal(err)
	}
	enc, header, err := secretstream.NewEncryptor(tx)
	if err != nil {
		f.Fatal(err)
	}
	var stream []byte
	for _, msg := range []string{"hello", "", "a longer message, of more than one read"} {
		ct, err := enc.Push([]byte(msg), secretstream.TagMessage)
		if err != nil {
			f.Fatal(err)
		}
		stream = append(binary.BigEndian.AppendUint32(stream, uint32(len(ct))), ct...)
		f.Add(bytes.Clone(stream))
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 17, 1, 2})
	headerFrame := append(binary.BigEndian.AppendUint32(nil, uint32(len(header))), header...)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := append(bytes.Clone(headerFrame), data...)
		zc, err := ZitiClient(bytesConn{r: bytes.NewReader(in)}, key, kp.Public())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 7)
		total := 0
		for range len(in) + 1 {
			n, err := zc.Read(buf)
			if n < 0 || n > len(buf) {
				t.Fatalf("read returned %d", n)
			}
			total += n
			if err != nil {
				if total > len(data) {
					t.Fatalf("%d bytes of plaintext from %d bytes of stream", total, len(data))
				}
				return
			}
		}
		t.Fatal("the reader never ended")
	})
}

type zitiCloseWriter struct{ *ZitiConn }

func (c zitiCloseWriter) Close() error { return c.CloseWrite() }

// BenchmarkZiti moves data one way over loopback TCP in 1 MiB writes (16 messages each),
// read in 64 KiB reads.
func BenchmarkZiti(b *testing.B) {
	client, server := zitiPair(b)
	benchmarkOneWay(b, zitiCloseWriter{client}, server)
}

// BenchmarkZitiMessage sends one 16 KiB message per op and reads it back on the other end,
// for allocations per message.
func BenchmarkZitiMessage(b *testing.B) {
	client, server := zitiPair(b)
	data := make([]byte, 16<<10)
	buf := make([]byte, len(data))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Write(data); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(server, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// TestZitiFrameLengthAllocatesAsBytesArrive: a frame's length, the peer's word, makes the
// reader allocate only for the bytes that arrived: a peer that announces the largest frame
// and stalls after one byte pins no more than a pooled buffer.
func TestZitiFrameLengthAllocatesAsBytesArrive(t *testing.T) {
	zc, sc, key, kp := zitiEnd(t, false)
	newSDKPeer(t, sc, kp, key.Public(), false) // sends its 24-byte header
	readTimesOut := func() {
		t.Helper()
		zc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := zc.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read of a stalled frame: %v", err)
		}
	}
	readTimesOut() // the header is opened; no message yet
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sc.Write(append(binary.BigEndian.AppendUint32(nil, MaxZitiFrame), 1))
	readTimesOut()
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew >= 1<<20 {
		t.Fatalf("a stalled frame of %d bytes, 1 sent, allocated %d bytes", MaxZitiFrame, grew)
	} else {
		t.Logf("a stalled frame of %d bytes, 1 sent, allocated %d bytes", MaxZitiFrame, grew)
	}
}
