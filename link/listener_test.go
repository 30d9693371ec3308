package link

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/testutil"
)

// openLinkConn dials ln as ident and says hello h to router peer, the way a link dialer
// opens each connection of a link, and returns the connection once the listener answered.
func openLinkConn(t *testing.T, ident Identity, ln *Listener, peer string, h hello) stream {
	t.Helper()
	addr, err := config.ParseAddress(targetOf(peer, ln).Address, config.TransportTLS, config.TransportQUIC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	s, err := dialStream(ctx, addr, netip.AddrPort{}, ident.clientTLS(peer), 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h.V, h.RouterID, h.Groups = helloVersion, ident.RouterID, []string{"default"}
	if err := clientHandshake(s, h, peer, 5*time.Second); err != nil {
		t.Fatalf("%s %s connection: %v", ident.RouterID, h.Role, err)
	}
	return s
}

// waitPaired waits until the listener holds n connections of split link id from router:
// the listener answers a hello before it pairs the connection, so a test that needs one
// connection to arrive before another waits for it.
func waitPaired(t *testing.T, ln *Listener, router, id string, n int) {
	t.Helper()
	testutil.EventuallyNil(t, fmt.Sprintf("link %s from %s: %d connections paired", id, router, n), func() error {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		arrived := 0
		if p := ln.pending[pairKey{router, id}]; p != nil {
			arrived = p.arrived
		}
		if arrived < n {
			return fmt.Errorf("%d paired", arrived)
		}
		return nil
	})
}

// waitClosed fails unless the listener closes s soon.
func waitClosed(t *testing.T, s stream, what string) {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("%s: not closed by the listener (%v)", what, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestPairingKeepsOtherRoutersOut: another router's connection that names a link being
// paired neither joins it nor breaks its pairing.
func TestPairingKeepsOtherRoutersOut(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := ca.identity(t, "router-a")
	c := ca.identity(t, "router-c")
	b := newNode(t, ca, "router-b", releaseAll, nil)
	ln := b.listen(t, config.TransportTLS, 0)

	const id = "link-1"
	openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RolePayload})
	openLinkConn(t, c, ln, "router-b", hello{LinkID: id, Role: RoleAck})
	ack := openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RoleAck})
	l := b.waitUp(t)
	if l.ID() != id || l.PeerID() != "router-a" {
		t.Fatalf("link %s with %s up; want %s with router-a", l.ID(), l.PeerID(), id)
	}
	if got, want := l.ack.s.RemoteAddr().String(), ack.LocalAddr().String(); got != want {
		t.Errorf("the link's ack connection comes from %s, want router-a's %s", got, want)
	}
	if b.reg.Get("router-c") != nil {
		t.Error("router-c has a link")
	}
}

// TestPairingTakesEachConnectionOnce: a connection of a role (or payload index) the link
// has already, of another certificate of the same router, or announcing another number of
// payload connections is refused alone, and the link forms of the right ones.
func TestPairingTakesEachConnectionOnce(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := ca.identity(t, "router-a")
	other := ca.identity(t, "router-a") // the same router, another certificate
	b := newNode(t, ca, "router-b", releaseAll, nil)
	ln := b.listen(t, config.TransportTLS, 0)

	const id = "link-2"
	p0 := openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RolePayload, Payloads: 2, Index: 0})
	waitPaired(t, ln, "router-a", id, 1)
	for _, tc := range []struct {
		what  string
		ident Identity
		h     hello
	}{
		{"a second payload connection 0", a, hello{LinkID: id, Role: RolePayload, Payloads: 2, Index: 0}},
		{"another certificate", other, hello{LinkID: id, Role: RolePayload, Payloads: 2, Index: 1}},
		{"another number of payload connections", a, hello{LinkID: id, Role: RolePayload, Payloads: 3, Index: 1}},
	} {
		waitClosed(t, openLinkConn(t, tc.ident, ln, "router-b", tc.h), tc.what)
	}
	p1 := openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RolePayload, Payloads: 2, Index: 1})
	waitPaired(t, ln, "router-a", id, 2)
	ack := openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RoleAck, Payloads: 2})
	l := b.waitUp(t)
	waitClosed(t, openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RoleAck, Payloads: 2}), "a second ack connection")
	for i, s := range []stream{p0, p1, ack} {
		if got, want := l.conns[i].s.RemoteAddr().String(), s.LocalAddr().String(); got != want {
			t.Errorf("the link's %s comes from %s, want %s", l.conns[i], got, want)
		}
	}
}

// TestPairingWithoutStriping pairs the payload and ack connections of a split link whose
// dialer does not stripe (hellos without payloads and index, as older routers send them),
// refusing a second payload connection alone.
func TestPairingWithoutStriping(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := ca.identity(t, "router-a")
	b := newNode(t, ca, "router-b", releaseAll, nil)
	ln := b.listen(t, config.TransportTLS, 0)

	const id = "link-3"
	p := openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RolePayload})
	waitPaired(t, ln, "router-a", id, 1)
	waitClosed(t, openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RolePayload}), "a second payload connection")
	ack := openLinkConn(t, a, ln, "router-b", hello{LinkID: id, Role: RoleAck})
	l := b.waitUp(t)
	if l.PayloadConns() != 1 || l.stripe != nil {
		t.Fatalf("%d payload connections", l.PayloadConns())
	}
	for i, s := range []stream{p, ack} {
		if got, want := l.conns[i].s.RemoteAddr().String(), s.LocalAddr().String(); got != want {
			t.Errorf("the link's %s comes from %s, want %s", l.conns[i], got, want)
		}
	}
}
