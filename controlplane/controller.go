// Package controlplane is the zmesh controller: it opens the data directory (store, PKI),
// builds the model, and serves the client and management APIs over HTTPS and the routers'
// control channels until its context ends. It runs standalone (zmesh controller run) or
// inside a router process.
package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/controlplane/circuits"
	"github.com/zmesh/zmesh/controlplane/cluster"
	"github.com/zmesh/zmesh/controlplane/metrics"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/routers"
	"github.com/zmesh/zmesh/controlplane/sessionsync"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ops/health"
	"github.com/zmesh/zmesh/internal/ops/web"
)

// Build describes the binary, for the version endpoint.
type Build struct {
	Version, Revision, BuildDate string
}

// Controller is an open controller: its data directory is locked and loaded.
type Controller struct {
	cfg     *config.Controller
	log     *slog.Logger
	lock    *os.File
	store   *store.Store
	ca      *pki.CA
	model   *model.Model
	api     *api.Server
	routers *routers.Server
	// circuits and mesh serve the routers' circuit and link messages.
	circuits *circuits.Service
	mesh     *circuits.Mesh
	// sessions keeps the connected routers' copies of the API sessions and sessions current.
	sessions *sessionsync.Syncer
	// metrics is the controller's Prometheus registry, fed by the API.
	metrics *metrics.Metrics
	// ctrlServing is the control channel's address while it accepts routers.
	ctrlServing atomic.Pointer[string]
	// webAddrs are the bound addresses of the web listeners, by name, once serving.
	webMu    sync.Mutex
	webAddrs map[string][]net.Addr
	cert     tls.Certificate
	// webCert is what the web listeners present: the API's certificate, re-read from its
	// files by ReloadWebCertificate.
	webCert *web.CertificateHolder
	closed  bool
	// snapshotMu makes snapshots one at a time, so that their files stay bounded.
	snapshotMu sync.Mutex
	// node is the raft node with a cluster section (nil without), set once by Open.
	node *cluster.Node
	// members is the replicated collection of the cluster members' records.
	members *store.Collection[ControllerRecord]
	// initMu makes cluster inits one at a time, and Close wait for the one under way.
	initMu sync.Mutex
	// endpointsSent is the list of the members' endpoints the routers were last told.
	endpointsMu   sync.Mutex
	endpointsSent []string
	// started is when Open ran.
	started time.Time
}

// Open locks and loads the data directory, creating the store, the CA, the API's server
// certificate and the default administrator on the first start.
func Open(cfg *config.Controller, log *slog.Logger, build Build) (_ *Controller, err error) {
	c := &Controller{cfg: cfg, log: log, started: time.Now(), members: newControllers()}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if c.lock, err = lockDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if c.ca, err = pki.Open(filepath.Join(cfg.DataDir, "pki"), nil); err != nil {
		return nil, err
	}
	if c.cert, err = c.ca.ServerCert(filepath.Join(cfg.DataDir, "pki"), apiHosts(cfg)); err != nil {
		return nil, err
	}
	c.webCert = web.NewCertificateHolder(c.cert)
	key, ok := c.cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the API server key in %s is %T; enrollment tokens need an ECDSA key", filepath.Join(cfg.DataDir, "pki"), c.cert.PrivateKey)
	}
	if c.store, err = store.Open(filepath.Join(cfg.DataDir, "db"), log, store.Options{}); err != nil {
		return nil, err
	}
	jwksRoots, err := jwksRoots(cfg.ExtJWT.CABundle)
	if err != nil {
		return nil, err
	}
	c.model = model.New(c.store, c.ca, log, model.Options{
		SessionTimeout:       cfg.SessionTimeout,
		SessionMaxLifetime:   cfg.SessionMaxLifetime,
		RouterCertValidity:   cfg.Certificates.Routers,
		IdentityCertValidity: cfg.Certificates.Identities,
		Issuer:               "https://" + cfg.API.Advertise,
		SigningKey:           key,
		SigningKID:           certid.Fingerprint(c.cert.Leaf),
		JWKSRoots:            jwksRoots,
	})
	c.sessions = sessionsync.New(c.model, log, sessionsync.Options{})
	if cfg.Cluster != nil {
		// A member writes nothing before it knows it is one: the store's records, the
		// default administrator's included, come from the cluster (ClusterInit creates
		// them on the first member).
		if err := c.startNode(); err != nil {
			return nil, err
		}
	} else {
		if err := c.model.EnsureBuiltinConfigTypes(); err != nil {
			return nil, fmt.Errorf("built-in config types: %w", err)
		}
		// Open has no context: nothing else hashes passwords before the API serves.
		created, err := c.model.EnsureDefaultAdmin(context.Background(), cfg.Admin.Username, string(cfg.Admin.Password))
		if err != nil {
			return nil, fmt.Errorf("default administrator: %w", err)
		}
		if created {
			log.Info("created the default administrator", "username", cfg.Admin.Username)
		}
	}
	pkiDir := filepath.Join(cfg.DataDir, "pki")
	ctrlCert, err := c.ca.ServerCertAt(filepath.Join(pkiDir, ctrlCertFile), filepath.Join(pkiDir, ctrlKeyFile), ctrlHosts(cfg))
	if err != nil {
		return nil, fmt.Errorf("control channel server certificate: %w", err)
	}
	c.routers = routers.New(routers.Config{
		Model: c.model, CA: c.ca, Cert: ctrlCert,
		ControllerID: memberID(cfg), Endpoints: c.ctrlEndpoints, ClientAPI: cfg.API.Advertise, Log: log,
		Handlers: func(id string, ch *ctrlproto.Channel) { c.circuits.Register(id, ch, c.mesh) },
		OnConnect: func(rt *routers.Router) {
			c.sessions.Connected(rt.ID, rt.Channel) // does not block: the state is sent by its own goroutine
			c.circuits.Adopt(rt.ID, rt.Hello.Circuits)
			c.circuits.PruneTerminators(rt.ID, rt.Hello.Terminators, rt.Since)
			c.mesh.Connected(rt)
		},
		OnDisconnect: func(rt *routers.Router) { c.mesh.Disconnected(rt) },
		OnExtended:   func(rt *routers.Router) { c.mesh.Extended(rt) },
	})
	graph := paths.NewGraph()
	c.circuits = circuits.New(c.model, graph, c.routers, log)
	c.mesh = circuits.NewMesh(graph, c.routers, log)
	c.metrics = metrics.New(metrics.Sources{
		Counts: c.store.Counts, StoreSizes: c.store.Sizes, ConnectedRouters: c.routers.Connected,
		Cluster: c.clusterMetrics,
	})
	c.api = api.New(c.model, log, api.Info{
		Version: build.Version, Revision: build.Revision, BuildDate: build.BuildDate,
		Advertise: cfg.API.Advertise, ServerCert: c.cert.Leaf, Started: c.started, Routers: c.routers, Observer: c.metrics,
		Backup: c.store.Backup, Verify: c.store.Verify, Snapshot: c.snapshot, Fabric: fabricView{c},
		Controllers: c.controllerList,
	})
	return c, nil
}

// The control channel's server certificate and key, in the PKI directory.
const (
	ctrlCertFile = "ctrl.cert"
	ctrlKeyFile  = "ctrl.key"
)

// followMembersEvery is how often a member checks the members' endpoints and its own record.
const followMembersEvery = 2 * time.Second

// controllerID is a single controller's id, as the API's controller list shows it.
const controllerID = "ctrl1"

// memberID is the controller's id: its cluster member id, or controllerID.
func memberID(cfg *config.Controller) string {
	if cfg.Cluster != nil {
		return cfg.Cluster.ID
	}
	return controllerID
}

// ctrlEndpoint is the control channel address routers are told to use: ctrl.listen, or,
// when it listens on every address, the API's advertised host with ctrl.listen's port.
func ctrlEndpoint(cfg *config.Controller) string {
	a := cfg.Ctrl.Listen
	if ip := net.ParseIP(a.Host); ip != nil && ip.IsUnspecified() {
		if host, _, err := net.SplitHostPort(cfg.API.Advertise); err == nil && host != "" {
			a.Host = host
		}
	}
	return a.String()
}

// ctrlHosts are the names the control channel's certificate covers: ctrl.listen's host
// when it is a specific address, and the API's advertised host.
func ctrlHosts(cfg *config.Controller) []string {
	hosts := []string{}
	if ip := net.ParseIP(cfg.Ctrl.Listen.Host); ip == nil || !ip.IsUnspecified() {
		hosts = append(hosts, cfg.Ctrl.Listen.Host)
	}
	if host, _, err := net.SplitHostPort(cfg.API.Advertise); err == nil && host != "" {
		hosts = append(hosts, host)
	}
	return hosts
}

// apiHosts are the names the API's server certificate covers: the advertised host and the
// listen host when it is a specific address; likewise for the web listeners' bind points,
// which serve with the same certificate.
func apiHosts(cfg *config.Controller) []string {
	var hosts []string
	hostPorts := []string{cfg.API.Advertise, cfg.API.Listen}
	if cfg.Cluster != nil {
		// The members dial the raft address and check it against the certificate.
		hostPorts = append(hostPorts, cfg.Cluster.Advertise, cfg.Cluster.Listen)
	}
	for _, wl := range cfg.Web {
		for _, bp := range wl.BindPoints {
			hostPorts = append(hostPorts, bp.Address, bp.Interface)
		}
	}
	for _, hp := range hostPorts {
		host, _, err := net.SplitHostPort(hp)
		if err != nil || host == "" {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		if !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	return hosts
}

// lockDir takes an exclusive lock on the data directory, so that two controllers never
// share one store.
// ErrDataDirInUse: another controller holds the data directory's lock.
var ErrDataDirInUse = errors.New("in use by another zmesh controller")

// DataDirInUseError is the error of a data directory whose lock another process holds: PID
// is the process that wrote the lock file last (0 when it could not be read). It wraps
// ErrDataDirInUse.
type DataDirInUseError struct {
	Dir string
	PID int
}

func (e *DataDirInUseError) Error() string {
	holder := "an unknown process"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%v: data directory %s, by %s; stop it or choose another dataDir", ErrDataDirInUse, e.Dir, holder)
}

func (e *DataDirInUseError) Unwrap() error { return ErrDataDirInUse }

func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "controller.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(holder)))
			return nil, &DataDirInUseError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// Model returns the controller's model.
func (c *Controller) Model() *model.Model { return c.model }

// CA returns the controller's certificate authority.
func (c *Controller) CA() *pki.CA { return c.ca }

// Handler returns the HTTP handler of both APIs, and of the cluster members' own path.
func (c *Controller) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == selfPath {
			c.serveSelf(w, r)
			return
		}
		c.api.ServeHTTP(w, r)
	})
}

// TLSConfig is the API listener's TLS configuration: the server certificate, and client
// certificates requested (not required) for certificate authentication and enrollment.
func (c *Controller) TLSConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequestClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// Run serves the API on api.listen, the routers' control channels on ctrl.listen and the
// web listeners of the configuration until ctx ends, then shuts down and closes the store.
// ready, when not nil, receives the API listener's address once everything accepts
// connections.
func (c *Controller) Run(ctx context.Context, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", c.cfg.API.Listen)
	if err != nil {
		c.Close()
		return fmt.Errorf("listen on api.listen %s: %w", c.cfg.API.Listen, err)
	}
	ctrlLn, err := net.Listen("tcp", c.cfg.Ctrl.Listen.HostPort())
	if err != nil {
		ln.Close()
		c.Close()
		return fmt.Errorf("listen on ctrl.listen %s: %w", c.cfg.Ctrl.Listen, err)
	}
	return c.ServeWithCtrl(ctx, ln, ctrlLn, ready)
}

// Serve serves the API on a listener the caller opened, without the control channel.
func (c *Controller) Serve(ctx context.Context, ln net.Listener, ready func(net.Addr)) error {
	return c.ServeWithCtrl(ctx, ln, nil, ready)
}

// ServeWithCtrl is Run on listeners the caller opened: the API on ln and, when ctrl is not
// nil, the routers' control channels (TLS 1.3 with client certificates) on ctrl. The web
// listeners of the configuration (health checks, metrics) are opened here.
func (c *Controller) ServeWithCtrl(ctx context.Context, ln, ctrl net.Listener, ready func(net.Addr)) error {
	defer c.Close()
	srv := &http.Server{
		Handler:           c.Handler(),
		TLSConfig:         c.TLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
	}
	bg, stop := context.WithCancel(ctx)
	defer stop()
	go c.store.RunGC(bg, 10*time.Minute)
	go c.store.RunVerify(bg, time.Minute) // about 5 ms per 20,000 records
	go c.expireLoop(bg)
	sessionsDone := make(chan struct{})
	go func() { c.sessions.Run(bg); close(sessionsDone) }()
	// The session state senders stop before the store closes.
	defer func() { stop(); <-sessionsDone }()

	ctrlErr := make(chan error, 1)
	if ctrl != nil {
		// The listener is bound already: routers' connections wait in its backlog until
		// Serve accepts them, so it counts as serving from now until Serve returns.
		addr := ctrl.Addr().String()
		c.ctrlServing.Store(&addr)
		go func() {
			err := c.routers.Serve(bg, ctrl)
			c.ctrlServing.Store(nil)
			ctrlErr <- err
		}()
		// The control channels end before the store closes.
		defer func() { stop(); <-ctrlErr }()
	}
	memberErr := make(chan error, 1)
	if c.node != nil {
		stopSock, err := c.serveClusterSocket(bg)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopSock()
		followDone := make(chan struct{})
		go func() { c.followMembers(bg, followMembersEvery); close(followDone) }()
		go func() {
			if err := c.watchNode(bg); err != nil {
				memberErr <- err
			}
		}()
		if _, _, err := c.joined(); errors.Is(err, ErrNotMember) {
			c.log.Warn("not in a cluster yet: writes are refused until zmesh controller cluster init runs on this controller, or a member adds it with zmesh controller cluster add",
				"member", c.node.ID(), "api", c.cfg.API.Advertise)
		}
		// It reads the store: it ends before the store closes.
		defer func() { stop(); <-followDone }()
	}
	checks := health.New(c.healthChecks(ctrl != nil)...)
	checksDone := checks.Start(bg)
	defer func() { stop(); checksDone() }()
	webSrv, err := c.openWeb(checks)
	if err != nil {
		ln.Close()
		return err
	}
	webErr := make(chan error, 1)
	go func() { webErr <- webSrv.Serve(bg) }()
	// The web listeners stop before the store closes: a scrape reads it.
	defer func() { stop(); <-webErr }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, srv.TLSConfig)) }()
	c.log.Info("controller API listening", "listen", ln.Addr().String(), "advertise", c.cfg.API.Advertise)
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("API server: %w", err)
	case err := <-webErr:
		webErr <- err // for the deferred wait
		if ctx.Err() == nil {
			srv.Close()
			return err
		}
	case err := <-ctrlErr:
		ctrlErr <- err // for the deferred wait
		if ctx.Err() == nil {
			srv.Close()
			return err
		}
	case err := <-memberErr:
		// The member stopped following the log: the controller stops too, so that its
		// supervisor restarts it and it replays the log from its store's applied index.
		srv.Close()
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		srv.Close()
	}
	c.log.Info("controller stopped")
	return nil
}

// Sweeper periods: idle API sessions end within expireEvery of their timeout, sessions
// whose time-based posture (MFA timeouts) ran out within postureEvery.
const (
	expireEvery  = time.Minute
	postureEvery = 15 * time.Second
)

// expireLoop deletes idle API sessions, and those past their maximum lifetime, every
// expireEvery and ends the sessions whose posture stopped holding every postureEvery.
func (c *Controller) expireLoop(ctx context.Context) {
	t := time.NewTicker(postureEvery)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if tick%int(expireEvery/postureEvery) == 0 {
				if n, err := c.model.ExpireSessions(); err != nil {
					c.log.Error("expire API sessions", "err", err)
				} else if n > 0 {
					c.log.Debug("expired API sessions", "count", n)
				}
			}
			if n, err := c.model.SweepPosture(); err != nil {
				c.log.Error("end sessions whose posture no longer holds", "err", err)
			} else if n > 0 {
				c.log.Info("ended sessions whose posture no longer holds", "count", n)
			}
		}
	}
}

// Close closes the store and releases the data directory. It is safe to call twice.
func (c *Controller) Close() error {
	// A cluster init under way ends first: it writes to the store.
	c.initMu.Lock()
	defer c.initMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	// The raft node stops before the store it applies to closes.
	if c.node != nil {
		err = c.node.Shutdown()
	}
	if c.store != nil {
		if cerr := c.store.Close(); err == nil {
			err = cerr
		}
	}
	if c.lock != nil {
		c.lock.Close()
	}
	return err
}

// Routers returns the registry of the routers connected to the controller.
func (c *Controller) Routers() *routers.Server { return c.routers }

// Metrics returns the controller's Prometheus registry and instruments.
func (c *Controller) Metrics() *metrics.Metrics { return c.metrics }

// Links returns the router links that circuits are routed over: those both of their routers
// reported up.
func (c *Controller) Links() []paths.Link { return c.mesh.Links() }

// jwksRoots are the CAs external JWT signers' https key-set endpoints are trusted under: the
// system's roots plus the certificates of the PEM file bundle (extJwt.caBundle); nil (the
// system's roots alone) when bundle is "".
func jwksRoots(bundle string) (*x509.CertPool, error) {
	if bundle == "" {
		return nil, nil
	}
	data, err := os.ReadFile(bundle)
	if err != nil {
		return nil, fmt.Errorf("extJwt.caBundle: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system roots on this host: the bundle alone
	}
	certs, err := pki.ParseCertificatesPEM(data)
	if err != nil {
		return nil, fmt.Errorf("extJwt.caBundle %s: %w", bundle, err)
	}
	for _, cert := range certs {
		pool.AddCert(cert)
	}
	return pool, nil
}
