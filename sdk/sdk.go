// Package sdk embeds a zmesh network in a Go program the way package net reaches a TCP/IP
// one: a Client joins the network as an enrolled identity, Dial (or DialContext, which plugs
// into http.Transport) opens a *Conn to a service by name, and Listen hosts a service
// through a *Listener that http.Serve and any net.Listener user can take. Connections are
// net.Conns that also half-close (Conn.CloseWrite), end-to-end encrypted when the service
// requires it. The API holds only its own types and the standard library's.
//
//	client, err := sdk.Load("app.json", sdk.Options{}) // the file zmesh enroll wrote
//	...
//	defer client.Close()
//	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialContext}}
//	resp, err := hc.Get("http://myservice/") // the host names the service
//
// A Client authenticates to the controller with the identity's certificate on first use,
// and again, once, when the controller answers 401. It lists the services the identity may
// use (with their configs) and caches its Dial and Bind sessions per service; one that a
// router refuses as INVALID_SESSION is replaced once. Everything it opens lives until its
// Close.
//
// Controllers. An Identity may name several controllers, the members of a cluster
// (Identity.Controllers; an identity file's ztAPIs). Each controller call goes to the one that
// answered last and moves to the next when it cannot be reached or answers 503; a POST whose
// connection broke after it was sent is not sent again elsewhere. The API session is kept: it
// is valid on every member. After authenticating and after such a move the Client reads the
// members the controller lists (GET /controllers) and adds them to the ones it tries.
//
// Routers. A session lists the edge routers that may carry its service. On first need the
// Client connects to all of them in parallel (each bounded by Options.ConnectTimeout), over
// one multiplexed TLS connection each, waits for all, or for Options.RouterGrace after the
// first success, and uses the connected ones in order of the round trip of their latest
// ping (one at connect, then every Options.PingInterval). A dial or bind that fails on one
// router (its stream fails, or it refuses with anything but INVALID; a failed end-to-end
// key exchange is not retried) is tried on the next. A router connection that dies (failed
// ping, closed session) is dropped and made again on the next need; a failed connection
// attempt is repeated at most once per second.
//
// Hosting. A Listener binds on up to ListenOptions.MaxBinds routers (2 by default: a second
// terminator keeps the service reachable while one router restarts), fastest first. When a
// bind ends, because its router connection died or the router closed it, the Listener binds
// again, retrying with a backoff from 0.5 s to 15 s while it has fewer binds than wanted.
//
// End-to-end encryption. A Dial of a service that requires it offers zmesh's scheme, and
// OpenZiti's when the service's OpenZitiEncryption allows it; the hosting end chooses. Two
// zmesh ends use zmesh's (keys signed by both identities' certificates, bound to the
// circuit); a zmesh end whose other end is an OpenZiti client uses OpenZiti's, whose
// unsigned keys the controller relays, only on a service that allows it: a Listener takes it
// when the dialer offered only that, and a Dial fails when the answer carries a host key it
// did not offer. Conn.Scheme tells which.
//
// Half-close. Conn.CloseWrite sends the stream's FIN (a Conn with zmesh's scheme first sends
// its authenticated close-write record): the other end reads EOF and can still write back.
//
// Certificate renewal. A Client made by Load renews the identity's certificate through the
// controller's extend and extend-verify operations once Options.RenewAt of its lifetime
// has passed (from its NotBefore), and at once when its API session says
// isCertExtendRequested (it asks every Options.RenewCheck while it has one), with a new key
// when the session says isCertKeyRollRequested. Only a certificate the network issued is
// renewed, and only when the file holds its certificate and key itself (pem:); one naming
// other files is not, as one atomic write could not replace both. A Client made by New
// does not renew: the previous certificate stops authenticating at extend-verify, so a
// certificate renewed only in memory would leave the caller's copy useless at its next
// start. One renewal: extend (a CSR of the current key, or of a new one), check that the
// answer is a client certificate of the identity for that key from the network's CAs,
// rewrite the identity file atomically (the new certificate, the new key, every other field
// and the file's mode as they were), present the new certificate in every later router
// connection, controller call and end-to-end key exchange, extend-verify, and authenticate
// again. The controller admits both certificates from extend until extend-verify and only
// the new one after, so the file always holds one that authenticates; a file left with an
// extension that was never verified (the program stopped in between) is verified by its
// next Client's first check. A failed attempt is retried after 5 s, doubling up to 10 min.
// After extend-verify the API sessions opened with the previous certificate go on when the
// key was kept, with their router connections, Listeners and Conns; after a key roll the
// controller ends them, and routers the connections made in them: Listeners bind again, and
// the Conns open then end.
package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/e2ee"
)

// Defaults of Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultRouterGrace    = 250 * time.Millisecond
	DefaultPingInterval   = 5 * time.Second
	DefaultSDKInfo        = "zmesh-sdk-go"
	DefaultRenewAt        = 0.5
	DefaultRenewCheck     = time.Minute
)

// ErrClosed is returned by the operations of a closed Client.
var ErrClosed = errors.New("sdk: client closed")

// ErrNoService is wrapped by the errors about a service the identity may not use or that
// does not exist.
var ErrNoService = errors.New("sdk: no such service")

// Options tune a Client; zero fields take the defaults.
type Options struct {
	// Logger receives the Client's logs; slog.Default() when nil.
	Logger *slog.Logger
	// ConnectTimeout bounds one connection to an edge router: TCP, TLS, hello and the first
	// latency ping (DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// RouterGrace is how long, once one of a session's routers is connected, the Client
	// waits for the session's other routers before it chooses the fastest among those
	// connected (DefaultRouterGrace). The others keep connecting in the background.
	RouterGrace time.Duration
	// PingInterval is the period of the latency pings on each router's control stream
	// (DefaultPingInterval). A ping unanswered for twice this (at least 5 s) ends the
	// router connection.
	PingInterval time.Duration
	// SDKInfo is sent to routers in hello (DefaultSDKInfo).
	SDKInfo string
	// RenewAt is the fraction of its certificate's lifetime after which a Client made by
	// Load renews the identity's certificate (DefaultRenewAt); it must be below 1, and a
	// negative value turns renewal off. See "Certificate renewal" in the package doc.
	RenewAt float64
	// RenewCheck is how often a Client made by Load asks the controller, while it has an API
	// session, whether an administrator requested an early renewal (DefaultRenewCheck).
	RenewCheck time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.RouterGrace <= 0 {
		o.RouterGrace = DefaultRouterGrace
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.SDKInfo == "" {
		o.SDKInfo = DefaultSDKInfo
	}
	if o.RenewAt == 0 {
		o.RenewAt = DefaultRenewAt
	}
	if o.RenewCheck <= 0 {
		o.RenewCheck = DefaultRenewCheck
	}
	return o
}

// pingTimeout is how long a ping may stay unanswered.
func (o Options) pingTimeout() time.Duration {
	return max(2*o.PingInterval, 5*time.Second)
}

// Client is an identity's connection to a zmesh network: its API session with the
// controller, its sessions, router connections and listeners. It is safe for concurrent use.
type Client struct {
	opts  Options
	log   *slog.Logger
	creds atomic.Pointer[credentials] // the identity's current certificate; renewal replaces it
	roots *x509.CertPool              // the network's CAs
	id    string                      // the identity's id: its certificate's common name
	ctrls []string                    // the controllers' URLs, https://host:port, in order
	path  string                      // the identity file, "" for an Identity given to New
	// renewal is the state of certificate renewal; the renewal loop's own.
	renewal renewal
	// chains caches the peers' chains the end-to-end key exchanges verified against roots;
	// sessions keeps their resumption tickets (the dials' by service, and those this
	// identity's listeners issued).
	chains  *e2ee.ChainCache
	tickets *e2ee.Tickets
	// bufs lends the TLS connections to edge routers the buffers their writes are gathered
	// in (tlscork).
	bufs sync.Pool

	life   context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines, waited for by Close
	auth   chan struct{}  // one authentication at a time (a semaphore that honors contexts)

	mu        sync.Mutex
	closed    bool
	token     string                       // the current API session token, "" before the first authentication
	services  map[string]Service           // by name, as last listed
	sessions  map[sessionKey]*sessionEntry // Dial and Bind sessions of the current API session
	routers   map[string]*routerEntry      // router connections by URL, the ones new needs use
	conns     map[*routerConn]struct{}     // every open router connection
	listeners map[*Listener]struct{}       // open listeners
}

// credentials are the identity's certificate as a Client uses it at one time.
type credentials struct {
	cert  tls.Certificate     // the certificate chain and key
	chain []*x509.Certificate // cert's chain, parsed, leaf first
	api   *apiclient.Client   // template of controller calls presenting cert; its Token stays empty
}

// Load reads the identity file at path (what zmesh enroll writes) and returns its Client.
// The Client renews the identity's certificate and rewrites the file with it (see
// "Certificate renewal" in the package doc) when the file holds the certificate and key
// itself rather than naming other files.
func Load(path string, opts Options) (*Client, error) {
	f, err := apiclient.LoadIdentity(path)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	id, err := identityOf(f)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	c, err := New(id, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case c.opts.RenewAt < 0:
	case !f.HoldsCredentials():
		c.log.Info("the identity file names the files of its certificate and key: the certificate is not renewed", "file", path)
	default:
		c.path = path
		c.spawn(c.renewLoop)
	}
	return c, nil
}

// New returns the Client of an enrolled identity. It does not contact the controller: the
// Client authenticates on first use.
func New(id *Identity, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if opts.RenewAt >= 1 {
		return nil, fmt.Errorf("sdk: Options.RenewAt %v: must be below 1 (negative: no renewal)", opts.RenewAt)
	}
	if id == nil || (id.Controller == "" && len(id.Controllers) == 0) || id.CAs == nil {
		return nil, errors.New("sdk: identity: the controller's URL and the network's CAs are required")
	}
	var ctrls []string
	if id.Controller != "" {
		ctrls = append(ctrls, id.Controller)
	}
	for i, u := range id.Controllers { // apiclient.NewMulti drops repeated ones
		if u == "" {
			return nil, fmt.Errorf("sdk: identity: Controllers[%d] is empty; give a controller's base URL, https://host:port", i)
		}
		ctrls = append(ctrls, u)
	}
	if len(id.Certificate.Certificate) == 0 || id.Certificate.PrivateKey == nil {
		return nil, errors.New("sdk: the identity has no certificate; the SDK authenticates with the identity's certificate")
	}
	life, cancel := context.WithCancel(context.Background())
	c := &Client{
		opts: opts, roots: id.CAs, chains: e2ee.NewChainCache(id.CAs, 0), tickets: e2ee.NewTickets(0), ctrls: ctrls,
		life: life, cancel: cancel, auth: make(chan struct{}, 1),
		services: map[string]Service{}, sessions: map[sessionKey]*sessionEntry{},
		routers: map[string]*routerEntry{}, conns: map[*routerConn]struct{}{}, listeners: map[*Listener]struct{}{},
	}
	cr, err := c.newCredentials(id.Certificate)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sdk: identity certificate: %w", err)
	}
	c.creds.Store(cr)
	c.id = cr.chain[0].Subject.CommonName
	c.log = opts.Logger.With("identity", c.id)
	return c, nil
}

// newCredentials parses cert's chain and makes the controller calls' template presenting it.
func (c *Client) newCredentials(cert tls.Certificate) (*credentials, error) {
	chain := make([]*x509.Certificate, 0, len(cert.Certificate))
	for i, der := range cert.Certificate {
		p, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", i, err)
		}
		chain = append(chain, p)
	}
	cert.Leaf = chain[0]
	// A renewed certificate keeps the controllers' list, learned members and all.
	var api *apiclient.Client
	if prev := c.creds.Load(); prev != nil {
		api = prev.api.WithCertificate(&cert)
	} else {
		api = apiclient.NewMulti(c.ctrls, c.roots, &cert)
	}
	return &credentials{cert: cert, chain: chain, api: api}, nil
}

// IdentityID returns the id of the Client's identity (its certificate's common name).
func (c *Client) IdentityID() string { return c.id }

// Close ends everything the Client opened: its listeners (the routers remove their
// terminators), its connections (every Conn from Dial or Accept ends), its router
// connections, and its API session with the controller (logout, which ends its sessions).
// It waits for the Client's goroutines to finish.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	listeners := make([]*Listener, 0, len(c.listeners))
	for l := range c.listeners {
		listeners = append(listeners, l)
	}
	routers := make([]*routerConn, 0, len(c.conns))
	for rc := range c.conns {
		routers = append(routers, rc)
	}
	token := c.token
	c.mu.Unlock()

	for _, l := range listeners {
		l.Close()
	}
	c.cancel() // aborts connections and session creations in progress
	for _, rc := range routers {
		rc.close(ErrClosed)
	}
	c.wg.Wait()
	if token != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl := *c.creds.Load().api
		cl.Token = token
		if _, err := cl.Do(ctx, "DELETE", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
			c.log.Debug("logout failed", "err", err)
		}
	}
	return nil
}

// spawn runs fn in a goroutine Close waits for, unless the Client is closed: then it
// returns false and does not run fn.
func (c *Client) spawn(fn func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
	return true
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
