package model

import (
	"context"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// Deleting a third-party CA, or turning its authentication off, ends the API sessions of
// the certificates enrolled with it (auto and ottca enrollment), tells routers the password
// sessions of those identities no longer admit them, and leaves the network's certificates
// alone; turning authentication back on makes them current again.
func TestCATrustEndsSessions(t *testing.T) {
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
	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAutoCaEnrollmentEnabled: true,
		IsOttCaEnrollmentEnabled: true, IsAuthEnabled: true})
	must(err)
	must(m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))))

	// An auto-enrolled identity, and one enrolled by ottca that also has a password and a
	// certificate of the network.
	auto := corp.Issue(t, "dev1", nil)
	_, err = m.EnrollCA([]*x509.Certificate{auto})
	must(err)
	o, err := m.CreateIdentity(IdentityCreate{Name: "o", Enrollment: &EnrollmentRequest{OTTCA: ca.ID}})
	must(err)
	ens, _ := m.EnrollmentsOf(o.ID)
	oc := corp.Issue(t, "o", nil)
	must(m.EnrollOTTCA(ens[0].Token, []*x509.Certificate{oc}))
	e, err := m.CreateEnrollment(o.ID, EnrollmentRequest{Updb: "o-user"}, f.clock.Now().Add(time.Hour))
	must(err)
	must(m.EnrollUpdb(context.Background(), e.Token, "o-pass"))
	ne, err := m.CreateEnrollment(o.ID, EnrollmentRequest{OTT: true}, f.clock.Now().Add(time.Hour))
	must(err)
	netPEM, err := m.EnrollOTT(ne.Token, testutil.CSR(t, testutil.NewKey(t)))
	must(err)
	netCert := parseCert(t, netPEM)

	login := func(c *x509.Certificate) *APISession {
		t.Helper()
		s, _, err := m.AuthenticateCert([]*x509.Certificate{c}, Login{})
		must(err)
		return s
	}
	autoSess, oSess, netSess := login(auto), login(oc), login(netCert)
	pw, _, err := m.AuthenticatePassword(context.Background(), "o-user", "o-pass", Login{})
	must(err)
	fp := certid.Fingerprint
	if got := routedCerts(t, m, pw.ID); !slices.Contains(got, fp(oc)) || !slices.Contains(got, fp(netCert)) {
		t.Fatalf("the password session admits %v", got)
	}
	alive := func(what string, s *APISession, want bool) {
		t.Helper()
		_, _, err := m.SessionByToken(s.Token)
		if want && err != nil {
			t.Fatalf("%s ended: %v", what, err)
		}
		if !want {
			wantCode(t, err, CodeUnauthorized)
		}
	}

	// Authentication off: the CA's certificate sessions end, the others stay.
	changes.take()
	_, err = m.UpdateCA(ca.ID, func(c *CA) error { c.IsAuthEnabled = false; return nil })
	must(err)
	if api, _ := changes.take(); !slices.Contains(api, "-"+autoSess.ID) || !slices.Contains(api, "-"+oSess.ID) || !slices.Contains(api, "+"+pw.ID) {
		t.Fatalf("routers were told %v; want both CA sessions removed and the password session sent again", api)
	}
	alive("the auto-enrolled certificate's session", autoSess, false)
	alive("the ottca certificate's session", oSess, false)
	alive("the network certificate's session", netSess, true)
	alive("the password session", pw, true)
	if got := routedCerts(t, m, pw.ID); !slices.Equal(got, []string{fp(netCert)}) {
		t.Fatalf("with the CA's authentication off the password session admits %v, want only the network's certificate", got)
	}

	// Back on: the certificates are current again.
	_, err = m.UpdateCA(ca.ID, func(c *CA) error { c.IsAuthEnabled = true; return nil })
	must(err)
	if got := routedCerts(t, m, pw.ID); !slices.Contains(got, fp(oc)) {
		t.Fatalf("with authentication back on the password session admits %v", got)
	}
	autoSess, oSess = login(auto), login(oc)

	// Deleted: the same, for good.
	must(m.DeleteCA(ca.ID))
	alive("the auto-enrolled certificate's session after the deletion", autoSess, false)
	alive("the ottca certificate's session after the deletion", oSess, false)
	alive("the network certificate's session after the deletion", netSess, true)
	alive("the password session after the deletion", pw, true)
	if got := routedCerts(t, m, pw.ID); !slices.Equal(got, []string{fp(netCert)}) {
		t.Fatalf("after the CA's deletion the password session admits %v", got)
	}
}

// A certificate authenticator stored without its CA (as an earlier version did) is matched
// to the CA that signed it when that CA is deleted.
func TestCATrustLegacyAuthenticator(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := f.m
	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAutoCaEnrollmentEnabled: true, IsAuthEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))); err != nil {
		t.Fatal(err)
	}
	dev := corp.Issue(t, "dev1", nil)
	id, err := m.EnrollCA([]*x509.Certificate{dev})
	if err != nil {
		t.Fatal(err)
	}
	auths, _ := m.AuthenticatorsOf(id.ID)
	if err := m.st.Update(func(tx *store.Tx) error {
		auths[0].CAFingerprint = ""
		return m.c.authenticators.Put(tx, auths[0])
	}); err != nil {
		t.Fatal(err)
	}
	s, _, err := m.AuthenticateCert([]*x509.Certificate{dev}, Login{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteCA(ca.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = m.SessionByToken(s.Token)
	wantCode(t, err, CodeUnauthorized)
}

// A certificate authenticator an administrator adds records the third-party CA that issued
// it, so that the CA's deletion ends the sessions it opened; a certificate of no CA the
// network knows is refused.
func TestAddedCertAuthenticatorFollowsItsCA(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := f.m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAuthEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))); err != nil {
		t.Fatal(err)
	}
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	leaf := corp.Issue(t, "laptop", nil)
	if _, err := f.m.CreateAuthenticator(context.Background(), AuthenticatorCreate{IdentityID: id.ID, Method: MethodCert, CertPEM: certPEM(leaf)}); err != nil {
		t.Fatal(err)
	}
	s, _, err := f.m.AuthenticateCert([]*x509.Certificate{leaf}, Login{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.DeleteCA(ca.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.SessionByToken(s.Token); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("the session of a certificate whose CA was deleted: %v", err)
	}
	stranger := testutil.NewAuthority(t, "unknown CA").Issue(t, "x", nil)
	if _, err := f.m.CreateAuthenticator(context.Background(), AuthenticatorCreate{IdentityID: id.ID, Method: MethodCert, CertPEM: certPEM(stranger)}); CodeOf(err) != CodeCouldNotValidate {
		t.Fatalf("a certificate of an unknown CA: %v", err)
	}
}
