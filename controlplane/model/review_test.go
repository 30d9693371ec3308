package model

import (
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestMissingPostureCheckDenies: a policy that names by id a posture check that is gone (the
// check was deleted while the policy was written) grants nothing, instead of nothing gated.
func TestMissingPostureCheckDenies(t *testing.T) {
	t.Parallel()
	n := newPostureNet(t)
	m := n.m
	c := &PostureCheck{Name: "corp", TypeID: PostureDomain, Domains: []string{"corp.example"}}
	n.must(t, m.CreatePostureCheck(c))
	n.dialPolicy(t, "gated", "@"+c.ID)
	if err := m.st.Update(func(tx *store.Tx) error { return m.c.postureChecks.Delete(tx, c.ID) }); err != nil {
		t.Fatal(err)
	}
	m.cache.gen.Add(1)
	if _, err := n.dial(t); err == nil {
		t.Fatal("a policy naming a deleted posture check granted a session")
	}
}

func TestMFATimeoutBounded(t *testing.T) {
	t.Parallel()
	n := newPostureNet(t)
	err := n.m.CreatePostureCheck(&PostureCheck{Name: "mfa", TypeID: PostureMFA, TimeoutSeconds: 10_000_000_000})
	wantField(t, err, "timeoutSeconds")
}

// enrolledRouter creates an edge router and completes its enrollment.
func enrolledRouter(t testing.TB, m *Model, r *EdgeRouter) {
	t.Helper()
	if err := m.CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	e, err := m.RouterEnrollment(r.ID)
	if err != nil || e == nil {
		t.Fatalf("enrollment of %s: %v", r.Name, err)
	}
	key := testutil.NewKey(t)
	if _, err := m.EnrollErOtt(e.Token, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "router.test")); err != nil {
		t.Fatal(err)
	}
}

// TestRouterIdentity: a tunneler-enabled edge router has an identity of its id and name, of
// type Router, kept in step with the router.
func TestRouterIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := f.m
	r := &EdgeRouter{Name: "gw1", IsTunnelerEnabled: true}
	if err := m.CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	id, err := m.Identity(r.ID)
	if err != nil || id.Name != "gw1" || id.Type != IdentityTypeRouter {
		t.Fatalf("router identity: %+v %v", id, err)
	}
	wantCode(t, m.DeleteIdentity(r.ID), CodeCanNotDeleteReferenced)
	if _, err := m.UpdateEdgeRouter(r.ID, func(r *EdgeRouter) error { r.Name = "gw-1"; return nil }); err != nil {
		t.Fatal(err)
	}
	if id, _ := m.Identity(r.ID); id == nil || id.Name != "gw-1" {
		t.Fatalf("identity after rename: %+v", id)
	}
	if _, err := m.CreateIdentity(IdentityCreate{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	_, err = m.UpdateEdgeRouter(r.ID, func(r *EdgeRouter) error { r.Name = "taken"; return nil })
	wantCode(t, err, CodeCouldNotValidate)
	if _, err := m.UpdateEdgeRouter(r.ID, func(r *EdgeRouter) error { r.IsTunnelerEnabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Identity(r.ID); CodeOf(err) != CodeNotFound {
		t.Fatalf("identity after the tunneler was turned off: %v", err)
	}
	r2 := &EdgeRouter{Name: "gw2", IsTunnelerEnabled: true}
	if err := m.CreateEdgeRouter(r2); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteEdgeRouter(r2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Identity(r2.ID); CodeOf(err) != CodeNotFound {
		t.Fatalf("identity after the router was deleted: %v", err)
	}
}
