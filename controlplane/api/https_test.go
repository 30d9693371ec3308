package api

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
)

// offsetClock is the model's clock in tests that need time to pass (TOTP steps, lockouts):
// the real time plus an offset the test moves forward.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// live is a controller API served over real HTTPS on loopback, with the project's PKI: the
// server certificate is issued by the controller's CA, and clients trust only that CA.
type live struct {
	t     *testing.T
	m     *model.Model
	s     *Server
	url   string // https://127.0.0.1:port
	ca    *pki.CA
	clock func() time.Time
	admin string // session token of the default administrator
	ref   map[string]refOp
}

type liveOptions struct {
	clock       func() time.Time // nil: real time
	jwksClient  *http.Client
	jwksRefetch time.Duration
}

func startLive(t *testing.T, o liveOptions) *live {
	t.Helper()
	var logOut io.Writer = io.Discard
	if os.Getenv("ZMESH_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	st, ca := modeltest.Store(t)
	cert, err := ca.ServerCert(t.TempDir(), []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	key := cert.PrivateKey.(*ecdsa.PrivateKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + ln.Addr().String()
	clock := o.clock
	if clock == nil {
		clock = time.Now
	}
	m := model.New(st, ca, log, model.Options{SessionTimeout: time.Hour, Issuer: url, SigningKey: key,
		SigningKID: certid.Fingerprint(cert.Leaf), Now: clock, JWKSClient: o.jwksClient, JWKSRefetchInterval: o.jwksRefetch})
	if _, err := m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	s := New(m, log, Info{Advertise: ln.Addr().String(), ServerCert: cert.Leaf, Started: time.Now()})
	srv := &http.Server{Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go srv.Serve(tls.NewListener(ln, srv.TLSConfig))
	t.Cleanup(func() { srv.Close() })
	l := &live{t: t, m: m, s: s, url: url, ca: ca, clock: clock, ref: loadReference(t, "client.yml")}
	mgmt := loadReference(t, "management.yml")
	for k, v := range mgmt {
		l.ref["MGMT "+k] = v
	}
	l.admin = l.login("admin", "admin-pass").token
	return l
}

// answer is one HTTP answer of the live API.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// data decodes the data of an enveloped answer into v.
func (a answer) data(t *testing.T, v any) {
	t.Helper()
	refData(t, a.body, v)
}

func (a answer) code(t *testing.T) string {
	t.Helper()
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(a.body, &env)
	return env.Error.Code
}

// hreq is one request to the live API.
type hreq struct {
	method, path string // path below the base, with the query
	mgmt         bool   // the management API, else the client API
	token        string // zt-session
	bearer       string // Authorization: Bearer
	header       map[string]string
	body         any // encoded as JSON unless a string or []byte
	cert         *tls.Certificate
	from         string // the client's loopback address; "" lets the system choose
}

func (l *live) client(cert *tls.Certificate, from string) *http.Client {
	tc := &tls.Config{RootCAs: l.ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc}
	if from != "" {
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: tr}
}

func (l *live) do(r hreq) answer {
	l.t.Helper()
	base := ClientBase
	if r.mgmt {
		base = ManagementBase
	}
	var rd io.Reader
	ctype := "application/json"
	switch b := r.body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd, ctype = bytes.NewReader(b), "application/x-pem-file"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			l.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	hr, err := http.NewRequestWithContext(context.Background(), r.method, l.url+base+r.path, rd)
	if err != nil {
		l.t.Fatal(err)
	}
	if rd != nil {
		hr.Header.Set("Content-Type", ctype)
	}
	if r.token != "" {
		hr.Header.Set(SessionHeader, r.token)
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	c := l.client(r.cert, r.from)
	defer c.CloseIdleConnections()
	resp, err := c.Do(hr)
	if err != nil {
		l.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		l.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// expect makes a request and checks its status, and that the reference lists that status
// for the operation (op is "METHOD /path" of client.yml or management.yml). code, when not
// empty, is the error code the answer must carry.
func (l *live) expect(r hreq, op string, status int, code string) answer {
	l.t.Helper()
	a := l.do(r)
	if a.status != status {
		l.t.Fatalf("%s %s: %d %s, want %d", r.method, r.path, a.status, a.body, status)
	}
	if code != "" && a.code(l.t) != code {
		l.t.Fatalf("%s %s: code %q in %s, want %s", r.method, r.path, a.code(l.t), a.body, code)
	}
	key := op
	if r.mgmt {
		key = "MGMT " + op
	}
	if refOp, ok := l.ref[key]; !ok {
		l.t.Fatalf("%s is not an operation of the reference", key)
	} else if !refOp.lists(status) {
		l.t.Errorf("%s answered %d, which the reference does not list (%v)", key, status, refOp.codes)
	}
	return a
}

// sessionInfo is what the tests read of an API session.
type sessionInfo struct {
	ID          string           `json:"id"`
	token       string           // from the zt-session header
	IdentityID  string           `json:"identityId"`
	AuthQueries []map[string]any `json:"authQueries"`
	MFARequired bool             `json:"isMfaRequired"`
	MFAComplete bool             `json:"isMfaComplete"`
}

func (s sessionInfo) pendingMFA() bool {
	return slices.ContainsFunc(s.AuthQueries, func(q map[string]any) bool { return q["typeId"] == "MFA" })
}

func (l *live) login(user, pass string) sessionInfo {
	l.t.Helper()
	a := l.expect(hreq{method: "POST", path: "/authenticate?method=password", body: map[string]string{"username": user, "password": pass}},
		"POST /authenticate", 200, "")
	var s sessionInfo
	a.data(l.t, &s)
	s.token = a.header.Get(SessionHeader)
	if s.token == "" {
		l.t.Fatal("no zt-session header")
	}
	return s
}

// updbUser creates an identity that authenticates with a username and password.
func (l *live) updbUser(name, policy string) (id string) {
	l.t.Helper()
	ident, err := l.m.CreateIdentity(model.IdentityCreate{Name: name, AuthPolicyID: policy, Enrollment: &model.EnrollmentRequest{Updb: name}})
	if err != nil {
		l.t.Fatal(err)
	}
	ens, _ := l.m.EnrollmentsOf(ident.ID)
	if err := l.m.EnrollUpdb(l.t.Context(), ens[0].Token, name+"-Pass1!"); err != nil {
		l.t.Fatal(err)
	}
	return ident.ID
}

// sessions is the number of API sessions in the store.
func (l *live) sessions() int {
	l.t.Helper()
	list, err := l.m.APISessions()
	if err != nil {
		l.t.Fatal(err)
	}
	return len(list)
}

// totpCode is the test's own RFC 6238 generator (SHA-1, 6 digits, 30 s), independent of
// the library the controller uses.
func totpCode(secret string, step int64) string {
	key, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(strings.TrimRight(secret, "=")))
	if err != nil {
		panic(err)
	}
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(step))
	mac := hmac.New(sha1.New, key)
	mac.Write(msg[:])
	sum := mac.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	code := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	return fmt.Sprintf("%06d", code%1_000_000)
}

// TestTOTPGenerator checks the test's generator against RFC 6238's SHA-1 test vectors
// (their last six digits).
func TestTOTPGenerator(t *testing.T) {
	t.Parallel()
	secret := base32.StdEncoding.EncodeToString([]byte("12345678901234567890"))
	for _, v := range []struct {
		unix int64
		want string
	}{{59, "287082"}, {1111111109, "081804"}, {1111111111, "050471"}, {1234567890, "005924"}, {2000000000, "279037"}, {20000000000, "353130"}} {
		if got := totpCode(secret, v.unix/30); got != v.want {
			t.Errorf("T=%d: %s, want %s", v.unix, got, v.want)
		}
	}
}

// authenticator is a TOTP app: it hands out codes of steps it has not used yet, letting
// the (test) clock move on to the next step when it has used the current one and the next.
type authenticator struct {
	secret string
	clock  *offsetClock
	last   int64
}

func (a *authenticator) code() string {
	step := a.clock.Now().Unix() / 30
	s := max(a.last+1, step)
	if s > step+1 { // the server accepts one step ahead; move the clock on
		a.clock.Advance(time.Duration(s-1-step) * 30 * time.Second)
	}
	a.last = s
	return totpCode(a.secret, s)
}

// TestAuthenticationRoutes checks that every operation of the reference on the paths of
// MFA, external JWT signers, authentication policies and token enrollment is served, in the
// client and the management API, with the reference's access: public or with a session.
func TestAuthenticationRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, api := range []struct {
		file  string
		set   apiSet
		paths []string
	}{
		{"client.yml", client, []string{"/authenticate/mfa", "/current-api-session/totp-token", "/current-identity/mfa",
			"/current-identity/mfa/qr-code", "/current-identity/mfa/recovery-codes", "/current-identity/mfa/verify",
			"/enroll/token", "/enroll/challenge", "/enroll/jwks", "/external-jwt-signers", "/network-jwts"}},
		{"management.yml", management, []string{"/authenticate/mfa", "/current-identity/mfa", "/current-identity/mfa/qr-code",
			"/current-identity/mfa/recovery-codes", "/current-identity/mfa/verify", "/identities/{id}/mfa",
			"/external-jwt-signers", "/external-jwt-signers/{id}", "/auth-policies", "/auth-policies/{id}", "/network-jwts"}},
	} {
		ref := loadReference(t, api.file)
		n := 0
		for key, op := range ref {
			method, path, _ := strings.Cut(key, " ")
			if !slices.Contains(api.paths, path) {
				continue
			}
			n++
			i := slices.IndexFunc(f.s.routesOf(api.set), func(rt route) bool { return rt.method == method && rt.path == path })
			if i < 0 {
				t.Errorf("%s: %s is not served", api.file, key)
				continue
			}
			if rt := f.s.routesOf(api.set)[i]; (rt.access != public) != op.protected {
				t.Errorf("%s: %s needs a session: %v, the reference says %v", api.file, key, rt.access != public, op.protected)
			}
		}
		if n < len(api.paths) {
			t.Errorf("%s: only %d operations on %d paths", api.file, n, len(api.paths))
		}
	}
}
