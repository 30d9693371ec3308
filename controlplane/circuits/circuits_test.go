package circuits

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// noRouters: no router is connected.
type noRouters struct{}

func (noRouters) Channel(string) (*ctrlproto.Channel, bool) { return nil, false }

func newService(t *testing.T) (*Service, *model.Model) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, _ := modeltest.New(t, log, model.Options{})
	return New(m, paths.NewGraph(), noRouters{}, log), m
}

// TestCircuitRefusals: each reason a circuit cannot be made is answered with its code, and
// nothing is kept.
func TestCircuitRefusals(t *testing.T) {
	t.Parallel()
	s, m := newService(t)
	gw := &model.EdgeRouter{Name: "gw", IsTunnelerEnabled: true}
	other := &model.EdgeRouter{Name: "other", IsTunnelerEnabled: true}
	for _, r := range []*model.EdgeRouter{gw, other} {
		if err := m.CreateEdgeRouter(r); err != nil {
			t.Fatal(err)
		}
	}
	svc := &model.Service{Name: "web"}
	if err := m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	if err := m.CreateTerminator(&model.Terminator{ServiceID: svc.ID, RouterID: gw.ID, Binding: "proxy", Address: "127.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	ask := func(req *ctrlproto.CircuitRequest) string {
		return s.Create(context.Background(), gw.ID, req).ErrorCode
	}
	if code := ask(&ctrlproto.CircuitRequest{IngressIdentityID: gw.ID}); code != ctrlproto.ErrCodeInvalid {
		t.Errorf("no service: %s", code)
	}
	if code := ask(&ctrlproto.CircuitRequest{ServiceName: "nope", IngressIdentityID: gw.ID}); code != ctrlproto.ErrCodeServiceNotFound {
		t.Errorf("unknown service: %s", code)
	}
	if code := ask(&ctrlproto.CircuitRequest{ServiceName: "web", IngressIdentityID: gw.ID}); code != ctrlproto.ErrCodeServiceNotFound {
		t.Errorf("no policy: %s", code)
	}
	if err := m.CreateServicePolicy(&model.ServicePolicy{Name: "p", Type: model.PolicyDial, IdentityRoles: []string{"@" + gw.ID}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		t.Fatal(err)
	}
	// A router may not dial as another router's identity.
	if code := ask(&ctrlproto.CircuitRequest{ServiceName: "web", IngressIdentityID: other.ID}); code != ctrlproto.ErrCodeInvalid {
		t.Errorf("another router's identity: %s", code)
	}
	if code := ask(&ctrlproto.CircuitRequest{ServiceName: "web", SessionToken: "not-a-session"}); code != ctrlproto.ErrCodeInvalidSession {
		t.Errorf("bad session token: %s", code)
	}
	// The policy allows it, but the terminator's router is not connected.
	if code := ask(&ctrlproto.CircuitRequest{ServiceName: "web", IngressIdentityID: gw.ID}); code != ctrlproto.ErrCodeNoTerminator {
		t.Errorf("terminator router offline: %s", code)
	}
	if created, failed := s.Stats(); created != 0 || failed != 6 || len(s.Circuits()) != 0 {
		t.Errorf("stats %d created, %d failed, %d kept", created, failed, len(s.Circuits()))
	}
	if s.Remove(42, "x") || len(s.Valid([]uint64{42})) != 0 {
		t.Error("an unknown circuit was known")
	}
}

// TestAdopt: circuits routers report on reconnecting become known, with the reporting routers
// as their path, unless they were removed meanwhile.
func TestAdopt(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	s.Adopt("A", []uint64{1, 2})
	s.Adopt("B", []uint64{1})
	if v := s.Valid([]uint64{1, 2, 3}); len(v) != 2 {
		t.Fatalf("valid after adoption: %v", v)
	}
	for _, c := range s.Circuits() {
		if c.ID == 1 && len(c.Path) != 2 {
			t.Fatalf("circuit 1's path: %v", c.Path)
		}
	}
	if !s.Remove(1, "fault") || s.Remove(1, "again") {
		t.Fatal("remove")
	}
	// A fault that arrived before the router's Hello keeps the circuit from coming back.
	s.Remove(7, "fault of a circuit not known yet")
	s.Adopt("C", []uint64{1, 7})
	if v := s.Valid([]uint64{1, 7}); len(v) != 0 {
		t.Fatalf("removed circuits came back: %v", v)
	}
}

// TestLinksNeedBothEnds: a link counts in the graph once both of its routers reported it.
func TestLinksNeedBothEnds(t *testing.T) {
	t.Parallel()
	graph := paths.NewGraph()
	m := NewMesh(graph, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.LinkState("A", &ctrlproto.LinkState{LinkID: "l1", PeerRouterID: "B", Up: true, Latency: time.Millisecond})
	if len(graph.Links()) != 0 {
		t.Fatal("a link reported by one end entered the graph")
	}
	// B reports a different peer for the same link id: still one-sided.
	m.LinkState("B", &ctrlproto.LinkState{LinkID: "l1", PeerRouterID: "C", Up: true})
	if len(graph.Links()) != 0 {
		t.Fatal("mismatched reports made a link")
	}
	m.LinkState("B", &ctrlproto.LinkState{LinkID: "l1", PeerRouterID: "A", Up: true, Latency: 3 * time.Millisecond})
	links := graph.Links()
	if len(links) != 1 || links[0].Latency != 3*time.Millisecond {
		t.Fatalf("links: %+v", links)
	}
	m.LinkState("A", &ctrlproto.LinkState{LinkID: "l1", PeerRouterID: "B", Up: false})
	if len(graph.Links()) != 0 {
		t.Fatal("a link reported down stayed")
	}
}

// pipeRouters connects routers over in-memory channels and records the Unroutes they get.
type pipeRouters struct {
	chans    map[string]*ctrlproto.Channel
	unroutes chan string // "<router> <circuit>"
}

func newPipeRouters(t *testing.T, names ...string) *pipeRouters {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &pipeRouters{chans: map[string]*ctrlproto.Channel{}, unroutes: make(chan string, 100)}
	var all []*ctrlproto.Channel
	for _, name := range names {
		a, b := net.Pipe()
		ctrlEnd := ctrlproto.New(context.Background(), a, log, ctrlproto.Options{})
		routerEnd := ctrlproto.New(context.Background(), b, log, ctrlproto.Options{})
		routerEnd.Handle(ctrlproto.TypeUnroute, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
			p.unroutes <- fmt.Sprintf("%s %d", name, m.(*ctrlproto.Unroute).CircuitID)
			return nil, nil
		})
		ctrlEnd.Start()
		routerEnd.Start()
		p.chans[name] = ctrlEnd
		all = append(all, ctrlEnd, routerEnd)
	}
	t.Cleanup(func() {
		for _, c := range all {
			c.Close()
		}
	})
	return p
}

func (p *pipeRouters) Channel(id string) (*ctrlproto.Channel, bool) {
	c, ok := p.chans[id]
	return c, ok
}

// got returns the Unroutes received within a moment, sorted.
func (p *pipeRouters) got() []string {
	var out []string
	for {
		select {
		case u := <-p.unroutes:
			out = append(out, u)
		case <-time.After(200 * time.Millisecond):
			slices.Sort(out)
			return out
		}
	}
}

// TestFaultUnroutesTheOthers: a fault unroutes the circuit on every router of its path, but
// for the reporting router when it says it removed the circuit itself.
func TestFaultUnroutesTheOthers(t *testing.T) {
	t.Parallel()
	_, m := newService(t)
	rs := newPipeRouters(t, "A", "B")
	s := New(m, paths.NewGraph(), rs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Adopt("A", []uint64{1, 2})
	s.Adopt("B", []uint64{1, 2})

	s.Fault("A", &ctrlproto.Fault{CircuitID: 1, Reason: "closed", Unrouted: true})
	if got := rs.got(); !slices.Equal(got, []string{"B 1"}) {
		t.Errorf("unroutes after a fault of a router that removed the circuit: %v", got)
	}
	s.Fault("B", &ctrlproto.Fault{CircuitID: 1, Reason: "closed", Unrouted: true})
	if got := rs.got(); len(got) != 0 {
		t.Errorf("unroutes after the second fault: %v", got)
	}
	s.Fault("B", &ctrlproto.Fault{CircuitID: 2, Reason: "the client left"})
	if got := rs.got(); !slices.Equal(got, []string{"A 2", "B 2"}) {
		t.Errorf("unroutes after a fault of a router that still has the circuit: %v", got)
	}
	if v := s.Valid([]uint64{1, 2}); len(v) != 0 {
		t.Errorf("circuits still known: %v", v)
	}
}

// TestCleanFaultSkipsTheTerminator: a clean end reported by the initiator's router of a
// two-router path unroutes nothing more (the terminator's router removes the circuit by
// itself); with a router between, that router and the terminator's are unrouted, since an
// Unroute could reach the router between before the initiator's EOF passed it; a clean end
// reported by another router, or of an adopted circuit, unroutes as any fault does.
func TestCleanFaultSkipsTheTerminator(t *testing.T) {
	t.Parallel()
	_, m := newService(t)
	rs := newPipeRouters(t, "A", "B", "C")
	s := New(m, paths.NewGraph(), rs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.mu.Lock()
	s.circuits[1] = &Circuit{ID: 1, Path: []string{"A", "C"}}
	s.circuits[2] = &Circuit{ID: 2, Path: []string{"A", "C"}}
	s.circuits[4] = &Circuit{ID: 4, Path: []string{"A", "B", "C"}}
	s.mu.Unlock()
	s.Adopt("A", []uint64{3})
	s.Adopt("C", []uint64{3})

	s.Fault("A", &ctrlproto.Fault{CircuitID: 1, Reason: "closed", Unrouted: true, Clean: true})
	if got := rs.got(); len(got) != 0 {
		t.Errorf("unroutes after a clean end at the initiator of a two-router path: %v, want none", got)
	}
	s.Fault("C", &ctrlproto.Fault{CircuitID: 2, Reason: "closed", Unrouted: true, Clean: true})
	if got := rs.got(); !slices.Equal(got, []string{"A 2"}) {
		t.Errorf("unroutes after a clean fault from the terminator's router: %v", got)
	}
	s.Fault("A", &ctrlproto.Fault{CircuitID: 3, Reason: "closed", Unrouted: true, Clean: true})
	if got := rs.got(); !slices.Equal(got, []string{"C 3"}) {
		t.Errorf("unroutes after a clean end of an adopted circuit: %v", got)
	}
	s.Fault("A", &ctrlproto.Fault{CircuitID: 4, Reason: "closed", Unrouted: true, Clean: true})
	if got := rs.got(); !slices.Equal(got, []string{"B 4", "C 4"}) {
		t.Errorf("unroutes after a clean end at the initiator of a three-router path: %v", got)
	}
}

// routeRouter is a connected router that answers Routes with hostKey as its HostZitiKey and
// hostHello as its HostHello, and records the egress Xgress of each.
type routeRouter struct {
	ch                 *ctrlproto.Channel
	hostKey, hostHello []byte
	egress             chan *ctrlproto.Xgress
}

func newRouteRouter(t *testing.T) *routeRouter {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rr := &routeRouter{egress: make(chan *ctrlproto.Xgress, 10)}
	a, b := net.Pipe()
	ctrlEnd := ctrlproto.New(context.Background(), a, log, ctrlproto.Options{})
	routerEnd := ctrlproto.New(context.Background(), b, log, ctrlproto.Options{})
	routerEnd.Handle(ctrlproto.TypeRoute, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		r := m.(*ctrlproto.Route)
		rr.egress <- r.Forward.Xgress
		return &ctrlproto.RouteReply{CircuitID: r.CircuitID, HostAnswer: ctrlproto.HostAnswer{HostZitiKey: rr.hostKey, HostHello: rr.hostHello}}, nil
	})
	routerEnd.Handle(ctrlproto.TypeUnroute, func(context.Context, ctrlproto.Message) (ctrlproto.Message, error) { return nil, nil })
	ctrlEnd.Start()
	routerEnd.Start()
	t.Cleanup(func() { ctrlEnd.Close(); routerEnd.Close() })
	rr.ch = ctrlEnd
	return rr
}

func (rr *routeRouter) Channel(string) (*ctrlproto.Channel, bool) { return rr.ch, true }

// TestE2EEOffers: the controller applies the service's policy to the initiator's offer: a
// malformed offer or one of no scheme is refused; no offer on an encrypted service means
// zmesh's scheme; OpenZiti's scheme only where openZitiEncryption allows it (its key dropped
// from the egress's offer otherwise, and a host key refused; required when only it was
// offered); zmesh's ClientHello passed to the egress and its ServerHello back, which must
// answer one; a service without encryption passes no offer and takes no host key or hello.
func TestE2EEOffers(t *testing.T) {
	t.Parallel()
	_, m := newService(t)
	rr := newRouteRouter(t)
	s := New(m, paths.NewGraph(), rr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	gw := &model.EdgeRouter{Name: "gw", IsTunnelerEnabled: true}
	if err := m.CreateEdgeRouter(gw); err != nil {
		t.Fatal(err)
	}
	secret := &model.Service{Name: "secret", EncryptionRequired: true}
	ziti := &model.Service{Name: "ziti", EncryptionRequired: true, OpenZitiEncryption: true}
	plain := &model.Service{Name: "plain"}
	for _, svc := range []*model.Service{secret, ziti, plain} {
		if err := m.CreateService(svc); err != nil {
			t.Fatal(err)
		}
		if err := m.CreateTerminator(&model.Terminator{ServiceID: svc.ID, RouterID: gw.ID, Binding: "tunnel", Address: svc.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.CreateServicePolicy(&model.ServicePolicy{Name: "p", Type: model.PolicyDial, IdentityRoles: []string{"@" + gw.ID},
		ServiceRoles: []string{"@" + secret.ID, "@" + ziti.ID, "@" + plain.ID}}); err != nil {
		t.Fatal(err)
	}
	key := func(n int) []byte { return bytes.Repeat([]byte{7}, n) }
	ask := func(svc string, offer *ctrlproto.E2EEOffer) *ctrlproto.CircuitReply {
		return s.Create(context.Background(), gw.ID, &ctrlproto.CircuitRequest{ServiceName: svc, IngressIdentityID: gw.ID, E2EE: offer})
	}
	for _, c := range []struct {
		name  string
		svc   string
		offer *ctrlproto.E2EEOffer
		code  string
		says  []string
	}{
		{"an empty offer", "secret", &ctrlproto.E2EEOffer{}, ctrlproto.ErrCodeEncryptionRequired, []string{"e2ee."}},
		{"a short key", "secret", &ctrlproto.E2EEOffer{Zmesh: true, ZitiKey: key(31)}, ctrlproto.ErrCodeInvalidE2EEOffer, []string{"e2ee.zitiKey"}},
		{"a long key", "plain", &ctrlproto.E2EEOffer{ZitiKey: key(33)}, ctrlproto.ErrCodeInvalidE2EEOffer, []string{"e2ee.zitiKey"}},
		{"only OpenZiti's scheme where it is not allowed", "secret", &ctrlproto.E2EEOffer{ZitiKey: key(32)},
			ctrlproto.ErrCodeOpenZitiEncryptionNotAllowed, []string{"openZitiEncryption is false", `"secret"`}},
		{"a long ClientHello", "secret", &ctrlproto.E2EEOffer{Zmesh: true, ZmeshHello: key(ctrlproto.MaxZmeshHello + 1)},
			ctrlproto.ErrCodeInvalidE2EEOffer, []string{"e2ee.zmeshHello", "257"}},
		{"a ClientHello without zmesh's scheme", "ziti", &ctrlproto.E2EEOffer{ZitiKey: key(32), ZmeshHello: key(40)},
			ctrlproto.ErrCodeInvalidE2EEOffer, []string{"e2ee.zmeshHello without e2ee.zmesh"}},
	} {
		reply := ask(c.svc, c.offer)
		if reply.ErrorCode != c.code {
			t.Errorf("%s: %s %q, want %s", c.name, reply.ErrorCode, reply.ErrorMessage, c.code)
		}
		for _, w := range c.says {
			if !strings.Contains(reply.ErrorMessage, w) {
				t.Errorf("%s: %q does not say %s", c.name, reply.ErrorMessage, w)
			}
		}
	}
	if len(rr.egress) != 0 {
		t.Fatal("a refused circuit was routed")
	}

	// route asks for a circuit and returns its reply and the offer the egress got.
	route := func(svc string, offer *ctrlproto.E2EEOffer, hostKey, hostHello []byte) (*ctrlproto.CircuitReply, *ctrlproto.E2EEOffer) {
		t.Helper()
		rr.hostKey, rr.hostHello = hostKey, hostHello
		reply := ask(svc, offer)
		select {
		case x := <-rr.egress:
			return reply, x.E2EE
		default:
			t.Fatalf("%s: not routed: %+v", svc, reply)
			return nil, nil
		}
	}
	zmeshOnly := &ctrlproto.E2EEOffer{Zmesh: true}
	both := &ctrlproto.E2EEOffer{Zmesh: true, ZitiKey: key(32)}
	zitiOnly := &ctrlproto.E2EEOffer{ZitiKey: key(32)}
	hello := &ctrlproto.E2EEOffer{Zmesh: true, ZmeshHello: key(40)}
	bothHello := &ctrlproto.E2EEOffer{Zmesh: true, ZitiKey: key(32), ZmeshHello: key(40)}
	kept := 0
	for _, c := range []struct {
		name      string
		svc       string
		offer     *ctrlproto.E2EEOffer
		hostKey   []byte
		hostHello []byte
		egress    *ctrlproto.E2EEOffer // what the egress gets
		code      string               // of the reply
	}{
		// openZitiEncryption false: zmesh's scheme only.
		{"no offer means zmesh's scheme", "secret", nil, nil, nil, zmeshOnly, ""},
		{"zmesh's scheme", "secret", zmeshOnly, nil, nil, zmeshOnly, ""},
		{"the key dropped", "secret", both, nil, nil, zmeshOnly, ""},
		{"a host key refused", "secret", both, key(32), nil, zmeshOnly, ctrlproto.ErrCodeRouteFailed},
		{"zmesh's ClientHello answered", "secret", hello, nil, key(300), hello, ""},
		{"the key dropped, the ClientHello kept", "secret", bothHello, nil, key(300), hello, ""},
		{"a ClientHello answered in-band", "secret", hello, nil, nil, hello, ""},
		{"a ServerHello answering no ClientHello", "secret", zmeshOnly, nil, key(300), zmeshOnly, ctrlproto.ErrCodeRouteFailed},
		// openZitiEncryption true: the offer as made.
		{"OpenZiti's scheme allowed", "ziti", zitiOnly, key(32), nil, zitiOnly, ""},
		{"both offered", "ziti", both, nil, nil, both, ""},
		{"no offer on an OpenZiti service", "ziti", nil, nil, nil, zmeshOnly, ""},
		{"a host key answering zmesh's offer", "ziti", zmeshOnly, key(32), nil, zmeshOnly, ctrlproto.ErrCodeRouteFailed},
		{"a short host key", "ziti", zitiOnly, key(16), nil, zitiOnly, ctrlproto.ErrCodeRouteFailed},
		{"no host key answering only OpenZiti's scheme", "ziti", zitiOnly, nil, nil, zitiOnly, ctrlproto.ErrCodeEncryptionRequired},
		{"a host key and a ServerHello", "ziti", bothHello, key(32), key(300), bothHello, ctrlproto.ErrCodeRouteFailed},
		{"a ServerHello over the bound", "ziti", bothHello, nil, key(ctrlproto.MaxHostHello + 1), bothHello, ctrlproto.ErrCodeRouteFailed},
		// no encryption: no offer passed, no host key or hello taken.
		{"no offer", "plain", nil, nil, nil, nil, ""},
		{"an offer dropped", "plain", bothHello, nil, nil, nil, ""},
		{"a host key on a plain service", "plain", both, key(32), nil, nil, ctrlproto.ErrCodeRouteFailed},
		{"a ServerHello on a plain service", "plain", hello, nil, key(300), nil, ctrlproto.ErrCodeRouteFailed},
	} {
		reply, got := route(c.svc, c.offer, c.hostKey, c.hostHello)
		if reply.ErrorCode != c.code {
			t.Errorf("%s: %s %q, want code %q", c.name, reply.ErrorCode, reply.ErrorMessage, c.code)
		}
		if (got == nil) != (c.egress == nil) || got != nil && (got.Zmesh != c.egress.Zmesh || !bytes.Equal(got.ZitiKey, c.egress.ZitiKey) ||
			!bytes.Equal(got.ZmeshHello, c.egress.ZmeshHello)) {
			t.Errorf("%s: the egress got offer %+v, want %+v", c.name, got, c.egress)
		}
		if c.code != "" {
			continue
		}
		kept++
		if reply.EncryptionRequired != (c.svc != "plain") || !bytes.Equal(reply.HostZitiKey, c.hostKey) || !bytes.Equal(reply.HostHello, c.hostHello) {
			t.Errorf("%s: reply %+v", c.name, reply)
		}
	}
	if got := len(s.Circuits()); got != kept {
		t.Errorf("%d circuits kept, want %d", got, kept)
	}
}

// TestUpdateTerminator: a router changes the cost and precedence of its own terminator; a
// field left unset keeps its value, invalid values are refused naming the field, and another
// router's terminator cannot be changed.
func TestUpdateTerminator(t *testing.T) {
	t.Parallel()
	s, m := newService(t)
	svc := &model.Service{Name: "svc"}
	if err := m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	var routers []*model.EdgeRouter
	for _, name := range []string{"a", "b"} {
		er := &model.EdgeRouter{Name: name}
		if err := m.CreateEdgeRouter(er); err != nil {
			t.Fatal(err)
		}
		routers = append(routers, er)
	}
	term := &model.Terminator{ServiceID: svc.ID, RouterID: routers[0].ID, Binding: "edge", Address: "ziti/c/1", Cost: 5}
	if err := m.CreateTerminator(term); err != nil {
		t.Fatal(err)
	}
	cost := 9
	if reply := s.updateTerminator(routers[0].ID, &ctrlproto.TerminatorUpdate{TerminatorID: term.ID, Cost: &cost}); reply.Err() != nil {
		t.Fatal(reply.Err())
	}
	if reply := s.updateTerminator(routers[0].ID, &ctrlproto.TerminatorUpdate{TerminatorID: term.ID, Precedence: "failed"}); reply.Err() != nil {
		t.Fatal(reply.Err())
	}
	if got, _ := m.Terminator(term.ID); got.Cost != 9 || got.Precedence != "failed" {
		t.Fatalf("after the updates: cost %d, precedence %q", got.Cost, got.Precedence)
	}
	tooHigh := model.MaxTerminatorCost + 1
	for name, u := range map[string]*ctrlproto.TerminatorUpdate{
		"precedence": {TerminatorID: term.ID, Precedence: "sometimes"},
		"cost":       {TerminatorID: term.ID, Cost: &tooHigh},
	} {
		if reply := s.updateTerminator(routers[0].ID, u); reply.ErrorCode != ctrlproto.ErrCodeInvalid || !strings.Contains(reply.ErrorMessage, name) {
			t.Errorf("an invalid %s: %s %q", name, reply.ErrorCode, reply.ErrorMessage)
		}
	}
	if reply := s.updateTerminator(routers[1].ID, &ctrlproto.TerminatorUpdate{TerminatorID: term.ID, Cost: &cost}); reply.Err() == nil {
		t.Fatal("a router changed another router's terminator")
	}
	if got, _ := m.Terminator(term.ID); got.Cost != 9 || got.Precedence != "failed" {
		t.Fatalf("after the refused updates: cost %d, precedence %q", got.Cost, got.Precedence)
	}
}

// TestSnapshotRechecksClientCerts: a store whose whole content is replaced (a cluster
// member installing a snapshot) reports no identity's change, yet the circuits dialed with
// a client certificate that the new content no longer knows end, and the others stay.
func TestSnapshotRechecksClientCerts(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, ca := modeltest.Store(t)
	key := testutil.NewKey(t)
	m := model.New(st, ca, log, model.Options{SessionTimeout: time.Hour, Issuer: "https://ctrl.test", SigningKey: key, SigningKID: "k"})
	s := New(m, paths.NewGraph(), noRouters{}, log)

	enroll := func(name string) (string, []byte) {
		t.Helper()
		id, err := m.CreateIdentity(model.IdentityCreate{Name: name, Type: "Device"})
		if err != nil {
			t.Fatal(err)
		}
		e, err := m.CreateEnrollment(id.ID, model.EnrollmentRequest{OTT: true}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		certPEM, err := m.EnrollOTT(e.Token, testutil.CSR(t, testutil.NewKey(t)))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(certPEM)
		if block == nil {
			t.Fatalf("enrolling %s returned no PEM certificate", name)
		}
		return id.ID, block.Bytes
	}
	kept, keptCert := enroll("kept")
	snap := filepath.Join(t.TempDir(), "snap")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Backup(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	gone, goneCert := enroll("gone")

	s.mu.Lock()
	s.circuits[1] = &Circuit{ID: 1, Initiator: kept, clientCert: keptCert}
	s.circuits[2] = &Circuit{ID: 2, Initiator: gone, clientCert: goneCert}
	s.mu.Unlock()
	for _, c := range s.Circuits() {
		if !s.certStillAuthenticates(&c) {
			t.Fatalf("circuit %d: its certificate does not authenticate %s before the replacement", c.ID, c.Initiator)
		}
	}

	if err := st.ReplaceFromBackup(snap); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the circuit of the certificate the snapshot lacks ends", func() bool {
		return !slices.ContainsFunc(s.Circuits(), func(c Circuit) bool { return c.ID == 2 })
	})
	got := s.Circuits()
	if len(got) != 1 || got[0].ID != 1 || !s.certStillAuthenticates(&got[0]) {
		t.Fatalf("circuits after the replacement %+v; want circuit 1, whose certificate the snapshot holds", got)
	}
}
