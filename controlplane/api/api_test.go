package api

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
)

type fixture struct {
	s             *Server
	m             *model.Model
	admin, normal string // session tokens
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), log, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ca, err := pki.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	m := model.New(st, ca, log, model.Options{SessionTimeout: time.Hour, Issuer: "https://ctrl.test", SigningKey: key, SigningKID: "k"})
	if err := m.EnsureBuiltinConfigTypes(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnsureDefaultAdmin("admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: m, s: New(m, log, Info{Advertise: "ctrl.test:1280", ServerCert: ca.Certificate(), Started: time.Now()})}
	f.admin = f.login(t, "admin", "admin-pass")
	id, err := m.CreateIdentity(model.IdentityCreate{Name: "user", Enrollment: &model.EnrollmentRequest{Updb: "user"}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := m.EnrollmentsOf(id.ID)
	if err := m.EnrollUpdb(ens[0].Token, "user-pass"); err != nil {
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

// TestClientPathsStatus checks, for every client API path of the reference that the
// controller serves so far, the status without a session, with a bad session and with a good
// one. Session-protected paths answer 401 UNAUTHORIZED to the first two.
func TestClientPathsStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const bogus = "/doesnotexist"
	tests := []struct {
		method, path, body string
		protected          bool
		good               int
	}{
		{"GET", "/", "", false, 200},
		{"GET", "/version", "", false, 200},
		{"GET", "/protocols", "", false, 200},
		{"GET", "/enumerated-capabilities", "", false, 200},
		{"GET", "/specs", "", false, 200},
		{"GET", "/specs/edge-client", "", false, 200},
		{"GET", "/specs/edge-client/spec", "", false, 200},
		{"GET", "/specs" + bogus, "", false, 404},
		{"GET", "/.well-known/est/cacerts", "", false, 200},
		{"POST", "/authenticate?method=password", `{}`, false, 400},
		{"POST", "/authenticate?method=password", `{"username":"nobody","password":"wrong-pass"}`, false, 401},
		{"POST", "/authenticate?method=cert", `{}`, false, 401},
		{"POST", "/authenticate?method=magic", `{}`, false, 400},
		{"POST", "/enroll?method=ott&token=00000000-0000-4000-8000-000000000000", "", false, 400},
		{"POST", "/enroll/ott", `{"token":"x","clientCsr":"y"}`, false, 400},
		{"POST", "/enroll/ottca", `{"token":"00000000-0000-4000-8000-000000000000"}`, false, 400},
		{"POST", "/enroll/ca", "", false, 400},
		{"POST", "/enroll/updb?token=00000000-0000-4000-8000-000000000000", `{"password":"secret1"}`, false, 400},
		{"GET", "/controllers", "", true, 200},
		{"GET", "/current-api-session", "", true, 200},
		{"GET", "/current-identity", "", true, 200},
		{"GET", "/current-identity/authenticators", "", true, 200},
		{"GET", "/current-identity/authenticators" + bogus, "", true, 404},
		{"PUT", "/current-identity/authenticators" + bogus, `{"username":"user","password":"x-pass","currentPassword":"user-pass"}`, true, 404},
		{"PATCH", "/current-identity/authenticators" + bogus, `{}`, true, 400},
		{"POST", "/current-identity/authenticators" + bogus + "/extend", `{"clientCertCsr":"x"}`, true, 404},
		{"POST", "/current-identity/authenticators" + bogus + "/extend-verify", `{"clientCert":"x"}`, true, 404},
		{"GET", "/current-api-session/certificates", "", true, 200},
		{"POST", "/current-api-session/certificates", `{}`, true, 400},
		{"GET", "/current-api-session/certificates" + bogus, "", true, 404},
		{"DELETE", "/current-api-session/certificates" + bogus, "", true, 404},
		{"DELETE", "/current-api-session", "", true, 200},
	}
	for _, tt := range tests {
		path := ClientBase + tt.path
		if tt.protected {
			for _, token := range []string{"", "not-a-session"} {
				rec := f.do(tt.method, path, token, tt.body)
				if rec.Code != 401 || errorCode(t, rec) != "UNAUTHORIZED" {
					t.Errorf("%s %s with session %q: %d %s, want 401 UNAUTHORIZED", tt.method, tt.path, token, rec.Code, rec.Body)
				}
			}
		}
		rec := f.do(tt.method, path, f.normal, tt.body)
		if rec.Code != tt.good {
			t.Errorf("%s %s with a good session: %d %s, want %d", tt.method, tt.path, rec.Code, rec.Body, tt.good)
		}
	}
	// The logout above ended the session.
	if rec := f.do("GET", ClientBase+"/current-api-session", f.normal, ""); rec.Code != 401 {
		t.Errorf("session after logout: %d", rec.Code)
	}
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
