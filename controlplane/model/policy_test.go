package model

import (
	"fmt"
	"sort"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
)

func names(t *testing.T, list []ServiceAccess) string {
	var out []string
	for _, a := range list {
		mode := ""
		if a.Dial {
			mode += "D"
		}
		if a.Bind {
			mode += "B"
		}
		out = append(out, a.Name+":"+mode)
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := f.m
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	alice, _ := m.CreateIdentity(IdentityCreate{Name: "alice", RoleAttributes: []string{"staff", "ops"}})
	bob, _ := m.CreateIdentity(IdentityCreate{Name: "bob", RoleAttributes: []string{"staff"}})
	web := &Service{Name: "web", RoleAttributes: []string{"public"}}
	db := &Service{Name: "db", RoleAttributes: []string{"internal"}}
	must(m.CreateService(web))
	must(m.CreateService(db))
	must(m.CreateServicePolicy(&ServicePolicy{Name: "staff-web", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"#public"}}))
	must(m.CreateServicePolicy(&ServicePolicy{Name: "ops-db", Type: PolicyDial, Semantic: SemanticAll, IdentityRoles: []string{"#staff", "#ops"}, ServiceRoles: []string{"@" + db.ID}}))
	must(m.CreateServicePolicy(&ServicePolicy{Name: "bob-hosts", Type: PolicyBind, IdentityRoles: []string{"@" + bob.ID}, ServiceRoles: []string{"#all"}}))

	got, _ := m.ServicesFor(alice.ID)
	if s := names(t, got); s != "[db:D web:D]" {
		t.Errorf("alice: %s", s)
	}
	got, _ = m.ServicesFor(bob.ID)
	if s := names(t, got); s != "[db:B web:DB]" {
		t.Errorf("bob: %s", s)
	}

	// Sessions need an edge router both policies allow.
	api, _, err := m.openSession(&Authenticator{IdentityID: alice.ID}, "password", "", Login{})
	must(err)
	_, _, err = m.CreateSession(api, db.ID, PolicyDial, nil)
	wantCode(t, err, CodeNoEdgeRoutersAvailable)
	er := &EdgeRouter{Name: "er1", RoleAttributes: []string{"edge"}}
	must(m.CreateEdgeRouter(er))
	must(m.CreateEdgeRouterPolicy(&EdgeRouterPolicy{Name: "all-edge", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#edge"}}))
	must(m.CreateServiceEdgeRouterPolicy(&ServiceEdgeRouterPolicy{Name: "all-svc", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	s, routers, err := m.CreateSession(api, db.ID, PolicyDial, nil)
	must(err)
	if len(routers) != 1 || routers[0].ID != er.ID {
		t.Fatalf("routers = %v", routers)
	}
	_, _, err = m.CreateSession(api, db.ID, PolicyBind, nil)
	wantCode(t, err, CodeCouldNotValidate)

	// Taking ops away from alice ends the db session the ops policy alone allowed.
	before := m.LastChange()
	_, err = m.UpdateIdentity(alice.ID, func(i *Identity) error { i.RoleAttributes = []string{"staff"}; return nil })
	must(err)
	if _, err := m.Session(s.ID); CodeOf(err) != CodeNotFound {
		t.Errorf("session survived the loss of its policy: %v", err)
	}
	if m.LastChange() <= before {
		t.Error("last change did not move")
	}
	got, _ = m.ServicesFor(alice.ID)
	if s := names(t, got); s != "[web:D]" {
		t.Errorf("alice after update: %s", s)
	}
	// Deleting the service ends its sessions.
	s2, _, err := m.CreateSession(api, web.ID, PolicyDial, nil)
	must(err)
	must(m.DeleteService(web.ID))
	if _, err := m.Session(s2.ID); CodeOf(err) != CodeNotFound {
		t.Errorf("session of a deleted service: %v", err)
	}
}

func TestRolesValidated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	err := f.m.CreateServicePolicy(&ServicePolicy{Name: "p", Type: PolicyDial, IdentityRoles: []string{"staff"}})
	var e *Error
	if !errorAs(err, &e) || e.Field != "identityRoles[0]" {
		t.Errorf("role without #: %v", err)
	}
	err = f.m.CreateServicePolicy(&ServicePolicy{Name: "p", Type: "Host"})
	if !errorAs(err, &e) || e.Field != "type" {
		t.Errorf("type: %v", err)
	}
}

// BenchmarkServicesFor lists the services of one identity in a network of 10,000 services,
// 1,000 service policies and 1,000 identities.
func BenchmarkServicesFor(b *testing.B) {
	f := newFixtureWith(b, store.Options{InMemory: true})
	m := f.m
	var ids []string
	for i := range 1000 {
		id, err := m.CreateIdentity(IdentityCreate{Name: fmt.Sprintf("id%d", i), RoleAttributes: []string{fmt.Sprintf("team%d", i%50), "all-staff"}})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id.ID)
	}
	for i := range 10_000 {
		if err := m.CreateService(&Service{Name: fmt.Sprintf("svc%d", i), RoleAttributes: []string{fmt.Sprintf("group%d", i%200)}}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 1000 {
		p := &ServicePolicy{Name: fmt.Sprintf("p%d", i), Type: PolicyDial, Semantic: SemanticAny,
			IdentityRoles: []string{fmt.Sprintf("#team%d", i%50)}, ServiceRoles: []string{fmt.Sprintf("#group%d", i%200), fmt.Sprintf("#group%d", (i+1)%200)}}
		if err := m.CreateServicePolicy(p); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := m.policies(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		list, err := m.ServicesFor(ids[i%len(ids)])
		if err != nil || len(list) == 0 {
			b.Fatal(err, len(list))
		}
		i++
	}
}

// BenchmarkPolicyRebuild measures the rebuild of the policy index after a change, in the
// network of BenchmarkServicesFor.
func BenchmarkPolicyRebuild(b *testing.B) {
	f := newFixtureWith(b, store.Options{InMemory: true})
	m := f.m
	for i := range 1000 {
		m.CreateIdentity(IdentityCreate{Name: fmt.Sprintf("id%d", i), RoleAttributes: []string{fmt.Sprintf("team%d", i%50)}})
	}
	for i := range 10_000 {
		m.CreateService(&Service{Name: fmt.Sprintf("svc%d", i), RoleAttributes: []string{fmt.Sprintf("group%d", i%200)}})
	}
	for i := range 1000 {
		m.CreateServicePolicy(&ServicePolicy{Name: fmt.Sprintf("p%d", i), Type: PolicyDial, Semantic: SemanticAny,
			IdentityRoles: []string{fmt.Sprintf("#team%d", i%50)}, ServiceRoles: []string{fmt.Sprintf("#group%d", i%200)}})
	}
	b.ReportAllocs()
	for b.Loop() {
		m.cache.gen.Add(1)
		if _, err := m.policies(); err != nil {
			b.Fatal(err)
		}
	}
}
