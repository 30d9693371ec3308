package model

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// Disabling an identity ends its password and certificate API sessions with their sessions
// in one change that routers are told of, refuses every login and enrollment while it
// lasts with the answer of a failed login, and lapses at disabledUntil; enabling lifts it.
func TestDisableIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := f.m
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	changes := watchChanges(t, m)
	id, err := m.CreateIdentity(IdentityCreate{Name: "laptop", RoleAttributes: []string{"staff"}, Enrollment: &EnrollmentRequest{OTT: true}})
	must(err)
	ens, _ := m.EnrollmentsOf(id.ID)
	certPEM, err := m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	must(err)
	chain := []*x509.Certificate{parseCert(t, certPEM)}
	e, err := m.CreateEnrollment(id.ID, EnrollmentRequest{Updb: "laptop-user"}, f.clock.Now().Add(time.Hour))
	must(err)
	must(m.EnrollUpdb(context.Background(), e.Token, "laptop-pass"))
	web := &Service{Name: "web"}
	must(m.CreateService(web))
	must(m.CreateServicePolicy(&ServicePolicy{Name: "staff-web", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + web.ID}}))
	er := &EdgeRouter{Name: "er1"}
	must(m.CreateEdgeRouter(er))
	enr, err := m.RouterEnrollment(er.ID)
	must(err)
	rkey := testutil.NewKey(t)
	_, err = m.EnrollErOtt(enr.Token, testutil.CSR(t, rkey), testutil.CSR(t, rkey, "router.test"))
	must(err)
	must(m.CreateEdgeRouterPolicy(&EdgeRouterPolicy{Name: "all-edge", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	must(m.CreateServiceEdgeRouterPolicy(&ServiceEdgeRouterPolicy{Name: "all-svc", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))

	password := func() (*APISession, error) {
		s, _, err := m.AuthenticatePassword(context.Background(), "laptop-user", "laptop-pass", Login{Source: "127.0.0.1"})
		return s, err
	}
	cert := func() (*APISession, error) {
		s, _, err := m.AuthenticateCert(chain, Login{Source: "127.0.0.1"})
		return s, err
	}
	pw, err := password()
	must(err)
	cs, err := cert()
	must(err)
	dial, _, err := m.CreateSession(pw, web.ID, PolicyDial, nil)
	must(err)
	changes.take()

	// Another identity's session lives on.
	other, err := m.CreateIdentity(IdentityCreate{Name: "other"})
	must(err)
	oe, err := m.CreateEnrollment(other.ID, EnrollmentRequest{Updb: "other-user"}, f.clock.Now().Add(time.Hour))
	must(err)
	must(m.EnrollUpdb(context.Background(), oe.Token, "other-pass"))
	otherSess, _, err := m.AuthenticatePassword(context.Background(), "other-user", "other-pass", Login{Source: "127.0.0.1"})
	must(err)
	changes.take()

	wantCode(t, m.DisableIdentity(id.ID, -time.Minute), CodeCouldNotValidate)
	wantCode(t, m.DisableIdentity("nobody", 0), CodeNotFound)
	must(m.DisableIdentity(id.ID, 0))
	changes.want(t, "disable", []string{"-" + pw.ID, "-" + cs.ID}, []string{"-" + dial.ID})
	for _, s := range []*APISession{pw, cs} {
		_, _, err := m.SessionByToken(s.Token)
		wantCode(t, err, CodeUnauthorized)
	}
	if _, err := m.Session(dial.ID); CodeOf(err) != CodeNotFound {
		t.Fatalf("the disabled identity's session is still stored: %v", err)
	}
	if _, _, err := m.SessionByToken(otherSess.Token); err != nil {
		t.Fatalf("another identity's API session ended: %v", err)
	}
	got, err := m.Identity(id.ID)
	must(err)
	if got.DisabledAt == nil || got.DisabledUntil != nil || !got.IsDisabled(f.clock.Now().Add(1000*time.Hour)) {
		t.Fatalf("disabled until enabled: disabledAt %v, disabledUntil %v", got.DisabledAt, got.DisabledUntil)
	}

	// Every login fails like a wrong password, whatever the method; a wrong password too.
	_, err = password()
	wantCode(t, err, CodeInvalidAuth)
	_, _, err = m.AuthenticatePassword(context.Background(), "laptop-user", "wrong-pass", Login{Source: "127.0.0.2"})
	wantCode(t, err, CodeInvalidAuth)
	_, err = cert()
	wantCode(t, err, CodeInvalidAuth)
	_, err = m.IdentityByCert(chain)
	wantCode(t, err, CodeInvalidAuth)
	_, _, err = m.openSessionFor(id.ID, "", MethodExtJWT, "", Login{}, "")
	wantCode(t, err, CodeInvalidAuth)

	// Nor can it enroll; the token stays for after enabling.
	re, err := m.CreateEnrollment(id.ID, EnrollmentRequest{OTT: true}, f.clock.Now().Add(time.Hour))
	must(err)
	csr := testutil.CSR(t, testutil.NewKey(t))
	_, err = m.EnrollOTT(re.Token, csr)
	wantCode(t, err, CodeUnauthorized)

	// An update of its other fields keeps it disabled.
	_, err = m.UpdateIdentity(id.ID, func(i *Identity) error { i.DisabledAt = nil; i.Name = "laptop2"; return nil })
	must(err)
	_, err = password()
	wantCode(t, err, CodeInvalidAuth)

	// Enabled: logins and the enrollment work again.
	must(m.EnableIdentity(id.ID))
	if got, _ := m.Identity(id.ID); got.DisabledAt != nil || got.DisabledUntil != nil {
		t.Fatalf("enabled identity keeps disabledAt %v, disabledUntil %v", got.DisabledAt, got.DisabledUntil)
	}
	_, err = password()
	must(err)
	_, err = cert()
	must(err)
	if _, err := m.EnrollOTT(re.Token, csr); err != nil {
		t.Fatalf("enrollment after enabling: %v", err)
	}

	// For a duration: refused until disabledUntil, allowed after, on the model's clock.
	must(m.DisableIdentity(id.ID, 30*time.Minute))
	got, _ = m.Identity(id.ID)
	if got.DisabledUntil == nil || !got.DisabledUntil.Equal(got.DisabledAt.Add(30*time.Minute)) {
		t.Fatalf("disabledUntil %v, want disabledAt %v + 30m", got.DisabledUntil, got.DisabledAt)
	}
	f.clock.Add(29 * time.Minute)
	_, err = password()
	wantCode(t, err, CodeInvalidAuth)
	f.clock.Add(time.Minute)
	if _, err := password(); err != nil {
		t.Fatalf("login once the disabling lapsed: %v", err)
	}
	if _, err := cert(); err != nil {
		t.Fatalf("certificate login once the disabling lapsed: %v", err)
	}
}

// The default administrator and a router's identity cannot be disabled.
func TestDisableIdentityRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.m.EnsureDefaultAdmin(context.Background(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	ids, _ := f.m.Identities()
	wantCode(t, f.m.DisableIdentity(ids[0].ID, 0), CodeCannotUpdateDefaultAdmin)
	if _, _, err := f.m.AuthenticatePassword(context.Background(), "admin", "admin-pass", Login{}); err != nil {
		t.Fatal(err)
	}
	er := &EdgeRouter{Name: "er1", IsTunnelerEnabled: true}
	if err := f.m.CreateEdgeRouter(er); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Identity(er.ID); err != nil {
		t.Fatalf("a tunneling edge router has no identity: %v", err)
	}
	wantCode(t, f.m.DisableIdentity(er.ID, 0), CodeCouldNotValidate)
}
