package model

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"
)

func TestClaimSelectors(t *testing.T) {
	t.Parallel()
	var claims map[string]any
	json.Unmarshal([]byte(`{"sub":"u1","name":"Ann","groups":["a","b"],"dept":"ops","odd/key":{"x~y":"deep"},
		"list":[{"n":"first"}],"num":5,"mixed":["a",1]}`), &claims)
	for _, c := range []struct {
		sel  string
		want any
		ok   bool
	}{
		{"/sub", "u1", true}, {"name", "Ann", true}, {"/odd~1key/x~0y", "deep", true}, {"/list/0/n", "first", true},
		{"/list/1/n", nil, false}, {"/list/01/n", nil, false}, {"missing", nil, false}, {"/name/deeper", nil, false},
	} {
		got, ok, err := selectClaim(claims, c.sel)
		if err != nil || ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: %v %v %v, want %v %v", c.sel, got, ok, err, c.want, c.ok)
		}
	}
	for _, bad := range []string{"", "/a~2"} {
		if _, err := parseSelector(bad); err == nil {
			t.Errorf("selector %q accepted", bad)
		}
	}
	s := &ExtJWTSigner{EnrollAttributeClaimsSelector: "groups"}
	if got, err := enrollAttributes(s, claims); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("attributes from an array: %v %v", got, err)
	}
	s.EnrollAttributeClaimsSelector = "/dept"
	if got, err := enrollAttributes(s, claims); err != nil || !slices.Equal(got, []string{"ops"}) {
		t.Errorf("attributes from a string: %v %v", got, err)
	}
	for _, sel := range []string{"num", "mixed"} {
		s.EnrollAttributeClaimsSelector = sel
		if _, err := enrollAttributes(s, claims); CodeOf(err) != CodeCouldNotValidate {
			t.Errorf("attributes from %s: %v", sel, err)
		}
	}
	if name, err := enrollName(&ExtJWTSigner{}, claims); err != nil || name != "u1" {
		t.Errorf("default name: %q %v", name, err)
	}
	if _, err := enrollName(&ExtJWTSigner{EnrollNameClaimsSelector: "groups"}, claims); CodeOf(err) != CodeCouldNotValidate {
		t.Errorf("name from an array: %v", err)
	}
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestParseJWKS checks which key-set entries are usable, and that the algorithms come from
// the key.
func TestParseJWKS(t *testing.T) {
	t.Parallel()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	smallRSA, _ := rsa.GenerateKey(rand.Reader, 1024)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	ecRaw, _ := ecKey.PublicKey.Bytes()
	offCurve := slices.Clone(ecRaw)
	offCurve[len(offCurve)-1] ^= 1
	set := map[string]any{"keys": []map[string]any{
		{"kty": "RSA", "kid": "rsa", "n": b64u(rsaKey.N.Bytes()), "e": "AQAB"},
		{"kty": "RSA", "kid": "rsa-ps", "alg": "PS256", "n": b64u(rsaKey.N.Bytes()), "e": "AQAB"},
		{"kty": "RSA", "kid": "rsa-small", "n": b64u(smallRSA.N.Bytes()), "e": "AQAB"},
		{"kty": "RSA", "kid": "rsa-hs", "alg": "HS256", "n": b64u(rsaKey.N.Bytes()), "e": "AQAB"},
		{"kty": "RSA", "kid": "rsa-enc", "use": "enc", "n": b64u(rsaKey.N.Bytes()), "e": "AQAB"},
		{"kty": "EC", "kid": "ec", "crv": "P-384", "x": b64u(ecRaw[1:49]), "y": b64u(ecRaw[49:])},
		{"kty": "EC", "kid": "ec-off-curve", "crv": "P-384", "x": b64u(offCurve[1:49]), "y": b64u(offCurve[49:])},
		{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": b64u(edPub)},
		{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
		{"kty": "RSA", "n": b64u(rsaKey.N.Bytes()), "e": "AQAB"},
	}}
	data, _ := json.Marshal(set)
	keys, err := parseJWKS(data)
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for kid := range keys {
		kids = append(kids, kid)
	}
	slices.Sort(kids)
	if want := []string{"ec", "ed", "rsa", "rsa-ps"}; !slices.Equal(kids, want) {
		t.Fatalf("usable keys %v, want %v", kids, want)
	}
	for kid, want := range map[string][]string{
		"rsa": {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}, "rsa-ps": {"PS256"}, "ec": {"ES384"}, "ed": {"EdDSA"},
	} {
		if got, err := algorithmsFor(keys[kid].key, keys[kid].alg); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: algorithms %v %v, want %v", kid, got, err, want)
		}
	}
	if _, err := parseJWKS([]byte(`{"keys":[]}`)); err == nil {
		t.Error("an empty key set was accepted")
	}
}

// TestLockouts checks that maxAttempts failures lock an account for the lockout duration
// and that a success clears the count.
func TestLockouts(t *testing.T) {
	t.Parallel()
	l := &lockouts{m: map[string]*lockout{}}
	now := time.Now()
	u := AuthPolicyUpdb{MaxAttempts: 3, LockoutDurationMinutes: 2}
	l.failed("a", u, now)
	l.failed("a", u, now)
	l.succeeded("a")
	l.failed("a", u, now)
	l.failed("a", u, now)
	if l.locked("a", now) {
		t.Fatal("locked after 2 consecutive failures")
	}
	l.failed("a", u, now)
	if !l.locked("a", now.Add(time.Minute)) || l.locked("a", now.Add(2*time.Minute)) {
		t.Fatal("the lock does not last exactly the lockout duration")
	}
	l.failed("b", AuthPolicyUpdb{}, now)
	if len(l.m) != 0 {
		t.Fatal("a policy without maxAttempts counts failures")
	}
}

// TestJWKSEndpointRules checks which key-set endpoints a signer may name and which
// redirects a fetch follows: https anywhere; plain http only on a loopback IP literal, and
// a redirect from https never to plain http.
func TestJWKSEndpointRules(t *testing.T) {
	t.Parallel()
	for endpoint, ok := range map[string]bool{
		"https://idp.example.com/jwks":  true,
		"https://10.0.0.1:8443/jwks":    true,
		"http://127.0.0.1:8080/jwks":    true,
		"http://127.255.0.9/jwks":       true,
		"http://[::1]:5556/dex/keys":    true,
		"http://[::ffff:127.0.0.1]/k":   true,
		"http://localhost:8080/jwks":    false,
		"http://idp.example.com/jwks":   false,
		"http://10.0.0.1/jwks":          false,
		"http://[fe80::1%25lo]/jwks":    false,
		"http://0.0.0.0/jwks":           false,
		"http:///jwks":                  false,
		"ftp://127.0.0.1/jwks":          false,
		"127.0.0.1:8080/jwks":           false,
		"https://":                      false,
		"http://127.0.0.1.example/jwks": false,
	} {
		err := checkJWKSEndpoint(endpoint)
		if (err == nil) != ok {
			t.Errorf("%s: %v, want accepted %v", endpoint, err, ok)
		}
		if err != nil {
			if e, isModel := err.(*Error); !isModel || e.Field != "jwksEndpoint" || e.Code != CodeCouldNotValidate {
				t.Errorf("%s: %#v does not name jwksEndpoint", endpoint, err)
			}
		}
	}

	check := newJWKSCache(Options{}).client.CheckRedirect
	req := func(raw string) *http.Request {
		r, err := http.NewRequest("GET", raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tt := range []struct {
		from, to string
		ok       bool
	}{
		{"https://idp.example.com/jwks", "https://keys.example.com/jwks", true},
		{"https://idp.example.com/jwks", "http://127.0.0.1/jwks", false},
		{"https://idp.example.com/jwks", "http://idp.example.com/jwks", false},
		{"http://127.0.0.1:8080/jwks", "http://127.0.0.1:8080/realms/dev/jwks", true},
		{"http://127.0.0.1:8080/jwks", "https://idp.example.com/jwks", true},
		{"http://127.0.0.1:8080/jwks", "http://idp.example.com/jwks", false},
	} {
		if err := check(req(tt.to), []*http.Request{req(tt.from)}); (err == nil) != tt.ok {
			t.Errorf("redirect %s -> %s: %v, want followed %v", tt.from, tt.to, err, tt.ok)
		}
	}
}
