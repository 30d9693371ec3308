package edgesync_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/channel"
	"github.com/zmesh/zmesh/controlplane/edgesync"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/routers"
	"github.com/zmesh/zmesh/controlplane/store"
)

// clock is a settable clock for the model.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// logBuffer collects a log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is a model in a Badger store in a temporary directory, a syncer, and the control
// channel listener the routers package serves on loopback, wired as the controller wires
// them.
type env struct {
	m        *model.Model
	clock    *clock
	ca       *pki.CA
	sync     *edgesync.Syncer
	ctrlAddr string
	logs     *logBuffer
}

func newEnv(t *testing.T, opts edgesync.Options) *env {
	t.Helper()
	clk := &clock{t: time.Now().UTC()}
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), quiet, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // last: after the syncer and the listener stopped
	ca, err := pki.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	m := model.New(st, ca, quiet, model.Options{SessionTimeout: 30 * time.Minute, Issuer: "https://127.0.0.1:1280",
		SigningKey: key, SigningKID: "kid1", Now: clk.Now})
	dir := t.TempDir()
	cert, err := ca.ServerCertAt(filepath.Join(dir, "ctrl.cert"), filepath.Join(dir, "ctrl.key"), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := edgesync.New(m, log, opts)
	srv := routers.New(routers.Config{
		Model: m, CA: ca, Cert: cert, ControllerID: "ctrl1", Endpoints: []string{"tls:127.0.0.1:1"}, Log: quiet,
		OnConnect: func(rt *routers.Router) { s.Connected(rt.ID, rt.Channel) },
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("control channel: %v", err)
		}
	})
	wg.Go(func() { s.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &env{m: m, clock: clk, ca: ca, sync: s, ctrlAddr: ln.Addr().String(), logs: logs}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	return key
}

func csr(t *testing.T, key *ecdsa.PrivateKey, dnsNames []string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}, DNSNames: dnsNames}, key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// enrollRouter creates an edge router and enrolls it, returning its id and client
// certificate.
func enrollRouter(t *testing.T, m *model.Model, name string) (string, tls.Certificate) {
	t.Helper()
	r := &model.EdgeRouter{Name: name}
	must(t, m.CreateEdgeRouter(r))
	enr, err := m.RouterEnrollment(r.ID)
	if err != nil || enr == nil {
		t.Fatalf("enrollment of %s: %v", name, err)
	}
	key := newKey(t)
	certs, err := m.EnrollErOtt(enr.Token, csr(t, key, nil), csr(t, newKey(t), []string{name + ".example"}))
	must(t, err)
	cert, err := pki.ParsePEMCert(certs.Cert)
	must(t, err)
	return r.ID, tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// enrollIdentity creates an identity with a certificate and returns the chain it
// authenticates with.
func enrollIdentity(t *testing.T, m *model.Model, name string, roles ...string) (*model.Identity, []*x509.Certificate) {
	t.Helper()
	id, err := m.CreateIdentity(model.IdentityCreate{Name: name, RoleAttributes: roles, Enrollment: &model.EnrollmentRequest{OTT: true}})
	must(t, err)
	ens, err := m.EnrollmentsOf(id.ID)
	must(t, err)
	certPEM, err := m.EnrollOTT(ens[0].Token, csr(t, newKey(t), nil))
	must(t, err)
	cert, err := pki.ParsePEMCert(certPEM)
	must(t, err)
	return id, []*x509.Certificate{cert}
}

// login opens n API sessions with chain, 16 at a time.
func login(t *testing.T, m *model.Model, chain []*x509.Certificate, n int) []*model.APISession {
	t.Helper()
	out := make([]*model.APISession, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, _, err := m.AuthenticateCert(chain, model.Login{Source: "127.0.0.1"})
			out[i] = s
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	return out
}

// grantAll lets every identity dial every service over every router.
func grantAll(t *testing.T, m *model.Model) {
	t.Helper()
	must(t, m.CreateServicePolicy(&model.ServicePolicy{Name: "dial-all", Type: model.PolicyDial, IdentityRoles: []string{"#all"}, ServiceRoles: []string{"#all"}}))
	must(t, m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "all-routers", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	must(t, m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all-services", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
}

// edgeRouter is a router's end of the control channel, keeping the edge state it is sent
// as a router would.
type edgeRouter struct {
	ch *channel.Channel

	mu         sync.Mutex
	msgs       []*channel.EdgeState
	apis       map[string]channel.EdgeAPISession
	sessions   map[string]channel.EdgeSession
	resets     int
	complete   bool // the last snapshot is complete
	violations []string
	gate       chan struct{} // when set, the handler waits for it to close
}

func newEdgeRouter() *edgeRouter {
	return &edgeRouter{apis: map[string]channel.EdgeAPISession{}, sessions: map[string]channel.EdgeSession{}}
}

func (r *edgeRouter) handle(_ context.Context, msg channel.Message) (channel.Message, error) {
	m := msg.(*channel.EdgeState)
	r.mu.Lock()
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.msgs) == 0 && !m.Reset {
		r.violations = append(r.violations, "the first message is not a Reset")
	}
	r.msgs = append(r.msgs, m)
	if m.Reset {
		r.resets++
		r.complete = false
		clear(r.apis)
		clear(r.sessions)
	}
	for _, a := range m.APISessions {
		r.apis[a.ID] = a
	}
	for _, s := range m.Sessions {
		r.sessions[s.ID] = s
	}
	for _, id := range m.RemovedAPISessions {
		delete(r.apis, id)
	}
	for _, id := range m.RemovedSessions {
		delete(r.sessions, id)
	}
	if m.Complete {
		r.complete = true
	}
	return nil, nil
}

// connect dials the control channel with cert and says Hello.
func (r *edgeRouter) connect(t *testing.T, addr string, roots *x509.CertPool, id string, cert tls.Certificate) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13,
	})
	must(t, err)
	r.ch = channel.New(context.Background(), conn, slog.New(slog.NewTextHandler(io.Discard, nil)), channel.Options{})
	r.ch.Handle(channel.TypeEdgeState, r.handle)
	r.ch.Start()
	t.Cleanup(func() { r.ch.Close() })
	reply, err := channel.Call[*channel.HelloReply](context.Background(), r.ch, &channel.Hello{
		RouterID: id, Version: "test", Protocol: channel.ProtocolVersion, Hostname: "er.example",
	})
	if err != nil || !reply.Accepted {
		t.Fatalf("hello: %+v %v", reply, err)
	}
}

// state returns the router's API session and session ids, sorted, and whether its last
// snapshot is complete.
func (r *edgeRouter) state() (apis, sessions []string, complete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.apis)), slices.Sorted(maps.Keys(r.sessions)), r.complete
}

func (r *edgeRouter) messages() []*channel.EdgeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *edgeRouter) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Error(v)
	}
}

// storeState returns the ids of the stored API sessions and sessions, sorted.
func storeState(t *testing.T, m *model.Model) (apis, sessions []string) {
	t.Helper()
	a, s, err := m.SessionState()
	must(t, err)
	for _, x := range a {
		apis = append(apis, x.ID)
	}
	for _, x := range s {
		sessions = append(sessions, x.ID)
	}
	return apis, sessions
}

// within waits up to d for cond, failing the test with what's description otherwise.
func within(t *testing.T, d time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitInSync waits up to d for the router's state to be complete and equal to the store's.
func waitInSync(t *testing.T, r *edgeRouter, m *model.Model, d time.Duration) {
	t.Helper()
	var msg string
	within(t, d, func() string { return msg }, func() bool {
		wantA, wantS := storeState(t, m)
		gotA, gotS, complete := r.state()
		msg = fmt.Sprintf("router has %d API sessions, %d sessions (complete %v); the store %d, %d",
			len(gotA), len(gotS), complete, len(wantA), len(wantS))
		return complete && slices.Equal(gotA, wantA) && slices.Equal(gotS, wantS)
	})
}
