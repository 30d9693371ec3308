package model

import (
	"fmt"
	"sort"
	"testing"

	"github.com/zmesh/zmesh/internal/testutil"
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
	// A router that has not enrolled carries nothing.
	_, _, err = m.CreateSession(api, db.ID, PolicyDial, nil)
	wantCode(t, err, CodeNoEdgeRoutersAvailable)
	e, err := m.RouterEnrollment(er.ID)
	must(err)
	key := testutil.NewKey(t)
	_, err = m.EnrollErOtt(e.Token, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "router.test"))
	must(err)
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
