package api

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestAuthPolicies covers authentication policies over HTTPS: management CRUD with the
// built-in default, primary mechanisms refused with INVALID_AUTH, password rules and
// lockout, TOTP required as a second factor (enrolled from the restricted session), and a
// JWT of an external signer required on every call.
func TestAuthPolicies(t *testing.T) {
	t.Parallel()
	clock := &offsetClock{}
	idp := newTestIdP(t, "https://corp-sso.example.com")
	idp.addKey("k1", false, true)
	l := startLive(t, liveOptions{clock: clock.Now, jwksClient: idp.srv.Client()})
	mg := func(method, path string, body any) hreq {
		return hreq{method: method, path: path, mgmt: true, token: l.admin, body: body}
	}

	// The default policy is listed and shown, can be changed, not deleted.
	var list []map[string]any
	l.expect(mg("GET", "/auth-policies", nil), "GET /auth-policies", 200, "").data(t, &list)
	if len(list) != 1 || list[0]["id"] != "default" {
		t.Fatalf("policies: %v", list)
	}
	l.expect(mg("DELETE", "/auth-policies/default", nil), "DELETE /auth-policies/{id}", 400, model.CodeCanNotDeleteDefault)
	l.expect(mg("PATCH", "/auth-policies/default", map[string]any{"primary": map[string]any{"updb": map[string]any{"minPasswordLength": 6}}}),
		"PATCH /auth-policies/{id}", 200, "")
	var def map[string]any
	l.expect(mg("GET", "/auth-policies/default", nil), "GET /auth-policies/{id}", 200, "").data(t, &def)
	updb := def["primary"].(map[string]any)["updb"].(map[string]any)
	if updb["minPasswordLength"] != 6.0 || updb["allowed"] != true || def["secondary"].(map[string]any)["requireExtJwtSigner"] != nil {
		t.Fatalf("default policy after patch: %v", def)
	}

	// Creation is checked.
	for name, body := range map[string]map[string]any{
		"no primary": {"name": "x", "secondary": map[string]any{"requireTotp": false}},
		"short passwords": policyBody("x", func(p map[string]any) {
			p["primary"].(map[string]any)["updb"].(map[string]any)["minPasswordLength"] = 3
		}),
		"unknown signer":       policyBody("x", func(p map[string]any) { p["secondary"].(map[string]any)["requireExtJwtSigner"] = "nope" }),
		"lockout without time": policyBody("x", func(p map[string]any) { p["primary"].(map[string]any)["updb"].(map[string]any)["maxAttempts"] = 3 }),
		"missing inner field": policyBody("x", func(p map[string]any) {
			delete(p["primary"].(map[string]any)["cert"].(map[string]any), "allowExpiredCerts")
		}),
		"nothing allowed at all": policyBody("x", func(p map[string]any) {
			pr := p["primary"].(map[string]any)
			for _, k := range []string{"cert", "updb", "extJwt"} {
				pr[k].(map[string]any)["allowed"] = false
			}
		}),
	} {
		if a := l.do(mg("POST", "/auth-policies", body)); a.status != 400 || a.code(t) != "COULD_NOT_VALIDATE" {
			t.Errorf("create with %s: %d %s", name, a.status, a.body)
		}
	}
	if a := l.do(mg("POST", "/identities", map[string]any{"name": "x", "type": "User", "isAdmin": false, "authPolicyId": "nope"})); a.status != 400 {
		t.Errorf("identity with an unknown policy: %d %s", a.status, a.body)
	}

	strict := l.createID(t, "/auth-policies", policyBody("strict", func(p map[string]any) {
		pr := p["primary"].(map[string]any)
		pr["cert"].(map[string]any)["allowed"] = false
		pr["updb"] = map[string]any{"allowed": true, "minPasswordLength": 10, "requireSpecialChar": true, "requireNumberChar": true,
			"requireMixedCase": true, "maxAttempts": 3, "lockoutDurationMinutes": 1}
	}))

	// Password rules apply when the password is set.
	id := l.createID(t, "/identities", map[string]any{"name": "paula", "type": "User", "isAdmin": false, "authPolicyId": strict, "enrollment": map[string]any{"updb": "paula"}})
	var detail struct {
		AuthPolicy struct{ Name string } `json:"authPolicy"`
		Enrollment struct {
			Updb struct{ Token string } `json:"updb"`
		} `json:"enrollment"`
	}
	l.expect(mg("GET", "/identities/"+id, nil), "GET /identities/{id}", 200, "").data(t, &detail)
	if detail.AuthPolicy.Name != "strict" {
		t.Errorf("identity's policy: %+v", detail.AuthPolicy)
	}
	for _, weak := range []string{"Short1!", "longbutlower1!", "LongNoDigits!!", "LongNoSpecial123"} {
		l.expect(hreq{method: "POST", path: "/enroll/updb?token=" + detail.Enrollment.Updb.Token, body: map[string]string{"password": weak}},
			"POST /enroll/updb", 400, "COULD_NOT_VALIDATE")
	}
	l.expect(hreq{method: "POST", path: "/enroll/updb?token=" + detail.Enrollment.Updb.Token, body: map[string]string{"password": "Good-Pass-123"}},
		"POST /enroll/updb", 200, "")
	s := l.login("paula", "Good-Pass-123")
	var auths []struct{ ID string }
	l.expect(hreq{method: "GET", path: "/current-identity/authenticators", token: s.token}, "GET /current-identity/authenticators", 200, "").data(t, &auths)
	l.expect(hreq{method: "PATCH", path: "/current-identity/authenticators/" + auths[0].ID, token: s.token,
		body: map[string]string{"password": "weakpass", "currentPassword": "Good-Pass-123"}}, "PATCH /current-identity/authenticators/{id}", 400, "COULD_NOT_VALIDATE")

	// maxAttempts failures lock the account, whatever the password, until the lockout ends.
	wrong := hreq{method: "POST", path: "/authenticate?method=password", body: map[string]string{"username": "paula", "password": "Wrong-Pass-1"}}
	right := hreq{method: "POST", path: "/authenticate?method=password", body: map[string]string{"username": "paula", "password": "Good-Pass-123"}}
	for range 3 {
		l.expect(wrong, "POST /authenticate", 401, "INVALID_AUTH")
	}
	l.expect(right, "POST /authenticate", 401, "INVALID_AUTH")
	clock.Advance(61 * time.Second)
	l.expect(right, "POST /authenticate", 200, "")

	// A mechanism the policy forbids fails like bad credentials.
	tok := l.m
	ott, err := tok.CreateIdentity(model.IdentityCreate{Name: "no-certs", AuthPolicyID: strict, Enrollment: &model.EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := tok.EnrollmentsOf(ott.ID)
	key := testutil.NewKey(t)
	certPEM, err := tok.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	if err != nil {
		t.Fatal(err)
	}
	before := l.sessions()
	l.expect(hreq{method: "POST", path: "/authenticate?method=cert", cert: new(testutil.TLSCert(t, certPEM, key))}, "POST /authenticate", 401, "INVALID_AUTH")
	noPasswords := l.createID(t, "/auth-policies", policyBody("no-passwords", func(p map[string]any) {
		p["primary"].(map[string]any)["updb"].(map[string]any)["allowed"] = false
	}))
	l.updbUser("walter", noPasswords)
	l.expect(hreq{method: "POST", path: "/authenticate?method=password", body: map[string]string{"username": "walter", "password": "walter-Pass1!"}},
		"POST /authenticate", 401, "INVALID_AUTH")
	if l.sessions() != before {
		t.Fatal("refused authentications created API sessions")
	}

	// TOTP required: the session must pass MFA, and may enroll to do so.
	totp := l.createID(t, "/auth-policies", policyBody("totp", func(p map[string]any) { p["secondary"].(map[string]any)["requireTotp"] = true }))
	l.updbUser("tina", totp)
	s = l.login("tina", "tina-Pass1!")
	if !s.pendingMFA() || !s.MFARequired || s.AuthQueries[0]["isTotpEnrolled"] != false {
		t.Fatalf("session of a TOTP policy: %+v", s)
	}
	l.expect(hreq{method: "GET", path: "/services", token: s.token}, "GET /services", 401, "UNAUTHORIZED")
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s.token, body: map[string]string{"code": "123456"}}, "POST /authenticate/mfa", 401, "")
	app, _ := startMFA(t, l, clock, s.token, true)
	l.expect(hreq{method: "GET", path: "/current-identity/authenticators", token: s.token}, "GET /current-identity/authenticators", 200, "")
	s = l.login("tina", "tina-Pass1!")
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: s.token, body: map[string]string{"code": app.code()}}, "POST /authenticate/mfa", 200, "")

	// A JWT of an external signer on every call.
	signer := l.createID(t, "/external-jwt-signers", map[string]any{"name": "corp-sso", "enabled": true, "issuer": idp.iss, "audience": idp.aud,
		"jwksEndpoint": idp.endpoint(), "externalAuthUrl": "https://corp-sso.example.com/auth", "clientId": "zmesh"})
	jwtPolicy := l.createID(t, "/auth-policies", policyBody("sso-on-every-call", func(p map[string]any) {
		p["secondary"].(map[string]any)["requireExtJwtSigner"] = signer
	}))
	samID := l.updbUser("samuel", jwtPolicy)
	s = l.login("samuel", "samuel-Pass1!")
	if len(s.AuthQueries) != 1 || s.AuthQueries[0]["typeId"] != "EXT-JWT" || s.AuthQueries[0]["id"] != signer ||
		s.AuthQueries[0]["httpUrl"] != "https://corp-sso.example.com/auth" {
		t.Fatalf("auth queries of a session that needs a JWT: %v", s.AuthQueries)
	}
	samJWT := idp.sign("k1", idp.claims("sub", samID))
	for name, bearer := range map[string]string{
		"without a JWT":                   "",
		"with a JWT of another identity":  idp.sign("k1", idp.claims("sub", "someone-else")),
		"with an expired JWT":             idp.sign("k1", idp.claims("sub", samID, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })),
		"with a JWT of another audience":  idp.sign("k1", idp.claims("sub", samID, func(c jwt.MapClaims) { c["aud"] = "x" })),
		"with the API session's token":    s.token,
		"with an unsigned JWT (alg none)": unsigned("k1", idp.claims("sub", samID)),
	} {
		a := l.do(hreq{method: "GET", path: "/current-identity", token: s.token, bearer: bearer})
		if a.status != 401 || a.code(t) != "UNAUTHORIZED" {
			t.Errorf("call %s: %d %s", name, a.status, a.body)
		}
	}
	l.expect(hreq{method: "GET", path: "/current-identity", token: s.token, bearer: samJWT}, "GET /current-identity", 200, "")
	l.expect(hreq{method: "GET", path: "/services", token: s.token, bearer: samJWT}, "GET /services", 200, "")
	var withJWT sessionInfo
	a := l.expect(hreq{method: "POST", path: "/authenticate?method=password", bearer: samJWT, body: map[string]string{"username": "samuel", "password": "samuel-Pass1!"}},
		"POST /authenticate", 200, "")
	a.data(t, &withJWT)
	if len(withJWT.AuthQueries) != 0 {
		t.Errorf("a login that carries the JWT still lists %v", withJWT.AuthQueries)
	}

	// Policies in use are not deleted; unused ones are.
	l.expect(mg("DELETE", "/auth-policies/"+jwtPolicy, nil), "DELETE /auth-policies/{id}", 400, "CAN_NOT_DELETE_REFERENCED_ENTITY")
	unused := l.createID(t, "/auth-policies", policyBody("unused", nil))
	l.expect(mg("PUT", "/auth-policies/"+unused, policyBody("renamed", nil)), "PUT /auth-policies/{id}", 200, "")
	l.expect(mg("DELETE", "/auth-policies/"+unused, nil), "DELETE /auth-policies/{id}", 200, "")
	l.expect(mg("GET", "/auth-policies/"+unused, nil), "GET /auth-policies/{id}", 404, "NOT_FOUND")
}
