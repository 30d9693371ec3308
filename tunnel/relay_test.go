package tunnel

import (
	"context"
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/zmesh/zmesh/internal/memconn"
	"github.com/zmesh/zmesh/internal/socketpair"
)

// opaque hides a connection's type, as an encrypted or multiplexed circuit end does: Join
// copies it through a buffer.
type opaque struct{ net.Conn }

func (o opaque) CloseWrite() error { return o.Conn.(closeWriter).CloseWrite() }

// joined returns the outer ends of two socket pairs whose inner ends a Relay joins, one
// of them opaque, and a channel closed when Join returns. With pipes, the first pair is an
// in-process pair instead, as the router's tunnel's end of a circuit is.
func joined(t testing.TB, r *Relay, pipes *memconn.Pool) (net.Conn, net.Conn, chan struct{}) {
	t.Helper()
	var a, aIn net.Conn
	var err error
	if pipes != nil {
		a, aIn = pipes.Pipe()
	} else if a, aIn, err = socketpair.New(); err != nil {
		t.Fatal(err)
	}
	b, bIn, err := socketpair.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	done := make(chan struct{})
	go func() {
		r.Join(context.Background(), aIn, opaque{bIn})
		close(done)
	}()
	return a, b, done
}

// pairKinds runs test over socket pairs only, and with an in-process pair on one side.
func pairKinds(t *testing.T, test func(t *testing.T, pipes *memconn.Pool)) {
	t.Run("sockets", func(t *testing.T) { test(t, nil) })
	t.Run("memconn", func(t *testing.T) { test(t, &memconn.Pool{}) })
}

// TestJoinHalfClose: each direction carries its bytes, and an EOF on one ends only the
// other side's sending direction: the other way still carries.
func TestJoinHalfClose(t *testing.T) {
	t.Parallel()
	pairKinds(t, testJoinHalfClose)
}

func testJoinHalfClose(t *testing.T, pipes *memconn.Pool) {
	var r Relay
	a, b, done := joined(t, &r, pipes)
	if _, err := a.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	a.(closeWriter).CloseWrite()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "request" {
		t.Fatalf("b read %q, %v; want request and EOF", got, err)
	}
	if _, err := b.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	b.(closeWriter).CloseWrite()
	if got, err := io.ReadAll(a); err != nil || string(got) != "response" {
		t.Fatalf("a read %q, %v; want response and EOF", got, err)
	}
	<-done
}

// TestJoinSharesBuffers: the connections a Relay joins one after another copy through the
// same buffers, instead of allocating a buffer per direction of each.
func TestJoinSharesBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation figures are not kept under the race detector")
	}
	pairKinds(t, testJoinSharesBuffers)
}

func testJoinSharesBuffers(t *testing.T, pipes *memconn.Pool) {
	var r Relay
	carry := func() {
		a, b, done := joined(t, &r, pipes)
		a.Write([]byte("x"))
		a.(closeWriter).CloseWrite()
		io.ReadAll(b)
		b.(closeWriter).CloseWrite()
		io.ReadAll(a)
		<-done
	}
	carry() // the relay's first buffers
	const joins = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range joins {
		carry()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / joins; per >= relayBufferSize {
		t.Fatalf("%d bytes allocated per joined pair, want less than one %d-byte buffer", per, relayBufferSize)
	}
}
