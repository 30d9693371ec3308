package sessionsync_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/routers"
	"github.com/zmesh/zmesh/controlplane/sessionsync"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// clock is a settable clock for the model.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// env is a model in a Badger store in a temporary directory, a syncer, and the control
// channel listener the routers package serves on loopback, wired as the controller wires
// them.
type env struct {
	m        *model.Model
	st       *store.Store
	clock    *clock
	ca       *pki.CA
	sync     *sessionsync.Syncer
	ctrlAddr string
	logs     *ctrltest.LogBuffer
}

func newEnv(t *testing.T, opts sessionsync.Options) *env {
	t.Helper()
	clk := &clock{t: time.Now().UTC()}
	logs := &ctrltest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, ca := modeltest.Store(t)
	m := model.New(st, ca, quiet, model.Options{SessionTimeout: 30 * time.Minute, Issuer: "https://127.0.0.1:1280",
		Now: clk.Now, SigningKey: testutil.NewKey(t), SigningKID: "k"})
	dir := t.TempDir()
	cert, err := ca.ServerCertAt(filepath.Join(dir, "ctrl.cert"), filepath.Join(dir, "ctrl.key"), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := sessionsync.New(m, log, opts)
	srv := routers.New(routers.Config{
		Model: m, CA: ca, Cert: cert, ControllerID: "ctrl1", Endpoints: func() []string { return []string{"tls:127.0.0.1:1"} }, Log: quiet,
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
	return &env{m: m, st: st, clock: clk, ca: ca, sync: s, ctrlAddr: ln.Addr().String(), logs: logs}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// enrollRouter creates an edge router and enrolls it, returning its id and client
// certificate.
func enrollRouter(t *testing.T, m *model.Model, name string) (string, tls.Certificate) {
	t.Helper()
	r := ctrltest.EnrollRouter(t, m, name, name+".example")
	return r.ID, r.Client
}

// enrollIdentity creates an identity with a certificate and returns the chain it
// authenticates with.
func enrollIdentity(t *testing.T, m *model.Model, name string, roles ...string) (*model.Identity, []*x509.Certificate) {
	t.Helper()
	id := ctrltest.EnrollIdentity(t, m, name, roles...)
	return id.Identity, []*x509.Certificate{id.Cert}
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

// edgeRouter is a router's end of the control channel, keeping the session state it is sent
// as a router would.
type edgeRouter struct {
	ch *ctrlproto.Channel

	mu         sync.Mutex
	msgs       []*ctrlproto.SessionState
	apis       map[string]ctrlproto.APISession
	sessions   map[string]ctrlproto.Session
	resets     int
	complete   bool // the last snapshot is complete
	violations []string
	gate       chan struct{} // when set, the handler waits for it to close
}

func newEdgeRouter() *edgeRouter {
	return &edgeRouter{apis: map[string]ctrlproto.APISession{}, sessions: map[string]ctrlproto.Session{}}
}

func (r *edgeRouter) handle(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
	m := msg.(*ctrlproto.SessionState)
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
	r.ch = ctrlproto.New(context.Background(), conn, slog.New(slog.NewTextHandler(io.Discard, nil)), ctrlproto.Options{})
	r.ch.Handle(ctrlproto.TypeSessionState, r.handle)
	r.ch.Start()
	t.Cleanup(func() { r.ch.Close() })
	reply, err := ctrlproto.Call[*ctrlproto.HelloReply](context.Background(), r.ch, &ctrlproto.Hello{
		RouterID: id, Version: "test", Protocol: ctrlproto.ProtocolVersion, Hostname: "er.example",
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

func (r *edgeRouter) messages() []*ctrlproto.SessionState {
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

// waitInSync waits for the router's state to be complete and equal to the store's.
func waitInSync(t *testing.T, r *edgeRouter, m *model.Model) {
	t.Helper()
	testutil.EventuallyNil(t, "the router's state is the store's", func() error {
		wantA, wantS := storeState(t, m)
		gotA, gotS, complete := r.state()
		if complete && slices.Equal(gotA, wantA) && slices.Equal(gotS, wantS) {
			return nil
		}
		return fmt.Errorf("router has %d API sessions, %d sessions (complete %v); the store %d, %d",
			len(gotA), len(gotS), complete, len(wantA), len(wantS))
	})
}
