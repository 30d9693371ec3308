package xgress

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// direct is a Hop that hands frames straight to the other endpoint, as a forwarder does
// for a circuit whose two ends are on one router.
type direct struct {
	mu sync.Mutex
	to *Endpoint
}

func (d *direct) Forward(f *Frame) {
	d.mu.Lock()
	to := d.to
	d.mu.Unlock()
	to.Receive(f)
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// circuit is a client connection and a server connection joined by two endpoints.
type circuit struct {
	client, server  net.Conn // the test's ends
	ingress, egress *Endpoint
	ingressDone     chan error
	egressDone      chan error
	activity        atomic.Int64 // chunks a spliced circuit reported
	spliced         atomic.Int64 // and their bytes
}

func newCircuit(t testing.TB) *circuit { return newCircuitMode(t, false) }

// newCircuitMode is newCircuit with, when spliced is set, the two ends spliced as a router
// splices the ends of a one-router circuit: the egress started first, then Splice instead
// of the ingress's Start.
func newCircuitMode(t testing.TB, spliced bool) *circuit {
	t.Helper()
	pool := NewPool()
	client, ingressConn := tcpPair(t)
	egressConn, server := tcpPair(t)
	c := &circuit{client: client, server: server, ingressDone: make(chan error, 1), egressDone: make(chan error, 1)}
	toEgress, toIngress := &direct{}, &direct{}
	c.ingress = NewEndpoint(7, Initiator, ingressConn, toEgress, pool, func(err error) { c.ingressDone <- err })
	c.egress = NewEndpoint(7, Terminator, egressConn, toIngress, pool, func(err error) { c.egressDone <- err })
	toEgress.to, toIngress.to = c.egress, c.ingress
	if spliced {
		c.egress.Start()
		if !Splice(c.ingress, c.egress, func(n int64) { c.activity.Add(1); c.spliced.Add(n) }) {
			t.Fatal("Splice refused two TCP ends")
		}
		return c
	}
	c.ingress.Start()
	c.egress.Start()
	return c
}

// modes runs test once with framed endpoints and once with spliced ones.
func modes(t *testing.T, test func(t *testing.T, spliced bool)) {
	for _, spliced := range []bool{false, true} {
		name := "framed"
		if spliced {
			name = "spliced"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, spliced)
		})
	}
}

func waitDone(t *testing.T, name string, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not finish", name)
		return nil
	}
}

// TestEndpointsCarryBothWays sends 32 MiB each way at once, with half-close, and checks the
// bytes and a clean end of both endpoints.
func TestEndpointsCarryBothWays(t *testing.T) {
	t.Parallel()
	modes(t, testCarryBothWays)
}

func testCarryBothWays(t *testing.T, spliced bool) {
	c := newCircuitMode(t, spliced)
	const size = 32 << 20
	up, down := make([]byte, size), make([]byte, size)
	rand.Read(up)
	rand.Read(down)

	var wg sync.WaitGroup
	var gotUp, gotDown []byte
	var errUp, errDown error
	wg.Add(4)
	go func() { defer wg.Done(); c.client.Write(up); c.client.(*net.TCPConn).CloseWrite() }()
	go func() { defer wg.Done(); c.server.Write(down); c.server.(*net.TCPConn).CloseWrite() }()
	go func() { defer wg.Done(); gotUp, errUp = io.ReadAll(c.server) }()
	go func() { defer wg.Done(); gotDown, errDown = io.ReadAll(c.client) }()
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
	if spliced && (c.activity.Load() < 2*size/spliceChunk || c.spliced.Load() != 2*size) {
		t.Errorf("a spliced circuit reported %d chunks of activity, %d bytes, for %d bytes", c.activity.Load(), c.spliced.Load(), 2*size)
	}
	if st := c.egress.Stats(); st.Delivered != size {
		t.Errorf("egress delivered %d bytes, want %d", st.Delivered, size)
	}
}

// TestHalfClose: the client closes its sending side; the server still answers, and the
// circuit ends only after the answer.
func TestHalfClose(t *testing.T) {
	t.Parallel()
	modes(t, testHalfClose)
}

func testHalfClose(t *testing.T, spliced bool) {
	c := newCircuitMode(t, spliced)
	c.client.Write([]byte("question"))
	c.client.(*net.TCPConn).CloseWrite()
	q, err := io.ReadAll(c.server)
	if err != nil || string(q) != "question" {
		t.Fatalf("server read %q, %v", q, err)
	}
	select {
	case err := <-c.egressDone:
		t.Fatalf("the circuit ended after one direction closed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.server.Write([]byte("answer"))
	c.server.(*net.TCPConn).CloseWrite()
	a, err := io.ReadAll(c.client)
	if err != nil || string(a) != "answer" {
		t.Fatalf("client read %q, %v", a, err)
	}
	if err := waitDone(t, "egress", c.egressDone); err != nil {
		t.Errorf("egress: %v", err)
	}
}

// TestWindowBoundsSlowConsumer: a server that does not read holds the sender to its window,
// and the egress endpoint never queues more than a window.
func TestWindowBoundsSlowConsumer(t *testing.T) {
	t.Parallel()
	c := newCircuit(t)
	go c.client.Write(make([]byte, 64<<20))
	time.Sleep(300 * time.Millisecond)
	st := c.ingress.Stats()
	if st.Sent-st.Acked > st.Window || st.Window > MaxWindow {
		t.Fatalf("in flight %d beyond the window %d", st.Sent-st.Acked, st.Window)
	}
	if st.Sent >= 64<<20 {
		t.Fatalf("everything was sent to a consumer that reads nothing: %+v", st)
	}
	// The data in flight is parked at the egress end: its queue plus the socket buffers.
	c.egress.mu.Lock()
	queued := 0
	for _, f := range c.egress.queue {
		queued += len(f.Data)
	}
	c.egress.mu.Unlock()
	if uint64(queued) > st.Window {
		t.Fatalf("egress queued %d bytes, beyond the window %d", queued, st.Window)
	}
	// Reading resumes the flow: everything reaches the server, and all but what the egress
	// may owe without acknowledging (less than ackAfter, until an EOF) is acknowledged.
	go io.Copy(io.Discard, c.server)
	testutil.EventuallyNil(t, "the flow resumes", func() error {
		st, eg := c.ingress.Stats(), c.egress.Stats()
		if eg.Delivered < 64<<20 || st.Acked+ackAfter <= 64<<20 {
			return fmt.Errorf("ingress %+v, egress delivered %d", st, eg.Delivered)
		}
		return nil
	})
}

// TestCloseReachesTheOtherEnd: an endpoint closed with a reason closes the other end's
// connection and reports the reason there.
func TestCloseReachesTheOtherEnd(t *testing.T) {
	t.Parallel()
	modes(t, testCloseReachesTheOtherEnd)
}

func testCloseReachesTheOtherEnd(t *testing.T, spliced bool) {
	c := newCircuitMode(t, spliced)
	c.egress.Close("service went away")
	err := waitDone(t, "ingress", c.ingressDone)
	if !errors.Is(err, ErrClosedByPeer) || !bytes.Contains([]byte(err.Error()), []byte("service went away")) {
		t.Fatalf("ingress ended with %v", err)
	}
	c.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.client.Read(make([]byte, 1)); err == nil {
		t.Fatal("the client's connection is still open")
	}
}

// TestOutOfOrderPayloadFails: a payload that does not continue the stream ends the circuit.
func TestOutOfOrderPayloadFails(t *testing.T) {
	t.Parallel()
	c := newCircuit(t)
	f := NewPool().Get(3)
	f.Type, f.Origin, f.Circuit, f.Seq = Payload, Initiator, 7, 100
	f.SetData([]byte("abc"))
	c.egress.Receive(f)
	if err := waitDone(t, "egress", c.egressDone); !errors.Is(err, errOutOfOrder) {
		t.Fatalf("egress ended with %v", err)
	}
}

// TestRoundTripsAllocateNothing sends 1 KiB messages back and forth through a circuit, so
// that each end's writer catches up and stops after every message: in steady state the
// endpoints allocate nothing per message (frames from the pool, the writer's goroutine
// started without a closure). Each run is 10 round trips: testing.AllocsPerRun counts whole
// allocations per run, so one allocation in 10 round trips shows.
func TestRoundTripsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not kept under the race detector")
	}
	c := newCircuit(t)
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
	for range 100 { // the pool reaches its steady size
		roundTrip()
	}
	noAllocations(t, "round trips", roundTrip)
}

// noAllocations fails the test unless 10 calls of f, repeated, allocate nothing: a run of
// 10, since testing.AllocsPerRun counts whole allocations per run.
func noAllocations(t *testing.T, what string, f func()) {
	t.Helper()
	allocs := testing.AllocsPerRun(50, func() {
		for range 10 {
			f()
		}
	})
	if allocs != 0 {
		t.Fatalf("%.0f allocations per 10 %s, want none", allocs, what)
	}
}

// waitStopped waits until e's writer has caught up and stopped.
func waitStopped(e *Endpoint) {
	for {
		e.mu.Lock()
		writing := e.state.writing()
		e.mu.Unlock()
		if !writing {
			return
		}
		runtime.Gosched()
	}
}

// gatedConn is a connection whose writes wait for a turn, so that a test holds the
// endpoint's writer in a write while more payloads arrive.
type gatedConn struct {
	net.Conn
	entered chan struct{} // a write is waiting for its turn
	turn    chan struct{}
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.entered <- struct{}{}
	<-g.turn
	return g.Conn.Write(p)
}

// releaser is a Hop that drops what it is given (the acks of a lone endpoint).
type releaser struct{}

func (releaser) Forward(f *Frame) { f.Release() }

// gatedTerminator returns a lone terminator of circuit 7 whose connection's writes wait for
// their turn, and the pool of its frames; it is closed when the test ends.
func gatedTerminator(t *testing.T) (*Endpoint, *gatedConn, *Pool) {
	conn, peer := tcpPair(t)
	go io.Copy(io.Discard, peer)
	g := &gatedConn{Conn: conn, entered: make(chan struct{}), turn: make(chan struct{})}
	pool := NewPool()
	e := NewEndpoint(7, Terminator, g, releaser{}, pool, nil)
	t.Cleanup(func() { e.Close("") })
	return e, g, pool
}

// TestBurstsAllocateNothing delivers bursts of three payloads, two of which arrive while the
// writer writes the first: each burst takes the writer two batches, after which it stops. In
// steady state a burst allocates nothing: the stopped writer kept both its queues.
func TestBurstsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not kept under the race detector")
	}
	e, g, pool := gatedTerminator(t)
	data := []byte("sixteen bytes...")
	var seq uint64
	send := func() {
		f := pool.Get(len(data))
		f.Type, f.Origin, f.Circuit, f.Seq = Payload, Initiator, 7, seq
		f.SetData(data)
		seq += uint64(len(data))
		e.Receive(f)
	}
	burst := func() {
		send()
		<-g.entered // the writer is in its first batch's write
		send()
		send()
		g.turn <- struct{}{}
		for range 2 { // the second batch: the two payloads queued meanwhile
			<-g.entered
			g.turn <- struct{}{}
		}
		waitStopped(e)
	}
	for range 10 {
		burst()
	}
	noAllocations(t, "bursts", burst)
}

// TestStoppedWriterKeepsSmallQueues: after a burst of more small payloads than
// maxKeptQueue, the stopped writer keeps no queue that large.
func TestStoppedWriterKeepsSmallQueues(t *testing.T) {
	t.Parallel()
	e, g, pool := gatedTerminator(t)
	const n = 2*maxKeptQueue + 1
	for i := range n {
		f := pool.Get(1)
		f.Type, f.Origin, f.Circuit, f.Seq = Payload, Initiator, 7, uint64(i)
		f.SetData([]byte{'x'})
		e.Receive(f)
		if i == 0 {
			<-g.entered // the writer holds the first; the others queue behind it
		}
	}
	g.turn <- struct{}{}
	for range n - 1 {
		<-g.entered
		g.turn <- struct{}{}
	}
	waitStopped(e)
	e.mu.Lock()
	queue, spare := cap(e.queue), cap(e.spare)
	e.mu.Unlock()
	if queue > maxKeptQueue || spare > maxKeptQueue {
		t.Fatalf("the stopped writer keeps queues of %d and %d frames, want at most %d", queue, spare, maxKeptQueue)
	}
}

// BenchmarkRelay compares one circuit through two endpoints (the forwarding of a single
// router) with a plain io.Copy relay between the same kind of sockets. Each op moves 16 MiB
// one way.
func BenchmarkRelay(b *testing.B) {
	const size = 16 << 20
	data := make([]byte, size)
	run := func(b *testing.B, client, server net.Conn) {
		b.SetBytes(size)
		b.ReportAllocs()
		done := make(chan struct{})
		go func() {
			buf := make([]byte, 256<<10)
			for {
				got := 0
				for got < size {
					n, err := server.Read(buf)
					if err != nil {
						close(done)
						return
					}
					got += n
				}
				done <- struct{}{}
			}
		}()
		for b.Loop() {
			client.Write(data)
			<-done
		}
	}
	b.Run("zmesh", func(b *testing.B) {
		c := newCircuit(b)
		run(b, c.client, c.server)
	})
	b.Run("io.Copy", func(b *testing.B) {
		client, in := tcpPair(b)
		out, server := tcpPair(b)
		go io.Copy(out, in)
		run(b, client, server)
	})
}

// TestDatagramsKeepBoundaries carries UDP datagrams both ways through two datagram endpoints.
func TestDatagramsKeepBoundaries(t *testing.T) {
	t.Parallel()
	udp := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	client, server := udp(), udp()
	ingressConn, err := net.DialUDP("udp", nil, client.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	egressConn, err := net.DialUDP("udp", nil, server.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	pool := NewPool()
	toEgress, toIngress := &direct{}, &direct{}
	ingress := NewEndpoint(9, Initiator, ingressConn, toEgress, pool, nil)
	egress := NewEndpoint(9, Terminator, egressConn, toIngress, pool, nil)
	ingress.SetDatagram(1500)
	egress.SetDatagram(1500)
	toEgress.to, toIngress.to = egress, ingress
	ingress.Start()
	egress.Start()
	defer ingress.Close("")
	defer egress.Close("")

	sizes := []int{100, 1000, 1400, 1}
	for _, n := range sizes {
		client.WriteTo(bytes.Repeat([]byte{byte(n)}, n), ingressConn.LocalAddr())
	}
	buf := make([]byte, 2000)
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, n := range sizes {
		got, from, err := server.ReadFrom(buf)
		if err != nil || got != n || buf[0] != byte(n) {
			t.Fatalf("datagram of %d bytes arrived as %d: %v", n, got, err)
		}
		server.WriteTo(buf[:got], from)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, n := range sizes {
		got, _, err := client.ReadFrom(buf)
		if err != nil || got != n {
			t.Fatalf("reply of %d bytes arrived as %d: %v", n, got, err)
		}
	}
}

// TestOverrunFails: a sender that ignores its window (a faulty or hostile peer) ends the
// circuit instead of making the receiving end buffer without bound.
func TestOverrunFails(t *testing.T) {
	t.Parallel()
	c := newCircuit(t)
	// The server does not read: everything sent queues at the egress end.
	pool := NewPool()
	seq := uint64(0)
	for range 1024 { // 64 MiB: far more than the socket buffers and the window
		f := pool.Get(MaxData)
		f.Type, f.Origin, f.Circuit, f.Seq = Payload, Initiator, 7, seq
		f.Extend(MaxData)
		seq += MaxData
		c.egress.Receive(f)
	}
	if err := waitDone(t, "egress", c.egressDone); !errors.Is(err, errOverrun) {
		t.Fatalf("egress ended with %v", err)
	}
}

// TestSpliceNeedsTCP: ends that are not TCP connections are left to frames.
func TestSpliceNeedsTCP(t *testing.T) {
	t.Parallel()
	pool := NewPool()
	a, _ := net.Pipe()
	bConn, _ := tcpPair(t)
	in := NewEndpoint(1, Initiator, a, &direct{}, pool, nil)
	out := NewEndpoint(1, Terminator, bConn, &direct{}, pool, nil)
	if Splice(in, out, func(int64) {}) {
		t.Fatal("Splice joined a pipe to a TCP connection")
	}
	if out.Opened() {
		t.Fatal("a refused Splice opened the terminator")
	}
}

// recorder is a Hop that keeps the frames it is given.
type recorder struct {
	mu     sync.Mutex
	frames []*Frame
}

func (r *recorder) Forward(f *Frame) {
	r.mu.Lock()
	r.frames = append(r.frames, f)
	r.mu.Unlock()
}

// acks returns the Seq of the acks r was given.
func (r *recorder) acks() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var seqs []uint64
	for _, f := range r.frames {
		if f.Type == Ack {
			seqs = append(seqs, f.Seq)
		}
	}
	return seqs
}

func (r *recorder) first(t *testing.T) *Frame {
	t.Helper()
	var f *Frame
	testutil.Eventually(t, "the initiator sends a frame", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.frames) > 0 {
			f = r.frames[0]
		}
		return f != nil
	})
	return f
}

// TestOpeningPayload: an initiator whose client spoke first opens the circuit with that data;
// one whose client is silent opens it with an empty payload.
func TestOpeningPayload(t *testing.T) {
	t.Parallel()
	for _, spoke := range []bool{true, false} {
		client, conn := tcpPair(t)
		if spoke {
			client.Write([]byte("hello"))
			time.Sleep(20 * time.Millisecond) // the bytes reach the router's socket
		}
		rec := &recorder{}
		e := NewEndpoint(3, Initiator, conn, rec, NewPool(), nil)
		e.Start()
		f := rec.first(t)
		if f.Type != Payload || f.Seq != 0 || f.Flags != 0 {
			t.Fatalf("spoke %v: opening frame %+v", spoke, f)
		}
		if want := map[bool]string{true: "hello", false: ""}[spoke]; string(f.Data) != want {
			t.Fatalf("spoke %v: the opening payload carries %q, want %q", spoke, f.Data, want)
		}
		e.Close("")
	}
}

// TestStartWithinClosesUnopened: a terminator whose opening payload does not come within its
// time ends with a Close frame to the other end and its connection closed.
func TestStartWithinClosesUnopened(t *testing.T) {
	t.Parallel()
	conn, server := tcpPair(t)
	rec := &recorder{}
	done := make(chan error, 1)
	e := NewEndpoint(5, Terminator, conn, rec, NewPool(), func(err error) { done <- err })
	e.StartWithin(50 * time.Millisecond)
	if err := waitDone(t, "terminator", done); err == nil || !strings.Contains(err.Error(), "not opened within 50ms") {
		t.Fatalf("the terminator ended with %v", err)
	}
	if f := rec.first(t); f.Type != Close || !strings.Contains(string(f.Data), "not opened") {
		t.Fatalf("the terminator sent %+v, want a Close", f)
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := server.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the service's connection: read %v, want EOF", err)
	}
}

// TestStartWithinReleases: the open timer of a terminator is stopped when it is opened or
// ends, so that it keeps nothing of the circuit alive: a router sets up
// thousands of circuits a second, and a timer per circuit holding its endpoint for the whole
// open time made the live heap, and so every garbage collection, grow with the setup rate.
func TestStartWithinReleases(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"opened", "closed"} {
		conn, _ := tcpPair(t)
		e := NewEndpoint(6, Terminator, conn, &recorder{}, NewPool(), nil)
		e.StartWithin(time.Hour)
		switch how {
		case "opened":
			f := e.pool.Get(0)
			f.Type, f.Origin, f.Circuit = Payload, Initiator, 6
			e.Receive(f)
			e.mu.Lock()
			opened, timer := e.state.opened(), e.state.openTimer
			e.mu.Unlock()
			if !opened || timer != nil {
				t.Fatalf("after the opening payload: opened %v, open timer %v", opened, timer)
			}
		}
		e.Close("")
		released := make(chan struct{})
		runtime.AddCleanup(e, func(ch chan struct{}) { close(ch) }, released)
		e = nil
		testutil.Eventually(t, how+": the terminator is collected an open time before its timer fires", func() bool {
			runtime.GC()
			select {
			case <-released:
				return true
			default:
				return false
			}
		})
	}
}

// TestNoAckWithoutData: a terminator acknowledges the payloads that carried data, and not an
// empty opening payload or an EOF, which move no window: each would cost the link a frame
// for every circuit. The EOF's batch does carry the ack of "hi", which Receive wrote itself
// and left owed (see writeNow).
func TestNoAckWithoutData(t *testing.T) {
	t.Parallel()
	conn, server := tcpPair(t)
	rec := &recorder{}
	e := NewEndpoint(8, Terminator, conn, rec, NewPool(), nil)
	e.Start()
	send := func(seq uint64, data string, flags uint8) {
		f := e.pool.Get(len(data))
		f.Type, f.Origin, f.Circuit, f.Seq, f.Flags = Payload, Initiator, 8, seq, flags
		f.SetData([]byte(data))
		e.Receive(f)
	}
	// One payload at a time, each written before the next comes, so that each is a batch.
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	send(0, "", 0)
	time.Sleep(20 * time.Millisecond)
	send(0, "hi", 0)
	buf := make([]byte, 2)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("the service read %q, %v; want hi", buf, err)
	}
	time.Sleep(20 * time.Millisecond)
	send(2, "", FlagEOF)
	if n, err := server.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("the service read %d bytes, %v; want EOF", n, err)
	}
	time.Sleep(50 * time.Millisecond) // an ack for the EOF would be sent by now
	acks := rec.acks()
	if len(acks) != 1 || acks[0] != 2 {
		t.Fatalf("acks %v, want one, for 2 bytes", acks)
	}
	e.Close("")
}
