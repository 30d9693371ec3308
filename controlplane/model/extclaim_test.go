package model

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"slices"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

func TestExternalIDClaims(t *testing.T) {
	t.Parallel()
	spiffe, _ := url.Parse("spiffe://corp/dev/1")
	web, _ := url.Parse("https://corp/x")
	cert := &x509.Certificate{
		Subject:        pkix.Name{CommonName: "id:a.b.c"},
		EmailAddresses: []string{"joe@other.org", "ann.lee@corp.org"},
		URIs:           []*url.URL{web, spiffe},
	}
	for _, c := range []struct {
		claim ExternalIDClaim
		want  []string
	}{
		{ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchAll, Parser: ClaimParseNone}, []string{"id:a.b.c"}},
		{ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "id:", Parser: ClaimParseSplit, ParserCriteria: "."}, []string{"a", "b", "c"}},
		{ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "cn:", Parser: ClaimParseNone}, nil},
		{ExternalIDClaim{Location: ClaimLocSanEmail, Matcher: ClaimMatchSuffix, MatcherCriteria: "@corp.org", Parser: ClaimParseNone}, []string{"ann.lee"}},
		{ExternalIDClaim{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: ClaimParseSplit, ParserCriteria: "@"}, []string{"joe", "other.org", "ann.lee", "corp.org"}},
		{ExternalIDClaim{Location: ClaimLocSanURI, Matcher: ClaimMatchScheme, MatcherCriteria: "spiffe", Parser: ClaimParseNone}, []string{"spiffe://corp/dev/1"}},
		{ExternalIDClaim{Location: ClaimLocSanURI, Matcher: ClaimMatchAll, Parser: ClaimParseNone}, []string{"https://corp/x", "spiffe://corp/dev/1"}},
	} {
		if err := c.claim.check(); err != nil {
			t.Errorf("%+v: %v", c.claim, err)
		}
		if got := c.claim.Claims(cert); !slices.Equal(got, c.want) {
			t.Errorf("%+v: claims %q, want %q", c.claim, got, c.want)
		}
	}
	claim := ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "id:", Parser: ClaimParseSplit, ParserCriteria: ".", Index: 2}
	if id, err := claim.ExternalID(cert); err != nil || id != "c" {
		t.Errorf("index 2: %q, %v", id, err)
	}
	claim.Index = 3
	if id, err := claim.ExternalID(cert); err == nil {
		t.Errorf("index 3 of 3 claims: %q", id)
	}
	for _, bad := range []ExternalIDClaim{
		{Location: "SAN_DNS", Matcher: ClaimMatchAll, Parser: ClaimParseNone},
		{Location: ClaimLocCommonName, Matcher: ClaimMatchScheme, MatcherCriteria: "x", Parser: ClaimParseNone},
		{Location: ClaimLocSanURI, Matcher: ClaimMatchSuffix, MatcherCriteria: "x", Parser: ClaimParseNone},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchPrefix, Parser: ClaimParseNone},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: "REGEX"},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: ClaimParseSplit},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: ClaimParseNone, Index: -1},
	} {
		if err := bad.check(); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

// An API session opened by a certificate through its CA's external id claim is admitted at
// routers with that certificate, and outlives changes of the identity's authenticators.
func TestExternalIDSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := f.m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAutoCaEnrollmentEnabled: true, IsAuthEnabled: true,
		ExternalIDClaim: &ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "emp-", Parser: ClaimParseNone}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))); err != nil {
		t.Fatal(err)
	}
	id, err := f.m.EnrollCA([]*x509.Certificate{corp.Issue(t, "emp-7", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if id.ExternalID != "7" {
		t.Fatalf("external id %q", id.ExternalID)
	}
	other := corp.Issue(t, "emp-7", nil)
	s, who, err := f.m.AuthenticateCert([]*x509.Certificate{other}, Login{})
	if err != nil || who.ID != id.ID {
		t.Fatalf("authenticate: %v", err)
	}
	if got := routedCerts(t, f.m, s.ID); !slices.Contains(got, certid.Fingerprint(other)) {
		t.Fatalf("routed certificates %v lack the session's", got)
	}
	// A certificate authenticator added and removed leaves the session alone.
	err = f.m.st.Update(func(tx *store.Tx) error { f.m.certsChanged(tx, id.ID); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.SessionByToken(s.Token); err != nil {
		t.Fatalf("session after a certificate change: %v", err)
	}
	if _, _, err := f.m.AuthenticateCert([]*x509.Certificate{corp.Issue(t, "emp-8", nil)}, Login{}); CodeOf(err) != CodeInvalidAuth {
		t.Fatalf("claim of no identity: %v", err)
	}
}

// An API session opened through a CA's external id claim ends when the claim no longer
// stands: the CA deleted, its authentication turned off, its claim removed, or the
// identity's external id changed. Routers are told, and the token answers 401.
func TestExternalIDSessionRevoked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		revoke func(f *fixture, ca *CA, identityID string) error
	}{
		{"CA deleted", func(f *fixture, ca *CA, _ string) error { return f.m.DeleteCA(ca.ID) }},
		{"CA auth off", func(f *fixture, ca *CA, _ string) error {
			_, err := f.m.UpdateCA(ca.ID, func(c *CA) error { c.IsAuthEnabled = false; return nil })
			return err
		}},
		{"claim removed", func(f *fixture, ca *CA, _ string) error {
			_, err := f.m.UpdateCA(ca.ID, func(c *CA) error { c.ExternalIDClaim = nil; return nil })
			return err
		}},
		{"external id changed", func(f *fixture, _ *CA, identityID string) error {
			_, err := f.m.UpdateIdentity(identityID, func(i *Identity) error { i.ExternalID = "8"; return nil })
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			corp := testutil.NewAuthority(t, "corp CA")
			ca, err := f.m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAutoCaEnrollmentEnabled: true, IsAuthEnabled: true,
				ExternalIDClaim: &ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "emp-", Parser: ClaimParseNone}})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))); err != nil {
				t.Fatal(err)
			}
			id, err := f.m.EnrollCA([]*x509.Certificate{corp.Issue(t, "emp-7", nil)})
			if err != nil {
				t.Fatal(err)
			}
			s, _, err := f.m.AuthenticateCert([]*x509.Certificate{corp.Issue(t, "emp-7", nil)}, Login{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.revoke(f, ca, id.ID); err != nil {
				t.Fatal(err)
			}
			if _, _, err := f.m.SessionByToken(s.Token); CodeOf(err) != CodeUnauthorized {
				t.Fatalf("the claim's API session after the change: %v", err)
			}
			if got := routedCerts(t, f.m, s.ID); got != nil {
				t.Fatalf("routers still know the claim's API session, admitting %v", got)
			}
		})
	}
}

// A CA's external id claim does not reach an administrator: a certificate claiming an
// administrator's external id is refused.
func TestExternalIDClaimSparesAdmins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := f.m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAuthEnabled: true,
		ExternalIDClaim: &ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchAll, Parser: ClaimParseNone}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))); err != nil {
		t.Fatal(err)
	}
	admin, err := f.m.CreateIdentity(IdentityCreate{Name: "ops", IsAdmin: true, ExternalID: "ops@corp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.AuthenticateCert([]*x509.Certificate{corp.Issue(t, "ops@corp", nil)}, Login{}); CodeOf(err) != CodeInvalidAuth {
		t.Fatalf("a claim of administrator %s's external id: %v, want INVALID_AUTH", admin.ID, err)
	}
}
