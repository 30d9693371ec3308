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

// routedCerts returns the certificates routers are told the API session admits; nil if
// routers do not know it.
func routedCerts(t *testing.T, m *Model, apiSessionID string) []string {
	t.Helper()
	apis, _, err := m.SessionStateOf([]string{apiSessionID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := apis[apiSessionID]; a != nil {
		return a.CertFingerprints
	}
	return nil
}

func (l *changeLog) reported(entry string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.api, entry)
}

func (l *changeLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.api, l.ses = nil, nil
}

// API sessions opened with a certificate end as soon as it stops being current (extension
// replaced or verified, authenticator deleted, identity deleted); a password session of the
// same identity lives on, and routers are told which certificates it admits at each step.
func TestCertRevocationEndsAPISessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	changes := watchChanges(t, f.m)
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "laptop", Enrollment: &EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(id.ID)
	oldPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	e, err := f.m.CreateEnrollment(id.ID, EnrollmentRequest{Updb: "laptop-user"}, f.clock.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.EnrollUpdb(context.Background(), e.Token, "laptop-pass"); err != nil {
		t.Fatal(err)
	}
	auth := func(pemBytes []byte) *APISession {
		t.Helper()
		s, _, err := f.m.AuthenticateCert([]*x509.Certificate{parseCert(t, pemBytes)}, Login{Source: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alive := func(what string, s *APISession, want bool) {
		t.Helper()
		_, _, err := f.m.SessionByToken(s.Token)
		if want && err != nil {
			t.Fatalf("%s ended: %v", what, err)
		}
		if !want {
			wantCode(t, err, CodeUnauthorized)
			if _, err := f.m.APISession(s.ID); CodeOf(err) != CodeNotFound {
				t.Fatalf("%s is still stored: %v", what, err)
			}
		}
	}
	fp := func(pemBytes []byte) string { return certid.Fingerprint(parseCert(t, pemBytes)) }

	oldSess := auth(oldPEM)
	pw, _, err := f.m.AuthenticatePassword(context.Background(), "laptop-user", "laptop-pass", Login{Source: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := routedCerts(t, f.m, pw.ID); !slices.Equal(got, []string{fp(oldPEM)}) {
		t.Fatalf("the password session admits %v, want the enrolled certificate", got)
	}
	auths, _ := f.m.AuthenticatorsOf(id.ID)
	var certAuth *Authenticator
	for _, a := range auths {
		if a.Method == MethodCert {
			certAuth = a
		}
	}

	// An extension's certificate authenticates before verification; a second extension
	// replaces it, and the sessions it opened end.
	firstPEM, err := f.m.ExtendCert(oldSess, certAuth.ID, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	firstSess := auth(firstPEM)
	secondPEM, err := f.m.ExtendCert(oldSess, certAuth.ID, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	alive("the replaced extension's session", firstSess, false)
	alive("the current certificate's session", oldSess, true)

	// Verification ends the old certificate's sessions, the one that verified included.
	changes.reset()
	if err := f.m.ExtendVerify(oldSess, certAuth.ID, string(secondPEM)); err != nil {
		t.Fatal(err)
	}
	alive("the old certificate's session", oldSess, false)
	alive("the password session", pw, true)
	if !changes.reported("-"+oldSess.ID) || !changes.reported("+"+pw.ID) {
		t.Fatalf("routers were told %v; want the old session removed and the password session sent again", changes.api)
	}
	if got := routedCerts(t, f.m, pw.ID); !slices.Equal(got, []string{fp(secondPEM)}) {
		t.Fatalf("the password session admits %v, want the verified certificate", got)
	}
	secondSess := auth(secondPEM)
	_, _, err = f.m.AuthenticateCert([]*x509.Certificate{parseCert(t, oldPEM)}, Login{})
	wantCode(t, err, CodeInvalidAuth)

	// An ephemeral certificate of the password session is admitted with it.
	sc, err := f.m.CreateAPISessionCert(pw, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	if got := routedCerts(t, f.m, pw.ID); !slices.Contains(got, sc.Fingerprint) || !slices.Contains(got, fp(secondPEM)) {
		t.Fatalf("the password session admits %v, want its ephemeral certificate too", got)
	}

	// Deleting the authenticator ends the certificate's sessions, not the password one.
	changes.reset()
	if err := f.m.DeleteAuthenticator(certAuth.ID); err != nil {
		t.Fatal(err)
	}
	alive("the deleted authenticator's session", secondSess, false)
	alive("the password session", pw, true)
	if got := routedCerts(t, f.m, pw.ID); !slices.Equal(got, []string{sc.Fingerprint}) {
		t.Fatalf("after the deletion the password session admits %v, want only its ephemeral certificate", got)
	}
	if !changes.reported("-"+secondSess.ID) || !changes.reported("+"+pw.ID) {
		t.Fatalf("routers were told %v", changes.api)
	}

	// Re-enrollment with a new key: a new current certificate, admitted with the password
	// session too.
	re, err := f.m.CreateEnrollment(id.ID, EnrollmentRequest{OTT: true}, f.clock.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	newPEM, err := f.m.EnrollOTT(re.Token, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	newSess := auth(newPEM)
	if got := routedCerts(t, f.m, pw.ID); !slices.Contains(got, fp(newPEM)) {
		t.Fatalf("after re-enrollment the password session admits %v", got)
	}

	// Deleting the identity ends everything.
	if err := f.m.DeleteIdentity(id.ID); err != nil {
		t.Fatal(err)
	}
	alive("the new certificate's session after the identity's deletion", newSess, false)
	alive("the password session after the identity's deletion", pw, false)
}

// A session whose certificate stopped being current without the revocation seeing it (as
// stored by an earlier version) is refused where its token is resolved.
func TestStaleCertSessionRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.m.CreateIdentity(IdentityCreate{Name: "old", Enrollment: &EnrollmentRequest{OTT: true}})
	ens, _ := f.m.EnrollmentsOf(id.ID)
	certPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := f.m.AuthenticateCert([]*x509.Certificate{parseCert(t, certPEM)}, Login{})
	if err != nil {
		t.Fatal(err)
	}
	// The authenticator goes behind the model's back.
	auths, _ := f.m.AuthenticatorsOf(id.ID)
	if err := f.m.st.Update(func(tx *store.Tx) error { return f.m.c.authenticators.Delete(tx, auths[0].ID) }); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.m.SessionByToken(s.Token)
	wantCode(t, err, CodeUnauthorized)
	if _, err := f.m.APISession(s.ID); CodeOf(err) != CodeNotFound {
		t.Fatalf("the stale session is still stored: %v", err)
	}
}

// An API session ends at its maximum lifetime however active, both where its token is
// resolved and in the sweep; the idle timeout still applies before.
func TestSessionMaxLifetime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.m.opts.SessionMaxLifetime = 2 * time.Hour
	changes := watchChanges(t, f.m)
	if _, err := f.m.EnsureDefaultAdmin(context.Background(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	login := func() *APISession {
		s, _, err := f.m.AuthenticatePassword(context.Background(), "admin", "admin-pass", Login{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	used, swept := login(), login()
	if want := used.CreatedAt.Add(30 * time.Minute); !f.m.ExpiresAt(used).Equal(want) {
		t.Fatalf("a new session expires at %v, want %v (idle)", f.m.ExpiresAt(used), want)
	}
	for range 11 { // 110 minutes of activity
		f.clock.Add(10 * time.Minute)
		for _, s := range []*APISession{used, swept} {
			if _, _, err := f.m.SessionByToken(s.Token); err != nil {
				t.Fatalf("an active session ended before its maximum lifetime: %v", err)
			}
		}
	}
	cur, _ := f.m.APISession(used.ID)
	if want := used.CreatedAt.Add(2 * time.Hour); !f.m.ExpiresAt(cur).Equal(want) {
		t.Fatalf("an active session expires at %v, want its maximum lifetime %v", f.m.ExpiresAt(cur), want)
	}
	if n, err := f.m.ExpireSessions(); err != nil || n != 0 {
		t.Fatalf("sweep before the maximum lifetime: %d %v", n, err)
	}
	f.clock.Add(10*time.Minute + time.Second)
	_, _, err := f.m.SessionByToken(used.Token)
	wantCode(t, err, CodeUnauthorized)
	n, err := f.m.ExpireSessions()
	if err != nil || n != 1 {
		t.Fatalf("sweep past the maximum lifetime deleted %d: %v", n, err)
	}
	for _, s := range []*APISession{used, swept} {
		if !changes.reported("-" + s.ID) {
			t.Fatalf("routers were not told that API session %s ended: %v", s.ID, changes.api)
		}
	}
}

// TestRevokingManySessions checks that a certificate that opened more API sessions than one
// transaction can delete is revoked all the same: the deletion of its authenticator commits,
// every session it opened ends, and none answers.
func TestRevokingManySessions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("opens 12,000 API sessions")
	}
	f := newFixtureWith(t, store.Options{InMemory: true})
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "busy", Enrollment: &EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(id.ID)
	certPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	chain := []*x509.Certificate{parseCert(t, certPEM)}
	const n = 12_000 // more than a Badger transaction deletes, with their index entries
	var last *APISession
	for range n {
		if last, _, err = f.m.AuthenticateCert(chain, Login{Source: "127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	auths, _ := f.m.AuthenticatorsOf(id.ID)
	if err := f.m.DeleteAuthenticator(auths[0].ID); err != nil {
		t.Fatalf("deleting the authenticator of a certificate with %d API sessions: %v", n, err)
	}
	if _, _, err := f.m.SessionByToken(last.Token); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("an API session of the revoked certificate: %v", err)
	}
	left := 0
	if err := f.m.st.View(func(tx *store.Tx) error {
		ids, err := f.m.c.apiSessions.IDsWith(tx, "identityId", id.ID)
		left = len(ids)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d of %d API sessions of the revoked certificate are left", left, n)
	}
}

// TestExtensionKeepingKeyKeepsSessions: a verified extension that kept the key leaves the API
// sessions opened with the previous certificate alive (routers admit both certificates for
// them), though that certificate opens no new session; the next extension drops it, and its
// sessions end then.
func TestExtensionKeepingKeyKeepsSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "svc", Enrollment: &EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(id.ID)
	key := testutil.NewKey(t)
	firstPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	if err != nil {
		t.Fatal(err)
	}
	login := func(pemBytes []byte) (*APISession, error) {
		s, _, err := f.m.AuthenticateCert([]*x509.Certificate{parseCert(t, pemBytes)}, Login{Source: "127.0.0.1"})
		return s, err
	}
	alive := func(s *APISession) bool { _, _, err := f.m.SessionByToken(s.Token); return err == nil }
	fp := func(pemBytes []byte) string { return certid.Fingerprint(parseCert(t, pemBytes)) }
	first, err := login(firstPEM)
	if err != nil {
		t.Fatal(err)
	}
	auths, _ := f.m.AuthenticatorsOf(id.ID)
	extend := func(s *APISession, authID string) []byte {
		t.Helper()
		next, err := f.m.ExtendCert(s, authID, testutil.CSR(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.m.ExtendVerify(s, authID, string(next)); err != nil {
			t.Fatal(err)
		}
		return next
	}

	secondPEM := extend(first, auths[0].ID)
	if !alive(first) {
		t.Fatal("the session of the previous certificate ended, though the extension kept the key")
	}
	if got := routedCerts(t, f.m, first.ID); !slices.Contains(got, fp(firstPEM)) || !slices.Contains(got, fp(secondPEM)) {
		t.Fatalf("routers admit %v for it, want both certificates", got)
	}
	if _, err := login(firstPEM); CodeOf(err) != CodeInvalidAuth {
		t.Fatalf("a login with the previous certificate: %v", err)
	}
	second, err := login(secondPEM)
	if err != nil {
		t.Fatal(err)
	}

	extend(second, auths[0].ID)
	if alive(first) {
		t.Error("the session of the certificate two extensions back is still alive")
	}
	if !alive(second) {
		t.Error("the session of the previous certificate ended")
	}
}
