package link

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/xgress"
)

// testCA is a network CA made with the project's PKI, as the controller makes it.
type testCA struct{ ca *testutil.CA }

func newCA(t testing.TB) *testCA {
	t.Helper()
	return &testCA{testutil.NewCA(t)}
}

// identity issues a router's client and server certificates with CommonName id, the way
// controlplane/model issueRouterCerts does.
func (c *testCA) identity(t testing.TB, id string) Identity {
	t.Helper()
	return Identity{
		RouterID: id,
		Certs:    NewCertificates(c.ca.Cert(t, id, pki.Client), c.ca.Cert(t, id, pki.Server)),
		CAs:      c.ca.Pool(),
	}
}

// handlerFunc adapts a function to Handler.
type handlerFunc func(l *Link, f *xgress.Frame)

func (h handlerFunc) HandleFrame(l *Link, f *xgress.Frame) { h(l, f) }

// releaseAll is a handler that drops every frame.
var releaseAll = handlerFunc(func(_ *Link, f *xgress.Frame) { f.Release() })

type downEvent struct {
	l   *Link
	err error
}

// node is one router of a test: its registry and what its events reported.
type node struct {
	id     string
	reg    *Registry
	ctx    context.Context
	cancel context.CancelFunc // stops the node's listeners, dialers and links
	up     chan *Link
	down   chan downEvent
}

// newNode makes router id with identity from ca; edit may change the options.
func newNode(t testing.TB, ca *testCA, id string, h Handler, edit func(*Options)) *node {
	t.Helper()
	return newNodeWith(t, ca.identity(t, id), h, edit)
}

func newNodeWith(t testing.TB, ident Identity, h Handler, edit func(*Options)) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := &node{id: ident.RouterID, ctx: ctx, cancel: cancel, up: make(chan *Link, 64), down: make(chan downEvent, 64)}
	opts := Options{
		Identity: ident,
		Handler:  h,
		Events: Events{
			Up:   func(l *Link) { n.up <- l },
			Down: func(l *Link, err error) { n.down <- downEvent{l, err} },
		},
		Log:              testLog(t),
		HandshakeTimeout: 5 * time.Second,
		// The pairing tests open several TLS connections one after another, which on a loaded
		// 2-core machine with the race detector takes seconds: the production default.
		PairTimeout: DefaultPairTimeout,
	}
	if edit != nil {
		edit(&opts)
	}
	reg, err := NewRegistry(opts)
	if err != nil {
		t.Fatalf("NewRegistry(%s): %v", ident.RouterID, err)
	}
	n.reg = reg
	return n
}

// testLog logs to stderr when ZMESH_TEST_LOG is set.
func testLog(t testing.TB) *slog.Logger {
	if os.Getenv("ZMESH_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

// listen starts a link listener of n on 127.0.0.1, port 0 unless port says otherwise.
func (n *node) listen(t testing.TB, transport string, port int, groups ...string) *Listener {
	t.Helper()
	if len(groups) == 0 {
		groups = []string{"default"}
	}
	bind := config.Address{Transport: transport, Host: "127.0.0.1", Port: port}
	ln, err := Listen(n.ctx, config.LinkListener{Binding: "transport", Bind: bind, Advertise: bind, Groups: groups}, n.reg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	return ln
}

// targetOf is the Target that names ln of router id.
func targetOf(id string, ln *Listener) Target {
	a := ln.Addr()
	tr := config.TransportTLS
	if _, ok := a.(*net.UDPAddr); ok {
		tr = config.TransportQUIC
	}
	return Target{RouterID: id, Address: tr + ":" + a.String(), Groups: ln.Groups()}
}

// dialerConfig is a link dialer with fast backoffs for tests.
func dialerConfig(split bool, groups ...string) config.LinkDialer {
	if len(groups) == 0 {
		groups = []string{"default"}
	}
	fast := config.Backoff{
		MinRetryInterval:   10 * time.Millisecond,
		MaxRetryInterval:   50 * time.Millisecond,
		RetryBackoffFactor: 2,
	}
	return config.LinkDialer{Binding: "transport", Groups: groups, Split: split, HealthyDialBackoff: fast, UnhealthyDialBackoff: fast}
}

// newDialer starts a dialer of n with the given link dialers (default: one split dialer).
func (n *node) newDialer(t testing.TB, dialers ...config.LinkDialer) *Dialer {
	t.Helper()
	if len(dialers) == 0 {
		dialers = []config.LinkDialer{dialerConfig(true)}
	}
	d, err := NewDialer(n.ctx, dialers, n.reg)
	if err != nil {
		t.Fatalf("NewDialer: %v", err)
	}
	return d
}

// dialOnce dials tg once, without queue or retries, and returns the registered link.
func (n *node) dialOnce(t testing.TB, tg Target, split bool) (*Link, error) {
	t.Helper()
	d := n.newDialer(t, dialerConfig(split))
	addr, err := config.ParseAddress(tg.Address, config.TransportTLS, config.TransportQUIC)
	if err != nil {
		t.Fatal(err)
	}
	return d.dial(tg.RouterID, addr, dialerConfig(split))
}

// connect has a dial b's listener ln once and returns both ends of the link.
func connect(t testing.TB, a, b *node, ln *Listener, split bool) (*Link, *Link) {
	t.Helper()
	la, err := a.dialOnce(t, targetOf(b.id, ln), split)
	if err != nil {
		t.Fatalf("%s dials %s: %v", a.id, b.id, err)
	}
	if got := <-a.up; got != la {
		t.Fatalf("%s reported link %s up, want %s", a.id, got.ID(), la.ID())
	}
	lb := b.waitUp(t)
	if lb.ID() != la.ID() {
		t.Fatalf("link ids differ: %s dialed %s, %s accepted %s", a.id, la.ID(), b.id, lb.ID())
	}
	return la, lb
}

func (n *node) waitUp(t testing.TB) *Link {
	t.Helper()
	select {
	case l := <-n.up:
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no link came up", n.id)
		return nil
	}
}

func (n *node) waitDown(t testing.TB) downEvent {
	t.Helper()
	select {
	case ev := <-n.down:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no link went down", n.id)
		return downEvent{}
	}
}

// tcpOf returns the TCP connection under connection i of a tls link.
func tcpOf(t testing.TB, l *Link, i int) *net.TCPConn {
	t.Helper()
	ts, ok := l.conns[i].s.(tlsStream)
	if !ok {
		t.Fatalf("connection %d of link %s is a %T, not TLS", i, l.ID(), l.conns[i].s)
	}
	return ts.cc.TCP()
}

// frame returns a frame of pool p.
func frame(p *xgress.Pool, typ xgress.Type, circuit, seq uint64, data []byte) *xgress.Frame {
	f := p.Get(len(data))
	f.Type, f.Circuit, f.Seq = typ, circuit, seq
	if err := f.SetData(data); err != nil {
		panic(err)
	}
	return f
}
