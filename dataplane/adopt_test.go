package dataplane

import (
	"io"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/xgress"
)

// An idle circuit outlives a controller restart: the routers report their circuits when they
// reconnect, so the idle checks that follow find them known; a fault after the restart still
// removes the circuit from every router.
func TestIdleCircuitSurvivesControllerRestart(t *testing.T) {
	t.Parallel()
	const idle = "forwarder:\n  idleCircuitTimeout: 200\n  idleTxInterval: 100\n"
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, a: idle, b: idle, c: idle})
	const size = 1 << 20
	cl, err := dialClient(addr, size, size)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.c.Close()
	cl.c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.CopyN(cl.got, cl.c, size); err != nil {
		t.Fatalf("the server's data: %v", err)
	}
	var id uint64
	n.routers["B"].r.fw.Each(func(c uint64, _, _ xgress.Hop) { id = c })
	if id == 0 {
		t.Fatal("no circuit routed at B")
	}

	n.stopController()
	n.startController()
	testutil.Eventually(t, "the routers online again", func() bool { return n.online("A") && n.online("B") && n.online("C") })
	time.Sleep(time.Second) // several idle checks of the now idle circuit
	if !n.routers["B"].r.fw.Routed(id) {
		t.Fatal("the idle circuit was unrouted after the controller restarted")
	}
	if known := n.controllerKnows("A", []uint64{id}); len(known) != 1 {
		t.Fatal("the restarted controller does not know the circuit the routers reported")
	}

	// The circuit still works, and its end unroutes it everywhere.
	if err := cl.send(); err != nil {
		t.Fatal(err)
	}
	if err := cl.receive(); err != nil {
		t.Fatal(err)
	}
	if err := cl.serverSaw(srv, size, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the circuit gone from every router", func() bool {
		for _, name := range []string{"A", "B", "C"} {
			if n.routers[name].r.fw.Routed(id) {
				return false
			}
		}
		return true
	})
}

// A circuit that ends while the controller is down is removed from the routers between its
// ends once the controller is back: the ends keep their faults and send them on reconnecting.
func TestFaultsKeptWhileControllerDown(t *testing.T) {
	t.Parallel()
	n, srv, addr := line(t, "tls", true)
	cl, err := dialClient(addr, 1<<10, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	cl.c.SetDeadline(time.Now().Add(time.Minute))
	var id uint64
	// A routes its end once the controller's reply comes, after B and C have their routes:
	// the controller stops only then, so the circuit is made before it goes.
	testutil.Eventually(t, "the circuit routed at A, B and C", func() bool {
		n.routers["B"].r.fw.Each(func(c uint64, _, _ xgress.Hop) { id = c })
		return id != 0 && n.routers["A"].r.fw.Routed(id) && n.routers["C"].r.fw.Routed(id)
	})
	n.stopController()
	if err := cl.send(); err != nil {
		t.Fatal(err)
	}
	if err := cl.receive(); err != nil {
		t.Fatal(err)
	}
	if err := cl.serverSaw(srv, 1<<10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cl.c.Close()
	testutil.Eventually(t, "the ends gone from A and C", func() bool { return !n.routers["A"].r.fw.Routed(id) && !n.routers["C"].r.fw.Routed(id) })
	if !n.routers["B"].r.fw.Routed(id) {
		t.Fatal("B unrouted the circuit with no controller to tell it")
	}
	n.startController()
	testutil.Eventually(t, "B told to unroute the circuit", func() bool { return !n.routers["B"].r.fw.Routed(id) })
}

// Routers send metrics reports every metrics.reportInterval, once they are
// metrics.intervalAgeThreshold old, and the controller keeps the latest of each router.
func TestMetricsReports(t *testing.T) {
	t.Parallel()
	const metrics = "metrics:\n  reportInterval: 1s\n  intervalAgeThreshold: 0s\n"
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, a: metrics, b: metrics, c: metrics})
	if err := transfer(srv, addr, 1<<20, 1<<20, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a report from B showing the forwarded frames", func() bool {
		rt, ok := n.ctrl.Routers().Lookup(n.routers["B"].id)
		if !ok || rt.Metrics() == nil {
			return false
		}
		v := rt.Metrics().Values
		return v["zmesh_forwarder_frames_forwarded_total"] > 0 && v["zmesh_links"] == 2 && v["zmesh_circuits_created_total"] == 0
	})
}

// When a router leaves the controller the routers that dial it are told, and retry it with
// the unhealthy backoff; when it is back they are told again.
func TestPeerStateReachesDialers(t *testing.T) {
	t.Parallel()
	n, _, _ := line(t, "tls", true)
	b := n.routers["B"]
	b.stop()
	testutil.Eventually(t, "A and C to count B offline", func() bool {
		return !n.routers["A"].r.dialer.PeerOnline(b.id) && !n.routers["C"].r.dialer.PeerOnline(b.id)
	})
	b.start(t)
	testutil.Eventually(t, "A and C to count B online", func() bool {
		return n.routers["A"].r.dialer.PeerOnline(b.id) && n.routers["C"].r.dialer.PeerOnline(b.id)
	})
	testutil.Eventually(t, "links A–B and C–B again", func() bool { return n.linked("A", "B") && n.linked("C", "B") })
}

// A route the controller does not know is removed once it has been idle for
// idleCircuitTimeout and, after the check, for xgressCloseCheckInterval more.
func TestUnknownIdleRouteRemoved(t *testing.T) {
	t.Parallel()
	const idle = "forwarder:\n  idleCircuitTimeout: 200\n  idleTxInterval: 100\n  xgressCloseCheckInterval: 300\n"
	n, _, _ := buildLine(t, lineConfig{transport: "tls", split: true, b: idle})
	b := n.routers["B"].r
	b.fw.Route(424242, nil, nil)
	start := time.Now()
	testutil.Eventually(t, "the unknown route removed", func() bool { return !b.fw.Routed(424242) })
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("removed after %s, before idleCircuitTimeout and xgressCloseCheckInterval had passed", d)
	}
}

// Links accept only the current certificates of routers, as the controller announced them.
func TestLinkPeersByCurrentCertificate(t *testing.T) {
	t.Parallel()
	n, _, _ := line(t, "tls", true)
	a, b := n.routers["A"].r, n.routers["B"].r
	if err := a.authorizePeer(b.id, b.ident.Certs.Server().Leaf); err != nil {
		t.Fatalf("B's server certificate: %v", err)
	}
	// A certificate of the network that is not B's: C's, under B's name.
	if err := a.authorizePeer(b.id, n.routers["C"].r.ident.Certs.Client().Leaf); err == nil {
		t.Fatal("another router's certificate was accepted as B's")
	}
	// B re-enrolled: its old certificates stop making links.
	if _, err := n.m.ReEnrollEdgeRouter(b.id); err != nil {
		t.Fatal(err)
	}
	n.routers["B"].stop()
	testutil.Eventually(t, "A to hear B is offline", func() bool { return !a.dialer.PeerOnline(b.id) })
	if err := a.authorizePeer(b.id, b.ident.Certs.Server().Leaf); err == nil {
		t.Fatal("B's certificate from before its re-enrollment still makes links")
	}
	// C merely stopped: its certificates still count while it is offline.
	c := n.routers["C"].r
	n.routers["C"].stop()
	testutil.Eventually(t, "A to hear C is offline", func() bool { return !a.dialer.PeerOnline(c.id) })
	if err := a.authorizePeer(c.id, c.ident.Certs.Client().Leaf); err != nil {
		t.Fatalf("C's certificates are kept while C is offline: %v", err)
	}
}
