package api

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/internal/testutil"
)

// testIdP is an identity provider on loopback: it signs JWTs and serves its current key set
// over HTTPS, counting the fetches.
type testIdP struct {
	t       *testing.T
	iss     string
	aud     string
	srv     *httptest.Server
	fetches atomic.Int32

	mu   sync.Mutex
	keys map[string]any // kid -> private key (*rsa.PrivateKey or *ecdsa.PrivateKey)
	set  []string       // kids of the published key set
}

func newTestIdP(t *testing.T, iss string) *testIdP {
	return startTestIdP(t, iss, httptest.NewTLSServer)
}

// startTestIdP is newTestIdP with the key set served by a server newServer starts:
// httptest.NewServer for plain HTTP, or one whose certificate the test chose.
func startTestIdP(t *testing.T, iss string, newServer func(http.Handler) *httptest.Server) *testIdP {
	p := &testIdP{t: t, iss: iss, aud: "zmesh-network", keys: map[string]any{}}
	p.srv = newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jwks" {
			http.NotFound(w, r)
			return
		}
		p.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(p.jwks())
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *testIdP) endpoint() string { return p.srv.URL + "/jwks" }

// addKey makes a key; publish says whether the key set lists it.
func (p *testIdP) addKey(kid string, ec, publish bool) {
	var key any
	var err error
	if ec {
		key = testutil.NewKey(p.t)
	} else {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[kid] = key
	if publish {
		p.set = append(p.set, kid)
	}
}

// publish replaces the published key set (rotation).
func (p *testIdP) publish(kids ...string) {
	p.mu.Lock()
	p.set = kids
	p.mu.Unlock()
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (p *testIdP) jwks() map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := []map[string]any{}
	for _, kid := range p.set {
		switch k := p.keys[kid].(type) {
		case *rsa.PrivateKey:
			keys = append(keys, map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
		case *ecdsa.PrivateKey:
			raw, _ := k.PublicKey.Bytes()
			keys = append(keys, map[string]any{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])})
		}
	}
	// An encryption key is not a signature key.
	keys = append(keys, map[string]any{"kty": "RSA", "kid": "enc-1", "use": "enc", "n": b64(big.NewInt(12345).Bytes()), "e": "AQAB"})
	return map[string]any{"keys": keys}
}

// claims are a valid set of claims for subject, changed by the edits.
func (p *testIdP) claims(subjectClaim, subject string, edits ...func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"iss": p.iss, "aud": p.aud, subjectClaim: subject, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	for _, e := range edits {
		e(c)
	}
	return c
}

// sign signs claims with the key kid under its algorithm.
func (p *testIdP) sign(kid string, c jwt.MapClaims) string {
	p.mu.Lock()
	key := p.keys[kid]
	p.mu.Unlock()
	method := jwt.SigningMethod(jwt.SigningMethodRS256)
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		method = jwt.SigningMethodES256
	}
	tok := jwt.NewWithClaims(method, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// unsigned is a token with alg none.
func unsigned(kid string, c jwt.MapClaims) string {
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": kid})
	b, _ := json.Marshal(c)
	return b64(h) + "." + b64(b) + "."
}

// hmacWithPublicKey is the key-confusion attack: HS256 with the RSA public key as secret.
func (p *testIdP) hmacWithPublicKey(kid string, c jwt.MapClaims, der bool) string {
	p.mu.Lock()
	key := p.keys[kid].(*rsa.PrivateKey)
	p.mu.Unlock()
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	if der {
		secret = pub
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(secret)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// extLogin authenticates with a JWT.
func (l *live) extLogin(token string) answer {
	l.t.Helper()
	return l.do(hreq{method: "POST", path: "/authenticate?method=ext-jwt", bearer: token})
}

func (l *live) createID(t *testing.T, path string, body any) string {
	t.Helper()
	a := l.do(hreq{method: "POST", path: path, mgmt: true, token: l.admin, body: body})
	if a.status != 201 {
		t.Fatalf("POST %s %v: %d %s", path, body, a.status, a.body)
	}
	var out struct {
		ID string `json:"id"`
	}
	a.data(t, &out)
	return out.ID
}

// staticCert is a self-signed certificate of a signer defined by certPem.
func staticCert(t *testing.T) (*ecdsa.PrivateKey, string) {
	signer := testutil.NewAuthority(t, "static signer")
	return signer.Key, string(signer.PEM())
}

// TestExtJWTSigners covers the management and client views of external JWT signers and
// authentication with their JWTs over HTTPS: a key-set signer matched by externalId and a
// static-certificate signer matched by id, and every rejection rule answering 401 without
// creating an API session.
func TestExtJWTSigners(t *testing.T) {
	t.Parallel()
	idp := newTestIdP(t, "https://idp.example.com")
	idp.addKey("rsa-1", false, true)
	idp.addKey("ec-1", true, true)
	idp.addKey("unpublished", false, false)
	l := startLive(t, liveOptions{jwksClient: idp.srv.Client()})

	base := func(edits map[string]any) map[string]any {
		b := map[string]any{"name": "idp", "enabled": true, "issuer": idp.iss, "audience": idp.aud, "jwksEndpoint": idp.endpoint()}
		for k, v := range edits {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	t.Run("creation checks the definition", func(t *testing.T) {
		_, certPEM := staticCert(t)
		for name, body := range map[string]map[string]any{
			"no issuer":          base(map[string]any{"issuer": nil}),
			"no audience":        base(map[string]any{"audience": nil}),
			"no key":             base(map[string]any{"jwksEndpoint": nil}),
			"both keys":          base(map[string]any{"certPem": certPEM, "kid": "k"}),
			"cert without kid":   base(map[string]any{"jwksEndpoint": nil, "certPem": certPEM}),
			"bad certificate":    base(map[string]any{"jwksEndpoint": nil, "certPem": "not a certificate", "kid": "k"}),
			"plain http jwks":    base(map[string]any{"jwksEndpoint": "http://idp.example.com/jwks"}),
			"bad target token":   base(map[string]any{"targetToken": "REFRESH"}),
			"bad name selector":  base(map[string]any{"enrollNameClaimsSelector": "/a~2b"}),
			"unknown policy":     base(map[string]any{"enrollAuthPolicyId": "nope"}),
			"unknown field":      base(map[string]any{"colour": "blue"}),
			"enabled is missing": base(map[string]any{"enabled": nil}),
		} {
			if a := l.do(hreq{method: "POST", path: "/external-jwt-signers", mgmt: true, token: l.admin, body: body}); a.status != 400 || a.code(t) != "COULD_NOT_VALIDATE" {
				t.Errorf("create with %s: %d %s", name, a.status, a.body)
			}
		}
	})
	jwksSigner := l.createID(t, "/external-jwt-signers", base(map[string]any{"claimsProperty": "email", "useExternalId": true,
		"externalAuthUrl": "https://idp.example.com/authorize", "clientId": "zmesh-cli", "scopes": []string{"openid", "email"}, "targetToken": "ID"}))
	t.Run("an issuer in use is refused", func(t *testing.T) {
		l.expect(hreq{method: "POST", path: "/external-jwt-signers", mgmt: true, token: l.admin, body: base(map[string]any{"name": "idp-2"})},
			"POST /external-jwt-signers", 400, "COULD_NOT_VALIDATE") // issuer in use
	})
	staticKey, certPEM := staticCert(t)
	// The spec's path for the same collection.
	staticSigner := l.createID(t, "/ext-jwt-signers", map[string]any{"name": "static", "enabled": true, "issuer": "https://static.example.com",
		"audience": "zmesh-static", "certPem": certPEM, "kid": "static-1"})

	t.Run("the management view details a static signer", func(t *testing.T) {
		var detail map[string]any
		l.expect(hreq{method: "GET", path: "/external-jwt-signers/" + staticSigner, mgmt: true, token: l.admin}, "GET /external-jwt-signers/{id}", 200, "").data(t, &detail)
		if detail["kid"] != "static-1" || detail["commonName"] != "static signer" || detail["fingerprint"] == nil || detail["jwksEndpoint"] != nil ||
			detail["claimsProperty"] != "sub" || detail["useExternalId"] != false || detail["notAfter"] == nil {
			t.Errorf("static signer detail: %v", detail)
		}
	})

	t.Run("the client view lists enabled signers with the fields of spec 2.4 and the reference", func(t *testing.T) {
		var view []map[string]any
		l.expect(hreq{method: "GET", path: "/external-jwt-signers"}, "GET /external-jwt-signers", 200, "").data(t, &view)
		if len(view) != 2 {
			t.Fatalf("client view: %v", view)
		}
		want := []string{"_links", "audience", "clientId", "createdAt", "enrollToCertEnabled", "enrollToTokenEnabled", "externalAuthUrl", "id", "name",
			"openIdConfigurationUrl", "scopes", "tags", "targetToken", "updatedAt"}
		for _, v := range view {
			var keys []string
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, want) {
				t.Errorf("client view fields %v, want %v", keys, want)
			}
			if v["id"] == jwksSigner && (fmt.Sprint(v["scopes"]) != "[openid email]" || v["clientId"] != "zmesh-cli" || v["targetToken"] != "ID") {
				t.Errorf("client view of the key-set signer: %v", v)
			}
		}
	})

	erin := l.createID(t, "/identities", map[string]any{"name": "erin", "type": "User", "isAdmin": false, "externalId": "erin@example.com"})
	stan := l.createID(t, "/identities", map[string]any{"name": "stan", "type": "User", "isAdmin": false})
	static := func(edits ...func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": "https://static.example.com", "aud": "zmesh-static", "sub": stan, "exp": time.Now().Add(time.Minute).Unix()}
		for _, e := range edits {
			e(c)
		}
		return c
	}
	signStatic := func(kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, c)
		tok.Header["kid"] = kid
		s, _ := tok.SignedString(staticKey)
		return s
	}

	t.Run("good tokens authenticate: RSA and EC keys of the key set, the static certificate", func(t *testing.T) {
		for _, tok := range []string{
			idp.sign("rsa-1", idp.claims("email", "erin@example.com")),
			idp.sign("ec-1", idp.claims("email", "erin@example.com", func(c jwt.MapClaims) { c["aud"] = []string{"other", idp.aud} })),
		} {
			a := l.extLogin(tok)
			var s sessionInfo
			if a.status != 200 {
				t.Fatalf("ext-jwt login: %d %s", a.status, a.body)
			}
			a.data(t, &s)
			if s.IdentityID != erin || a.header.Get(SessionHeader) == "" {
				t.Fatalf("ext-jwt session: %+v", s)
			}
		}
		if a := l.extLogin(signStatic("static-1", static())); a.status != 200 {
			t.Fatalf("static signer login: %d %s", a.status, a.body)
		}
	})

	edit := func(k string, v any) func(jwt.MapClaims) { return func(c jwt.MapClaims) { c[k] = v } }
	drop := func(k string) func(jwt.MapClaims) { return func(c jwt.MapClaims) { delete(c, k) } }
	policyNoJWT := l.createID(t, "/auth-policies", policyBody("no-ext-jwt", func(p map[string]any) {
		p["primary"].(map[string]any)["extJwt"] = map[string]any{"allowed": false, "allowedSigners": []string{}}
	}))
	policyStaticOnly := l.createID(t, "/auth-policies", policyBody("static-only", func(p map[string]any) {
		p["primary"].(map[string]any)["extJwt"] = map[string]any{"allowed": true, "allowedSigners": []string{staticSigner}}
	}))
	l.createID(t, "/identities", map[string]any{"name": "nora", "type": "User", "isAdmin": false, "externalId": "nora@example.com", "authPolicyId": policyNoJWT})
	l.createID(t, "/identities", map[string]any{"name": "olga", "type": "User", "isAdmin": false, "externalId": "olga@example.com", "authPolicyId": policyStaticOnly})
	t.Run("every rule rejects on its own, creating no API session", func(t *testing.T) {
		other, _ := rsa.GenerateKey(rand.Reader, 2048)
		forged := jwt.NewWithClaims(jwt.SigningMethodRS256, idp.claims("email", "erin@example.com"))
		forged.Header["kid"] = "rsa-1"
		badSignature, _ := forged.SignedString(other)
		rejected := map[string]string{
			"wrong iss":        idp.sign("rsa-1", idp.claims("email", "erin@example.com", edit("iss", "https://evil.example.com"))),
			"wrong aud":        idp.sign("rsa-1", idp.claims("email", "erin@example.com", edit("aud", "someone-else"))),
			"unknown identity": idp.sign("rsa-1", idp.claims("email", "nobody@example.com")),
			"claim is the id":  idp.sign("rsa-1", idp.claims("email", erin)),
			"claim missing":    idp.sign("rsa-1", idp.claims("sub", "erin@example.com")),
			"bad signature":    badSignature,
			"unknown kid":      idp.sign("unpublished", idp.claims("email", "erin@example.com")),
			"no kid": func() string {
				tk := jwt.NewWithClaims(jwt.SigningMethodRS256, idp.claims("email", "erin@example.com"))
				s, _ := tk.SignedString(idp.keys["rsa-1"])
				return s
			}(),
			"expired":                 idp.sign("rsa-1", idp.claims("email", "erin@example.com", edit("exp", time.Now().Add(-5*time.Minute).Unix()))),
			"no exp":                  idp.sign("rsa-1", idp.claims("email", "erin@example.com", drop("exp"))),
			"not yet valid":           idp.sign("rsa-1", idp.claims("email", "erin@example.com", edit("nbf", time.Now().Add(5*time.Minute).Unix()))),
			"issued in the future":    idp.sign("rsa-1", idp.claims("email", "erin@example.com", edit("iat", time.Now().Add(5*time.Minute).Unix()))),
			"alg none":                unsigned("rsa-1", idp.claims("email", "erin@example.com")),
			"HS256 with the PEM key":  idp.hmacWithPublicKey("rsa-1", idp.claims("email", "erin@example.com"), false),
			"HS256 with the DER key":  idp.hmacWithPublicKey("rsa-1", idp.claims("email", "erin@example.com"), true),
			"truncated signature":     func() string { s := idp.sign("rsa-1", idp.claims("email", "erin@example.com")); return s[:len(s)-8] }(),
			"static: wrong kid":       signStatic("static-2", static()),
			"static: expired":         signStatic("static-1", static(edit("exp", time.Now().Add(-time.Hour).Unix()))),
			"static: alg none":        unsigned("static-1", static()),
			"policy forbids ext-jwt":  idp.sign("rsa-1", idp.claims("email", "nora@example.com")),
			"policy allows another":   idp.sign("rsa-1", idp.claims("email", "olga@example.com")),
			"not a JWT":               "not-a-jwt",
			"sub of the wrong signer": idp.sign("rsa-1", idp.claims("email", "erin@example.com", edit("iss", "https://static.example.com"))),
		}
		before := l.sessions()
		for name, tok := range rejected {
			a := l.extLogin(tok)
			if a.status != 401 || a.code(t) != "INVALID_AUTH" {
				t.Errorf("%s: %d %s, want 401 INVALID_AUTH", name, a.status, a.body)
			}
			if a.header.Get(SessionHeader) != "" {
				t.Errorf("%s: a session token was returned", name)
			}
		}
		if a := l.do(hreq{method: "POST", path: "/authenticate?method=ext-jwt"}); a.status != 401 {
			t.Errorf("ext-jwt without a token: %d %s", a.status, a.body)
		}
		if n := l.sessions(); n != before {
			t.Fatalf("rejected JWTs created %d API sessions", n-before)
		}
		// The policy forbids only the signer it does not list.
		if a := l.extLogin(signStatic("static-1", static(edit("sub", "")))); a.status != 401 {
			t.Errorf("empty subject: %d", a.status)
		}
	})

	t.Run("a disabled signer takes no part and is not shown to clients", func(t *testing.T) {
		var view []map[string]any
		good := idp.sign("rsa-1", idp.claims("email", "erin@example.com"))
		l.expect(hreq{method: "PATCH", path: "/external-jwt-signers/" + jwksSigner, mgmt: true, token: l.admin, body: map[string]any{"enabled": false}},
			"PATCH /external-jwt-signers/{id}", 200, "")
		before := l.sessions()
		if a := l.extLogin(good); a.status != 401 || a.code(t) != "INVALID_AUTH" || l.sessions() != before {
			t.Fatalf("disabled signer: %d %s", a.status, a.body)
		}
		l.expect(hreq{method: "GET", path: "/external-jwt-signers"}, "GET /external-jwt-signers", 200, "").data(t, &view)
		if len(view) != 1 || view[0]["id"] != staticSigner {
			t.Fatalf("client view with a disabled signer: %v", view)
		}
		l.expect(hreq{method: "PATCH", path: "/external-jwt-signers/" + jwksSigner, mgmt: true, token: l.admin, body: map[string]any{"enabled": true}},
			"PATCH /external-jwt-signers/{id}", 200, "")
		if a := l.extLogin(good); a.status != 200 {
			t.Fatalf("re-enabled signer: %d %s", a.status, a.body)
		}
	})

	t.Run("PATCH with null turns the static signer into a key-set signer", func(t *testing.T) {
		var detail map[string]any
		l.expect(hreq{method: "PATCH", path: "/ext-jwt-signers/" + staticSigner, mgmt: true, token: l.admin,
			body: map[string]any{"certPem": nil, "kid": nil, "jwksEndpoint": idp.endpoint() + "?static"}}, "PATCH /external-jwt-signers/{id}", 200, "")
		l.expect(hreq{method: "GET", path: "/external-jwt-signers/" + staticSigner, mgmt: true, token: l.admin}, "GET /external-jwt-signers/{id}", 200, "").data(t, &detail)
		if detail["certPem"] != nil || detail["fingerprint"] != nil || !strings.HasSuffix(detail["jwksEndpoint"].(string), "?static") {
			t.Errorf("after patch: %v", detail)
		}
	})
	t.Run("a signer an authentication policy names cannot be deleted", func(t *testing.T) {
		l.expect(hreq{method: "DELETE", path: "/external-jwt-signers/" + staticSigner, mgmt: true, token: l.admin}, "DELETE /external-jwt-signers/{id}", 400, "CAN_NOT_DELETE_REFERENCED_ENTITY")
		l.expect(hreq{method: "DELETE", path: "/auth-policies/" + policyStaticOnly, mgmt: true, token: l.admin}, "DELETE /auth-policies/{id}", 400, "CAN_NOT_DELETE_REFERENCED_ENTITY")
	})
}

// TestExtJWTKeyRotation rotates the provider's key: the new key is fetched when a token
// names it, at most once per refetch interval, and the retired key stops working.
func TestExtJWTKeyRotation(t *testing.T) {
	t.Parallel()
	idp := newTestIdP(t, "https://rotating.example.com")
	idp.addKey("k1", false, true)
	idp.addKey("k2", false, false)
	const interval = 2 * time.Second
	l := startLive(t, liveOptions{jwksClient: idp.srv.Client(), jwksRefetch: interval})
	l.createID(t, "/external-jwt-signers", map[string]any{"name": "rotating", "enabled": true, "issuer": idp.iss, "audience": idp.aud, "jwksEndpoint": idp.endpoint()})
	id := l.createID(t, "/identities", map[string]any{"name": "rita", "type": "User", "isAdmin": false})
	login := func(kid string) int { return l.extLogin(idp.sign(kid, idp.claims("sub", id))).status }

	if st := login("k1"); st != 200 {
		t.Fatalf("login with k1: %d", st)
	}
	firstFetch := time.Now()
	if st := login("k1"); st != 200 || idp.fetches.Load() != 1 {
		t.Fatalf("second login with k1: %d, %d fetches (want the key set cached)", st, idp.fetches.Load())
	}
	idp.publish("k2")
	// Tokens naming unknown keys do not make the controller fetch the set more than once per
	// interval.
	for range 10 {
		if st := l.extLogin(idp.sign("k2", idp.claims("sub", id, func(c jwt.MapClaims) {}))); st.status == 200 && time.Since(firstFetch) < interval {
			t.Fatal("k2 accepted before the key set could be fetched again")
		}
	}
	if n := idp.fetches.Load(); n > 2 {
		t.Fatalf("%d fetches for 10 tokens with a new key within the interval", n)
	}
	time.Sleep(time.Until(firstFetch.Add(interval + 100*time.Millisecond)))
	if st := login("k2"); st != 200 {
		t.Fatalf("login with the rotated key after the interval: %d", st)
	}
	fetches := idp.fetches.Load()
	if st := login("k2"); st != 200 || idp.fetches.Load() != fetches {
		t.Fatalf("second login with k2: %d, fetches %d -> %d", st, fetches, idp.fetches.Load())
	}
	if st := login("k1"); st != 401 {
		t.Fatalf("login with the retired key: %d", st)
	}
}

// policyBody is a complete authentication policy body that allows everything, changed by
// edit.
func policyBody(name string, edit func(map[string]any)) map[string]any {
	p := map[string]any{
		"name": name,
		"primary": map[string]any{
			"cert": map[string]any{"allowed": true, "allowExpiredCerts": false},
			"updb": map[string]any{"allowed": true, "minPasswordLength": 5, "requireSpecialChar": false, "requireNumberChar": false,
				"requireMixedCase": false, "maxAttempts": 0, "lockoutDurationMinutes": 0},
			"extJwt": map[string]any{"allowed": true, "allowedSigners": []string{}},
		},
		"secondary": map[string]any{"requireTotp": false, "requireExtJwtSigner": nil},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

// TestExtJWTLoopbackHTTP checks the key-set endpoints a signer may name: https, or plain
// http on a loopback IP address only (an identity provider on the controller's host, in
// development), on creation and on update; and a real login with a JWT whose key the
// controller fetched over http from 127.0.0.1 with its default client.
func TestExtJWTLoopbackHTTP(t *testing.T) {
	t.Parallel()
	idp := startTestIdP(t, "http://127.0.0.1/realms/dev", httptest.NewServer)
	idp.addKey("dev-1", true, true)
	if !strings.HasPrefix(idp.endpoint(), "http://127.0.0.1:") {
		t.Fatalf("the IdP is at %s", idp.endpoint())
	}
	l := startLive(t, liveOptions{}) // the model's own JWKS client

	body := func(name, iss, endpoint string) map[string]any {
		return map[string]any{"name": name, "enabled": true, "issuer": iss, "audience": idp.aud, "jwksEndpoint": endpoint}
	}
	refused := func(t *testing.T, a answer, what string) {
		t.Helper()
		var env struct {
			Error struct {
				Code  string `json:"code"`
				Cause struct {
					Field string `json:"field"`
				} `json:"cause"`
			} `json:"error"`
		}
		json.Unmarshal(a.body, &env)
		if a.status != 400 || env.Error.Code != "COULD_NOT_VALIDATE" || env.Error.Cause.Field != "jwksEndpoint" {
			t.Errorf("%s: %d %s, want 400 COULD_NOT_VALIDATE naming jwksEndpoint", what, a.status, a.body)
		}
	}
	for _, endpoint := range []string{
		"http://idp.example.com/jwks",
		"http://192.168.1.10:8080/jwks",
		"http://[fe80::1]/jwks",
		"http://localhost:8080/jwks", // a name, not an address: not trusted to be loopback
		"http://127.0.0.1.nip.io/jwks",
		"http://0.0.0.0:8080/jwks",
		"ftp://127.0.0.1/jwks",
	} {
		a := l.do(hreq{method: "POST", path: "/external-jwt-signers", mgmt: true, token: l.admin, body: body("refused", "https://refused.example.com", endpoint)})
		refused(t, a, "create with "+endpoint)
	}
	for i, endpoint := range []string{"http://[::1]:8080/jwks", "http://127.1.2.3/jwks", "https://idp.example.com/jwks"} {
		id := l.createID(t, "/external-jwt-signers", body(fmt.Sprintf("ok-%d", i), fmt.Sprintf("https://ok-%d.example.com", i), endpoint))
		a := l.do(hreq{method: "PATCH", path: "/external-jwt-signers/" + id, mgmt: true, token: l.admin, body: map[string]any{"jwksEndpoint": "http://10.0.0.1/jwks"}})
		refused(t, a, "update of "+endpoint+" to http://10.0.0.1/jwks")
	}

	dev := l.createID(t, "/external-jwt-signers", body("dev-idp", idp.iss, idp.endpoint()))
	ident := l.createID(t, "/identities", map[string]any{"name": "dora", "type": "User", "isAdmin": false})
	var sess sessionInfo
	l.expect(hreq{method: "POST", path: "/authenticate?method=ext-jwt", bearer: idp.sign("dev-1", idp.claims("sub", ident))}, "POST /authenticate", 200, "").data(t, &sess)
	if sess.IdentityID != ident || idp.fetches.Load() != 1 {
		t.Fatalf("login with a JWT of the loopback IdP: %+v, %d fetches", sess, idp.fetches.Load())
	}
	// Moved to plain http elsewhere by an update: refused, and the signer keeps its endpoint.
	a := l.do(hreq{method: "PATCH", path: "/external-jwt-signers/" + dev, mgmt: true, token: l.admin, body: map[string]any{"jwksEndpoint": "http://idp.example.com/jwks"}})
	refused(t, a, "update to a remote http endpoint")
	if st := l.extLogin(idp.sign("dev-1", idp.claims("sub", ident))).status; st != 200 {
		t.Fatalf("login after the refused update: %d", st)
	}
}
