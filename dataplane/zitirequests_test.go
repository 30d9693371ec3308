package dataplane

import (
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// While the controller is away, an OpenZiti client's Connects wait for it: at most
// zitiMaxRequests of them are in progress at router E (each registers its connection), the
// channel's reader waiting with the rest, and once the controller is back every Connect is
// answered and the channel works on.
func TestZitiRequestsBounded(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 3*testutil.Patience)
	n, svc, e, cl := s.n, s.svc, s.e, s.cl
	tok := n.zitiSession(cl, e.r, svc.ID, "Dial")
	n.stopController()
	testutil.Eventually(t, "router E to see the controller gone", func() bool { return !e.r.ctrl.isConnected() })

	const connects = zitiMaxRequests + 16
	replies := make([]chan *zitiproto.Message, connects)
	for i := range replies {
		zc := cl.newConn(0)
		var m zitiproto.Message
		m.SetState(zitiproto.ContentConnect, zc.id, tok)
		replies[i] = make(chan *zitiproto.Message, 1)
		cl.wmu.Lock()
		cl.seq++
		m.Sequence = cl.seq
		cl.mu.Lock()
		cl.replies[m.Sequence] = replies[i]
		cl.mu.Unlock()
		err := cl.w.Write(&m)
		cl.wmu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	inProgress := func() int {
		n := 0
		for _, zc := range e.r.ziti.clients() {
			zc.mu.Lock()
			n += len(zc.circuits)
			zc.mu.Unlock()
		}
		return n
	}
	testutil.Eventually(t, "the first Connects to be in progress", func() bool { return inProgress() >= zitiMaxRequests })
	if k := inProgress(); k > zitiMaxRequests {
		t.Fatalf("%d Connects in progress at once, want at most %d", k, zitiMaxRequests)
	}

	n.startController()
	deadline := time.After(3 * testutil.Patience)
	for i, ch := range replies {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d of %d Connects answered once the controller was back", i, connects)
		}
	}
	var probe zitiproto.Message
	probe.Reset(zitiproto.ContentLatency)
	if _, err := cl.request(&probe); err != nil {
		t.Fatalf("the channel after its Connects: %v", err)
	}
}
