package circuits

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/internal/ctrlproto"
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
