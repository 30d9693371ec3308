package model

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zmesh/zmesh/internal/testutil"
)

// readNetwork is a service alice may dial over an enrolled edge router, with a terminator.
type readNetwork struct {
	f      *fixture
	alice  *Identity
	web    *Service
	er     *EdgeRouter
	erp    *EdgeRouterPolicy
	dial   *ServicePolicy
	api    *APISession
	termID string
}

func newReadNetwork(t *testing.T) *readNetwork {
	t.Helper()
	n := &readNetwork{f: newFixture(t)}
	m := n.f.m
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	n.alice, err = m.CreateIdentity(IdentityCreate{Name: "alice", RoleAttributes: []string{"staff"}})
	must(err)
	n.web = &Service{Name: "web"}
	must(m.CreateService(n.web))
	n.dial = &ServicePolicy{Name: "staff-web", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + n.web.ID}}
	must(m.CreateServicePolicy(n.dial))
	n.er = &EdgeRouter{Name: "er1"}
	must(m.CreateEdgeRouter(n.er))
	n.erp = &EdgeRouterPolicy{Name: "all-edge", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}
	must(m.CreateEdgeRouterPolicy(n.erp))
	must(m.CreateServiceEdgeRouterPolicy(&ServiceEdgeRouterPolicy{Name: "all-svc", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	enr, err := m.RouterEnrollment(n.er.ID)
	must(err)
	key := testutil.NewKey(t)
	_, err = m.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "router.test"))
	must(err)
	n.api, _, err = m.openSession(&Authenticator{IdentityID: n.alice.ID}, "password", "", Login{})
	must(err)
	t1 := &Terminator{ServiceID: n.web.ID, RouterID: n.er.ID, Binding: "proxy", Address: "127.0.0.1:1"}
	must(m.CreateTerminator(t1))
	n.termID = t1.ID
	return n
}

// terminators returns the addresses of the cached terminators of the service.
func (n *readNetwork) terminators(t *testing.T, serviceID string) map[string]int {
	t.Helper()
	list, err := n.f.m.CachedTerminatorsOf(serviceID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, term := range list {
		out[term.Address] = term.Cost
	}
	return out
}

// TestCachedTerminatorsSeeChanges checks that every committed change of a service's
// terminators, cascades included, is seen by the next read.
func TestCachedTerminatorsSeeChanges(t *testing.T) {
	t.Parallel()
	n := newReadNetwork(t)
	m := n.f.m
	for range 2 { // the second read comes from the cache
		if got := n.terminators(t, n.web.ID); len(got) != 1 || got["127.0.0.1:1"] != 0 {
			t.Fatalf("terminators %v", got)
		}
	}
	t2 := &Terminator{ServiceID: n.web.ID, RouterID: n.er.ID, Binding: "proxy", Address: "127.0.0.1:2"}
	if err := m.CreateTerminator(t2); err != nil {
		t.Fatal(err)
	}
	if got := n.terminators(t, n.web.ID); len(got) != 2 {
		t.Fatalf("after a create: %v", got)
	}
	if _, err := m.UpdateTerminator(n.termID, func(t *Terminator) error { t.Cost = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := n.terminators(t, n.web.ID); got["127.0.0.1:1"] != 7 {
		t.Fatalf("after an update: %v", got)
	}
	if err := m.DeleteTerminator(n.termID); err != nil {
		t.Fatal(err)
	}
	if got := n.terminators(t, n.web.ID); len(got) != 1 || got["127.0.0.1:2"] != 0 {
		t.Fatalf("after a delete: %v", got)
	}
	// Deleting the router deletes its terminators.
	if err := m.DeleteEdgeRouter(n.er.ID); err != nil {
		t.Fatal(err)
	}
	if got := n.terminators(t, n.web.ID); len(got) != 0 {
		t.Fatalf("after the router's deletion: %v", got)
	}
}

// TestCachedServiceSeesChanges checks service lookups by id and name after updates and
// deletion, with the service's terminators gone with it.
func TestCachedServiceSeesChanges(t *testing.T) {
	t.Parallel()
	n := newReadNetwork(t)
	m := n.f.m
	for range 2 {
		if s, err := m.CachedServiceByName("web"); err != nil || s.ID != n.web.ID {
			t.Fatalf("by name: %v, %v", s, err)
		}
		if s, err := m.CachedService(n.web.ID); err != nil || s.Name != "web" || s.EncryptionRequired {
			t.Fatalf("by id: %+v, %v", s, err)
		}
	}
	n.terminators(t, n.web.ID)
	if _, err := m.UpdateService(n.web.ID, func(s *Service) error { s.Name, s.TerminatorStrategy = "www", "random"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CachedServiceByName("web"); CodeOf(err) != CodeNotFound {
		t.Fatalf("the old name still finds a service: %v", err)
	}
	if s, err := m.CachedServiceByName("www"); err != nil || s.TerminatorStrategy != "random" {
		t.Fatalf("the new name: %+v, %v", s, err)
	}
	if err := m.DeleteService(n.web.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CachedService(n.web.ID); CodeOf(err) != CodeNotFound {
		t.Fatalf("a deleted service is found by id: %v", err)
	}
	if _, err := m.CachedServiceByName("www"); CodeOf(err) != CodeNotFound {
		t.Fatalf("a deleted service is found by name: %v", err)
	}
	if got := n.terminators(t, n.web.ID); len(got) != 0 {
		t.Fatalf("the deleted service's terminators: %v", got)
	}
}

// TestCachedDialSessionRevoked checks that a dial session stops working as soon as it is
// deleted, its API session is deleted, or the policy that allowed it is.
func TestCachedDialSessionRevoked(t *testing.T) {
	t.Parallel()
	n := newReadNetwork(t)
	m := n.f.m
	newSession := func(api *APISession) *Session {
		t.Helper()
		s, _, err := m.CreateSession(api, n.web.ID, PolicyDial, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	wantValid := func(s *Session) {
		t.Helper()
		for range 2 {
			got, err := m.DialSession(s.Token, n.web.ID, PolicyDial)
			if err != nil || got.ID != s.ID {
				t.Fatalf("session %s: %v, %v", s.ID, got, err)
			}
		}
	}
	wantGone := func(s *Session, after string) {
		t.Helper()
		if _, err := m.DialSession(s.Token, n.web.ID, PolicyDial); CodeOf(err) != CodeNotFound {
			t.Fatalf("session %s still dials after %s: %v", s.ID, after, err)
		}
	}

	s := newSession(n.api)
	wantValid(s)
	if _, err := m.DialSession(s.Token, n.web.ID, PolicyBind); CodeOf(err) != CodeNotFound {
		t.Fatalf("a Dial session binds: %v", err)
	}
	if _, err := m.DialSession(s.Token, "other", PolicyDial); CodeOf(err) != CodeNotFound {
		t.Fatalf("a session dials another service: %v", err)
	}
	if err := m.DeleteSession(s.ID); err != nil {
		t.Fatal(err)
	}
	wantGone(s, "its deletion")

	s = newSession(n.api)
	wantValid(s)
	if err := m.DeleteAPISession(n.api.ID); err != nil {
		t.Fatal(err)
	}
	wantGone(s, "its API session's deletion")

	api, _, err := m.openSession(&Authenticator{IdentityID: n.alice.ID}, "password", "", Login{})
	if err != nil {
		t.Fatal(err)
	}
	s = newSession(api)
	wantValid(s)
	if err := m.DeleteServicePolicy(n.dial.ID); err != nil {
		t.Fatal(err)
	}
	wantGone(s, "the deletion of the policy that allowed it")
}

// TestCachedDialSessionConcurrentDelete checks, under concurrent lookups, that no lookup made
// after DeleteSession returned finds the session.
func TestCachedDialSessionConcurrentDelete(t *testing.T) {
	t.Parallel()
	n := newReadNetwork(t)
	m := n.f.m
	for round := range 20 {
		s, _, err := m.CreateSession(n.api, n.web.ID, PolicyDial, nil)
		if err != nil {
			t.Fatal(err)
		}
		var deleted, stop atomic.Bool
		var late atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for !stop.Load() {
					after := deleted.Load()
					if _, err := m.DialSession(s.Token, n.web.ID, PolicyDial); err == nil && after {
						late.Add(1)
					}
				}
			})
		}
		if err := m.DeleteSession(s.ID); err != nil {
			t.Fatal(err)
		}
		deleted.Store(true)
		for range 1000 {
			if _, err := m.DialSession(s.Token, n.web.ID, PolicyDial); err == nil {
				late.Add(1)
			}
		}
		stop.Store(true)
		wg.Wait()
		if late.Load() > 0 {
			t.Fatalf("round %d: %d lookups after the deletion found the session", round, late.Load())
		}
	}
}

// TestEdgeRouterAllows checks the edge router check of circuit requests against the
// listing it stands for, after policy and router changes.
func TestEdgeRouterAllows(t *testing.T) {
	t.Parallel()
	n := newReadNetwork(t)
	m := n.f.m
	check := func(want bool, when string) {
		t.Helper()
		ok, err := m.EdgeRouterAllows(n.alice.ID, n.er.ID, n.web.ID)
		if err != nil {
			t.Fatal(err)
		}
		list, err := m.EdgeRoutersFor(n.alice.ID, n.web.ID)
		if err != nil {
			t.Fatal(err)
		}
		if listed := len(list) == 1 && list[0].ID == n.er.ID; ok != want || listed != want {
			t.Fatalf("%s: allowed %v, listed %v, want %v", when, ok, listed, want)
		}
	}
	check(true, "at first")
	if ok, err := m.EdgeRouterAllows(n.alice.ID, "no-such-router", n.web.ID); ok || err != nil {
		t.Fatalf("an unknown router: %v, %v", ok, err)
	}
	if _, err := m.EdgeRouterAllows("no-such-identity", n.er.ID, n.web.ID); CodeOf(err) != CodeNotFound {
		t.Fatalf("an unknown identity: %v", err)
	}
	if err := m.DeleteEdgeRouterPolicy(n.erp.ID); err != nil {
		t.Fatal(err)
	}
	check(false, "after the edge router policy's deletion")
	if err := m.CreateEdgeRouterPolicy(&EdgeRouterPolicy{Name: "staff-edge", IdentityRoles: []string{"#staff"}, EdgeRouterRoles: []string{"@" + n.er.ID}}); err != nil {
		t.Fatal(err)
	}
	check(true, "with a new edge router policy")
	if _, err := m.UpdateEdgeRouter(n.er.ID, func(r *EdgeRouter) error { r.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	check(false, "once the router is disabled")
}
