package model

import (
	"crypto/ecdsa"
	"crypto/x509"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type fixture struct {
	m     *Model
	clock *clock
	key   *ecdsa.PrivateKey
}

func newFixture(t testing.TB) *fixture { return newFixtureWith(t, store.Options{}) }

func newFixtureWith(t testing.TB, so store.Options) *fixture {
	t.Helper()
	clk := &clock{t: time.Now().UTC()}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), log, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ca, err := pki.Open(t.TempDir(), clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	key := testutil.NewKey(t)
	m := New(st, ca, log, Options{SessionTimeout: 30 * time.Minute, Issuer: "https://ctrl.test:1280",
		SigningKey: key, SigningKID: "kid1", Now: clk.Now})
	return &fixture{m: m, clock: clk, key: key}
}

func parseCert(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	c, err := pki.ParsePEMCert(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := CodeOf(err); got != code {
		t.Fatalf("error %v has code %q, want %q", err, got, code)
	}
}

func TestOTTEnrollmentAndCertAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "laptop", Enrollment: &EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(id.ID)
	if len(ens) != 1 || ens[0].Method != EnrollOTT {
		t.Fatalf("enrollments = %+v", ens)
	}
	// The token is a JWT signed with the signing key, naming the enrollment.
	var claims EnrollmentClaims
	tok, err := jwt.ParseWithClaims(ens[0].JWT, &claims, func(*jwt.Token) (any, error) { return &f.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithTimeFunc(f.clock.Now))
	if err != nil || !tok.Valid {
		t.Fatalf("enrollment JWT: %v", err)
	}
	if claims.Method != "ott" || claims.Subject != id.ID || claims.ID != ens[0].Token || claims.Issuer != "https://ctrl.test:1280" || tok.Header["kid"] != "kid1" {
		t.Errorf("claims = %+v header %v", claims, tok.Header)
	}

	key := testutil.NewKey(t)
	certPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, certPEM)
	if cert.Subject.CommonName != id.ID {
		t.Errorf("certificate CN = %q, want the identity id", cert.Subject.CommonName)
	}
	// The token is used up.
	_, err = f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	wantCode(t, err, CodeInvalidEnrollmentToken)

	s, who, err := f.m.AuthenticateCert([]*x509.Certificate{cert}, Login{Source: "127.0.0.1"})
	if err != nil || who.ID != id.ID || s.AuthMethod != "cert" {
		t.Fatalf("cert auth: %v %v %v", s, who, err)
	}
	got, _, err := f.m.SessionByToken(s.Token)
	if err != nil || got.ID != s.ID {
		t.Fatalf("session by token: %v", err)
	}
}

func TestEnrollmentTokenRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.m.CreateIdentity(IdentityCreate{Name: "a", Enrollment: &EnrollmentRequest{Updb: "alice"}})
	ens, _ := f.m.EnrollmentsOf(id.ID)
	token := ens[0].Token

	wantCode(t, f.m.EnrollUpdb(t.Context(), "not-a-uuid", "secret1"), CodeInvalidEnrollmentToken)
	wantCode(t, f.m.EnrollUpdb(t.Context(), newToken(), "secret1"), CodeInvalidEnrollmentToken)
	_, err := f.m.EnrollOTT(token, nil)
	wantCode(t, err, CodeInvalidEnrollMethod)
	wantCode(t, f.m.EnrollUpdb(t.Context(), token, "abc"), CodeCouldNotValidate)

	f.clock.Add(DefaultEnrollmentDuration + time.Second)
	wantCode(t, f.m.EnrollUpdb(t.Context(), token, "secret1"), CodeEnrollmentExpired)

	// A refreshed enrollment has a new token; the old one is dead.
	e, err := f.m.RefreshEnrollment(ens[0].ID, f.clock.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.m.EnrollUpdb(t.Context(), token, "secret1"), CodeInvalidEnrollmentToken)
	if err := f.m.EnrollUpdb(t.Context(), e.Token, "secret1"); err != nil {
		t.Fatal(err)
	}
}

func TestUpdbLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "bob", Enrollment: &EnrollmentRequest{Updb: "bob1"}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(id.ID)
	if err := f.m.EnrollUpdb(t.Context(), ens[0].Token, "first-pass"); err != nil {
		t.Fatal(err)
	}
	s, _, err := f.m.AuthenticatePassword(t.Context(), "bob1", "first-pass", Login{Source: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	auths, _ := f.m.AuthenticatorsOf(id.ID)
	if len(auths) != 1 {
		t.Fatalf("authenticators = %d", len(auths))
	}
	newPass := "second-pass"
	wantCode(t, f.m.ChangeCredentials(t.Context(), id.ID, auths[0].ID, CredentialsChange{Password: &newPass, CurrentPassword: "wrong-pass"}), CodeUnauthorized)
	if err := f.m.ChangeCredentials(t.Context(), id.ID, auths[0].ID, CredentialsChange{Password: &newPass, CurrentPassword: "first-pass"}); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.m.AuthenticatePassword(t.Context(), "bob1", "first-pass", Login{Source: "10.0.0.1"})
	wantCode(t, err, CodeInvalidAuth)
	if _, _, err := f.m.AuthenticatePassword(t.Context(), "bob1", "second-pass", Login{Source: "10.0.0.1"}); err != nil {
		t.Fatal(err)
	}

	// Deleting the identity ends its sessions and frees its username.
	if err := f.m.DeleteIdentity(id.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.m.SessionByToken(s.Token)
	wantCode(t, err, CodeUnauthorized)
	if all, _ := f.m.Authenticators(); len(all) != 0 {
		t.Errorf("authenticators left: %d", len(all))
	}
	if _, err := f.m.CreateIdentity(IdentityCreate{Name: "bob", Enrollment: &EnrollmentRequest{Updb: "bob1"}}); err != nil {
		t.Errorf("name and username not freed: %v", err)
	}
}

func TestSessionExpiresWhenIdle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	s, _, err := f.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", Login{})
	if err != nil {
		t.Fatal(err)
	}
	// Activity keeps it alive past the timeout...
	for range 4 {
		f.clock.Add(10 * time.Minute)
		if _, _, err := f.m.SessionByToken(s.Token); err != nil {
			t.Fatalf("active session ended: %v", err)
		}
	}
	// ...idleness ends it.
	f.clock.Add(31 * time.Minute)
	_, _, err = f.m.SessionByToken(s.Token)
	wantCode(t, err, CodeUnauthorized)
}

func TestDefaultAdminOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	created, err := f.m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass")
	if err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	created, err = f.m.EnsureDefaultAdmin(t.Context(), "admin", "other-pass")
	if err != nil || created {
		t.Fatalf("second: %v %v", created, err)
	}
	ids, _ := f.m.Identities()
	if len(ids) != 1 || !ids[0].IsAdmin || !ids[0].IsDefaultAdmin {
		t.Fatalf("identities = %+v", ids)
	}
	wantCode(t, f.m.DeleteIdentity(ids[0].ID), CodeCannotDeleteDefaultAdmin)
	_, err = f.m.UpdateIdentity(ids[0].ID, func(i *Identity) error { i.IsAdmin = false; return nil })
	wantCode(t, err, CodeCannotUpdateDefaultAdmin)
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass")
	// The real user logged in from 192.0.2.1 before.
	if _, _, err := f.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", Login{Source: "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	for range failedFree {
		_, _, err := f.m.AuthenticatePassword(t.Context(), "admin", "guess", Login{Source: "192.0.2.9"})
		wantCode(t, err, CodeInvalidAuth)
	}
	_, _, err := f.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", Login{Source: "192.0.2.9"})
	wantCode(t, err, CodeRateLimited)
	// A source that logged in before is not affected: the attacker does not lock it out.
	if _, _, err := f.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", Login{Source: "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	// A new source waits with the account.
	_, _, err = f.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", Login{Source: "192.0.2.2"})
	wantCode(t, err, CodeRateLimited)
	// After the wait, the right password works again.
	f.clock.Add(2 * time.Second)
	if _, _, err := f.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", Login{Source: "192.0.2.9"}); err != nil {
		t.Fatal(err)
	}
}

func TestUniqueFields(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.m.CreateIdentity(IdentityCreate{Name: "x", ExternalID: "ext-1"}); err != nil {
		t.Fatal(err)
	}
	_, err := f.m.CreateIdentity(IdentityCreate{Name: "x"})
	var e *Error
	if CodeOf(err) != CodeCouldNotValidate || !errorAs(err, &e) || e.Field != "name" {
		t.Errorf("duplicate name: %v", err)
	}
	_, err = f.m.CreateIdentity(IdentityCreate{Name: "y", ExternalID: "ext-1"})
	if CodeOf(err) != CodeCouldNotValidate || !errorAs(err, &e) || e.Field != "externalId" {
		t.Errorf("duplicate externalId: %v", err)
	}
	_, err = f.m.CreateIdentity(IdentityCreate{Name: "z", Enrollment: &EnrollmentRequest{OTT: true, Updb: "zzzz"}})
	wantCode(t, err, CodeCouldNotValidate)
}

func errorAs(err error, e **Error) bool {
	var x *Error
	ok := false
	if err != nil {
		x, ok = err.(*Error)
	}
	*e = x
	return ok
}

func TestThirdPartyCA(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := f.m.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAutoCaEnrollmentEnabled: true,
		IsOttCaEnrollmentEnabled: true, IsAuthEnabled: true, IdentityRoles: []string{"employees"}})
	if err != nil {
		t.Fatal(err)
	}
	// Unverified: no ottca enrollment, no auto enrollment.
	_, err = f.m.CreateIdentity(IdentityCreate{Name: "o", Enrollment: &EnrollmentRequest{OTTCA: ca.ID}})
	wantCode(t, err, CodeCouldNotValidate)
	_, err = f.m.EnrollCA([]*x509.Certificate{corp.Issue(t, "dev1", nil)})
	wantCode(t, err, CodeCertFailedValidation)

	// A verification certificate with the wrong common name, or from another key, fails.
	wantCode(t, f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, "wrong", nil))), CodeInvalidCertificate)
	other := testutil.NewAuthority(t, "corp CA")
	wantCode(t, f.m.VerifyCA(ca.ID, certPEM(other.Issue(t, ca.VerificationToken, nil))), CodeInvalidCertificate)
	if err := f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.m.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))), CodeCAAlreadyVerified)

	// Auto enrollment creates the identity, named by the format, with the CA's roles.
	dev := corp.Issue(t, "dev1", nil)
	id, err := f.m.EnrollCA([]*x509.Certificate{dev})
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "corp-dev1" || len(id.RoleAttributes) != 1 {
		t.Errorf("auto-enrolled identity = %+v", id)
	}
	_, err = f.m.EnrollCA([]*x509.Certificate{dev})
	wantCode(t, err, CodeCertInUse)
	if _, who, err := f.m.AuthenticateCert([]*x509.Certificate{dev}, Login{}); err != nil || who.ID != id.ID {
		t.Fatalf("auth with auto-enrolled cert: %v", err)
	}

	// ottca: pre-created identity, certificate of the named CA.
	o, err := f.m.CreateIdentity(IdentityCreate{Name: "o", Enrollment: &EnrollmentRequest{OTTCA: ca.ID}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(o.ID)
	wantCode(t, f.m.EnrollOTTCA(ens[0].Token, []*x509.Certificate{other.Issue(t, "x", nil)}), CodeCertFailedValidation)
	oc := corp.Issue(t, "o", nil)
	if err := f.m.EnrollOTTCA(ens[0].Token, []*x509.Certificate{oc}); err != nil {
		t.Fatal(err)
	}
	if _, who, err := f.m.AuthenticateCert([]*x509.Certificate{oc}, Login{}); err != nil || who.ID != o.ID {
		t.Fatalf("auth with ottca cert: %v", err)
	}

	// Deleting the CA stops its certificates from authenticating.
	if err := f.m.DeleteCA(ca.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.m.AuthenticateCert([]*x509.Certificate{oc}, Login{})
	wantCode(t, err, CodeInvalidAuth)
}

func TestCertExtension(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.m.CreateIdentity(IdentityCreate{Name: "e", Enrollment: &EnrollmentRequest{OTT: true}})
	ens, _ := f.m.EnrollmentsOf(id.ID)
	key := testutil.NewKey(t)
	oldPEM, _ := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	oldCert := parseCert(t, oldPEM)
	s, _, err := f.m.AuthenticateCert([]*x509.Certificate{oldCert}, Login{})
	if err != nil {
		t.Fatal(err)
	}
	auths, _ := f.m.AuthenticatorsOf(id.ID)
	newKey := testutil.NewKey(t)
	newPEM, err := f.m.ExtendCert(s, auths[0].ID, testutil.CSR(t, newKey))
	if err != nil {
		t.Fatal(err)
	}
	// Until verification the old certificate still works.
	if _, _, err := f.m.AuthenticateCert([]*x509.Certificate{oldCert}, Login{}); err != nil {
		t.Fatalf("old certificate before verification: %v", err)
	}
	wantCode(t, f.m.ExtendVerify(s, auths[0].ID, string(oldPEM)), CodeCertExtendMismatch)
	if err := f.m.ExtendVerify(s, auths[0].ID, string(newPEM)); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.m.AuthenticateCert([]*x509.Certificate{oldCert}, Login{})
	wantCode(t, err, CodeInvalidAuth)
	if _, _, err := f.m.AuthenticateCert([]*x509.Certificate{parseCert(t, newPEM)}, Login{}); err != nil {
		t.Fatalf("new certificate: %v", err)
	}
}

func TestPasswordHash(t *testing.T) {
	t.Parallel()
	h, err := hashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !checkPassword(h, "correct horse") || checkPassword(h, "correct horsE") || checkPassword("garbage", "x") {
		t.Error("checkPassword disagrees with hashPassword")
	}
	if checkPassword(dummyHash, "") {
		t.Error("the dummy hash matched")
	}
}
