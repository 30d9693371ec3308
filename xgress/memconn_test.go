package xgress

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zmesh/zmesh/internal/memconn"
	"github.com/zmesh/zmesh/internal/testutil"
)

// The router's tunnel reaches its circuits through in-process pairs (memconn) rather than
// sockets: these tests check that an endpoint over one keeps what it has over a socket.

// memCircuit is a circuit whose two endpoints' connections are ends of in-process pairs, as
// a circuit between two of a router's tunnel's connections is.
func memCircuit(t testing.TB) *circuit {
	t.Helper()
	var conns memconn.Pool
	pool := NewPool()
	client, ingressConn := conns.Pipe()
	egressConn, server := conns.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	c := &circuit{client: client, server: server, ingressDone: make(chan error, 1), egressDone: make(chan error, 1)}
	toEgress, toIngress := &direct{}, &direct{}
	c.ingress = NewEndpoint(7, Initiator, ingressConn, toEgress, pool, func(err error) { c.ingressDone <- err })
	c.egress = NewEndpoint(7, Terminator, egressConn, toIngress, pool, func(err error) { c.egressDone <- err })
	toEgress.to, toIngress.to = c.egress, c.ingress
	c.ingress.Start()
	c.egress.Start()
	return c
}

// TestMemConnCarriesBothWays sends 8 MiB each way at once through endpoints over in-process
// pairs, each side half-closing when done, and checks the bytes and a clean end of both.
func TestMemConnCarriesBothWays(t *testing.T) {
	t.Parallel()
	c := memCircuit(t)
	const size = 8 << 20
	up, down := make([]byte, size), make([]byte, size)
	rand.Read(up)
	rand.Read(down)
	type closeWriter interface{ CloseWrite() error }

	var wg sync.WaitGroup
	var gotUp, gotDown []byte
	var errUp, errDown error
	wg.Go(func() { c.client.Write(up); c.client.(closeWriter).CloseWrite() })
	wg.Go(func() { gotUp, errUp = io.ReadAll(c.server) })
	// The server answers only once the client's direction ended: the circuit carries one
	// direction after the other has half-closed.
	wg.Wait()
	wg.Go(func() { c.server.Write(down); c.server.(closeWriter).CloseWrite() })
	wg.Go(func() { gotDown, errDown = io.ReadAll(c.client) })
	wg.Wait()
	if errUp != nil || errDown != nil {
		t.Fatalf("read: %v %v", errUp, errDown)
	}
	if sha256.Sum256(gotUp) != sha256.Sum256(up) || sha256.Sum256(gotDown) != sha256.Sum256(down) {
		t.Fatalf("data differs: %d and %d bytes arrived", len(gotUp), len(gotDown))
	}
	if err := waitDone(t, "ingress", c.ingressDone); err != nil {
		t.Errorf("ingress ended with %v", err)
	}
	if err := waitDone(t, "egress", c.egressDone); err != nil {
		t.Errorf("egress ended with %v", err)
	}
}

// watchedConn is an in-process end that reports the calls the endpoint's reader makes.
type watchedConn struct {
	*memconn.Conn
	reads   atomic.Int64
	waits   atomic.Int64
	calls   chan string // "read" or "wait", as each starts
	reading atomic.Bool // inside a Read: the reader holds a frame
}

func (w *watchedConn) Read(p []byte) (int, error) {
	w.reads.Add(1)
	w.reading.Store(true)
	defer w.reading.Store(false)
	w.calls <- "read"
	return w.Conn.Read(p)
}

func (w *watchedConn) WaitReadable() error {
	w.waits.Add(1)
	w.calls <- "wait"
	return w.Conn.WaitReadable()
}

// TestMemConnIdleReaderHoldsNoFrame: an endpoint over an in-process end waits for data in
// WaitReadable, which takes no frame, and reads (into a frame) only once data is there.
func TestMemConnIdleReaderHoldsNoFrame(t *testing.T) {
	t.Parallel()
	var conns memconn.Pool
	conn, client := conns.Pipe()
	t.Cleanup(func() { client.Close() })
	w := &watchedConn{Conn: conn, calls: make(chan string, 16)}
	rec := &recorder{}
	e := NewEndpoint(3, Initiator, w, rec, NewPool(), nil)
	t.Cleanup(func() { e.Close("") })
	e.Start() // an empty opening payload: the client is silent

	for round := range 3 {
		if call := <-w.calls; call != "wait" {
			t.Fatalf("round %d: the idle reader called %s, want wait (a Read holds a frame)", round, call)
		}
		if w.reading.Load() {
			t.Fatalf("round %d: a Read is under way while the connection is idle", round)
		}
		msg := []byte{'a' + byte(round)}
		client.Write(msg)
		if call := <-w.calls; call != "read" {
			t.Fatalf("round %d: with data, the reader called %s, want read", round, call)
		}
		testutil.Eventually(t, "the payload leaves", func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			last := rec.frames[len(rec.frames)-1]
			return last.Type == Payload && bytes.Equal(last.Data, msg)
		})
	}
	if reads, waits := w.reads.Load(), w.waits.Load(); reads != 3 || waits < 3 {
		t.Fatalf("%d reads and %d waits for 3 messages, want 3 reads, each after a wait", reads, waits)
	}
}

// TestMemConnOpeningPayload: an initiator whose client spoke before Start opens the circuit
// with that data, as over a socket (Readable).
func TestMemConnOpeningPayload(t *testing.T) {
	t.Parallel()
	var conns memconn.Pool
	conn, client := conns.Pipe()
	t.Cleanup(func() { client.Close() })
	client.Write([]byte("hello"))
	rec := &recorder{}
	e := NewEndpoint(3, Initiator, conn, rec, NewPool(), nil)
	t.Cleanup(func() { e.Close("") })
	e.Start()
	if f := rec.first(t); f.Type != Payload || string(f.Data) != "hello" {
		t.Fatalf("opening frame %s with %q, want a payload with hello", f.Type, f.Data)
	}
}

// TestMemConnSmallPayloadWrittenByReceive: over an in-process end, a small payload that
// finds no writer running is readable by the service when Receive returns (TryWrite); the
// acknowledgement waits until ackAfter bytes are owed.
func TestMemConnSmallPayloadWrittenByReceive(t *testing.T) {
	t.Parallel()
	var conns memconn.Pool
	conn, service := conns.Pipe()
	t.Cleanup(func() { service.Close() })
	rec := &recorder{}
	e := NewEndpoint(7, Terminator, conn, rec, NewPool(), nil)
	t.Cleanup(func() { e.Close("") })
	e.Start()

	buf := make([]byte, 2*maxWriteNow)
	var seq uint64
	for range ackAfter / maxWriteNow {
		msg := bytes.Repeat([]byte{byte(seq)}, maxWriteNow)
		payload(e, seq, msg, 0)
		seq += uint64(len(msg))
		if !service.Readable() {
			t.Fatalf("after Receive of payload %d the service has nothing to read", seq)
		}
		if n, err := service.Read(buf); err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("after Receive of payload %d the service read %d bytes, %v; want its %d", seq, n, err, len(msg))
		}
		if acks := rec.acks(); seq < ackAfter && len(acks) > 0 {
			t.Fatalf("acks %v after %d bytes, want none before %d", acks, seq, ackAfter)
		}
	}
	testutil.Eventually(t, "the ack of the owed bytes", func() bool { return slices.Equal(rec.acks(), []uint64{ackAfter}) })
}

// TestMemConnRoundTripsAllocateNothing is TestRoundTripsAllocateNothing over in-process
// pairs: the endpoints and the pairs' buffers allocate nothing per message in steady state.
func TestMemConnRoundTripsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not kept under the race detector")
	}
	c := memCircuit(t)
	msg, got := make([]byte, 1<<10), make([]byte, 1<<10)
	roundTrip := func() {
		if _, err := c.client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c.server, got); err != nil {
			t.Fatal(err)
		}
		if _, err := c.server.Write(got); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c.client, got); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		roundTrip()
	}
	noAllocations(t, "round trips", roundTrip)
}

var _ net.Conn = (*watchedConn)(nil)
