package interop

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	edgeapis "github.com/openziti/sdk-golang/edge-apis"
	"github.com/openziti/sdk-golang/ziti"

	"github.com/zmesh/zmesh/internal/testutil"
)

// jwks is an identity provider for ext-JWT logins: a key set served over http on loopback
// (which zmesh accepts for a signer's jwksEndpoint) and the key that signs its tokens.
type jwks struct {
	url string
	key *ecdsa.PrivateKey
	kid string
}

func startJWKS(t *testing.T) *jwks {
	key := testutil.NewKey(t)
	raw, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	const kid = "interop-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]any{
			{"kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])},
		}})
	}))
	t.Cleanup(srv.Close)
	return &jwks{url: srv.URL + "/jwks", key: key, kid: kid}
}

// token signs a JWT of issuer iss for audience aud whose subject is sub.
func (j *jwks) token(iss, aud, sub string) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "aud": aud, "sub": sub,
		"iat": time.Now().Unix(), "exp": time.Now().Add(10 * time.Minute).Unix()})
	tok.Header["kid"] = j.kid
	return tok.SignedString(j.key)
}

// sdkSession is one OpenZiti SDK context under test.
type sdkSession struct {
	ctx ziti.Context
}

func newSDK(cfg *ziti.Config) (*sdkSession, error) {
	ctx, err := ziti.NewContext(cfg)
	if err != nil {
		return nil, err
	}
	return &sdkSession{ctx: ctx}, nil
}

func (s *sdkSession) close() {
	if s != nil {
		s.ctx.Close()
	}
}

func (s *sdkSession) currentIdentity(want string) error {
	id, err := s.ctx.GetCurrentIdentity()
	if err != nil {
		return err
	}
	if id.Name == nil || *id.Name != want {
		got := "no name"
		if id.Name != nil {
			got = fmt.Sprintf("%q", *id.Name)
		}
		return fmt.Errorf("the current identity is %s, want %q", got, want)
	}
	return nil
}

// services checks that the identity's services include want, and returns want's id.
func (s *sdkSession) services(want string) (string, error) {
	list, err := s.ctx.GetServices()
	if err != nil {
		return "", err
	}
	var got []string
	for _, svc := range list {
		if svc.Name != nil {
			got = append(got, *svc.Name)
			if *svc.Name == want && svc.ID != nil {
				return *svc.ID, nil
			}
		}
	}
	return "", fmt.Errorf("the services are %q, without %q", got, want)
}

// session creates a session of type typ (ziti.SessionDial, ziti.SessionBind) for service id.
func (s *sdkSession) session(id string, typ ziti.SessionType) error {
	impl, ok := s.ctx.(*ziti.ContextImpl)
	if !ok {
		return fmt.Errorf("the context is a %T", s.ctx)
	}
	sess, err := impl.CtrlClt.CreateSession(id, typ)
	if err != nil {
		return err
	}
	if sess.Token == nil || *sess.Token == "" {
		return errors.New("the session has no token")
	}
	return nil
}

// runSDK exercises the REST side of OpenZiti's Go SDK against the network: authentication
// by password, certificate (identity files written by zmesh and by `ziti edge enroll`) and
// external JWT, the current identity, services, sessions and external signers; and a file
// written by `ziti edge enroll` used by `zmesh tunnel proxy`.
func runSDK(t *testing.T, l *ledger, n *network, zitiBin string) {
	r := adminREST(t, n)
	step := func(name string, f func() error) bool { t.Helper(); return l.step(t, "sdk", name, f) }
	clientURL := n.api + clientAPI

	// The client identity of the quickstart may also bind echo, for a Bind session.
	if _, err := r.create("service-policies", map[string]any{"name": "sdk-bind", "type": "Bind", "semantic": "AnyOf",
		"identityRoles": []string{"#" + echoClientsRole}, "serviceRoles": []string{"@" + echoServiceID(t, r)}}); err != nil {
		t.Fatal(err)
	}

	// The administrator by username and password.
	{
		creds := edgeapis.NewUpdbCredentials("admin", n.password)
		creds.CaPool = n.pool
		s, err := newSDK(&ziti.Config{ZtAPI: clientURL, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		ok := step("updb: authenticate", s.ctx.Authenticate)
		step("updb: current identity", after(ok, "updb: authenticate", func() error { return s.currentIdentity("Default Admin") }))
	}

	// The quickstart's client by the identity file zmesh wrote.
	{
		var s *sdkSession
		defer func() { s.close() }()
		ok := step("zmesh identity file: load", func() error {
			cfg, err := ziti.NewConfigFromFile(n.client)
			if err == nil {
				s, err = newSDK(cfg)
			}
			return err
		})
		sdkIdentityChecks(t, step, ok, s, "zmesh identity file", clientName, true)
	}

	// An identity created by REST and enrolled with `ziti edge enroll`, which may dial echo.
	zitiFile := t.TempDir() + "/sdk-ziti.json"
	{
		var s *sdkSession
		defer func() { s.close() }()
		ok := step("ziti identity file: ziti edge enroll", func() error { return zitiEnroll(t, r, zitiBin, zitiFile) })
		ok = step("ziti identity file: load", after(ok, "ziti edge enroll", func() error {
			cfg, err := ziti.NewConfigFromFile(zitiFile)
			if err == nil {
				s, err = newSDK(cfg)
			}
			return err
		}))
		sdkIdentityChecks(t, step, ok, s, "ziti identity file", "sdk-ziti", false)
	}

	// An identity of an external JWT signer.
	{
		idp := startJWKS(t)
		const iss, aud = "https://sdk.interop.example", "sdk-aud"
		if _, err := r.create("external-jwt-signers", map[string]any{"name": "sdk-signer", "enabled": true,
			"issuer": iss, "audience": aud, "jwksEndpoint": idp.url}); err != nil {
			t.Fatal(err)
		}
		id, err := r.create("identities", map[string]any{"name": "sdk-jwt", "type": "User", "isAdmin": false,
			"roleAttributes": []string{echoClientsRole}})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := idp.token(iss, aud, id)
		if err != nil {
			t.Fatal(err)
		}
		creds := edgeapis.NewJwtCredentials(tok)
		creds.CaPool = n.pool
		s, err := newSDK(&ziti.Config{ZtAPI: clientURL, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		step("ext-jwt: external signers", func() error {
			signers, err := s.ctx.GetExternalSigners()
			if err != nil {
				return err
			}
			var got []string
			for _, sg := range signers {
				if sg.Name != nil {
					got = append(got, *sg.Name)
				}
			}
			if !slices.Contains(got, "sdk-signer") {
				return fmt.Errorf("the external signers are %q, without sdk-signer", got)
			}
			return nil
		})
		ok := step("ext-jwt: authenticate", s.ctx.Authenticate)
		step("ext-jwt: current identity", after(ok, "ext-jwt: authenticate", func() error { return s.currentIdentity("sdk-jwt") }))
		step("ext-jwt: list services", after(ok, "ext-jwt: authenticate", func() error { _, err := s.services(echoService); return err }))
	}

	// The file `ziti edge enroll` wrote, used by zmesh's own tunneler.
	step("zmesh tunnel proxy with a ziti identity file", func() error {
		if err := fileExists(zitiFile); err != nil {
			return err
		}
		return tunnelProxy(t, n, zitiFile)
	})
}

// sdkIdentityChecks authenticates s by its identity file's certificate and checks what the
// client API then tells it; bind says whether it may also bind echo. loaded says whether s
// was made: every step is recorded either way, a step whose precondition failed as failing.
func sdkIdentityChecks(t *testing.T, step func(string, func() error) bool, loaded bool, s *sdkSession, what, name string, bind bool) {
	t.Helper()
	ok := step(what+": cert authenticate", after(loaded, what+": load", func() error { return s.ctx.Authenticate() }))
	step(what+": current identity", after(ok, "cert authenticate", func() error { return s.currentIdentity(name) }))
	var echoID string
	ok = step(what+": list services", after(ok, "cert authenticate", func() (err error) { echoID, err = s.services(echoService); return err }))
	step(what+": create Dial session", after(ok, "list services", func() error { return s.session(echoID, ziti.SessionType(ziti.SessionDial)) }))
	if bind {
		step(what+": create Bind session", after(ok, "list services", func() error { return s.session(echoID, ziti.SessionType(ziti.SessionBind)) }))
	}
}

// after is f when the step it depends on succeeded, else a failure naming that step.
func after(ok bool, dep string, f func() error) func() error {
	if ok {
		return f
	}
	return func() error { return fmt.Errorf("not run: %s failed", dep) }
}

// echoServiceID returns the echo service's id.
func echoServiceID(t *testing.T, r *rest) string {
	t.Helper()
	svc, err := r.byName("services", echoService)
	if err != nil {
		t.Fatal(err)
	}
	return str(svc, "id")
}

// zitiEnroll creates the identity sdk-ziti, which may dial echo, by REST and enrolls it
// with `ziti edge enroll`, which writes file.
func zitiEnroll(t *testing.T, r *rest, zitiBin, file string) error {
	_, err := enrollWithZiti(t, r, zitiBin, "sdk-ziti", []string{echoClientsRole}, file)
	return err
}

// tunnelProxy runs `zmesh tunnel proxy` with the identity file and checks that the echo
// service answers through its port.
func tunnelProxy(t *testing.T, n *network, file string) error {
	port := strconv.Itoa(n.freePort(2))
	p, err := startProc(t, nil, "", n.zmesh, "tunnel", "proxy", "--identity", file, "--service", echoService+":"+port)
	if err != nil {
		return err
	}
	defer p.stop()
	conn, err := p.dial("127.0.0.1:" + port)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := echoOnce(conn, "through zmesh tunnel proxy\n"); err != nil {
		return fmt.Errorf("the echo service through zmesh tunnel proxy: %w; it printed: %s", err, lastLines(p.out.String(), 4))
	}
	return nil
}
