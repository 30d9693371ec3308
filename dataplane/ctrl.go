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
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/atomicfile"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/link"
)

// The router's control channel: it dials the controller with its enrolled client
// certificate, says Hello, and keeps the channel up, reconnecting with backoff when the
// controller goes away. Circuits keep forwarding while it is down; only new circuits wait.

// ErrNoController: there is no control channel now.
var ErrNoController = errors.New("not connected to the controller")

// ctrlBackoff bounds the waits between connection attempts.
const (
	ctrlMinBackoff = 200 * time.Millisecond
	ctrlMaxBackoff = 30 * time.Second
)

// ctrlClient keeps the control channel.
type ctrlClient struct {
	cfg      config.Ctrl
	tls      *tls.Config
	hello    func() *ctrlproto.Hello
	handlers func(*ctrlproto.Channel)
	// onConnect is called after each accepted Hello, before the channel is used otherwise:
	// the router tells the (possibly restarted) controller what it must know again.
	onConnect func()
	log       *slog.Logger
	// trace, when set (trace.path), receives every frame of every channel.
	trace *traceFile
	// local, when set, opens the channel to a controller in this process (co-located); it
	// is tried before the configured endpoints.
	local func() (net.Conn, error)

	mu        sync.Mutex
	ch        *ctrlproto.Channel
	endpoints []string // from the last HelloReply or EndpointsUpdate
	clientAPI string   // the controller's client API, <host>:<port>, from the last HelloReply
	connected chan struct{}
}

func newCtrlClient(cfg config.Ctrl, certs *link.Certificates, cas *x509.CertPool, hello func() *ctrlproto.Hello, handlers func(*ctrlproto.Channel), onConnect func(), log *slog.Logger) *ctrlClient {
	return &ctrlClient{
		cfg: cfg,
		// The controller is the one server whose certificate carries its policy: a router's
		// certificate from the same CA is refused, whatever its names.
		tls: &tls.Config{GetClientCertificate: certs.GetClientCertificate, RootCAs: cas, MinVersion: tls.VersionTLS13,
			VerifyConnection: certid.VerifyController},
		hello:     hello,
		handlers:  handlers,
		onConnect: onConnect,
		log:       log,
		connected: make(chan struct{}),
	}
}

// connectLoop connects and reconnects until ctx ends.
func (c *ctrlClient) connectLoop(ctx context.Context) {
	wait := ctrlMinBackoff
	for ctx.Err() == nil {
		ch, err := c.connect(ctx)
		if err != nil {
			c.log.Warn("control channel: cannot connect", "err", err, "retryIn", wait)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
			wait = min(wait*2, ctrlMaxBackoff)
			continue
		}
		wait = ctrlMinBackoff
		if c.onConnect != nil {
			c.onConnect()
		}
		<-ch.Done()
		c.mu.Lock()
		c.ch = nil
		c.connected = make(chan struct{})
		c.mu.Unlock()
		if ctx.Err() == nil {
			c.log.Warn("control channel lost; reconnecting", "err", ch.Err())
		}
	}
}

// addresses are the controller endpoints to try: the configured ones, then those the
// controller announced.
func (c *ctrlClient) addresses() []string {
	var out []string
	for _, a := range c.cfg.Addresses() {
		out = append(out, a.HostPort())
	}
	c.mu.Lock()
	for _, e := range c.endpoints {
		if _, hp, ok := strings.Cut(e, ":"); ok && !contains(out, hp) {
			out = append(out, hp)
		}
	}
	c.mu.Unlock()
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// inProcess names the co-located controller's channel in logs and traces.
const inProcess = "in-process"

func (c *ctrlClient) connect(ctx context.Context) (*ctrlproto.Channel, error) {
	var errs []error
	if c.local != nil {
		ch, err := c.open(ctx, inProcess, func(context.Context) (net.Conn, error) { return c.local() })
		if err == nil {
			return ch, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", inProcess, err))
	}
	for _, addr := range c.addresses() {
		ch, err := c.open(ctx, addr, func(dctx context.Context) (net.Conn, error) { return c.dialTLS(dctx, addr) })
		if err == nil {
			return ch, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, errors.Join(errs...)
}

// dialTLS connects to the controller at addr with the router's client certificate.
func (c *ctrlClient) dialTLS(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	if c.cfg.Bind != "" {
		ip := net.ParseIP(c.cfg.Bind)
		if ip == nil {
			return nil, fmt.Errorf("ctrl.bind %q is not an IP address", c.cfg.Bind)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	tc := c.tls.Clone()
	host, _, _ := net.SplitHostPort(addr)
	tc.ServerName = host
	return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
}

// open connects with dial, then starts the channel and says Hello, all within the connect
// timeout; addr names the controller in logs and traces.
func (c *ctrlClient) open(ctx context.Context, addr string, dial func(context.Context) (net.Conn, error)) (*ctrlproto.Channel, error) {
	timeout := c.cfg.Options.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dial(dctx)
	if err != nil {
		return nil, err
	}
	opts := ctrlproto.Options{
		RequestTimeout: c.cfg.DefaultRequestTimeout,
		Heartbeats: ctrlproto.Heartbeats{SendInterval: c.cfg.Heartbeats.SendInterval, CheckInterval: c.cfg.Heartbeats.CheckInterval,
			CloseUnresponsiveTimeout: c.cfg.Heartbeats.CloseUnresponsiveTimeout},
	}
	if c.trace != nil {
		opts.Trace = c.trace.hook(addr)
	}
	ch := ctrlproto.New(ctx, conn, c.log, opts)
	ch.Handle(ctrlproto.TypeEndpointsUpdate, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		c.saveEndpoints(m.(*ctrlproto.EndpointsUpdate).Endpoints)
		return nil, nil
	})
	c.handlers(ch)
	ch.Start()
	reply, err := ctrlproto.Call[*ctrlproto.HelloReply](dctx, ch, c.hello())
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	if !reply.Accepted {
		ch.Close()
		return nil, fmt.Errorf("the controller refused the router: %s", reply.Reason)
	}
	c.saveEndpoints(reply.Endpoints)
	c.mu.Lock()
	c.clientAPI = reply.ClientAPI
	c.ch = ch
	close(c.connected)
	c.mu.Unlock()
	c.log.Info("control channel connected", "controller", reply.ControllerID, "address", addr)
	return ch, nil
}

// ConnectLocally makes the router reach a controller that runs in the same process through
// connect (the controller's ConnectLocal), given the router's client certificate, before it
// tries ctrl.endpoint(s): the co-located control channel then skips TLS and the TCP stack.
// Call it before Run.
func (r *Router) ConnectLocally(connect func(cert *x509.Certificate) (net.Conn, error)) {
	r.localCtrl = connect
}

// clientAPIHost returns the client API's <host>:<port> of the controller the router last
// connected to; "" before the first connection.
func (c *ctrlClient) clientAPIHost() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientAPI
}

// saveEndpoints keeps the controller's endpoint list and writes it to ctrl.endpointsFile.
func (c *ctrlClient) saveEndpoints(eps []string) {
	c.mu.Lock()
	c.endpoints = eps
	c.mu.Unlock()
	if c.cfg.EndpointsFile == "" || len(eps) == 0 {
		return
	}
	if err := atomicfile.Write(c.cfg.EndpointsFile, []byte(strings.Join(eps, "\n")+"\n"), 0o600); err != nil {
		c.log.Warn("cannot save the controller endpoints", "file", c.cfg.EndpointsFile, "err", err)
	}
}

// loadEndpoints reads a saved endpoint list, if any.
func (c *ctrlClient) loadEndpoints() {
	data, err := os.ReadFile(c.cfg.EndpointsFile)
	if err != nil {
		return
	}
	var eps []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			eps = append(eps, l)
		}
	}
	c.mu.Lock()
	c.endpoints = eps
	c.mu.Unlock()
}

// channel returns the current channel, waiting up to ctx for one.
func (c *ctrlClient) channel(ctx context.Context) (*ctrlproto.Channel, error) {
	c.mu.Lock()
	ch, wait := c.ch, c.connected
	c.mu.Unlock()
	if ch != nil {
		return ch, nil
	}
	select {
	case <-wait:
		return c.channel(ctx)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrNoController, ctx.Err())
	}
}

// isConnected tells whether the control channel is up.
func (c *ctrlClient) isConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch != nil
}

// send sends a one-way message if connected.
func (c *ctrlClient) send(ctx context.Context, msg ctrlproto.Message) error {
	ch := c.current()
	if ch == nil {
		return ErrNoController
	}
	return ch.Send(ctx, msg)
}

// current returns the channel, or nil while there is none.
func (c *ctrlClient) current() *ctrlproto.Channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}
