package dataplane

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// echoOnce sends msg through the proxy address and returns what comes back.
func echoOnce(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	return string(got), err
}

// A router creates a terminator for a service its identity may bind, through the
// rate-limited queue; circuits reach it; creating it again returns the same one; removing
// it ends the service's reachability. A router whose identity may not bind is refused.
func TestRouterCreatesTerminators(t *testing.T) {
	t.Parallel()
	n := hostAndProxy(t, "hosted")
	svc := &model.Service{Name: "hosted"}
	if err := n.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServicePolicy(&model.ServicePolicy{Name: "dial-hosted", Type: model.PolicyDial, Semantic: model.SemanticAny,
		IdentityRoles: []string{"@" + n.routers["A"].id}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := n.routers["H"].r
	echo := echoServer(t)
	req := &ctrlproto.TerminatorCreate{Service: "hosted", Binding: "proxy", Address: echo}

	_, err := h.CreateTerminator(ctx, req)
	var ce *ctrlproto.Error
	if !errors.As(err, &ce) || ce.Code != ctrlproto.ErrCodeServiceNotFound {
		t.Fatalf("a router without a Bind policy created a terminator: %v", err)
	}
	if err := n.m.CreateServicePolicy(&model.ServicePolicy{Name: "bind-hosted", Type: model.PolicyBind, Semantic: model.SemanticAny,
		IdentityRoles: []string{"@" + n.routers["H"].id}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		t.Fatal(err)
	}
	id, err := h.CreateTerminator(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	term, err := n.m.Terminator(id)
	if err != nil || term.RouterID != n.routers["H"].id || term.HostID != n.routers["H"].id || term.Address != echo {
		t.Fatalf("terminator %s: %+v %v", id, term, err)
	}
	proxy := n.routers["A"].r.ProxyAddress("hosted")
	if got, err := echoOnce(proxy, "to the hosted service"); err != nil || got != "to the hosted service" {
		t.Fatalf("through the router's terminator: %q %v", got, err)
	}
	req.Cost = 7
	again, err := h.CreateTerminator(ctx, req)
	if err != nil || again != id {
		t.Fatalf("creating the same terminator again gave %q (%v), want %s", again, err, id)
	}
	if terms, _ := n.m.TerminatorsOf(svc.ID); len(terms) != 1 || terms[0].Cost != 7 {
		t.Fatalf("terminators after the second create: %+v", terms)
	}
	if err := h.RemoveTerminator(ctx, id); err != nil {
		t.Fatal(err)
	}
	if terms, _ := n.m.TerminatorsOf(svc.ID); len(terms) != 0 {
		t.Fatalf("terminators after remove: %+v", terms)
	}
	if got, _ := echoOnce(proxy, "nobody hosts this"); got != "" {
		t.Fatalf("a service without terminators answered %q", got)
	}
	// A router removes only its own terminators.
	if err := n.m.CreateTerminator(&model.Terminator{ServiceID: svc.ID, RouterID: n.routers["A"].id, Binding: "proxy", Address: echo}); err != nil {
		t.Fatal(err)
	}
	terms, _ := n.m.TerminatorsOf(svc.ID)
	if err := h.RemoveTerminator(ctx, terms[0].ID); err == nil {
		t.Fatal("a router removed another router's terminator")
	}
}

// While the controller is away, terminator requests wait in the rate-limited queue; once
// it holds rateLimitedQueueLength of them the next fails at once; the waiting ones complete
// when the controller is back.
func TestRateLimitedQueueFull(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	n.addRouter("H", true, `forwarder:
  rateLimitedQueueLength: 1
  rateLimitedWorkerCount: 1
`)
	svc := &model.Service{Name: "queued"}
	if err := n.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServicePolicy(&model.ServicePolicy{Name: "bind", Type: model.PolicyBind, Semantic: model.SemanticAny,
		IdentityRoles: []string{"@" + n.routers["H"].id}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		t.Fatal(err)
	}
	h := n.routers["H"].r
	n.stopController()
	testutil.Eventually(t, "the router to see the controller gone", func() bool {
		return !h.ctrl.isConnected()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := make(chan error, 2)
	create := func(addr string) {
		_, err := h.CreateTerminator(ctx, &ctrlproto.TerminatorCreate{Service: "queued", Binding: "proxy", Address: addr})
		results <- err
	}
	go create("127.0.0.1:1001")
	testutil.Eventually(t, "the worker to take the first request", func() bool { return h.ctrlOpsBusy.Load() == 1 })
	go create("127.0.0.1:1002")
	testutil.Eventually(t, "the second request to wait in the queue", func() bool { return len(h.ctrlOps) == 1 })
	start := time.Now()
	_, err := h.CreateTerminator(ctx, &ctrlproto.TerminatorCreate{Service: "queued", Binding: "proxy", Address: "127.0.0.1:1003"})
	if !errors.Is(err, ErrRateLimitedQueueFull) {
		t.Fatalf("third request with a full queue: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the full queue answered after %v, not at once", d)
	}
	n.startController()
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("a queued request failed after the controller came back: %v", err)
		}
	}
	if terms, _ := n.m.TerminatorsOf(svc.ID); len(terms) != 2 {
		t.Fatalf("terminators: %+v", terms)
	}
}

// hostAndProxy builds tunneler-enabled routers H (link listener) and A (link dialer, tunnel
// proxy mode for service on a free port), linked.
func hostAndProxy(t testing.TB, service string) *testNet {
	t.Helper()
	n := newTestNet(t)
	n.addRouter("H", true, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
`)
	n.addRouter("A", true, `link:
  dialers:
    - binding: transport
listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [`+service+`:{{port}}]
`)
	testutil.Eventually(t, "link A–H", func() bool { return n.linked("A", "H") })
	return n
}
