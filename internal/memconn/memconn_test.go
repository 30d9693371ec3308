package memconn

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/nettest"

	"github.com/zmesh/zmesh/internal/testutil"
)

// pipe returns a new pair, both ends closed when the test ends.
func pipe(t testing.TB, p *Pool) (*Conn, *Conn) {
	t.Helper()
	a, b := p.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestConformance runs x/net's net.Conn conformance tests: data both ways, racing reads and
// writes, deadlines in the past, present and future, Close during a blocked call,
// concurrent methods.
func TestConformance(t *testing.T) {
	t.Parallel()
	var p Pool
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		a, b := p.Pipe()
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestHalfClose: after CloseWrite the peer reads what was written, then EOF, while the
// other direction still carries; a write after CloseWrite fails.
func TestHalfClose(t *testing.T) {
	t.Parallel()
	a, b := pipe(t, &Pool{})
	if _, err := a.Write([]byte("question")); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("more")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("a write after CloseWrite: %v, want io.ErrClosedPipe", err)
	}
	if got, err := io.ReadAll(b); err != nil || string(got) != "question" {
		t.Fatalf("b read %q, %v; want question, then EOF", got, err)
	}
	if !b.Readable() {
		t.Fatal("b at EOF is not readable")
	}
	if err := b.WaitReadable(); err != nil {
		t.Fatalf("WaitReadable at EOF: %v", err)
	}
	if _, err := b.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	b.CloseWrite()
	if got, err := io.ReadAll(a); err != nil || string(got) != "answer" {
		t.Fatalf("a read %q, %v; want answer, then EOF", got, err)
	}
}

// TestCloseEnds: after Close an end's calls fail with net.ErrClosed; the peer reads what it
// had written, then ECONNRESET since the closed end dropped data it had not read, and its
// writes fail.
func TestCloseEnds(t *testing.T) {
	t.Parallel()
	a, b := pipe(t, &Pool{})
	a.Write([]byte("last words"))
	b.Write([]byte("never read"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a second Close: %v, want net.ErrClosed", err)
	}
	if _, err := a.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
	if err := a.SetDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("SetDeadline after Close: %v, want net.ErrClosed", err)
	}
	if got, err := io.ReadAll(b); !errors.Is(err, syscall.ECONNRESET) || string(got) != "last words" {
		t.Fatalf("b read %q, %v; want the last words, then ECONNRESET", got, err)
	}
	if err := b.WaitReadable(); err != nil || !b.Readable() {
		t.Fatalf("a reset end: WaitReadable %v, Readable %v; want nil, true", err, b.Readable())
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("a write to a closed peer: %v, want io.ErrClosedPipe", err)
	}
	if n := b.TryWrite([]byte("x")); n != 0 {
		t.Fatalf("TryWrite to a closed peer wrote %d bytes", n)
	}

	// An end closed after reading everything leaves its peer a clean EOF.
	a, b = pipe(t, &Pool{})
	b.Write([]byte("read"))
	a.Read(make([]byte, 8))
	a.Close()
	if got, err := io.ReadAll(b); err != nil || len(got) != 0 {
		t.Fatalf("b read %q, %v; want EOF", got, err)
	}
}

// waiting reports whether a goroutine waits to read (readers) or write on d.
func waiting(d *direction, readers bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if readers {
		return d.readers > 0
	}
	return d.writers > 0
}

// fill writes into c until its buffer is full, and returns how much it took.
func fill(t *testing.T, c *Conn) int {
	t.Helper()
	total := 0
	chunk := make([]byte, 10000) // not a divisor of the buffer: the last write is partial
	for {
		n := c.TryWrite(chunk)
		if n == 0 {
			return total
		}
		total += n
	}
}

// TestCloseUnblocks: Close returns a Read, a WaitReadable and a Write blocked on the end
// (net.ErrClosed), and a Write blocked on the peer (io.ErrClosedPipe).
func TestCloseUnblocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		call   func(a, b *Conn) error
		closeB bool // close the peer instead of the blocked end
		want   error
	}{
		{"read", func(a, b *Conn) error { _, err := a.Read(make([]byte, 1)); return err }, false, net.ErrClosed},
		{"wait", func(a, b *Conn) error { return a.WaitReadable() }, false, net.ErrClosed},
		{"write", func(a, b *Conn) error { _, err := a.Write([]byte("x")); return err }, false, net.ErrClosed},
		{"write to peer", func(a, b *Conn) error { _, err := a.Write([]byte("x")); return err }, true, io.ErrClosedPipe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := pipe(t, &Pool{})
			reading := tc.name == "read" || tc.name == "wait"
			if !reading {
				if n := fill(t, a); n != MaxBuffered {
					t.Fatalf("the buffer took %d bytes, want %d", n, MaxBuffered)
				}
			}
			done := make(chan error, 1)
			go func() { done <- tc.call(a, b) }()
			d := a.out
			if reading {
				d = a.in
			}
			testutil.Eventually(t, "the call waits", func() bool { return waiting(d, reading) })
			if tc.closeB {
				b.Close()
			} else {
				a.Close()
			}
			if err := <-done; !errors.Is(err, tc.want) {
				t.Fatalf("the blocked call returned %v, want %v", err, tc.want)
			}
		})
	}
}

// TestDeadlines: a deadline in the past fails a read or write at once; one that passes
// while a call waits ends it; a cleared deadline lets calls wait and succeed again.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	a, b := pipe(t, &Pool{})
	buf := make([]byte, 8)
	timeout := func(what string, err error) {
		t.Helper()
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s: %v, want a timeout (os.ErrDeadlineExceeded)", what, err)
		}
	}

	a.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := a.Read(buf)
	timeout("read past its deadline", err)
	timeout("WaitReadable past its deadline", a.WaitReadable())
	a.SetReadDeadline(time.Time{})
	b.Write([]byte("data"))
	if n, err := a.Read(buf); err != nil || string(buf[:n]) != "data" {
		t.Fatalf("read after the deadline was cleared: %q, %v", buf[:n], err)
	}

	// A deadline set while the read waits ends it.
	done := make(chan error, 1)
	go func() { _, err := a.Read(buf); done <- err }()
	testutil.Eventually(t, "the read waits", func() bool { return waiting(a.in, true) })
	a.SetReadDeadline(time.Now().Add(time.Millisecond))
	timeout("a waiting read", <-done)

	// Writes: a full buffer, then a deadline.
	fill(t, a)
	a.SetWriteDeadline(time.Now().Add(time.Millisecond))
	n, err := a.Write([]byte("more"))
	timeout("a waiting write", err)
	if n != 0 {
		t.Fatalf("a timed-out write into a full buffer wrote %d bytes", n)
	}
	a.SetWriteDeadline(time.Time{})
	go func() { io.Copy(io.Discard, b) }()
	if _, err := a.Write([]byte("more")); err != nil {
		t.Fatalf("write after the deadline was cleared: %v", err)
	}
}

// TestBuffering: a direction takes MaxBuffered bytes and no more; Readable and WaitReadable
// see data without consuming it; once read, a direction holds no buffer.
func TestBuffering(t *testing.T) {
	t.Parallel()
	a, b := pipe(t, &Pool{})
	if b.Readable() {
		t.Fatal("an empty end is readable")
	}
	if n := fill(t, a); n != MaxBuffered {
		t.Fatalf("the buffer took %d bytes, want %d", n, MaxBuffered)
	}
	if !b.Readable() {
		t.Fatal("an end with data is not readable")
	}
	if err := b.WaitReadable(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, MaxBuffered+1)
	n, err := io.ReadAtLeast(b, got, MaxBuffered)
	if err != nil || n != MaxBuffered {
		t.Fatalf("read %d bytes, %v; want %d", n, err, MaxBuffered)
	}
	d := a.out
	d.mu.Lock()
	chunks := d.count
	d.mu.Unlock()
	if chunks != 0 {
		t.Fatalf("a drained direction holds %d chunks", chunks)
	}
	// A part of a chunk, read, is given back too.
	a.Write([]byte("x"))
	b.Read(got)
	d.mu.Lock()
	chunks = d.count
	d.mu.Unlock()
	if chunks != 0 {
		t.Fatalf("a drained direction holds %d chunks", chunks)
	}
	// An idle pair is then its one allocation: both ends and directions (no deadline set).
	if size := unsafe.Sizeof(pair{}); size > 1<<10 {
		t.Fatalf("an idle pair holds %d bytes, want at most 1 KiB", size)
	}
}

// TestStress moves random data both ways at once, in writes of random sizes (some with
// TryWrite) and reads of random sizes, and checks every byte and the EOF at each end; run
// it with -race.
func TestStress(t *testing.T) {
	t.Parallel()
	var p Pool
	for range 4 {
		a, b := pipe(t, &p)
		var wg sync.WaitGroup
		send := func(c *Conn, seed uint64) [32]byte {
			rng := rand.New(rand.NewPCG(seed, 1))
			h := sha256.New()
			buf := make([]byte, 100<<10)
			for range 200 {
				p := buf[:rng.IntN(len(buf))+1]
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				h.Write(p)
				if rng.IntN(4) == 0 {
					n := c.TryWrite(p)
					p = p[n:]
				}
				if _, err := c.Write(p); err != nil {
					t.Error(err)
				}
			}
			c.CloseWrite()
			return [32]byte(h.Sum(nil))
		}
		recv := func(c *Conn, seed uint64) [32]byte {
			rng := rand.New(rand.NewPCG(seed, 2))
			h := sha256.New()
			buf := make([]byte, 80<<10)
			for {
				if rng.IntN(3) == 0 {
					if err := c.WaitReadable(); err != nil {
						t.Error(err)
					}
				}
				n, err := c.Read(buf[:rng.IntN(len(buf))+1])
				h.Write(buf[:n])
				if err == io.EOF {
					return [32]byte(h.Sum(nil))
				}
				if err != nil {
					t.Error(err)
					return [32]byte{}
				}
			}
		}
		var sentAB, sentBA, gotAB, gotBA [32]byte
		seed := rand.Uint64()
		wg.Go(func() { sentAB = send(a, seed) })
		wg.Go(func() { sentBA = send(b, seed+1) })
		wg.Go(func() { gotAB = recv(b, seed) })
		wg.Go(func() { gotBA = recv(a, seed+1) })
		wg.Wait()
		if sentAB != gotAB || sentBA != gotBA {
			t.Fatalf("the data differs (seed %d)", seed)
		}
	}
}

// TestNoAllocations: in steady state, writes and reads of small and large messages allocate
// nothing: the chunks go round through the pool.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not kept under the race detector")
	}
	var p Pool
	a, b := pipe(t, &p)
	for _, size := range []int{1 << 10, 64 << 10, MaxBuffered} {
		msg, got := bytes.Repeat([]byte{'m'}, size), make([]byte, size)
		roundTrip := func() {
			if _, err := a.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(b, got); err != nil {
				t.Fatal(err)
			}
			if n := b.TryWrite(got[:min(size, 1<<10)]); n == 0 {
				t.Fatal("TryWrite into an empty buffer wrote nothing")
			}
			if err := a.WaitReadable(); err != nil {
				t.Fatal(err)
			}
			a.Read(got)
		}
		roundTrip()
		if allocs := testing.AllocsPerRun(100, roundTrip); allocs != 0 {
			t.Errorf("%.1f allocations per round trip of %d bytes, want none", allocs, size)
		}
	}
}

// BenchmarkStream moves 64 KiB writes one way to a reader reading 32 KiB at a time.
func BenchmarkStream(b *testing.B) {
	var p Pool
	w, r := p.Pipe()
	defer w.Close()
	msg := make([]byte, 64<<10)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	done := make(chan struct{})
	go func() {
		io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, make([]byte, 32<<10))
		close(done)
	}()
	for b.Loop() {
		w.Write(msg)
	}
	w.CloseWrite()
	<-done
}

// BenchmarkPingPong sends 1 KiB back and forth between two goroutines.
func BenchmarkPingPong(b *testing.B) {
	var p Pool
	x, y := p.Pipe()
	defer x.Close()
	defer y.Close()
	go func() {
		buf := make([]byte, 1<<10)
		for {
			if _, err := io.ReadFull(y, buf); err != nil {
				return
			}
			if _, err := y.Write(buf); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, 1<<10)
	b.SetBytes(int64(2 * len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		x.Write(msg)
		io.ReadFull(x, msg)
	}
}
