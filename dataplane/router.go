package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ops/health"
	"github.com/zmesh/zmesh/internal/ops/profile"
	"github.com/zmesh/zmesh/link"
	"github.com/zmesh/zmesh/tunnel"
	"github.com/zmesh/zmesh/xgress"
)

// Router is a running router: its control channel, links, forwarder, circuit ends and
// on-ramps. Build it with New and run it with Run.
type Router struct {
	cfg     *config.Router
	id      string
	version string
	log     *slog.Logger
	ident   link.Identity

	pool *xgress.Pool
	// clientBufs lends the TLS connections of edge and transport clients the buffers their
	// writes are gathered in (tlscork).
	clientBufs sync.Pool
	fw         *Forwarder
	links      *link.Registry
	ctrl       *ctrlClient
	// localCtrl, when set, connects to a controller in this process (ConnectLocally).
	localCtrl func(*x509.Certificate) (net.Conn, error)
	dials     *xgress.DialPool
	// ctrlOps is the rate-limited queue of requests to the controller (terminators.go).
	ctrlOps      chan *ctrlOp
	sdk          *sdkServer
	ziti         *zitiServer // OpenZiti's clients, on the SDK listeners
	sessionCache *sessionCache
	overlay      *routerOverlay // the tunnel's way into the overlay
	tproxy       *tunnel.TProxy // the tunnel in mode tproxy, if any; set before Run starts it
	tunnelHost   *tunnel.Host   // the tunnel's host mode in modes proxy and host
	ctrlOpsBusy  atomic.Int64   // workers running a request

	mu            sync.Mutex
	ends          map[uint64]*xgress.Endpoint // the circuit ends on this router
	dialer        *link.Dialer
	linkLns       []*link.Listener
	proxyAddr     map[string]string     // tunnel proxy service → listening address, once listening
	proxies       map[int]*tunnel.Proxy // the proxy tunnels, by their index in cfg.Listeners
	transportAddr []string              // where the transport listeners listen
	sdkAddr       []string              // where the SDK listeners listen
	ready         chan struct{}
	stopped       chan struct{}       // closed when Run's context ends
	stopErrs      []error             // what did not stop cleanly; guarded by mu
	requests      atomic.Uint64       // ids of circuit requests
	faults        []pendingFault      // faults the controller could not be told yet; guarded by mu
	trust         map[string][]string // current certificate fingerprints of other routers; guarded by mu
	trusted       sync.Cond           // signalled, with mu, when trust changes
	reportMu      sync.Mutex          // orders the link reports to the controller
	linksUp       int                 // links reported up and not yet down; guarded by mu
	linkGone      sync.Cond           // signalled, with mu, when a link is down

	renewal renewal         // of the certificates (renew.go)
	metrics *routerMetrics  // the registry (metrics.go)
	book    *circuitBook    // circuit events and per-service metrics (circuitbook.go)
	checks  *health.Checker // the health checks (health.go)
}

// New loads the router's identity files and builds the router.
func New(cfg *config.Router, version string, log *slog.Logger) (*Router, error) {
	ident, err := loadIdentity(cfg.Identity)
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, id: ident.RouterID, version: version, log: log.With("router", ident.RouterID), ident: ident,
		pool: xgress.NewPool(), fw: NewForwarder(), ends: map[uint64]*xgress.Endpoint{},
		proxyAddr: map[string]string{}, proxies: map[int]*tunnel.Proxy{}, ready: make(chan struct{}), stopped: make(chan struct{}),
		ctrlOps: make(chan *ctrlOp, cfg.Forwarder.RateLimitedQueueLength)}
	r.linkGone.L = &r.mu
	r.trusted.L = &r.mu
	r.trust = map[string][]string{}
	r.renewal.changed = make(chan struct{}, 1)
	r.ident.Authorize = r.authorizePeer
	r.sdk = newSDKServer(r)
	r.ziti = newZitiServer(r)
	r.overlay = newRouterOverlay(r)
	r.sessionCache = newSessionCache(func(apiSessions, sessions []string) {
		r.sdk.removed(apiSessions, sessions)
		r.ziti.removed(apiSessions, sessions)
	}, func(apis []ctrlproto.APISession) {
		r.sdk.certsChanged(apis)
		r.ziti.certsChanged(apis)
	})
	r.checks = newHealthChecks(r)
	r.book = newCircuitBook(cfg.Metrics, r.log)
	r.metrics = newRouterMetrics(r)
	if cfg.Edge != nil && cfg.Edge.DB != "" {
		if err := r.sessionCache.load(cfg.Edge.DB); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// loadIdentity reads the certificates and keys the identity section names.
func loadIdentity(id config.Identity) (link.Identity, error) {
	client, err := tls.LoadX509KeyPair(id.Cert, id.Key)
	if err != nil {
		return link.Identity{}, fmt.Errorf("identity.cert / identity.key: %w", err)
	}
	serverCert, serverKey := id.ServerCert, id.ServerKey
	if serverCert == "" {
		serverCert = id.Cert
	}
	if serverKey == "" {
		serverKey = id.Key
	}
	server, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		return link.Identity{}, fmt.Errorf("identity.server_cert / key: %w", err)
	}
	caPEM, err := os.ReadFile(id.CA)
	if err != nil {
		return link.Identity{}, fmt.Errorf("identity.ca: %w", err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(caPEM) {
		return link.Identity{}, fmt.Errorf("identity.ca: %s holds no PEM certificate", id.CA)
	}
	leaf, err := x509.ParseCertificate(client.Certificate[0])
	if err != nil {
		return link.Identity{}, fmt.Errorf("identity.cert: %w", err)
	}
	return link.Identity{RouterID: leaf.Subject.CommonName, Certs: link.NewCertificates(client, server), CAs: cas}, nil
}

// ID returns the router's id.
func (r *Router) ID() string { return r.id }

// Forwarder returns the router's forwarder.
func (r *Router) Forwarder() *Forwarder { return r.fw }

// Links returns the router's current links.
func (r *Router) Links() []*link.Link { return r.links.Links() }

// Ready is closed once the router's listeners are open.
func (r *Router) Ready() <-chan struct{} { return r.ready }

// ProxyAddress returns where the tunnel proxy listens for a service, once ready.
func (r *Router) ProxyAddress(service string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proxyAddr[service]
}

// Run runs the router until ctx ends, then closes every circuit end, link and listener.
func (r *Router) Run(ctx context.Context) error {
	// The links outlive ctx until every circuit end here is closed, so that the ends' Close
	// frames reach the other ends of their circuits even without a controller to unroute
	// them; then the links close gracefully, and Run returns once they are down.
	linkCtx, stopLinks := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLinks()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Profiling covers the whole run, shutdown included: it stops last.
	prof, err := r.startProfile()
	if err != nil {
		return err
	}
	defer func() {
		if err := prof.Stop(); err != nil {
			r.log.Error("profile not written", "err", err)
		}
	}()
	var trace *traceFile
	if t := r.cfg.Trace; t != nil {
		if trace, err = openTrace(t.Path, r.log); err != nil {
			return err
		}
		// After the channels are gone (Run waits for them), so that every frame is in.
		defer func() {
			if err := trace.close(); err != nil {
				r.log.Error("message trace not written", "err", err)
			}
		}()
	}
	r.links, err = link.NewRegistry(link.Options{
		Identity: r.ident, Handler: r, Pool: r.pool, Log: r.log,
		ProbeInterval:   r.cfg.Forwarder.LatencyProbeInterval,
		DialQueueLength: r.cfg.Forwarder.LinkDialQueueLength,
		DialWorkerCount: r.cfg.Forwarder.LinkDialWorkerCount,
		Events:          link.Events{Up: r.linkUp, Down: r.linkDown, Latency: r.linkLatency},
	})
	if err != nil {
		return err
	}
	for _, lc := range r.cfg.Link.Listeners {
		ln, err := link.Listen(linkCtx, lc, r.links)
		if err != nil {
			return fmt.Errorf("link listener %s: %w", lc.Bind, err)
		}
		r.linkLns = append(r.linkLns, ln)
	}
	if len(r.cfg.Link.Dialers) > 0 {
		if r.dialer, err = link.NewDialer(linkCtx, r.cfg.Link.Dialers, r.links); err != nil {
			return fmt.Errorf("link dialers: %w", err)
		}
	}
	fc := r.cfg.Forwarder
	r.dials = xgress.NewDialPool(ctx, xgress.DialPoolOptions{QueueLength: fc.XgressDialQueueLength, Workers: fc.XgressDialWorkerCount,
		Dwell: fc.XgressDialDwellTime})
	r.ctrl = newCtrlClient(r.cfg.Ctrl, r.ident.Certs, r.ident.CAs, r.hello, r.handlers, r.connected, r.log)
	r.ctrl.trace = trace
	if r.localCtrl != nil {
		r.ctrl.local = func() (net.Conn, error) { return r.localCtrl(r.ident.Certs.Client().Leaf) }
	}
	r.ctrl.loadEndpoints()

	var wg sync.WaitGroup
	// A part that cannot start stops those already started, and Run returns once they have
	// (a tproxy tunnel removes what it installed), never leaving them behind.
	abort := func(err error) error {
		cancel()
		wg.Wait()
		return err
	}
	if err := r.startTunnels(ctx, &wg); err != nil {
		return abort(err)
	}
	if err := r.startTransportListeners(ctx, &wg); err != nil {
		return abort(err)
	}
	if err := r.startSDKListeners(ctx, &wg); err != nil {
		return abort(err)
	}
	if err := r.startWeb(ctx, &wg); err != nil {
		return abort(err)
	}
	if e := r.cfg.Edge; e != nil && e.DB != "" {
		wg.Go(func() {
			r.sessionCache.saveLoop(ctx, e.DB, e.DBSaveInterval, func(err error) {
				r.log.Warn("cannot save the session cache", "err", err)
			})
		})
	}
	close(r.ready)
	wg.Go(func() { r.ctrl.connectLoop(ctx) })
	wg.Go(func() { r.idleLoop(ctx) })
	wg.Go(func() { r.faultLoop(ctx) })
	wg.Go(func() { r.metricsLoop(ctx) })
	wg.Go(func() { r.renewLoop(ctx) })
	// The first runs of checks without an initial delay are not waited for: the router is
	// up, and its checks say "not checked yet" until then.
	wg.Go(func() { r.checks.Start(ctx)() })
	if trace != nil {
		wg.Go(func() { trace.flushLoop(ctx) })
	}
	for range fc.RateLimitedWorkerCount {
		wg.Go(func() { r.rateLimitedLoop(ctx) })
	}
	<-ctx.Done()
	close(r.stopped)
	r.closeEnds("the router is shutting down")
	stopLinks()
	r.mu.Lock()
	for r.linksUp > 0 {
		r.linkGone.Wait()
	}
	r.mu.Unlock()
	wg.Wait()
	r.mu.Lock()
	err = errors.Join(r.stopErrs...)
	r.mu.Unlock()
	if err != nil {
		r.log.Error("router stopped, but not cleanly", "err", err)
		return err
	}
	r.log.Info("router stopped")
	return nil
}

// startProfile starts the profiles the profile section asks for.
func (r *Router) startProfile() (*profile.Profiler, error) {
	opts := profile.Options{Log: r.log}
	if c := r.cfg.Profile.CPU; c != nil {
		opts.CPUPath = c.Path
	}
	if m := r.cfg.Profile.Memory; m != nil {
		opts.MemoryPath, opts.MemoryInterval = m.Path, m.Interval
	}
	p, err := profile.Start(opts)
	if err != nil {
		return nil, fmt.Errorf("profile.cpu.path: %w", err) // the only profile that can fail to start
	}
	return p, nil
}

// terminatorIDs returns the ids of the binds' terminators, skipping binds whose terminator
// is not made yet; the caller holds the lock that guards binds.
func terminatorIDs[B any](binds map[string]B, terminatorID func(B) string) []string {
	var out []string
	for _, b := range binds {
		if id := terminatorID(b); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// hello describes the router to the controller.
func (r *Router) hello() *ctrlproto.Hello {
	h := &ctrlproto.Hello{RouterID: r.id, Version: r.version, Protocol: ctrlproto.ProtocolVersion}
	r.fw.Each(func(id uint64, _, _ xgress.Hop) { h.Circuits = append(h.Circuits, id) })
	h.Terminators = append(append(r.sdk.terminators(), r.ziti.terminators()...), r.overlay.terminators()...)
	h.Hostname, _ = os.Hostname()
	for _, ln := range r.linkLns {
		adv := ln.Advertise()
		transport, _, _ := strings.Cut(adv, ":")
		h.LinkListeners = append(h.LinkListeners, ctrlproto.LinkListener{Address: adv, Transport: transport, Groups: ln.Groups()})
	}
	for _, l := range r.cfg.Listeners {
		cl := ctrlproto.Listener{Binding: l.Binding}
		if l.Advertise != nil {
			cl.Address = l.Advertise.String()
		}
		h.Listeners = append(h.Listeners, cl)
	}
	return h
}

// handlers registers the router's side of the control protocol.
func (r *Router) handlers(ch *ctrlproto.Channel) {
	ch.HandleAsync(ctrlproto.TypeRoute, func(ctx context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		return r.route(ctx, m.(*ctrlproto.Route)), nil
	})
	ch.Handle(ctrlproto.TypeUnroute, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		u := m.(*ctrlproto.Unroute)
		r.endCircuit(u.CircuitID, u.Reason, false)
		return nil, nil
	})
	ch.Handle(ctrlproto.TypePeerState, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		p := m.(*ctrlproto.PeerState)
		switch {
		case p.Revoked:
			r.trustPeer(p.RouterID, nil)
		case len(p.Fingerprints) > 0:
			r.trustPeer(p.RouterID, p.Fingerprints)
		}
		if r.dialer != nil {
			r.dialer.SetPeerOnline(p.RouterID, p.Online)
		}
		return nil, nil
	})
	ch.Handle(ctrlproto.TypeSessionState, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		r.sessionCache.apply(ch, m.(*ctrlproto.SessionState))
		return nil, nil
	})
	go func() {
		<-ch.Done()
		r.sessionCache.forget(ch)
	}()
	ch.Handle(ctrlproto.TypeLinkDial, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		d := m.(*ctrlproto.LinkDial)
		if r.dialer == nil {
			return nil, nil
		}
		if err := r.dialer.Dial(link.Target{RouterID: d.PeerRouterID, Address: d.Address, Groups: d.Groups}); err != nil &&
			!errors.Is(err, link.ErrNoCommonGroup) {
			r.log.Warn("link dial refused", "peer", d.PeerRouterID, "address", d.Address, "err", err)
		}
		return nil, nil
	})
}

// closeEnds closes every circuit end on this router, telling the other ends.
func (r *Router) closeEnds(reason string) {
	r.mu.Lock()
	ends := make([]*xgress.Endpoint, 0, len(r.ends))
	for _, e := range r.ends {
		ends = append(ends, e)
	}
	r.mu.Unlock()
	for _, e := range ends {
		e.Close(reason)
	}
}
