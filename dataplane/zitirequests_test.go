package dataplane

import (
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// While the controller is away, an OpenZiti client's Connects wait for it: at most
// zitiMaxRequests of them are in progress at router E (each registers its connection), the
// rest are refused at once while the channel goes on answering, and once the controller is
// back every Connect in progress is answered.
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
	// The channel's reader goes on: the probe sent after the Connects is answered while the
	// controller is away, so the Connects beyond the bound were refused before it.
	var probe zitiproto.Message
	probe.Reset(zitiproto.ContentLatency)
	if _, err := cl.request(&probe); err != nil {
		t.Fatalf("a latency probe behind %d Connects: %v", connects, err)
	}
	refused := 0
	for i, ch := range replies {
		select {
		case m := <-ch:
			if m.ContentType != zitiproto.ContentStateClosed || !strings.Contains(string(m.Body), "in progress") {
				t.Fatalf("Connect %d answered with content type %d (%s) while the controller is away", i, m.ContentType, m.Body)
			}
			replies[i] = nil
			refused++
		default:
		}
	}
	if refused != connects-zitiMaxRequests {
		t.Fatalf("%d of %d Connects refused at once, want %d", refused, connects, connects-zitiMaxRequests)
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
	testutil.Eventually(t, "the first Connects to be in progress", func() bool { return inProgress() == zitiMaxRequests })

	n.startController()
	deadline := time.After(3 * testutil.Patience)
	for i, ch := range replies {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("Connect %d not answered once the controller was back", i)
		}
	}
}
