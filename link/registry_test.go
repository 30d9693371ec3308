package link

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/testutil"
)

func TestWins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b *Link
		want bool
	}{
		{&Link{id: "2", dialerID: "a"}, &Link{id: "1", dialerID: "b"}, true},
		{&Link{id: "1", dialerID: "b"}, &Link{id: "2", dialerID: "a"}, false},
		{&Link{id: "1", dialerID: "a"}, &Link{id: "2", dialerID: "a"}, true},
		{&Link{id: "2", dialerID: "a"}, &Link{id: "1", dialerID: "a"}, false},
	}
	for _, tt := range tests {
		if got := wins(tt.a, tt.b); got != tt.want {
			t.Errorf("wins(%s by %s, %s by %s) = %v", tt.a.id, tt.a.dialerID, tt.b.id, tt.b.dialerID, got)
		}
	}
}

// TestDuplicateLinksResolveAlike builds the duplicates one at a time and checks that both
// routers keep the same link: the one router-a (the lower id) dialed.
func TestDuplicateLinksResolveAlike(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, nil)
	b := newNode(t, ca, "router-b", releaseAll, nil)
	lnA := a.listen(t, config.TransportTLS, 0)
	lnB := b.listen(t, config.TransportTLS, 0)

	// b dials first: the only link, kept.
	byB, byBatA := connect(t, b, a, lnA, true)

	// a dials too: a's link wins on both sides and b's goes down on both. The router that
	// resolves first closes it as a duplicate; the other may see it closed before it does.
	byA, byAatB := connect(t, a, b, lnB, true)
	duplicates := 0
	for _, n := range []*node{a, b} {
		ev := n.waitDown(t)
		if ev.l != map[*node]*Link{a: byBatA, b: byB}[n] {
			t.Errorf("%s: Down(%s, %v); want b's link down", n.id, ev.l.ID(), ev.err)
		}
		if errors.Is(ev.err, ErrDuplicate) {
			duplicates++
		}
		t.Logf("%s: %v", n.id, ev.err)
	}
	if duplicates == 0 {
		t.Error("neither router closed b's link as a duplicate")
	}
	if a.reg.Get("router-b") != byA || b.reg.Get("router-a") != byAatB {
		t.Fatal("the registries do not hold a's link")
	}

	// b dials again: its new link loses on both sides and never comes up.
	if _, err := b.dialOnce(t, targetOf("router-a", lnA), true); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("b's second dial: %v; want ErrDuplicate", err)
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case l := <-a.up:
		t.Fatalf("a took link %s dialed by %s", l.ID(), l.dialerID)
	case ev := <-a.down:
		t.Fatalf("a lost link %s: %v", ev.l.ID(), ev.err)
	default:
	}
	if a.reg.Get("router-b") != byA || b.reg.Get("router-a") != byAatB {
		t.Fatal("the registries no longer hold a's link")
	}
}

// TestDuplicateLinksFromCrossedDials has both routers dial each other at once, repeatedly.
func TestDuplicateLinksFromCrossedDials(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			a := newNode(t, ca, "router-a", releaseAll, nil)
			b := newNode(t, ca, "router-b", releaseAll, nil)
			lnA := a.listen(t, tr, 0)
			lnB := b.listen(t, tr, 0)
			da, db := a.newDialer(t), b.newDialer(t)
			if err := da.Dial(targetOf("router-b", lnB)); err != nil {
				t.Fatal(err)
			}
			if err := db.Dial(targetOf("router-a", lnA)); err != nil {
				t.Fatal(err)
			}
			var id string
			testutil.Eventually(t, "both routers hold the link a dialed", func() bool {
				la, lb := a.reg.Get("router-b"), b.reg.Get("router-a")
				if la == nil || lb == nil || la.ID() != lb.ID() || la.dialerID != "router-a" {
					return false
				}
				id = la.ID()
				return true
			})
			// b's crossed dial may still be under way: it ends with both dialers linked.
			testutil.Eventually(t, "both dialers linked", func() bool {
				return da.state("router-b") == linked && db.state("router-a") == linked
			})
			time.Sleep(200 * time.Millisecond)
			la, lb := a.reg.Get("router-b"), b.reg.Get("router-a")
			if la == nil || lb == nil || la.ID() != id || lb.ID() != id {
				t.Fatalf("the link changed after settling")
			}
		})
	}
}

// TestContextEndStopsEverything runs alone (not in parallel) so that it can count
// goroutines: once the contexts end, listeners, dialers and links leave none behind.
func TestContextEndStopsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	ca := newCA(t)
	var (
		nodes []*node
		links []*Link
	)
	for _, tr := range transports {
		a := newNode(t, ca, "router-a", releaseAll, nil)
		b := newNode(t, ca, "router-b", releaseAll, nil)
		if err := a.newDialer(t).Dial(targetOf("router-b", b.listen(t, tr, 0))); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, a, b)
		links = append(links, a.waitUp(t), b.waitUp(t))
	}
	for _, n := range nodes {
		n.cancel()
	}
	for _, l := range links {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("link %s did not close with its context", l.ID())
		}
	}
	testutil.Eventually(t, "goroutines end", func() bool { return runtime.NumGoroutine() <= base })
}
