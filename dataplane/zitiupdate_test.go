package dataplane

import (
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// A bind's updates take effect in order, the last one winning, and one sent right after the
// bind's StateConnected, before its terminator exists, is kept and applied.
func TestZitiUpdateBindInOrder(t *testing.T) {
	t.Parallel()
	n, svc, _, hostCert := zitiNet(t, false)
	h := n.routers["H"]
	host, err := n.connectZiti(h.r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	tok := n.zitiSession(host, h.r, svc.ID, "Bind")
	update := func(id uint32, cost int, prec int) {
		t.Helper()
		var m zitiproto.Message
		m.SetState(zitiproto.ContentUpdateBind, id, tok)
		if cost >= 0 {
			m.PutUint16(zitiproto.HeaderCost, uint16(cost))
		}
		if prec >= 0 {
			m.PutByte(zitiproto.HeaderPrecedence, byte(prec))
		}
		if err := host.send(&m); err != nil {
			t.Fatal(err)
		}
	}

	// The bind, answered StateConnected, then an update at once.
	const id = 100
	var bind zitiproto.Message
	bind.SetState(zitiproto.ContentBind, id, tok)
	bind.PutBool(zitiproto.HeaderSupportsBindSuccess, true)
	bind.PutUint16(zitiproto.HeaderCost, 7)
	reply, err := host.request(&bind)
	if err != nil || reply.ContentType != zitiproto.ContentStateConnected {
		t.Fatalf("bind: %v", err)
	}
	update(id, 33, -1)
	select {
	case ev := <-host.binds:
		if ev.ContentType != zitiproto.ContentBindSuccess {
			t.Fatalf("bind failed: %s", ev.Body)
		}
	case <-time.After(testutil.Patience):
		t.Fatal("no BindSuccess")
	}
	var termID string
	testutil.Eventually(t, "the update sent before the terminator existed to be applied", func() bool {
		terms, err := n.m.TerminatorsOf(svc.ID)
		if err != nil || len(terms) != 1 {
			return false
		}
		termID = terms[0].ID
		return terms[0].Cost == 33
	})

	// Costs 1 to 40 back to back, then a precedence: the last cost stays.
	for c := 1; c <= 40; c++ {
		update(id, c, -1)
	}
	update(id, -1, int(zitiproto.PrecedenceFailed))
	testutil.Eventually(t, "the last update to be applied", func() bool {
		got, err := n.m.Terminator(termID)
		return err == nil && got.Precedence == "failed"
	})
	if got, _ := n.m.Terminator(termID); got.Cost != 40 {
		t.Fatalf("after costs 1 to 40 in order, the terminator's cost is %d", got.Cost)
	}
}
