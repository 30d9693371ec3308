package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestTokenEnrollment auto-enrolls identities over HTTPS with JWTs of external signers: to
// a certificate (then used for certificate authentication on a TLS connection) and to token
// authentication (then used for ext-jwt logins), each with the name and attributes its
// signer's selectors take from the token and the signer's enrollment policy.
func TestTokenEnrollment(t *testing.T) {
	t.Parallel()
	idp := newTestIdP(t, "https://sso.example.com")
	idp.addKey("k1", true, true)
	l := startLive(t, liveOptions{jwksClient: idp.srv.Client()})
	certPolicy := l.createID(t, "/auth-policies", policyBody("cert-only", func(p map[string]any) {
		pr := p["primary"].(map[string]any)
		pr["updb"].(map[string]any)["allowed"] = false
		pr["extJwt"].(map[string]any)["allowed"] = false
	}))
	// Enrollment to a certificate: name and attributes by JSON pointers, found later by
	// externalId (the email claim).
	certSigner := l.createID(t, "/external-jwt-signers", map[string]any{"name": "sso-cert", "enabled": true, "issuer": idp.iss,
		"audience": idp.aud, "jwksEndpoint": idp.endpoint(), "claimsProperty": "email", "useExternalId": true,
		"enrollToCertEnabled": true, "enrollAuthPolicyId": certPolicy,
		"enrollNameClaimsSelector": "/profile/display~1name", "enrollAttributeClaimsSelector": "/groups"})
	claims := idp.claims("email", "carol@example.com", func(c jwt.MapClaims) {
		c["profile"] = map[string]any{"display/name": "Carol C"}
		c["groups"] = []string{"engineering", "vpn-users"}
	})
	key := testutil.NewKey(t)
	csr := string(testutil.CSR(t, key))

	// Without the signer's consent there is no enrollment of that kind.
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp.sign("k1", claims), body: map[string]any{}},
		"POST /enroll/token", 400, model.CodeEnrollmentNotAllowed)
	l.expect(hreq{method: "POST", path: "/enroll/token", body: map[string]any{"clientCsr": csr}}, "POST /enroll/token", 400, "COULD_NOT_VALIDATE")
	expired := idp.sign("k1", idp.claims("email", "x@example.com", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }))
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: expired, body: map[string]any{"clientCsr": csr}}, "POST /enroll/token", 400, "INVALID_ENROLLMENT_TOKEN")

	var certs struct {
		Cert string `json:"cert"`
		CA   string `json:"ca"`
	}
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp.sign("k1", claims), body: map[string]any{"clientCsr": csr}},
		"POST /enroll/token", 200, "").data(t, &certs)
	if certs.Cert == "" || certs.CA == "" {
		t.Fatalf("certificate enrollment: %+v", certs)
	}
	var ids []map[string]any
	l.expect(hreq{method: "GET", path: "/identities?filter=" + url.QueryEscape(`name = "Carol C"`), mgmt: true, token: l.admin}, "GET /identities", 200, "").data(t, &ids)
	if len(ids) != 1 || ids[0]["externalId"] != "carol@example.com" || ids[0]["authPolicyId"] != certPolicy ||
		!slices.Equal(toStrings(ids[0]["roleAttributes"]), []string{"engineering", "vpn-users"}) {
		t.Fatalf("identity enrolled to a certificate: %v", ids)
	}
	carol := new(testutil.TLSCert(t, []byte(certs.Cert), key))
	var s sessionInfo
	a := l.expect(hreq{method: "POST", path: "/authenticate?method=cert", cert: carol}, "POST /authenticate", 200, "")
	a.data(t, &s)
	if s.IdentityID != ids[0]["id"] {
		t.Fatalf("certificate login of the enrolled identity: %+v", s)
	}
	// Its policy allows certificates only.
	if a := l.extLogin(idp.sign("k1", claims)); a.status != 401 {
		t.Fatalf("ext-jwt login of a certificate-only identity: %d %s", a.status, a.body)
	}
	// The same subject cannot enroll twice.
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp.sign("k1", claims), body: map[string]any{"clientCsr": csr}},
		"POST /enroll/token", 409, model.CodeEnrollmentIdentityExists)

	// Enrollment to token authentication: name and attributes by root claim names, found
	// later by id (the sub claim), the signer named by header.
	idp2 := newTestIdP(t, "https://login.example.org")
	idp2.keys, idp2.set = idp.keys, idp.set // same keys, another issuer
	tokenSigner := l.createID(t, "/external-jwt-signers", map[string]any{"name": "login-token", "enabled": true, "issuer": idp2.iss,
		"audience": idp2.aud, "jwksEndpoint": idp.endpoint(), "enrollToTokenEnabled": true,
		"enrollNameClaimsSelector": "preferred_username", "enrollAttributeClaimsSelector": "department"})
	dave := idp2.claims("sub", "dave-0042", func(c jwt.MapClaims) {
		c["preferred_username"] = "dave"
		c["department"] = "finance"
	})
	// A CSR needs enrollToCertEnabled.
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp2.sign("k1", dave), body: map[string]any{"clientCsr": csr}},
		"POST /enroll/token", 400, model.CodeEnrollmentNotAllowed)
	// The header names the signer: the token must be that signer's.
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp2.sign("k1", dave), header: map[string]string{TokenIssuerHeader: certSigner}},
		"POST /enroll/token", 400, "INVALID_ENROLLMENT_TOKEN")
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp2.sign("k1", dave), header: map[string]string{TokenIssuerHeader: tokenSigner}},
		"POST /enroll/token", 200, "")
	var d map[string]any
	l.expect(hreq{method: "GET", path: "/identities/dave-0042", mgmt: true, token: l.admin}, "GET /identities/{id}", 200, "").data(t, &d)
	if d["name"] != "dave" || !slices.Equal(toStrings(d["roleAttributes"]), []string{"finance"}) || d["authPolicyId"] != model.DefaultAuthPolicyID ||
		len(d["authenticators"].(map[string]any)) != 0 {
		t.Fatalf("identity enrolled to tokens: %v", d)
	}
	a = l.extLogin(idp2.sign("k1", idp2.claims("sub", "dave-0042")))
	if a.status != 200 {
		t.Fatalf("ext-jwt login of the token-enrolled identity: %d %s", a.status, a.body)
	}
	a.data(t, &s)
	if s.IdentityID != "dave-0042" {
		t.Fatalf("session of the token-enrolled identity: %+v", s)
	}
	// A name claim that is missing fails the enrollment.
	l.expect(hreq{method: "POST", path: "/enroll/token", bearer: idp2.sign("k1", idp2.claims("sub", "eve-1"))}, "POST /enroll/token", 400, "COULD_NOT_VALIDATE")
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestEnrollmentTrust checks the enrollment key set, the nonce challenge signed with the
// key it names (both without envelope), and the network JWTs.
func TestEnrollmentTrust(t *testing.T) {
	t.Parallel()
	l := startLive(t, liveOptions{})
	var set struct {
		Keys []struct {
			Kty, Crv, Kid, Alg, X, Y string
			X5C                      []string `json:"x5c"`
		} `json:"keys"`
	}
	a := l.do(hreq{method: "GET", path: "/enroll/jwks"})
	if a.status != 200 {
		t.Fatalf("jwks: %d %s", a.status, a.body)
	}
	if err := json.Unmarshal(a.body, &set); err != nil || len(set.Keys) != 1 || set.Keys[0].Kty != "EC" || set.Keys[0].Alg != "ES256" || len(set.Keys[0].X5C) == 0 {
		t.Fatalf("jwks: %v %s", err, a.body)
	}
	k := set.Keys[0]
	x, _ := base64.RawURLEncoding.DecodeString(k.X)
	y, _ := base64.RawURLEncoding.DecodeString(k.Y)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil || len(x) != 32 || len(y) != 32 {
		t.Fatalf("jwks key: %v (x %d bytes, y %d bytes)", err, len(x), len(y))
	}

	nonce := uuid.NewString()
	a = l.do(hreq{method: "POST", path: "/enroll/challenge", body: map[string]string{"keyId": k.Kid, "nonce": nonce}})
	var sig struct{ Algorithm, CAPool, Kid, Signature string }
	if a.status != 200 || json.Unmarshal(a.body, &sig) != nil || sig.Algorithm != "ES256" || sig.Kid != k.Kid || sig.CAPool == "" {
		t.Fatalf("challenge: %d %s", a.status, a.body)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(sig.Signature)
	if err := jwt.SigningMethodES256.Verify(nonce, raw, pub); err != nil {
		t.Fatalf("the challenge's signature does not verify with the key set's key: %v", err)
	}
	l.expect(hreq{method: "POST", path: "/enroll/challenge", body: map[string]string{"keyId": "other", "nonce": nonce}}, "POST /enroll/challenge", 400, "COULD_NOT_VALIDATE")
	l.expect(hreq{method: "POST", path: "/enroll/challenge", body: map[string]string{"keyId": k.Kid, "nonce": "not-a-uuid"}}, "POST /enroll/challenge", 400, "COULD_NOT_VALIDATE")

	var jwts []struct{ Name, Token string }
	l.expect(hreq{method: "GET", path: "/network-jwts"}, "GET /network-jwts", 200, "").data(t, &jwts)
	if len(jwts) != 1 {
		t.Fatalf("network JWTs: %v", jwts)
	}
	var claims jwt.MapClaims
	if _, err := jwt.ParseWithClaims(jwts[0].Token, &claims, func(*jwt.Token) (any, error) { return pub, nil }, jwt.WithValidMethods([]string{"ES256"})); err != nil ||
		claims["iss"] != l.url || claims["em"] != "network" {
		t.Fatalf("network JWT: %v %v", err, claims)
	}
}
