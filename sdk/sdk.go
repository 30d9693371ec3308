// Package sdk is the Go SDK applications embed to use a zmesh network with an enrolled
// identity: it authenticates to the controller with the identity's certificate, lists the
// services the identity may use (with their configs), creates Dial and Bind sessions, keeps
// one multiplexed TLS connection per edge router (protocol in package edgeproto), dials services
// (Dial returns a net.Conn) and hosts them (Listen returns a net.Listener), end-to-end
// encrypted (package e2ee) when a service requires it.
//
// A Context is one identity's view of the network; everything it opens lives until its
// Close. It authenticates on first use and again, once, when the controller answers 401.
// Sessions are cached per service and type; one that a router refuses as INVALID_SESSION is
// replaced once.
//
// Routers. A session lists the edge routers that may carry its service. On first need the
// Context connects to all of them in parallel (each bounded by Options.ConnectTimeout),
// waits for all, or for Options.RouterGrace after the first success, and uses the connected
// ones in order of the round trip of their latest ping (one at connect, then every
// Options.PingInterval). A dial or bind that fails on one router (its stream fails, or it
// refuses with anything but INVALID; a failed end-to-end key exchange is not retried) is
// tried on the next. A router connection that dies (failed ping, closed session) is dropped
// and made again on the next need; a failed connection attempt is repeated at most once per
// second.
//
// Hosting. A listener binds on up to ListenOptions.MaxBinds routers (2 by default: a second
// terminator keeps the service reachable while one router restarts), fastest first. When a
// bind ends, because its router connection died or the router closed it, the listener binds
// again, retrying with a backoff from 0.5 s to 15 s while it has fewer binds than wanted.
//
// Half-close. Conn.CloseWrite sends the smux stream's FIN (an encrypted Conn first sends its
// authenticated close-write record): the other end reads EOF and can still write back.
package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// Defaults of Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultRouterGrace    = 250 * time.Millisecond
	DefaultPingInterval   = 5 * time.Second
	DefaultSDKInfo        = "zmesh-sdk-go"
)

// ErrClosed is returned by the operations of a closed Context.
var ErrClosed = errors.New("sdk: context closed")

// ErrNoService is wrapped by the errors about a service the identity may not use or that
// does not exist.
var ErrNoService = errors.New("sdk: no such service")

// Options tune a Context; zero fields take the defaults.
type Options struct {
	// Logger receives the Context's logs; slog.Default() when nil.
	Logger *slog.Logger
	// ConnectTimeout bounds one connection to an edge router: TCP, TLS, hello and the first
	// latency ping (DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// RouterGrace is how long, once one of a session's routers is connected, the Context
	// waits for the session's other routers before it chooses the fastest among those
	// connected (DefaultRouterGrace). The others keep connecting in the background.
	RouterGrace time.Duration
	// PingInterval is the period of the latency pings on each router's control stream
	// (DefaultPingInterval). A ping unanswered for twice this (at least 5 s) ends the
	// router connection.
	PingInterval time.Duration
	// SDKInfo is sent to routers in hello (DefaultSDKInfo).
	SDKInfo string
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
	return o
}

// pingTimeout is how long a ping may stay unanswered.
func (o Options) pingTimeout() time.Duration {
	return max(2*o.PingInterval, 5*time.Second)
}

// Context is an identity's connection to a zmesh network: its API session with the
// controller, its sessions, router connections and listeners. It is safe for concurrent use.
type Context struct {
	opts  Options
	log   *slog.Logger
	cert  tls.Certificate     // the identity's certificate chain and key
	chain []*x509.Certificate // cert's chain, parsed, leaf first
	roots *x509.CertPool      // the network's CAs
	id    string              // the identity's id: its certificate's common name
	api   *apiclient.Client   // template of controller calls; its Token stays empty
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
	listeners map[*listener]struct{}       // open listeners
}

// Load reads the identity file at path (what zmesh enroll writes) and returns its Context.
func Load(path string, opts Options) (*Context, error) {
	id, err := apiclient.LoadIdentity(path)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return New(id, opts)
}

// New returns the Context of an enrolled identity. It does not contact the controller: the
// Context authenticates on first use.
func New(id *apiclient.IdentityFile, opts Options) (*Context, error) {
	opts = opts.withDefaults()
	roots, err := id.Roots()
	if err != nil {
		return nil, fmt.Errorf("sdk: identity: %w", err)
	}
	cert, err := id.Certificate()
	if err != nil {
		return nil, fmt.Errorf("sdk: identity: %w", err)
	}
	if cert == nil {
		return nil, errors.New("sdk: the identity has no certificate; the SDK authenticates with the identity's certificate")
	}
	chain := make([]*x509.Certificate, 0, len(cert.Certificate))
	for i, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("sdk: identity certificate %d: %w", i, err)
		}
		chain = append(chain, c)
	}
	cert.Leaf = chain[0]
	api, err := id.Client()
	if err != nil {
		return nil, fmt.Errorf("sdk: identity: %w", err)
	}
	life, cancel := context.WithCancel(context.Background())
	c := &Context{
		opts: opts, cert: *cert, chain: chain, roots: roots, id: chain[0].Subject.CommonName, api: api,
		life: life, cancel: cancel, auth: make(chan struct{}, 1),
		services: map[string]Service{}, sessions: map[sessionKey]*sessionEntry{},
		routers: map[string]*routerEntry{}, conns: map[*routerConn]struct{}{}, listeners: map[*listener]struct{}{},
	}
	c.log = opts.Logger.With("identity", c.id)
	return c, nil
}

// IdentityID returns the id of the Context's identity (its certificate's common name).
func (c *Context) IdentityID() string { return c.id }

// Close ends everything the Context opened: its listeners (the routers remove their
// terminators), its connections (every Conn from Dial or Accept ends), its router
// connections, and its API session with the controller (logout, which ends its sessions).
// It waits for the Context's goroutines to finish.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	listeners := make([]*listener, 0, len(c.listeners))
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
		cl := *c.api
		cl.Token = token
		if _, err := cl.Do(ctx, "DELETE", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
			c.log.Debug("logout failed", "err", err)
		}
	}
	return nil
}

// spawn runs fn in a goroutine Close waits for, unless the Context is closed: then it
// returns false and does not run fn.
func (c *Context) spawn(fn func()) bool {
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
func (c *Context) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
