package api

import (
	"bytes"
	"image/png"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

type mfaDetail struct {
	ID              string   `json:"id"`
	IsVerified      bool     `json:"isVerified"`
	ProvisioningURL *string  `json:"provisioningUrl"`
	RecoveryCodes   []string `json:"recoveryCodes"`
}

// startMFA enrolls the session's identity in MFA over the API and returns its
// authenticator app and recovery codes; the enrollment is verified unless verify is false.
func startMFA(t *testing.T, l *live, clock *offsetClock, token string, verify bool) (*authenticator, []string) {
	t.Helper()
	l.expect(hreq{method: "POST", path: "/current-identity/mfa", token: token}, "POST /current-identity/mfa", 201, "")
	var d mfaDetail
	l.expect(hreq{method: "GET", path: "/current-identity/mfa", token: token}, "GET /current-identity/mfa", 200, "").data(t, &d)
	if d.IsVerified || d.ProvisioningURL == nil || len(d.RecoveryCodes) != model.RecoveryCodeCount {
		t.Fatalf("unverified enrollment: %+v", d)
	}
	u, err := url.Parse(*d.ProvisioningURL)
	q := u.Query()
	if err != nil || u.Scheme != "otpauth" || u.Host != "totp" || q.Get("secret") == "" || q.Get("digits") != "6" ||
		q.Get("period") != "30" || q.Get("algorithm") != "SHA1" {
		t.Fatalf("provisioning URL %q: %v", *d.ProvisioningURL, err)
	}
	app := &authenticator{secret: q.Get("secret"), clock: clock}
	if verify {
		l.expect(hreq{method: "POST", path: "/current-identity/mfa/verify", token: token, body: map[string]string{"code": app.code()}},
			"POST /current-identity/mfa/verify", 200, "")
	}
	return app, d.RecoveryCodes
}

// TestMFA walks the MFA state machine over HTTPS with codes of the test's own TOTP
// generator: enrollment (409 when enrolled), the QR code's 404 rules, verification, the
// login that must pass MFA and may do nothing else before, replay, single-use and
// regenerated recovery codes, the TOTP token, and disabling by the user and by an
// administrator.
func TestMFA(t *testing.T) {
	t.Parallel()
	clock := &offsetClock{}
	l := startLive(t, liveOptions{clock: clock.Now})
	userID := l.updbUser("mallory", "")
	pass := "mallory-Pass1!"
	s1 := l.login("mallory", pass)
	if s1.pendingMFA() || s1.MFARequired {
		t.Fatalf("a session before MFA enrollment: %+v", s1)
	}

	// Nothing to show before enrollment.
	l.expect(hreq{method: "GET", path: "/current-identity/mfa", token: s1.token}, "GET /current-identity/mfa", 404, "NOT_FOUND")
	l.expect(hreq{method: "GET", path: "/current-identity/mfa/qr-code", token: s1.token}, "GET /current-identity/mfa/qr-code", 404, "")

	app, shown := startMFA(t, l, clock, s1.token, false)
	l.expect(hreq{method: "POST", path: "/current-identity/mfa", token: s1.token}, "POST /current-identity/mfa", 409, "MFA_EXISTS")
	qr := l.expect(hreq{method: "GET", path: "/current-identity/mfa/qr-code", token: s1.token}, "GET /current-identity/mfa/qr-code", 200, "")
	if _, err := png.Decode(bytes.NewReader(qr.body)); err != nil || qr.header.Get("Content-Type") != "image/png" {
		t.Fatalf("QR code: %v %v", err, qr.header)
	}
	// An unverified enrollment neither gates logins nor takes recovery codes.
	if s := l.login("mallory", pass); s.pendingMFA() {
		t.Fatalf("login with an unverified enrollment: %+v", s)
	}
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/verify", token: s1.token, body: map[string]string{"code": shown[0]}},
		"POST /current-identity/mfa/verify", 401, "MFA_INVALID_TOKEN")
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/verify", token: s1.token, body: map[string]string{"code": "000000"}},
		"POST /current-identity/mfa/verify", 401, "MFA_INVALID_TOKEN")
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/verify", token: s1.token, body: map[string]string{"code": app.code()}},
		"POST /current-identity/mfa/verify", 200, "")
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/verify", token: s1.token, body: map[string]string{"code": app.code()}},
		"POST /current-identity/mfa/verify", 404, "")

	// Verified: the secret and the codes are never shown again, nor the QR code.
	var d mfaDetail
	l.expect(hreq{method: "GET", path: "/current-identity/mfa", token: s1.token}, "GET /current-identity/mfa", 200, "").data(t, &d)
	if !d.IsVerified || d.ProvisioningURL != nil || d.RecoveryCodes != nil {
		t.Fatalf("verified enrollment shows %+v", d)
	}
	l.expect(hreq{method: "GET", path: "/current-identity/mfa/qr-code", token: s1.token}, "GET /current-identity/mfa/qr-code", 404, "")
	l.expect(hreq{method: "POST", path: "/current-identity/mfa", token: s1.token}, "POST /current-identity/mfa", 409, "MFA_EXISTS")
	var ident map[string]any
	l.expect(hreq{method: "GET", path: "/identities/" + userID, mgmt: true, token: l.admin}, "GET /identities/{id}", 200, "").data(t, &ident)
	if ident["isMfaEnabled"] != true {
		t.Errorf("identity after verification: isMfaEnabled %v", ident["isMfaEnabled"])
	}
	stored, err := l.m.MFAOf(userID)
	if err != nil || len(stored.PendingRecoveryCodes) != 0 || len(stored.RecoveryHashes) != model.RecoveryCodeCount ||
		slices.ContainsFunc(stored.RecoveryHashes, func(h string) bool { return slices.Contains(shown, h) }) {
		t.Fatalf("stored enrollment keeps recovery codes in clear: %+v %v", stored, err)
	}

	// Recovery codes need a current code; they are not shown again.
	l.expect(hreq{method: "GET", path: "/current-identity/mfa/recovery-codes", token: s1.token}, "GET /current-identity/mfa/recovery-codes", 401, "MFA_INVALID_TOKEN")
	l.expect(hreq{method: "GET", path: "/current-identity/mfa/recovery-codes", token: s1.token, header: map[string]string{MFAHeader: "123456"}},
		"GET /current-identity/mfa/recovery-codes", 401, "MFA_INVALID_TOKEN")
	var rc struct {
		RecoveryCodes []string `json:"recoveryCodes"`
		Unused        int      `json:"unusedRecoveryCodes"`
	}
	l.expect(hreq{method: "GET", path: "/current-identity/mfa/recovery-codes", token: s1.token, header: map[string]string{MFAHeader: app.code()}},
		"GET /current-identity/mfa/recovery-codes", 200, "").data(t, &rc)
	if len(rc.RecoveryCodes) != 0 || rc.Unused != model.RecoveryCodeCount {
		t.Fatalf("recovery codes after verification: %+v", rc)
	}

	// A login must now pass MFA, and can do nothing else first.
	s2 := l.login("mallory", pass)
	if !s2.pendingMFA() || !s2.MFARequired || s2.MFAComplete {
		t.Fatalf("login with MFA: %+v", s2)
	}
	if q := s2.AuthQueries[0]; q["provider"] != "ziti" || q["httpUrl"] != "./authenticate/mfa" || q["isTotpEnrolled"] != true {
		t.Errorf("MFA auth query: %v", q)
	}
	for _, blocked := range []hreq{
		{method: "GET", path: "/current-identity"},
		{method: "GET", path: "/current-identity/authenticators"},
		{method: "GET", path: "/services"},
		{method: "POST", path: "/sessions", body: map[string]string{"serviceId": "x", "type": "Dial"}},
		{method: "POST", path: "/current-api-session/certificates", body: map[string]string{"csr": "x"}},
		{method: "DELETE", path: "/current-identity/mfa"},
		{method: "GET", path: "/identities", mgmt: true},
	} {
		blocked.token = s2.token
		if a := l.do(blocked); a.status != 401 || a.code(t) != "UNAUTHORIZED" {
			t.Errorf("%s %s before MFA: %d %s", blocked.method, blocked.path, a.status, a.body)
		}
	}
	l.expect(hreq{method: "GET", path: "/current-api-session", token: s2.token}, "GET /current-api-session", 200, "")
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s2.token, body: map[string]string{"code": "999999"}}, "POST /authenticate/mfa", 401, "MFA_INVALID_TOKEN")
	used := app.code()
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s2.token, body: map[string]string{"code": used}}, "POST /authenticate/mfa", 200, "")
	var after sessionInfo
	l.expect(hreq{method: "GET", path: "/current-api-session", token: s2.token}, "GET /current-api-session", 200, "").data(t, &after)
	if after.pendingMFA() || !after.MFAComplete {
		t.Fatalf("session after MFA: %+v", after)
	}
	sess, _, err := l.m.SessionByToken(s2.token)
	if err != nil || sess.MFACompletedAt == nil {
		t.Fatalf("MFA not recorded for posture checks: %v %v", sess, err)
	}
	l.expect(hreq{method: "GET", path: "/current-identity/authenticators", token: s2.token}, "GET /current-identity/authenticators", 200, "")

	// The code just used cannot be used again within its window.
	s3 := l.login("mallory", pass)
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s3.token, body: map[string]string{"code": used}}, "POST /authenticate/mfa", 401, "MFA_INVALID_TOKEN")

	// Recovery codes: each works once.
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s3.token, body: map[string]string{"code": shown[3]}}, "POST /authenticate/mfa", 200, "")
	s4 := l.login("mallory", pass)
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s4.token, body: map[string]string{"code": shown[3]}}, "POST /authenticate/mfa", 401, "MFA_INVALID_TOKEN")
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s4.token, body: map[string]string{"code": shown[4]}}, "POST /authenticate/mfa", 200, "")

	// Regeneration needs a current TOTP code (not a recovery code) and kills every old code.
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/recovery-codes", token: s4.token, body: map[string]string{"code": shown[5]}},
		"POST /current-identity/mfa/recovery-codes", 401, "MFA_INVALID_TOKEN")
	var fresh struct {
		RecoveryCodes []string `json:"recoveryCodes"`
	}
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/recovery-codes", token: s4.token, body: map[string]string{"code": app.code()}},
		"POST /current-identity/mfa/recovery-codes", 200, "").data(t, &fresh)
	if len(fresh.RecoveryCodes) != model.RecoveryCodeCount || slices.ContainsFunc(fresh.RecoveryCodes, func(c string) bool { return slices.Contains(shown, c) }) {
		t.Fatalf("regenerated codes: %v", fresh.RecoveryCodes)
	}
	s5 := l.login("mallory", pass)
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s5.token, body: map[string]string{"code": shown[6]}}, "POST /authenticate/mfa", 401, "MFA_INVALID_TOKEN")
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s5.token, body: map[string]string{"code": fresh.RecoveryCodes[0]}}, "POST /authenticate/mfa", 200, "")

	// A TOTP token proves a code check at a time.
	var tok struct {
		Token    string    `json:"token"`
		IssuedAt time.Time `json:"issuedAt"`
	}
	l.expect(hreq{method: "POST", path: "/current-api-session/totp-token", token: s5.token, body: map[string]string{"code": app.code()}},
		"POST /current-api-session/totp-token", 200, "").data(t, &tok)
	if tok.Token == "" || tok.IssuedAt.IsZero() {
		t.Fatalf("TOTP token: %+v", tok)
	}

	// Disabling needs a current code once verified.
	l.expect(hreq{method: "DELETE", path: "/current-identity/mfa", token: s5.token}, "DELETE /current-identity/mfa", 401, "MFA_INVALID_TOKEN")
	l.expect(hreq{method: "DELETE", path: "/current-identity/mfa", token: s5.token, header: map[string]string{MFAHeader: app.code()}},
		"DELETE /current-identity/mfa", 200, "")
	l.expect(hreq{method: "GET", path: "/current-identity/mfa", token: s5.token}, "GET /current-identity/mfa", 404, "")
	if s := l.login("mallory", pass); s.pendingMFA() || s.MFARequired {
		t.Fatalf("login after disabling MFA: %+v", s)
	}

	// An unverified enrollment is disabled with an empty code.
	startMFA(t, l, clock, s5.token, false)
	l.expect(hreq{method: "DELETE", path: "/current-identity/mfa", token: s5.token, header: map[string]string{MFAHeader: ""}}, "DELETE /current-identity/mfa", 200, "")

	// An administrator removes MFA without a code; sessions waiting for it go on.
	startMFA(t, l, clock, s5.token, true)
	s6 := l.login("mallory", pass)
	if !s6.pendingMFA() {
		t.Fatal("no MFA query after re-enrollment")
	}
	if a := l.do(hreq{method: "DELETE", path: "/identities/" + userID + "/mfa", mgmt: true, token: s5.token}); a.status != 403 {
		t.Fatalf("MFA removal by a non-administrator: %d %s", a.status, a.body)
	}
	l.expect(hreq{method: "DELETE", path: "/identities/nope/mfa", mgmt: true, token: l.admin}, "DELETE /identities/{id}/mfa", 404, "")
	l.expect(hreq{method: "DELETE", path: "/identities/" + userID + "/mfa", mgmt: true, token: l.admin}, "DELETE /identities/{id}/mfa", 200, "")
	l.expect(hreq{method: "GET", path: "/current-identity/authenticators", token: s6.token}, "GET /current-identity/authenticators", 200, "")
	if _, err := l.m.MFAOf(userID); model.CodeOf(err) != model.CodeNotFound {
		t.Fatalf("MFA after administrator removal: %v", err)
	}
}

// TestPartialSessionOnlyPassesMFA checks what a partially authenticated API session (the
// password passed, the MFA auth query outstanding) may do: the MFA routes and its own API
// session (read, log out) answer; its identity and every other route answer 401
// UNAUTHORIZED, as the reference's fully authenticated routes do, until MFA is passed.
func TestPartialSessionOnlyPassesMFA(t *testing.T) {
	t.Parallel()
	clock := &offsetClock{}
	l := startLive(t, liveOptions{clock: clock.Now})
	l.updbUser("petra", "")
	full := l.login("petra", "petra-Pass1!")
	app, _ := startMFA(t, l, clock, full.token, true)
	l.expect(hreq{method: "GET", path: "/current-identity", token: full.token}, "GET /current-identity", 200, "")

	partial := l.login("petra", "petra-Pass1!")
	if !partial.pendingMFA() {
		t.Fatalf("a login of an identity with verified MFA: %+v", partial)
	}
	for _, blocked := range []hreq{
		{method: "GET", path: "/current-identity"},
		{method: "GET", path: "/current-identity/edge-routers"},
		{method: "GET", path: "/services"},
	} {
		blocked.token = partial.token
		if a := l.do(blocked); a.status != 401 || a.code(t) != "UNAUTHORIZED" {
			t.Errorf("%s %s with MFA outstanding: %d %s", blocked.method, blocked.path, a.status, a.body)
		}
	}
	l.expect(hreq{method: "GET", path: "/current-api-session", token: partial.token}, "GET /current-api-session", 200, "")
	l.expect(hreq{method: "GET", path: "/current-identity/mfa", token: partial.token}, "GET /current-identity/mfa", 200, "")
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: partial.token, body: map[string]string{"code": app.code()}}, "POST /authenticate/mfa", 200, "")
	l.expect(hreq{method: "GET", path: "/current-identity", token: partial.token}, "GET /current-identity", 200, "")
	l.expect(hreq{method: "GET", path: "/services", token: partial.token}, "GET /services", 200, "")

	// A partial session logs out.
	other := l.login("petra", "petra-Pass1!")
	l.expect(hreq{method: "DELETE", path: "/current-api-session", token: other.token}, "DELETE /current-api-session", 200, "")
	if a := l.do(hreq{method: "GET", path: "/current-api-session", token: other.token}); a.status != 401 {
		t.Errorf("the API session after logout: %d %s", a.status, a.body)
	}

	// An identity whose policy requires TOTP enrolls from its partial session: the
	// enrollment routes answer, its identity does not.
	totp := l.createID(t, "/auth-policies", policyBody("totp", func(p map[string]any) { p["secondary"].(map[string]any)["requireTotp"] = true }))
	l.updbUser("quentin", totp)
	q := l.login("quentin", "quentin-Pass1!")
	if !q.pendingMFA() {
		t.Fatalf("a login under a TOTP policy: %+v", q)
	}
	if a := l.do(hreq{method: "GET", path: "/current-identity", token: q.token}); a.status != 401 || a.code(t) != "UNAUTHORIZED" {
		t.Errorf("GET /current-identity before enrolling: %d %s", a.status, a.body)
	}
	startMFA(t, l, clock, q.token, false)
	l.expect(hreq{method: "GET", path: "/current-identity/mfa/qr-code", token: q.token}, "GET /current-identity/mfa/qr-code", 200, "")
	if a := l.do(hreq{method: "GET", path: "/current-identity", token: q.token}); a.status != 401 {
		t.Errorf("GET /current-identity with an unverified enrollment: %d %s", a.status, a.body)
	}
}

// TestMFACodesRateLimited checks that guessing codes is slowed down like passwords.
func TestMFACodesRateLimited(t *testing.T) {
	t.Parallel()
	clock := &offsetClock{}
	l := startLive(t, liveOptions{clock: clock.Now})
	l.updbUser("guesser", "")
	s := l.login("guesser", "guesser-Pass1!")
	startMFA(t, l, clock, s.token, true)
	p := l.login("guesser", "guesser-Pass1!")
	var last answer
	for i := range 7 {
		last = l.do(hreq{method: "POST", path: "/authenticate/mfa", token: p.token, body: map[string]string{"code": "00000" + string(rune('0'+i))}})
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" {
		t.Fatalf("after 7 wrong codes: %d %s", last.status, last.body)
	}
}
