package api

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/testutil"
)

type fixture struct {
	s             *Server
	m             *model.Model
	admin, normal string // session tokens
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, ca := modeltest.New(t, log, model.Options{})
	if err := m.EnsureBuiltinConfigTypes(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	f := &fixture{m: m, s: New(m, log, Info{Advertise: "ctrl.test:1280", ServerCert: ca.Certificate(), Started: started,
		Controllers: func() ([]Controller, error) {
			return []Controller{{ID: "ctrl1", APIAddress: "ctrl.test:1280", CtrlAddress: "ctrl.test:6262", Cert: ca.Certificate(),
				Online: true, Leader: true, JoinedAt: started}}, nil
		}})}
	f.admin = f.login(t, "admin", "admin-pass")
	id, err := m.CreateIdentity(model.IdentityCreate{Name: "user", Enrollment: &model.EnrollmentRequest{Updb: "user"}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := m.EnrollmentsOf(id.ID)
	if err := m.EnrollUpdb(t.Context(), ens[0].Token, "user-pass"); err != nil {
		t.Fatal(err)
	}
	f.normal = f.login(t, "user", "user-pass")
	return f
}

func (f *fixture) login(t *testing.T, user, pass string) string {
	t.Helper()
	rec := f.do("POST", ClientBase+"/authenticate?method=password", "", `{"username":"`+user+`","password":"`+pass+`"}`)
	if rec.Code != 200 {
		t.Fatalf("login %s: %d %s", user, rec.Code, rec.Body)
	}
	token := rec.Header().Get(SessionHeader)
	if token == "" {
		t.Fatal("no zt-session header in the authenticate response")
	}
	return token
}

func newReq(method, path, token string) *http.Request {
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set(SessionHeader, token)
	}
	return req
}

func (f *fixture) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	f.s.ServeHTTP(rec, req)
	return rec
}

func (f *fixture) do(method, path, token, body string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set(SessionHeader, token)
	}
	rec := httptest.NewRecorder()
	f.s.ServeHTTP(rec, req)
	return rec
}

// errorCode returns the error code of an error envelope, or "".
func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var env struct {
		Error struct {
			Code      string `json:"code"`
			RequestID string `json:"requestId"`
		} `json:"error"`
		Meta map[string]any `json:"meta"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
		t.Fatalf("answer is not JSON: %s", rec.Body)
	}
	if env.Error.Code != "" && (env.Error.RequestID == "" || env.Meta == nil) {
		t.Errorf("error envelope without requestId or meta: %s", rec.Body)
	}
	return env.Error.Code
}

// coreClientPaths are the paths of the reference's client API that enroll and authenticate
// identities and describe the controller: informational, EST, password and certificate
// authentication, the current API session and its certificates, the current identity and
// its authenticators (with certificate extension), every identity enrollment variant, and
// the controllers.
var coreClientPaths = []string{
	"/", "/version", "/protocols", "/enumerated-capabilities", "/specs", "/specs/{id}", "/specs/{id}/spec",
	"/.well-known/est/cacerts",
	"/authenticate",
	"/current-api-session", "/current-api-session/certificates", "/current-api-session/certificates/{id}",
	"/current-identity", "/current-identity/authenticators", "/current-identity/authenticators/{id}",
	"/current-identity/authenticators/{id}/extend", "/current-identity/authenticators/{id}/extend-verify",
	"/enroll", "/enroll/ott", "/enroll/ottca", "/enroll/updb", "/enroll/ca",
	"/controllers",
}

// refOp is one operation of the reference Swagger document.
type refOp struct {
	codes     []int // the response status codes it lists, ascending
	success   int   // the one 2xx among them
	protected bool  // it needs an API session (security ztSession)
}

func (o refOp) lists(code int) bool { return slices.Contains(o.codes, code) }

// findReference locates ../shared/reference/openziti/<name> beside the repository by walking
// up from the working directory; it skips the test when the file is absent.
func findReference(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "reference", "openziti", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("the OpenZiti v0.29 reference is absent: no shared/reference/openziti/%s in any parent of the working directory", name)
		}
		dir = parent
	}
}

// loadReference reads the operations of a reference Swagger document, keyed "METHOD /path".
func loadReference(t *testing.T, name string) map[string]refOp {
	t.Helper()
	data, err := os.ReadFile(findReference(t, name))
	if err != nil {
		t.Fatal(err)
	}
	type operation struct {
		Responses map[string]yaml.Node   `yaml:"responses"`
		Security  *[]map[string][]string `yaml:"security"`
	}
	var doc struct {
		Security []map[string][]string           `yaml:"security"`
		Paths    map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	ops := map[string]refOp{}
	for path, item := range doc.Paths {
		for method, node := range item {
			switch method {
			case "get", "put", "post", "patch", "delete", "head", "options":
			default:
				continue // path-level parameters
			}
			var op operation
			if err := node.Decode(&op); err != nil {
				t.Fatalf("%s: %s %s: %v", name, method, path, err)
			}
			security := doc.Security
			if op.Security != nil {
				security = *op.Security
			}
			var o refOp
			for _, req := range security {
				if _, ok := req["ztSession"]; ok {
					o.protected = true
				}
			}
			for k := range op.Responses {
				code, err := strconv.Atoi(k)
				if err != nil {
					continue // "default"
				}
				o.codes = append(o.codes, code)
				if code >= 200 && code < 300 {
					if o.success != 0 {
						t.Fatalf("%s: %s %s lists two success codes", name, method, path)
					}
					o.success = code
				}
			}
			slices.Sort(o.codes)
			ops[strings.ToUpper(method)+" "+path] = o
		}
	}
	return ops
}

// refCall is one request of TestClientPathsStatus.
type refCall struct {
	path  string // below ClientBase, with the query
	body  string
	ctype string // Content-Type of body; application/json when empty
	token string // a good session for the operation (protected operations)
	chain []*x509.Certificate
	// check runs after a successful call.
	check func(t *testing.T, rec *httptest.ResponseRecorder)
}

func (f *fixture) send(method string, c refCall, token string) *httptest.ResponseRecorder {
	var rd io.Reader
	if c.body != "" {
		rd = strings.NewReader(c.body)
	}
	req := httptest.NewRequest(method, ClientBase+c.path, rd)
	if c.body != "" {
		ct := c.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set(SessionHeader, token)
	}
	if c.chain != nil {
		req.TLS = &tls.ConnectionState{PeerCertificates: c.chain}
	}
	return f.serve(req)
}

// refKit makes the real entities the calls of TestClientPathsStatus need.
type refKit struct {
	f    *fixture
	n    int
	corp struct { // a verified third-party CA with ottca and auto-enrollment
		id string
		*testutil.Authority
	}
}

func newRefKit(t *testing.T, f *fixture) *refKit {
	k := &refKit{f: f}
	k.corp.Authority = testutil.NewAuthority(t, "corp CA")
	ca, err := f.m.CreateCA(model.CACreate{Name: "corp", CertPEM: string(k.corp.PEM()),
		IsAutoCaEnrollmentEnabled: true, IsOttCaEnrollmentEnabled: true, IsAuthEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	k.corp.id = ca.ID
	if err := f.m.VerifyCA(ca.ID, string(testutil.CertPEM(k.corp.Issue(t, ca.VerificationToken, nil)))); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *refKit) name(prefix string) string { k.n++; return fmt.Sprintf("%s-%d", prefix, k.n) }

// token creates an identity with a pending enrollment and returns the enrollment token.
func (k *refKit) token(t *testing.T, req model.EnrollmentRequest) string {
	t.Helper()
	id, err := k.f.m.CreateIdentity(model.IdentityCreate{Name: k.name("enrollee"), Enrollment: &req})
	if err != nil {
		t.Fatal(err)
	}
	ens, err := k.f.m.EnrollmentsOf(id.ID)
	if err != nil || len(ens) != 1 {
		t.Fatalf("enrollments of %s: %v %v", id.ID, ens, err)
	}
	return ens[0].Token
}

// csr returns a PEM certificate request for a new P-256 key.
func (k *refKit) csr(t *testing.T) string { return string(testutil.CSR(t, testutil.NewKey(t))) }

// certIdentity is an identity enrolled with a one-time token and an API session opened with
// its certificate.
type certIdentity struct {
	chain  []*x509.Certificate
	authID string // its certificate authenticator
	token  string // the API session
}

func (k *refKit) certIdentity(t *testing.T) certIdentity {
	t.Helper()
	tok := k.token(t, model.EnrollmentRequest{OTT: true})
	certPEM, err := k.f.m.EnrollOTT(tok, []byte(k.csr(t)))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParsePEMCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	ci := certIdentity{chain: []*x509.Certificate{cert}}
	rec := k.f.send("POST", refCall{path: "/authenticate?method=cert", chain: ci.chain}, "")
	if ci.token = rec.Header().Get(SessionHeader); rec.Code != 200 || ci.token == "" {
		t.Fatalf("certificate authentication: %d %s", rec.Code, rec.Body)
	}
	_, ident, err := k.f.m.SessionByToken(ci.token)
	if err != nil {
		t.Fatal(err)
	}
	auths, err := k.f.m.AuthenticatorsOf(ident.ID)
	if err != nil || len(auths) != 1 || auths[0].Method != model.MethodCert {
		t.Fatalf("authenticators of %s: %v %v", ident.ID, auths, err)
	}
	ci.authID = auths[0].ID
	return ci
}

// updbIdentity enrolls a username and password identity and logs it in; it returns its
// authenticator, username, password and session.
func (k *refKit) updbIdentity(t *testing.T) (authID, username, password, token string) {
	t.Helper()
	username, password = k.name("user"), "first-pass"
	if err := k.f.m.EnrollUpdb(t.Context(), k.token(t, model.EnrollmentRequest{Updb: username}), password); err != nil {
		t.Fatal(err)
	}
	token = k.f.login(t, username, password)
	_, ident, err := k.f.m.SessionByToken(token)
	if err != nil {
		t.Fatal(err)
	}
	auths, err := k.f.m.AuthenticatorsOf(ident.ID)
	if err != nil || len(auths) != 1 {
		t.Fatalf("authenticators of %s: %v %v", ident.ID, auths, err)
	}
	return auths[0].ID, username, password, token
}

// sessionCert issues an ephemeral certificate to the API session and returns its id.
func (k *refKit) sessionCert(t *testing.T, token string) string {
	t.Helper()
	rec := k.f.send("POST", refCall{path: "/current-api-session/certificates", body: `{"csr":` + quote(k.csr(t)) + `}`}, token)
	var out struct {
		ID string `json:"id"`
	}
	refData(t, rec.Body.Bytes(), &out)
	if rec.Code != 201 || out.ID == "" {
		t.Fatalf("create session certificate: %d %s", rec.Code, rec.Body)
	}
	return out.ID
}

// refCase calls one operation of client.yml; variant names one of several ways to call it.
type refCase struct {
	op, variant string
	// call makes the entities of one call: once for a protected operation, once per session
	// state for a public one.
	call func(t *testing.T) refCall
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// refData decodes the data of an envelope.
func refData(t *testing.T, body []byte, v any) {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("answer is not an envelope: %v %s", err, body)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("answer data: %v %s", err, body)
	}
}

// TestClientPathsStatus calls every operation of the reference's client API (client.yml) on
// the paths of coreClientPaths without a session, with a bad session and with a good one,
// on real entities, and checks each answer's status against the codes the reference lists for
// that operation: protected operations answer 401 UNAUTHORIZED to the first two and their
// success code to the third; public ones succeed in all three cases. Error calls check that
// the failures clients see are among the reference's codes too.
func TestClientPathsStatus(t *testing.T) {
	t.Parallel()
	ref := loadReference(t, "client.yml")
	f := newFixture(t)
	k := newRefKit(t, f)
	_, user, err := f.m.SessionByToken(f.normal)
	if err != nil {
		t.Fatal(err)
	}
	userAuths, err := f.m.AuthenticatorsOf(user.ID)
	if err != nil || len(userAuths) != 1 {
		t.Fatalf("authenticators of user: %v %v", userAuths, err)
	}
	userAuth := userAuths[0].ID
	pemReply := func(t *testing.T, rec *httptest.ResponseRecorder) {
		if _, err := pki.ParsePEMCert(rec.Body.Bytes()); err != nil || rec.Header().Get("Content-Type") != "application/x-pem-file" {
			t.Errorf("want a PEM certificate: %v %v %s", err, rec.Header(), rec.Body)
		}
	}
	dataHas := func(fields ...string) func(*testing.T, *httptest.ResponseRecorder) {
		return func(t *testing.T, rec *httptest.ResponseRecorder) {
			var data map[string]any
			refData(t, rec.Body.Bytes(), &data)
			for _, f := range fields {
				if data[f] == nil || data[f] == "" {
					t.Errorf("answer lacks %s: %s", f, rec.Body)
				}
			}
		}
	}
	cases := []refCase{
		{"GET /", "", func(*testing.T) refCall { return refCall{path: "/", check: dataHas("apiVersions")} }},
		{"GET /version", "", func(*testing.T) refCall { return refCall{path: "/version", check: dataHas("apiVersions")} }},
		{"GET /protocols", "", func(*testing.T) refCall { return refCall{path: "/protocols"} }},
		{"GET /enumerated-capabilities", "", func(*testing.T) refCall { return refCall{path: "/enumerated-capabilities"} }},
		{"GET /specs", "", func(*testing.T) refCall { return refCall{path: "/specs"} }},
		{"GET /specs/{id}", "", func(*testing.T) refCall {
			return refCall{path: "/specs/edge-client", check: dataHas("id", "name")}
		}},
		{"GET /specs/{id}/spec", "", func(*testing.T) refCall {
			return refCall{path: "/specs/edge-client/spec", check: dataHas("swagger", "paths")}
		}},
		{"GET /.well-known/est/cacerts", "", func(*testing.T) refCall {
			return refCall{path: "/.well-known/est/cacerts", check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if rec.Header().Get("Content-Type") != "application/pkcs7-mime" {
					t.Errorf("cacerts content type %q", rec.Header().Get("Content-Type"))
				}
			}}
		}},
		{"POST /authenticate", "password", func(*testing.T) refCall {
			return refCall{path: "/authenticate?method=password", body: `{"username":"user","password":"user-pass"}`, check: dataHas("token", "identity")}
		}},
		{"POST /authenticate", "cert", func(t *testing.T) refCall {
			ci := k.certIdentity(t)
			return refCall{path: "/authenticate?method=cert", chain: ci.chain, check: dataHas("token", "identity")}
		}},
		{"POST /enroll", "ott PEM", func(t *testing.T) refCall {
			return refCall{path: "/enroll?method=ott&token=" + k.token(t, model.EnrollmentRequest{OTT: true}),
				body: k.csr(t), ctype: "application/x-pem-file", check: pemReply}
		}},
		{"POST /enroll", "ott JSON", func(t *testing.T) refCall {
			return refCall{path: "/enroll?method=ott&token=" + k.token(t, model.EnrollmentRequest{OTT: true}),
				body: `{"clientCsr":` + quote(k.csr(t)) + `}`, check: pemReply}
		}},
		{"POST /enroll", "updb", func(t *testing.T) refCall {
			return refCall{path: "/enroll?method=updb&token=" + k.token(t, model.EnrollmentRequest{Updb: k.name("u")}), body: `{"password":"chosen-pass"}`}
		}},
		{"POST /enroll", "ottca", func(t *testing.T) refCall {
			return refCall{path: "/enroll?method=ottca&token=" + k.token(t, model.EnrollmentRequest{OTTCA: k.corp.id}), chain: []*x509.Certificate{k.corp.Issue(t, k.name("dev"), nil)}}
		}},
		{"POST /enroll", "ca", func(t *testing.T) refCall {
			return refCall{path: "/enroll?method=ca", chain: []*x509.Certificate{k.corp.Issue(t, k.name("auto"), nil)}}
		}},
		{"POST /enroll/ott", "", func(t *testing.T) refCall {
			return refCall{path: "/enroll/ott", body: `{"token":"` + k.token(t, model.EnrollmentRequest{OTT: true}) + `","clientCsr":` + quote(k.csr(t)) + `}`, check: dataHas("cert", "ca")}
		}},
		{"POST /enroll/ottca", "", func(t *testing.T) refCall {
			return refCall{path: "/enroll/ottca", body: `{"token":"` + k.token(t, model.EnrollmentRequest{OTTCA: k.corp.id}) + `"}`, chain: []*x509.Certificate{k.corp.Issue(t, k.name("dev"), nil)}}
		}},
		{"POST /enroll/updb", "", func(t *testing.T) refCall {
			return refCall{path: "/enroll/updb?token=" + k.token(t, model.EnrollmentRequest{Updb: k.name("u")}), body: `{"password":"chosen-pass"}`}
		}},
		{"POST /enroll/ca", "", func(t *testing.T) refCall {
			cert := k.corp.Issue(t, k.name("auto"), nil)
			return refCall{path: "/enroll/ca", chain: []*x509.Certificate{cert}, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if _, _, err := f.m.AuthenticateCert([]*x509.Certificate{cert}, model.Login{}); err != nil {
					t.Errorf("the auto-enrolled certificate does not authenticate: %v", err)
				}
			}}
		}},
		{"GET /controllers", "", func(*testing.T) refCall { return refCall{path: "/controllers", token: f.normal} }},
		{"GET /current-api-session", "", func(*testing.T) refCall {
			return refCall{path: "/current-api-session", token: f.normal, check: dataHas("token", "expiresAt")}
		}},
		{"DELETE /current-api-session", "", func(t *testing.T) refCall {
			token := f.login(t, "user", "user-pass")
			return refCall{path: "/current-api-session", token: token, check: func(t *testing.T, _ *httptest.ResponseRecorder) {
				if rec := f.send("GET", refCall{path: "/current-api-session"}, token); rec.Code != 401 {
					t.Errorf("session after logout: %d", rec.Code)
				}
			}}
		}},
		{"GET /current-api-session/certificates", "", func(*testing.T) refCall {
			return refCall{path: "/current-api-session/certificates", token: f.normal}
		}},
		{"POST /current-api-session/certificates", "", func(t *testing.T) refCall {
			return refCall{path: "/current-api-session/certificates", token: f.normal, body: `{"csr":` + quote(k.csr(t)) + `}`, check: dataHas("id", "certificate", "cas")}
		}},
		{"GET /current-api-session/certificates/{id}", "", func(t *testing.T) refCall {
			return refCall{path: "/current-api-session/certificates/" + k.sessionCert(t, f.normal), token: f.normal, check: dataHas("certificate", "fingerprint")}
		}},
		{"DELETE /current-api-session/certificates/{id}", "", func(t *testing.T) refCall {
			id := k.sessionCert(t, f.normal)
			return refCall{path: "/current-api-session/certificates/" + id, token: f.normal, check: func(t *testing.T, _ *httptest.ResponseRecorder) {
				if rec := f.send("GET", refCall{path: "/current-api-session/certificates/" + id}, f.normal); rec.Code != 404 {
					t.Errorf("deleted session certificate: %d", rec.Code)
				}
			}}
		}},
		{"GET /current-identity", "", func(*testing.T) refCall {
			return refCall{path: "/current-identity", token: f.normal, check: dataHas("id", "name")}
		}},
		{"GET /current-identity/authenticators", "", func(*testing.T) refCall {
			return refCall{path: "/current-identity/authenticators", token: f.normal}
		}},
		{"GET /current-identity/authenticators/{id}", "", func(*testing.T) refCall {
			return refCall{path: "/current-identity/authenticators/" + userAuth, token: f.normal, check: dataHas("id", "method")}
		}},
		{"PUT /current-identity/authenticators/{id}", "", func(t *testing.T) refCall {
			authID, username, password, token := k.updbIdentity(t)
			return refCall{path: "/current-identity/authenticators/" + authID, token: token,
				body: `{"username":"` + username + `","password":"second-pass","currentPassword":"` + password + `"}`,
				check: func(t *testing.T, _ *httptest.ResponseRecorder) {
					if _, _, err := f.m.AuthenticatePassword(t.Context(), username, "second-pass", model.Login{}); err != nil {
						t.Errorf("the new password: %v", err)
					}
				}}
		}},
		{"PATCH /current-identity/authenticators/{id}", "", func(t *testing.T) refCall {
			authID, username, password, token := k.updbIdentity(t)
			return refCall{path: "/current-identity/authenticators/" + authID, token: token,
				body: `{"password":"second-pass","currentPassword":"` + password + `"}`,
				check: func(t *testing.T, _ *httptest.ResponseRecorder) {
					if _, _, err := f.m.AuthenticatePassword(t.Context(), username, "second-pass", model.Login{}); err != nil {
						t.Errorf("the new password: %v", err)
					}
				}}
		}},
		{"POST /current-identity/authenticators/{id}/extend", "", func(t *testing.T) refCall {
			ci := k.certIdentity(t)
			return refCall{path: "/current-identity/authenticators/" + ci.authID + "/extend", token: ci.token, chain: ci.chain,
				body: `{"clientCertCsr":` + quote(k.csr(t)) + `}`, check: dataHas("clientCert", "ca")}
		}},
		{"POST /current-identity/authenticators/{id}/extend-verify", "", func(t *testing.T) refCall {
			ci := k.certIdentity(t)
			rec := f.send("POST", refCall{path: "/current-identity/authenticators/" + ci.authID + "/extend", chain: ci.chain,
				body: `{"clientCertCsr":` + quote(k.csr(t)) + `}`}, ci.token)
			var ext struct {
				ClientCert string `json:"clientCert"`
			}
			refData(t, rec.Body.Bytes(), &ext)
			if rec.Code != 200 || ext.ClientCert == "" {
				t.Fatalf("extend: %d %s", rec.Code, rec.Body)
			}
			return refCall{path: "/current-identity/authenticators/" + ci.authID + "/extend-verify", token: ci.token, chain: ci.chain,
				body: `{"clientCert":` + quote(ext.ClientCert) + `}`, check: func(t *testing.T, _ *httptest.ResponseRecorder) {
					if _, _, err := f.m.AuthenticateCert(ci.chain, model.Login{}); model.CodeOf(err) != model.CodeInvalidAuth {
						t.Errorf("the replaced certificate still authenticates: %v", err)
					}
				}}
		}},
	}

	covered := map[string]bool{} // the operations of coreClientPaths
	for key := range ref {
		if slices.Contains(coreClientPaths, strings.SplitN(key, " ", 2)[1]) {
			covered[key] = true
		}
	}
	t.Run("every covered operation is called and routed", func(t *testing.T) {
		// Every operation of the covered paths has a call, and the server routes it.
		for _, p := range coreClientPaths {
			found := false
			for key := range covered {
				found = found || strings.HasSuffix(key, " "+p)
			}
			if !found {
				t.Errorf("client.yml has no path %s", p)
			}
		}
		for key := range covered {
			method, path, _ := strings.Cut(key, " ")
			if !slices.ContainsFunc(f.s.routesOf(client), func(rt route) bool { return rt.method == method && rt.path == path }) {
				t.Errorf("%s is not routed", key)
			}
			if !slices.ContainsFunc(cases, func(c refCase) bool { return c.op == key }) {
				t.Errorf("%s of client.yml is not called", key)
			}
		}
	})

	states := []struct{ name, token string }{{"no session", ""}, {"bad session", "not-a-session"}, {"good session", ""}}
	t.Run("each operation answers as the reference says with no, a bad and a good session", func(t *testing.T) {
		for _, c := range cases {
			op, ok := ref[c.op]
			if !ok || !covered[c.op] {
				t.Errorf("%s is not a covered operation of client.yml", c.op)
				continue
			}
			method := strings.SplitN(c.op, " ", 2)[0]
			var shared refCall
			if op.protected {
				shared = c.call(t) // refused calls change nothing, so all three share it
			}
			var seen []string
			for i, st := range states {
				call := shared
				if !op.protected {
					call = c.call(t) // public calls succeed each time, so each needs its own entities
				}
				token := st.token
				if i == 2 {
					token = call.token
					if token == "" {
						token = f.normal
					}
				}
				rec := f.send(method, call, token)
				seen = append(seen, strconv.Itoa(rec.Code))
				what := c.op + " " + c.variant + " with " + st.name
				if !op.lists(rec.Code) {
					t.Errorf("%s: %d %s; client.yml lists %v", what, rec.Code, rec.Body, op.codes)
				}
				if op.protected && i < 2 {
					if rec.Code != 401 || errorCode(t, rec) != "UNAUTHORIZED" {
						t.Errorf("%s: %d %s, want 401 UNAUTHORIZED", what, rec.Code, rec.Body)
					}
					continue
				}
				if rec.Code != op.success {
					t.Errorf("%s: %d %s, want %d", what, rec.Code, rec.Body, op.success)
					continue
				}
				if call.check != nil {
					call.check(t, rec)
				}
			}
			t.Logf("%-60s %-9s codes %v; seen %s", c.op, c.variant, op.codes, strings.Join(seen, "/"))
		}
	})

	t.Run("failures answer codes the reference lists", func(t *testing.T) {
		// Failures with a good session (or none, on public operations) answer codes the reference
		// lists for the operation.
		ci := k.certIdentity(t) // its certificate is then extended and replaced
		ciSession, _, err := f.m.SessionByToken(ci.token)
		if err != nil {
			t.Fatal(err)
		}
		extended, err := f.m.ExtendCert(ciSession, ci.authID, []byte(k.csr(t)))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.m.ExtendVerify(ciSession, ci.authID, string(extended)); err != nil {
			t.Fatal(err)
		}
		used := k.token(t, model.EnrollmentRequest{OTT: true})
		if _, err := f.m.EnrollOTT(used, []byte(k.csr(t))); err != nil {
			t.Fatal(err)
		}
		unknown := "00000000-0000-4000-8000-000000000000"
		failures := []struct {
			op   string
			call refCall
			want int
		}{
			{"POST /authenticate", refCall{path: "/authenticate?method=password", body: `{"username":"user","password":"wrong-pass"}`}, 401},
			{"POST /authenticate", refCall{path: "/authenticate?method=password", body: `{}`}, 400},
			{"POST /authenticate", refCall{path: "/authenticate?method=magic", body: `{}`}, 400},
			{"POST /authenticate", refCall{path: "/authenticate?method=cert"}, 401},
			{"POST /enroll", refCall{path: "/enroll?method=ott&token=" + used, body: k.csr(t), ctype: "application/x-pem-file"}, 400},
			{"POST /enroll", refCall{path: "/enroll?method=magic&token=" + unknown}, 400},
			{"POST /enroll/ott", refCall{path: "/enroll/ott", body: `{"token":"` + used + `","clientCsr":` + quote(k.csr(t)) + `}`}, 400},
			{"POST /enroll/ott", refCall{path: "/enroll/ott", body: `{"token":"` + k.token(t, model.EnrollmentRequest{OTT: true}) + `","clientCsr":"not a CSR"}`}, 400},
			{"POST /enroll/ottca", refCall{path: "/enroll/ottca", body: `{"token":"` + k.token(t, model.EnrollmentRequest{OTTCA: k.corp.id}) + `"}`}, 400},
			{"POST /enroll/updb", refCall{path: "/enroll/updb?token=" + unknown, body: `{"password":"chosen-pass"}`}, 400},
			{"POST /enroll/updb", refCall{path: "/enroll/updb?token=" + k.token(t, model.EnrollmentRequest{Updb: k.name("u")}), body: `{"password":"x"}`}, 400},
			{"POST /enroll/ca", refCall{path: "/enroll/ca"}, 400},
			{"GET /current-api-session/certificates", refCall{path: "/current-api-session/certificates?limit=0", token: f.normal}, 400},
			{"POST /current-api-session/certificates", refCall{path: "/current-api-session/certificates", token: f.normal, body: `{"csr":"not a CSR"}`}, 400},
			{"GET /current-api-session/certificates/{id}", refCall{path: "/current-api-session/certificates/" + unknown, token: f.normal}, 404},
			{"GET /current-identity/authenticators", refCall{path: "/current-identity/authenticators?filter=nope", token: f.normal}, 400},
			{"GET /current-identity/authenticators/{id}", refCall{path: "/current-identity/authenticators/" + unknown, token: f.normal}, 404},
			{"GET /current-identity/authenticators/{id}", refCall{path: "/current-identity/authenticators/" + ci.authID, token: f.normal}, 404},
			{"PUT /current-identity/authenticators/{id}", refCall{path: "/current-identity/authenticators/" + unknown, token: f.normal,
				body: `{"username":"user","password":"x-pass-2","currentPassword":"user-pass"}`}, 404},
			{"PATCH /current-identity/authenticators/{id}", refCall{path: "/current-identity/authenticators/" + userAuth, token: f.normal, body: `{}`}, 400},
			{"PATCH /current-identity/authenticators/{id}", refCall{path: "/current-identity/authenticators/" + userAuth, token: f.normal,
				body: `{"password":"x-pass-2","currentPassword":"wrong-pass"}`}, 401},
			{"POST /current-identity/authenticators/{id}/extend", refCall{path: "/current-identity/authenticators/" + ci.authID + "/extend", token: ci.token, chain: ci.chain,
				body: `{"clientCertCsr":` + quote(k.csr(t)) + `}`}, 401},
		}
		for _, fc := range failures {
			op := ref[fc.op]
			method := strings.SplitN(fc.op, " ", 2)[0]
			rec := f.send(method, fc.call, fc.call.token)
			if rec.Code != fc.want || !op.lists(rec.Code) {
				t.Errorf("%s %s: %d %s, want %d (client.yml lists %v)", method, fc.call.path, rec.Code, rec.Body, fc.want, op.codes)
			}
		}
	})
}

// TestManagementAccess checks that administrators' operations answer 401 without a session
// and 403 to a non-administrator.
func TestManagementAccess(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, rt := range f.s.routesOf(management) {
		if rt.access != adminOnly {
			continue
		}
		path := ManagementBase + strings.NewReplacer("{id}", "x").Replace(rt.path)
		if rec := f.do(rt.method, path, "", ""); rec.Code != 401 {
			t.Errorf("%s %s without session: %d", rt.method, rt.path, rec.Code)
		}
		rec := f.do(rt.method, path, f.normal, "")
		if rec.Code != 403 || errorCode(t, rec) != "UNAUTHORIZED" {
			t.Errorf("%s %s as non-admin: %d %s, want 403 UNAUTHORIZED", rt.method, rt.path, rec.Code, rec.Body)
		}
		if rec := f.do(rt.method, path, f.admin, ""); rec.Code == 401 || rec.Code == 403 {
			t.Errorf("%s %s as admin: %d", rt.method, rt.path, rec.Code)
		}
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec := f.do("GET", ClientBase+"/nothing-here", "", "")
	if rec.Code != 404 || errorCode(t, rec) != "NOT_FOUND" {
		t.Errorf("unknown path: %d %s", rec.Code, rec.Body)
	}
	rec = f.do("PUT", ClientBase+"/version", "", "")
	if rec.Code != 405 || rec.Header().Get("Allow") != "GET" {
		t.Errorf("wrong method: %d %v", rec.Code, rec.Header())
	}
}

func TestCreateIdentityValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		body, field string
	}{
		{`{"type":"User","isAdmin":false}`, "name"},
		{`{"name":"a","isAdmin":false}`, "type"},
		{`{"name":"a","type":"Robot","isAdmin":false}`, "type"},
		{`{"name":"a","type":"User","isAdmin":"no"}`, "isAdmin"},
		{`{"name":"a","type":"User","isAdmin":false,"colour":"red"}`, "colour"},
		{`{"name":"a","type":"User","isAdmin":false,"tags":{"n":1}}`, "tags.n"},
		{`{"name":"a","type":"User","isAdmin":false,"enrollment":{"updb":"ab"}}`, "enrollment.updb"},
		{`{"name":"a","type":"User","isAdmin":false,"defaultHostingCost":70000}`, "defaultHostingCost"},
		{`{"name":"Default Admin","type":"User","isAdmin":false}`, "name"},
	}
	for _, tt := range tests {
		rec := f.do("POST", ManagementBase+"/identities", f.admin, tt.body)
		var env struct {
			Error struct {
				Code  string `json:"code"`
				Cause struct {
					Field string `json:"field"`
				} `json:"cause"`
			} `json:"error"`
		}
		json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != 400 || env.Error.Code != "COULD_NOT_VALIDATE" || env.Error.Cause.Field != tt.field {
			t.Errorf("%s: %d %s, want 400 COULD_NOT_VALIDATE naming %s", tt.body, rec.Code, rec.Body, tt.field)
		}
	}
	rec := f.do("POST", ManagementBase+"/identities", f.admin, strings.Repeat(" ", maxBody+1)+"{}")
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", rec.Code)
	}
	rec = f.do("POST", ManagementBase+"/identities", f.admin, `{"name":"a","type":"User","isAdmin":false} {}`)
	if rec.Code != 400 {
		t.Errorf("two JSON values: %d", rec.Code)
	}
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, n := range []string{"c", "a", "b"} {
		if rec := f.do("POST", ManagementBase+"/identities", f.admin, `{"name":"`+n+`","type":"User","isAdmin":false}`); rec.Code != 201 {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
	}
	var env struct {
		Data []struct {
			Name string `json:"name"`
		} `json:"data"`
		Meta struct {
			Pagination Pagination `json:"pagination"`
		} `json:"meta"`
	}
	rec := f.do("GET", ManagementBase+"/identities?limit=2&offset=1", f.admin, "")
	json.Unmarshal(rec.Body.Bytes(), &env)
	if rec.Code != 200 || len(env.Data) != 2 || env.Meta.Pagination != (Pagination{Limit: 2, Offset: 1, TotalCount: 5}) {
		t.Errorf("page: %d %s", rec.Code, rec.Body)
	}
	rec = f.do("GET", ManagementBase+"/identities?filter="+url.QueryEscape(`name in ["a", "b", "c"] sort by name desc`), f.admin, "")
	env.Data = nil
	json.Unmarshal(rec.Body.Bytes(), &env)
	if rec.Code != 200 || len(env.Data) != 3 || env.Data[0].Name != "c" || env.Data[2].Name != "a" || env.Meta.Pagination.TotalCount != 3 {
		t.Errorf("filter and sort: %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []string{`name =`, `nme = "a"`, `isAdmin contains "x"`} {
		rec := f.do("GET", ManagementBase+"/identities?filter="+url.QueryEscape(bad), f.admin, "")
		if rec.Code != 400 || errorCode(t, rec) != "INVALID_FILTER" {
			t.Errorf("filter %s: %d %s", bad, rec.Code, rec.Body)
		}
	}
	for _, bad := range []string{"limit=0", "limit=501", "offset=-1", "limit=ten"} {
		if rec := f.do("GET", ManagementBase+"/identities?"+bad, f.admin, ""); rec.Code != 400 {
			t.Errorf("%s: %d", bad, rec.Code)
		}
	}
}

func TestRateLimitedLogin(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var rec *httptest.ResponseRecorder
	for range 6 {
		rec = f.do("POST", ClientBase+"/authenticate?method=password", "", `{"username":"admin","password":"guess-guess"}`)
	}
	if rec.Code != http.StatusTooManyRequests || errorCode(t, rec) != "RATE_LIMITED" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("sixth failed login: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}

// TestESTCACerts checks that the CA store is base64 PKCS#7 that openssl reads.
func TestESTCACerts(t *testing.T) {
	t.Parallel()
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	f := newFixture(t)
	rec := f.do("GET", ClientBase+"/.well-known/est/cacerts", "", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/pkcs7-mime" {
		t.Fatalf("cacerts: %d %v", rec.Code, rec.Header())
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(rec.Body.String()), ""))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(openssl, "pkcs7", "-inform", "DER", "-print_certs")
	cmd.Stdin = bytes.NewReader(der)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	if want := f.m.CA().Certificate().Subject.CommonName; !strings.Contains(string(out), want) {
		t.Errorf("openssl output lacks the CA %q:\n%s", want, out)
	}
}
