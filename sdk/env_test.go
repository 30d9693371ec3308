package sdk

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/edgeproto"
)

// testEnv is a controller on loopback whose policies let every identity dial and bind every
// service over every edge router, and the fake edge routers of a test.
type testEnv struct {
	t    *testing.T
	ctl  *ctrltest.Controller
	m    *model.Model
	logs *ctrltest.LogBuffer // the controller's log, and the SDKs'

	mu     sync.Mutex
	terms  map[string]*fakeTerm // the terminators of every fake router, by id
	nextID uint64               // circuits and terminators
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	c := ctrltest.Start(t)
	e := &testEnv{t: t, ctl: c, m: c.Model, logs: c.Logs, terms: map[string]*fakeTerm{}}
	all := []string{"#all"}
	check(t, e.m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny, IdentityRoles: all, EdgeRouterRoles: all}))
	check(t, e.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny, ServiceRoles: all, EdgeRouterRoles: all}))
	for _, typ := range []string{model.PolicyDial, model.PolicyBind} {
		check(t, e.m.CreateServicePolicy(&model.ServicePolicy{Name: typ, Type: typ, Semantic: model.SemanticAny, IdentityRoles: all, ServiceRoles: all}))
	}
	return e
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// identity creates an identity, enrolls it with its one-time token and returns its identity
// file, as zmesh enroll writes it.
func (e *testEnv) identity(name string) *apiclient.IdentityFile {
	e.t.Helper()
	return e.ctl.IdentityFile(e.t, name)
}

// sdkIdentity creates and enrolls an identity and returns it as New takes it.
func (e *testEnv) sdkIdentity(name string) *Identity {
	e.t.Helper()
	id, err := identityOf(e.identity(name))
	check(e.t, err)
	return id
}

// sdk returns a Client of a new identity, closed at the end of the test.
func (e *testEnv) sdk(name string) *Client {
	e.t.Helper()
	return e.sdkWith(name, func(*Options) {})
}

// sdkWith is sdk with the tests' options changed by set.
func (e *testEnv) sdkWith(name string, set func(*Options)) *Client {
	t := e.t
	t.Helper()
	opts := e.options(name)
	set(&opts)
	c, err := New(e.sdkIdentity(name), opts)
	check(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// options are the Options of the tests' Clients: logs into the test's log, short pings.
func (e *testEnv) options(name string) Options {
	return Options{
		Logger:         slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("sdk", name),
		ConnectTimeout: 5 * time.Second,
		RouterGrace:    200 * time.Millisecond,
		PingInterval:   100 * time.Millisecond,
	}
}

func (e *testEnv) service(name string, encrypted bool) *model.Service {
	e.t.Helper()
	s := &model.Service{Name: name, EncryptionRequired: encrypted}
	check(e.t, e.m.CreateService(s))
	return s
}

// --- A fake edge router ---

// fakeRouter is an edge router as edge.go describes it, enough to test the SDK: it is
// enrolled, connected to the controller (which then lists its SDK listener in sessions),
// and serves hello, ping, dial, bind and connect, checking API sessions and sessions with the
// model. Dials reach the binds of any fake router of the environment.
type fakeRouter struct {
	e       *testEnv
	name    string
	id      string
	tls     *tls.Config
	addr    string // the SDK listener's host:port
	channel *ctrlproto.Channel

	pingDelay  atomic.Int64  // delays ping answers (latency), in nanoseconds
	refuseDial atomic.Value  // string: a refusal code for every dial
	wrongHost  atomic.Bool   // name another host in dial responses
	wrongInit  atomic.Bool   // name another initiator in connect requests
	inBand     atomic.Bool   // drop the dialer's ClientHello from connect requests (the key exchange runs in-band)
	forgeHello atomic.Bool   // answer dials with a ServerHello of the router's making
	hostHellos atomic.Int32  // dial answers that carried the host's ServerHello
	hellos     atomic.Int32  // accepted hellos
	pings      atomic.Int32  // answered pings
	dials      atomic.Int32  // dial requests
	seen       *bytes.Buffer // what dialers sent over circuits through this router, up to 64 KiB
	seenMu     sync.Mutex

	mu      sync.Mutex
	ln      net.Listener
	clients map[*smux.Session]struct{}
}

// fakeTerm is a bind on a fake router.
type fakeTerm struct {
	id, serviceID, hostID, identity string
	router                          *fakeRouter
	client                          *smux.Session
}

// router enrolls and starts a fake edge router and connects it to the controller.
func (e *testEnv) router(name string) *fakeRouter {
	t := e.t
	t.Helper()
	er := ctrltest.EnrollRouter(t, e.m, name, "127.0.0.1")
	r := &fakeRouter{e: e, name: name, id: er.ID, clients: map[*smux.Session]struct{}{}, seen: &bytes.Buffer{},
		tls: &tls.Config{Certificates: []tls.Certificate{er.Server}, ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs: e.ctl.Ctrl.CA().Pool(), MinVersion: tls.VersionTLS13}}
	r.refuseDial.Store("")
	r.start()
	t.Cleanup(r.stop)

	conn, err := tls.Dial("tcp", e.ctl.CtrlAddr, &tls.Config{Certificates: []tls.Certificate{er.Client}, RootCAs: e.ctl.Ctrl.CA().Pool(),
		ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	check(t, err)
	r.channel = ctrlproto.New(context.Background(), conn, slog.New(slog.NewTextHandler(io.Discard, nil)), ctrlproto.Options{RequestTimeout: 5 * time.Second})
	r.channel.Start()
	t.Cleanup(func() { r.channel.Close() })
	reply, err := ctrlproto.Call[*ctrlproto.HelloReply](context.Background(), r.channel, &ctrlproto.Hello{
		RouterID: er.ID, Version: "test", Protocol: ctrlproto.ProtocolVersion, Hostname: "127.0.0.1",
		Listeners: []ctrlproto.Listener{{Binding: "edge", Address: "tls:" + r.addr}}})
	check(t, err)
	if !reply.Accepted {
		t.Fatalf("the controller refused fake router %s: %s", name, reply.Reason)
	}
	return r
}

// start listens on the router's edge address (a new one the first time).
func (r *fakeRouter) start() {
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	check(r.e.t, err)
	r.mu.Lock()
	r.ln, r.addr = ln, ln.Addr().String()
	r.mu.Unlock()
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(raw)
		}
	}()
}

// stop closes the SDK listener and every client connection, as a router that died.
func (r *fakeRouter) stop() {
	r.mu.Lock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	clients := r.clients
	r.clients = map[*smux.Session]struct{}{}
	r.mu.Unlock()
	for s := range clients {
		s.Close()
	}
}

func (r *fakeRouter) serve(raw net.Conn) {
	tc := tls.Server(raw, r.tls)
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		raw.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	leaf := tc.ConnectionState().PeerCertificates[0]
	mux, err := smux.Server(tc, edgeproto.Smux())
	if err != nil {
		tc.Close()
		return
	}
	defer mux.Close()
	r.mu.Lock()
	if r.ln == nil {
		r.mu.Unlock()
		return
	}
	r.clients[mux] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.clients, mux)
		r.mu.Unlock()
	}()

	ctl, err := mux.AcceptStream()
	if err != nil {
		return
	}
	var hello edgeproto.Request
	if err := edgeproto.Read(ctl, &hello); err != nil {
		return
	}
	if hello.Op != edgeproto.OpHello || hello.Version != edgeproto.ProtocolVersion {
		edgeproto.Write(ctl, edgeproto.Response{Code: edgeproto.CodeInvalid, Error: "expected hello"})
		return
	}
	_, ident, err := r.e.m.SessionByToken(hello.APISessionToken)
	if err != nil || ident.ID != leaf.Subject.CommonName {
		edgeproto.Write(ctl, edgeproto.Response{Code: edgeproto.CodeInvalidSession, Error: "unknown API session"})
		return
	}
	if err := edgeproto.Write(ctl, edgeproto.Response{OK: true, RouterID: r.id}); err != nil {
		return
	}
	r.hellos.Add(1)
	go r.serveControl(mux, ctl)
	for {
		st, err := mux.AcceptStream()
		if err != nil {
			return
		}
		go r.serveStream(mux, st, ident.ID)
	}
}

// serveControl answers pings, after pingDelay.
func (r *fakeRouter) serveControl(mux *smux.Session, ctl *smux.Stream) {
	defer mux.Close()
	for {
		var req edgeproto.Request
		if err := edgeproto.Read(ctl, &req); err != nil {
			return
		}
		if req.Op != edgeproto.OpPing {
			edgeproto.Write(ctl, edgeproto.Response{Code: edgeproto.CodeInvalid, Error: "expected ping"})
			return
		}
		time.Sleep(time.Duration(r.pingDelay.Load()))
		if err := edgeproto.Write(ctl, edgeproto.Response{OK: true, Seq: req.Seq}); err != nil {
			return
		}
		r.pings.Add(1)
	}
}

func (r *fakeRouter) serveStream(mux *smux.Session, st *smux.Stream, identityID string) {
	defer st.Close()
	var req edgeproto.Request
	if err := edgeproto.Read(st, &req); err != nil {
		return
	}
	switch req.Op {
	case edgeproto.OpDial:
		r.dials.Add(1)
		if code := r.refuseDial.Load().(string); code != "" {
			edgeproto.Write(st, edgeproto.Response{Code: code, Error: "refused by the test"})
			return
		}
		if _, err := r.e.m.DialSession(req.SessionToken, req.ServiceID, model.PolicyDial); err != nil {
			edgeproto.Write(st, edgeproto.Response{Code: edgeproto.CodeInvalidSession, Error: err.Error()})
			return
		}
		term, circuit := r.e.pick(req.ServiceID, req.Identity)
		if term == nil {
			edgeproto.Write(st, edgeproto.Response{Code: edgeproto.CodeFailed, Error: "no terminator"})
			return
		}
		initiator := identityID
		if r.wrongInit.Load() {
			initiator = "someone-else"
		}
		offer := req.E2EE
		if offer != nil && r.inBand.Load() {
			offer = &edgeproto.E2EEOffer{Zmesh: offer.Zmesh, ZitiKey: offer.ZitiKey}
		}
		host, resp, err := r.e.connect(term, edgeproto.Request{Op: edgeproto.OpConnect, TerminatorID: term.id, CircuitID: circuit, InitiatorID: initiator, E2EE: offer})
		if err != nil {
			edgeproto.Write(st, edgeproto.Response{Code: edgeproto.CodeFailed, Error: err.Error()})
			return
		}
		if !resp.OK {
			host.Close()
			edgeproto.Write(st, edgeproto.Response{Code: edgeproto.CodeFailed, Error: "the host refused: " + resp.Error})
			return
		}
		hostID := term.hostID
		if r.wrongHost.Load() {
			hostID = "someone-else"
		}
		hello := resp.HostHello
		if len(hello) > 0 {
			r.hostHellos.Add(1)
		}
		if r.forgeHello.Load() {
			hello = []byte{2, 0, 0, 1, 1}
		}
		if err := edgeproto.Write(st, edgeproto.Response{OK: true, CircuitID: circuit, HostID: hostID, HostZitiKey: resp.HostZitiKey, HostHello: hello}); err != nil {
			host.Close()
			return
		}
		r.pipe(st, host)
	case edgeproto.OpBind:
		if _, err := r.e.m.DialSession(req.SessionToken, req.ServiceID, model.PolicyBind); err != nil {
			edgeproto.Write(st, edgeproto.Response{Code: edgeproto.CodeInvalidSession, Error: err.Error()})
			return
		}
		term := &fakeTerm{id: r.e.newID("t"), serviceID: req.ServiceID, hostID: identityID, identity: req.Identity, router: r, client: mux}
		r.e.mu.Lock()
		r.e.terms[term.id] = term
		r.e.mu.Unlock()
		defer func() {
			r.e.mu.Lock()
			delete(r.e.terms, term.id)
			r.e.mu.Unlock()
		}()
		if err := edgeproto.Write(st, edgeproto.Response{OK: true, TerminatorID: term.id}); err != nil {
			return
		}
		io.Copy(io.Discard, st) // until the client closes the bind
	default:
		edgeproto.Write(st, edgeproto.Response{Code: edgeproto.CodeInvalid, Error: "unexpected " + string(req.Op)})
	}
}

// pipe carries a circuit between the dialer's and the host's streams, half-close included,
// and keeps the start of what the dialer sent.
func (r *fakeRouter) pipe(dialer, host *smux.Stream) {
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(host, io.TeeReader(dialer, writerFunc(func(p []byte) {
			r.seenMu.Lock()
			defer r.seenMu.Unlock()
			if r.seen.Len() < 64<<10 {
				r.seen.Write(p)
			}
		})))
		host.CloseWrite()
	})
	wg.Go(func() {
		io.Copy(dialer, host)
		dialer.CloseWrite()
	})
	wg.Wait()
	host.Close()
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func (r *fakeRouter) sawPlaintext(p []byte) bool {
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	return bytes.Contains(r.seen.Bytes(), p)
}

func (r *fakeRouter) terminators() int {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	n := 0
	for _, term := range r.e.terms {
		if term.router == r {
			n++
		}
	}
	return n
}

func (e *testEnv) newID(prefix string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	return fmt.Sprintf("%s%d", prefix, e.nextID)
}

// pick returns a terminator of the service (hosted under identity, if set) and a new
// circuit id.
func (e *testEnv) pick(serviceID, identity string) (*fakeTerm, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	for _, term := range e.terms {
		if term.serviceID == serviceID && (identity == "" || identity == term.identity) {
			return term, e.nextID
		}
	}
	return nil, 0
}

// connect opens a connect stream to the client hosting term and returns its answer.
func (e *testEnv) connect(term *fakeTerm, req edgeproto.Request) (*smux.Stream, *edgeproto.Response, error) {
	st, err := term.client.OpenStream()
	if err != nil {
		return nil, nil, err
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	var resp edgeproto.Response
	if err := edgeproto.Write(st, req); err != nil {
		st.Close()
		return nil, nil, err
	}
	if err := edgeproto.Read(st, &resp); err != nil {
		st.Close()
		return nil, nil, err
	}
	st.SetDeadline(time.Time{})
	return st, &resp, nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
