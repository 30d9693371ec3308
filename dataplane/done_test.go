package dataplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/xgress"
)

// The end-to-end tests of the data plane's "done when" list, on a line of three routers
// on loopback (see buildLine).

// endsOn returns the number of circuit ends on router name.
func (n *testNet) endsOn(name string) int {
	r := n.routers[name].r
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ends)
}

// waitGone waits until no router has a circuit routed or a circuit end, and the controller
// knows none of ids.
func (n *testNet) waitGone(t *testing.T, ids []uint64) {
	t.Helper()
	testutil.Eventually(t, "every circuit gone from every router", func() bool {
		for name, tr := range n.routers {
			if tr.cancel == nil {
				continue
			}
			if tr.r.Forwarder().CircuitCount() != 0 || n.endsOn(name) != 0 {
				return false
			}
		}
		return true
	})
	if len(ids) == 0 {
		return
	}
	if known := n.controllerKnows("A", ids); len(known) != 0 {
		t.Fatalf("the controller still knows %d of the %d circuits", len(known), len(ids))
	}
}

// A thousand circuits open at once through the line, each carrying a little data both ways;
// afterwards no router and not the controller keeps any of them.
func TestThousandConcurrentCircuits(t *testing.T) {
	t.Parallel()
	n, srv, addr := line(t, "tls", true)
	const circuits = 1000
	type outcome struct {
		i   int
		err error
	}
	opened := make(chan outcome, circuits) // each circuit, once both directions were checked up to now
	release := make(chan struct{})         // then the clients end their circuits
	closed := make(chan outcome, circuits)
	deadline := time.Now().Add(3 * time.Minute)
	for i := range circuits {
		go func() {
			up, down := int64(1000+i), int64(2000+i)
			cl, err := dialClient(addr, up, down)
			if err != nil {
				opened <- outcome{i, err}
				closed <- outcome{i, nil}
				return
			}
			defer cl.c.Close()
			cl.c.SetDeadline(deadline)
			// The client's data, without ending it: the circuit stays open.
			_, err = sendStream(cl.c, cl.h.up, up)
			if err == nil {
				_, err = io.Copy(cl.got, cl.c) // the server's data and its EOF
			}
			if err == nil {
				err = cl.got.err(down)
			}
			opened <- outcome{i, err}
			if err != nil {
				closed <- outcome{i, nil}
				return
			}
			<-release
			err = cl.c.(*net.TCPConn).CloseWrite()
			if err == nil {
				err = cl.serverSaw(srv, up, time.Until(deadline))
			}
			closed <- outcome{i, err}
		}()
	}
	var failed []string
	for range circuits {
		if o := <-opened; o.err != nil {
			failed = append(failed, fmt.Sprintf("circuit %d: %v", o.i, o.err))
		}
	}
	// Every circuit is open now, on every router of the line.
	var ids []uint64
	n.routers["A"].r.Forwarder().Each(func(id uint64, _, _ xgress.Hop) { ids = append(ids, id) })
	counts := map[string]int{}
	for _, name := range []string{"A", "B", "C"} {
		counts[name] = n.routers[name].r.Forwarder().CircuitCount()
	}
	close(release)
	for range circuits {
		if o := <-closed; o.err != nil {
			failed = append(failed, fmt.Sprintf("circuit %d: %v", o.i, o.err))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d circuits failed; first: %s", len(failed), circuits, slices.Min(failed))
	}
	for name, c := range counts {
		if c != circuits {
			t.Errorf("router %s routed %d circuits while all %d were open", name, c, circuits)
		}
	}
	if got := srv.conns.Load(); got != circuits {
		t.Errorf("the server accepted %d connections, want %d", got, circuits)
	}
	n.waitGone(t, ids)
}

// A client that stops reading stalls only its own circuit: another circuit over the same
// links carries its data meanwhile about as fast as with no stalled neighbour, and the
// stalled circuit completes intact once its client reads again. The client reads nothing
// until the other circuit is done, so a circuit held up by it would never finish (its
// transfer fails after a minute). Not parallel: it compares durations, which other tests
// running at the same time would disturb.
func TestStalledConsumerDoesNotSlowNeighbour(t *testing.T) {
	n, srv, addr := line(t, "tls", true)
	const size = 32 << 20
	timed := func() time.Duration {
		t.Helper()
		start := time.Now()
		if err := transfer(srv, addr, 0, size, time.Minute); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	timed() // warm up
	alone := max(timed(), timed())

	// Circuit 1: the server sends far more than windows and socket buffers hold.
	const stalledSize = 64 << 20
	c1, err := dialClient(addr, 0, stalledSize)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.c.Close()
	c1.c.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := c1.send(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(c1.got, c1.c, 1<<20); err != nil {
		t.Fatal(err)
	}
	before := c1.got.n.Load() // the client reads nothing from here until circuit 2 is done

	// The egress fills circuit 1's window, and holds no more than it unacknowledged.
	testutil.Eventually(t, "the egress to fill the stalled circuit's window", func() bool {
		for _, e := range n.ends("C") {
			if st := e.Stats(); st.Sent-st.Acked >= st.Window/2 {
				return true
			}
		}
		return false
	})
	for _, e := range n.ends("C") {
		if st := e.Stats(); st.Sent-st.Acked > st.Window || st.Window > xgress.MaxWindow {
			t.Errorf("circuit %d at the egress: %d bytes unacknowledged, window %d", e.Circuit(), st.Sent-st.Acked, st.Window)
		}
	}

	// Circuit 2, while circuit 1 stalls: the fastest of up to three runs counts, so that a
	// burst of other work on the machine during one run does not decide.
	with := time.Duration(math.MaxInt64)
	for run := 1; run <= 3 && with > 2*alone; run++ {
		start := time.Now()
		if err := transfer(srv, addr, 0, size, time.Minute); err != nil {
			t.Fatalf("circuit 2 (run %d) next to the stalled circuit: %v", run, err)
		}
		with = min(with, time.Since(start))
	}
	if c1.got.n.Load() != before {
		t.Fatal("circuit 1's client read while stalled")
	}

	if err := c1.receive(); err != nil {
		t.Fatalf("circuit 1 after the stall: %v", err)
	}
	if err := c1.got.err(stalledSize); err != nil {
		t.Fatalf("circuit 1 after the stall: %v", err)
	}
	if err := c1.serverSaw(srv, 0, 30*time.Second); err != nil {
		t.Fatalf("circuit 1 after the stall: %v", err)
	}

	// The slowest of three runs alone, two before and one after, is the reference: the
	// stalled neighbour must not slow circuit 2 much.
	alone = max(alone, timed())
	t.Logf("32 MiB alone: %s at most; next to a stalled circuit: %s (%.2fx)", alone, with, float64(with)/float64(alone))
	if with > 2*alone {
		t.Errorf("circuit 2 took %s next to a stalled circuit, more than twice its %s alone", with, alone)
	}
}

// ends returns the circuit ends on router name.
func (n *testNet) ends(name string) []*xgress.Endpoint {
	r := n.routers[name].r
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*xgress.Endpoint
	for _, e := range r.ends {
		out = append(out, e)
	}
	return out
}

// ended waits for a client's reading and writing to end, and for the server to finish the
// connection; it fails the test on a hang or on data that differs from what was sent.
func (cl *client) ended(t *testing.T, srv *streamServer, sent <-chan error, within time.Duration) (result, error) {
	t.Helper()
	var rerr, serr error
	timeout := time.After(within)
	for _, ch := range []<-chan error{cl.readDone, sent} {
		select {
		case err := <-ch:
			if ch == sent {
				serr = err
			} else {
				rerr = err
			}
		case <-timeout:
			t.Fatalf("the client's connection did not end within %s", within)
		}
	}
	if cl.got.bad.Load() {
		t.Fatalf("the client received data that differs from what the server sent, at byte %d", cl.got.n.Load())
	}
	res, err := srv.wait(cl.h.up, within)
	if err != nil {
		t.Fatal(err)
	}
	if res.corrupt {
		t.Fatalf("the server received data that differs from what the client sent, at byte %d", res.read)
	}
	return res, errors.Join(rerr, serr)
}

// Killing the A–B link's connections mid-transfer: the interrupted circuit ends at both
// ends without corrupt data, the link is dialed again within its backoff, and a new circuit
// carries data.
func TestLinkKilledMidTransfer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		transport string
		split     bool
	}{{"tls-split", "tls", true}, {"tls-single", "tls", false}, {"quic-split", "quic", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n, srv, addr := buildLine(t, lineConfig{transport: tc.transport, split: tc.split, dialer: `      healthyDialBackoff:
        minRetryInterval: 50ms
        maxRetryInterval: 1s
        retryBackoffFactor: 2
`})
			a := n.routers["A"].r
			old := a.links.Get(n.routers["B"].id)
			if len(a.Links()) != 1 || a.Links()[0] != old {
				t.Fatalf("router A has links %v; want the one to B", a.Links())
			}
			const size = 1 << 30
			cl, sent := bulkTransfer(t, addr, size, 16<<20)
			defer cl.c.Close()

			old.Sever()
			cut := time.Now()
			// Watched from the cut, while the interrupted circuit ends.
			relinkedAfter := make(chan time.Duration, 1)
			go func() {
				for time.Since(cut) < 30*time.Second {
					if l := a.links.Get(n.routers["B"].id); l != nil && l != old {
						relinkedAfter <- time.Since(cut)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			res, err := cl.ended(t, srv, sent, 15*time.Second)
			t.Logf("the interrupted circuit ended %s after the cut: client got %d MiB (%v), server got %d MiB (%v)",
				time.Since(cut).Round(time.Millisecond), cl.got.n.Load()>>20, err, res.read>>20, res.err)
			if cl.got.n.Load() == size && res.read == size {
				t.Log("the circuit completed despite the cut")
			}

			var relinked time.Duration
			select {
			case relinked = <-relinkedAfter:
			case <-time.After(30*time.Second - time.Since(cut)):
				t.Fatal("no new A–B link within 30 s of the cut")
			}
			t.Logf("A–B linked again %s after the cut", relinked.Round(time.Millisecond))
			// The link lived longer than minRetryInterval, so it is dialed again at once: allow
			// the 1 s maxRetryInterval and the handshakes under the race detector and a loaded
			// machine, less than the default healthy backoff's 5 s minimum.
			if relinked > 4500*time.Millisecond {
				t.Errorf("the link came back after %s", relinked)
			}
			// The controller learns of the new link from A's link report, a moment after A
			// has the link: a circuit asked for meanwhile finds no path and is refused.
			// Circuits must succeed within seconds of the link's return.
			var refused int
			var firstErr error
			for start := time.Now(); ; {
				err := transfer(srv, addr, 1, 1, 5*time.Second)
				if err == nil {
					break
				}
				if refused++; firstErr == nil {
					firstErr = err
				}
				if time.Since(start) > 5*time.Second {
					t.Fatalf("no circuit succeeded within 5 s of the link's return (%d refused; first: %v; last: %v)", refused, firstErr, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if refused > 0 {
				t.Logf("%d circuits refused before the controller knew the new link (first: %v)", refused, firstErr)
			}
			if err := transfer(srv, addr, 1<<20, 1<<20, 30*time.Second); err != nil {
				t.Fatalf("a new circuit after the cut: %v", err)
			}
			n.waitGone(t, nil)
		})
	}
}

// paced sends and reads at about 8 MiB/s each way, so that a circuit stays busy for seconds.
func (cl *client) paced(up, down int64, sent chan<- error) {
	const chunk = 128 << 10
	go func() {
		var n int64
		gen := genStream(cl.h.up)
		buf := make([]byte, chunk)
		for n < up {
			b := buf[:min(chunk, up-n)]
			gen.Read(b)
			if _, err := cl.c.Write(b); err != nil {
				sent <- err
				return
			}
			n += int64(len(b))
			cl.sent.Store(n)
			time.Sleep(15 * time.Millisecond)
		}
		sent <- cl.c.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		for {
			_, err := io.CopyN(cl.got, cl.c, chunk)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				cl.readDone <- err
				return
			}
			time.Sleep(15 * time.Millisecond)
		}
	}()
}

// A controller restart does not interrupt an established circuit; afterwards the routers
// are online again and new circuits work.
func TestControllerRestartKeepsCircuits(t *testing.T) {
	t.Parallel()
	n, srv, addr := line(t, "tls", true)
	const size = 32 << 20 // about 4 s at the pace
	cl, err := dialClient(addr, size, size)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.c.Close()
	cl.c.SetDeadline(time.Now().Add(2 * time.Minute))
	sent := make(chan error, 1)
	cl.paced(size, size, sent)
	testutil.Eventually(t, "1 MiB each way", func() bool { return cl.got.n.Load() >= 1<<20 && cl.sent.Load() >= 1<<20 })

	n.stopController()
	testutil.Eventually(t, "the routers to lose the controller", func() bool {
		for _, tr := range n.routers {
			if tr.r.ctrl.isConnected() {
				return false
			}
		}
		return true
	})
	down, up := cl.got.n.Load(), cl.sent.Load()
	time.Sleep(1500 * time.Millisecond)
	if cl.got.n.Load() <= down || cl.sent.Load() <= up {
		t.Fatalf("no data moved while the controller was down: %d → %d down, %d → %d up", down, cl.got.n.Load(), up, cl.sent.Load())
	}
	if cl.got.n.Load() == size && cl.sent.Load() == size {
		t.Fatal("the transfer ended before the controller came back; the test shows nothing")
	}
	n.startController()

	res, err := cl.ended(t, srv, sent, time.Minute)
	if err != nil {
		t.Fatalf("the circuit across the restart: %v", err)
	}
	if err := cl.got.err(size); err != nil {
		t.Fatalf("the circuit across the restart, server to client: %v", err)
	}
	if res.read != size || res.err != nil {
		t.Fatalf("the circuit across the restart, client to server: %d of %d bytes, %v", res.read, size, res.err)
	}

	testutil.Eventually(t, "the routers online again", func() bool { return n.online("A") && n.online("B") && n.online("C") })
	// The routers report their links once the controller answered their hello, after they
	// count as online: new circuits need those reports.
	testutil.Eventually(t, "links A–B and C–B known again", func() bool { return n.linked("A", "B") && n.linked("C", "B") })
	if err := transfer(srv, addr, 1<<20, 1<<20, 30*time.Second); err != nil {
		t.Fatalf("a new circuit after the restart: %v", err)
	}
}

// A full xgress dial queue at the egress fails the circuits it cannot take at once and
// cleanly; the circuits it took, and later ones, work; nothing is left behind.
func TestDialQueueFullFailsCleanly(t *testing.T) {
	t.Parallel()
	// The queued dial ends after two dwell times, within the controller's 5 s wait; a
	// refusal must come within 3/4 of one, time enough on a loaded machine.
	const dwell = 2 * time.Second
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, c: `forwarder:
  xgressDialQueueLength: 1
  xgressDialWorkerCount: 1
  xgressDialDwellTime: 2000
`})
	const circuits = 6
	outs := burst(srv, addr, circuits)
	var ok, failed int
	for _, o := range outs {
		if o.worked {
			ok++
			if o.err != nil {
				t.Errorf("a circuit that worked: %v", o.err)
			}
			if o.took < dwell {
				t.Errorf("a circuit worked after %s, before the dial's dwell time", o.took)
			}
			continue
		}
		failed++
		t.Logf("refused after %s (%v)", o.took.Round(time.Millisecond), o.err)
		// Refused at once: sooner than a dial that waited in the queue could have failed.
		if o.took > dwell*3/4 || o.got != 0 {
			t.Errorf("a refused circuit ended after %s with %d bytes (%v)", o.took, o.got, o.err)
		}
	}
	// One dial in a worker and one in the queue at most; with six at once, at least four are
	// refused.
	if ok < 1 || ok > 2 || failed < circuits-2 {
		t.Fatalf("%d circuits worked and %d were refused", ok, failed)
	}
	if got := srv.conns.Load(); got != int64(ok) {
		t.Errorf("the server saw %d connections for %d circuits that worked", got, ok)
	}
	if err := transfer(srv, addr, 1000, 1000, 30*time.Second); err != nil {
		t.Fatalf("a circuit after the burst: %v", err)
	}
	n.waitGone(t, nil)
}

// burstOutcome is how one of a burst of circuits went.
type burstOutcome struct {
	worked bool
	err    error // of a circuit that worked: nil; else how the client's connection ended
	got    int64 // bytes a refused circuit's client received
	took   time.Duration
}

// burst opens circuits at once, each carrying 1000 bytes each way, and returns how each went.
func burst(srv *streamServer, addr string, circuits int) []burstOutcome {
	out := make(chan burstOutcome, circuits)
	for range circuits {
		go func() {
			start := time.Now()
			cl, err := dialClient(addr, 1000, 1000)
			if err != nil {
				out <- burstOutcome{err: err}
				return
			}
			defer cl.c.Close()
			cl.c.SetDeadline(time.Now().Add(30 * time.Second))
			sent := make(chan error, 1)
			go func() { sent <- cl.send() }()
			rerr := cl.receive()
			<-sent
			took := time.Since(start)
			if cl.got.err(1000) == nil {
				out <- burstOutcome{worked: true, err: cl.serverSaw(srv, 1000, 30*time.Second), took: took}
				return
			}
			if cl.got.bad.Load() {
				rerr = errors.New("the client received data that was not sent")
			}
			out <- burstOutcome{err: rerr, got: cl.got.n.Load(), took: took}
		}()
	}
	outs := make([]burstOutcome, circuits)
	for i := range outs {
		outs[i] = <-out
	}
	return outs
}

// A dial that would end after the route's timeout (10 s; here the dial waits 12 s) fails the
// circuit at the client, and the egress keeps nothing: the route's timeout ends the dial in
// its dwell, so the service never sees a connection and no dial runs or waits after.
func TestDialOutlastingTheRouteLeavesNothing(t *testing.T) {
	t.Parallel()
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, c: `forwarder:
  xgressDialDwellTime: 12000
`})
	o := burst(srv, addr, 1)[0]
	if o.worked || o.got != 0 {
		t.Fatalf("the circuit worked (%v) or got %d bytes; its dial outlasted the controller's wait", o.worked, o.got)
	}
	t.Logf("refused after %s (%v)", o.took.Round(time.Millisecond), o.err)
	testutil.Eventually(t, "the egress's dial abandoned", func() bool {
		queued, busy := n.routers["C"].r.dials.Load()
		return queued == 0 && busy == 0
	})
	n.waitGone(t, nil)
	if got := srv.conns.Load(); got != 0 {
		t.Errorf("the service saw %d connections from a dial past the route's timeout", got)
	}
}

// A router that stops closes the circuits through it: the client and the server both see
// their connection end, and neither gets data that was not sent.
func TestRouterStopEndsCircuits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		noCtrl bool // the controller is down: the routers' Close frames alone end the circuit
	}{{"A", false}, {"B", false}, {"C", false}, {"A", true}, {"C", true}} {
		name := tc.name
		title := "stop " + name
		if tc.noCtrl {
			title += " without controller"
		}
		t.Run(title, func(t *testing.T) {
			t.Parallel()
			n, srv, addr := line(t, "tls", true)
			const size = 1 << 30
			cl, sent := bulkTransfer(t, addr, size, 8<<20)
			defer cl.c.Close()
			if tc.noCtrl {
				n.stopController()
			}
			stopped := make(chan struct{})
			go func() { n.routers[name].stop(); close(stopped) }()
			res, err := cl.ended(t, srv, sent, 15*time.Second)
			t.Logf("client got %d MiB (%v), server got %d MiB (%v)", cl.got.n.Load()>>20, err, res.read>>20, res.err)
			select {
			case <-stopped:
			case <-time.After(15 * time.Second):
				t.Fatalf("router %s did not stop", name)
			}
			// Run returned: nothing of the router is left.
			if r := n.routers[name].r; len(r.Links()) != 0 || r.Forwarder().CircuitCount() != 0 || n.endsOn(name) != 0 {
				t.Errorf("router %s stopped with %d links, %d circuits routed and %d ends", name, len(r.Links()), r.Forwarder().CircuitCount(), n.endsOn(name))
			}
			for _, other := range []string{"A", "B", "C"} {
				if other == name {
					continue
				}
				testutil.Eventually(t, "no circuit left on router "+other, func() bool {
					return n.routers[other].r.Forwarder().CircuitCount() == 0 && n.endsOn(other) == 0
				})
			}
		})
	}
}

// Nothing is left running once the routers and the controller stop. Not parallel: it
// counts the process's goroutines.
func TestNoGoroutineLeftAfterStop(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, tc := range []struct {
		transport string
		split     bool
	}{{"tls", true}, {"tls", false}, {"quic", true}} {
		t.Run(fmt.Sprintf("%s split=%v", tc.transport, tc.split), func(t *testing.T) {
			n, srv, addr := line(t, tc.transport, tc.split)
			if err := transfer(srv, addr, 4<<20, 4<<20, time.Minute); err != nil {
				t.Fatal(err)
			}
			// A circuit still open when everything stops.
			cl, err := dialClient(addr, 1<<30, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.c.Close()
			cl.c.SetDeadline(time.Now().Add(time.Minute))
			sent := make(chan error, 1)
			go func() { sent <- cl.send() }()
			go cl.receive()
			testutil.Eventually(t, "1 MiB through the circuit", func() bool { return cl.got.n.Load() >= 1<<20 })
			n.stop()
			cl.ended(t, srv, sent, 15*time.Second)
		})
	}
	testutil.EventuallyNil(t, "the goroutines end once the nets stopped", func() error {
		if n := runtime.NumGoroutine(); n > before+2 {
			var buf bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&buf, 1)
			return fmt.Errorf("%d goroutines before, %d after:\n%s", before, n, buf.String())
		}
		return nil
	})
}

// bulkTransfer starts sending and receiving size bytes each way through addr, and returns
// once atLeast bytes arrived from the server; sent receives the end of the sending side.
func bulkTransfer(t *testing.T, addr string, size, atLeast int64) (*client, <-chan error) {
	t.Helper()
	cl, err := dialClient(addr, size, size)
	if err != nil {
		t.Fatal(err)
	}
	cl.c.SetDeadline(time.Now().Add(2 * time.Minute))
	sent := make(chan error, 1)
	go func() { sent <- cl.send() }()
	go cl.receive()
	testutil.Eventually(t, fmt.Sprintf("%d MiB through the circuit", atLeast>>20), func() bool { return cl.got.n.Load() >= atLeast })
	return cl, sent
}

// A circuit that ends cleanly is told to the controller once: the initiator's router sends a
// Fault marked Clean, the terminator's router sends none; the controller unroutes the router
// between, and nothing is left anywhere. The routers' message traces show what was sent.
func TestCleanEndToldOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := func(name string) string { return "trace:\n  path: " + filepath.Join(dir, name+".trace") + "\n" }
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, a: trace("a"), c: trace("c")})
	if err := transfer(srv, addr, 1000, 1000, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	n.waitGone(t, nil)
	faults := func(name string) (all []string) {
		n.routers[strings.ToUpper(name)].stop() // the trace is complete once its router stopped
		data, err := os.ReadFile(filepath.Join(dir, name+".trace"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var l traceLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("%s trace: %q: %v", name, line, err)
			}
			if l.Direction == "out" && l.Type == "Fault" {
				all = append(all, string(l.Message))
			}
		}
		return all
	}
	if got := faults("a"); len(got) != 1 || !strings.Contains(got[0], `"clean":true`) || !strings.Contains(got[0], `"unrouted":true`) {
		t.Errorf("the initiator's router sent the faults %q, want one, clean and unrouted", got)
	}
	if got := faults("c"); len(got) != 0 {
		t.Errorf("the terminator's router sent the faults %q after a clean end, want none", got)
	}
}
