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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/atomicfile"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/link"
)

// The router's control channels: it dials the controller with its enrolled client
// certificate, says Hello, and keeps the channel up, reconnecting with backoff when the
// controller goes away. With a controller cluster it keeps one channel to every member:
// a member knows, and routes circuits over, only the routers connected to it. Every known
// address (the configured endpoints, and those the members announce) has a connect loop of
// its own; a channel is kept only when its Hello reply names a member no other open channel
// reaches, and the address is then remembered as that member's alias, not dialled while the
// member is connected. Circuits keep forwarding while every channel is down; only new
// circuits wait.

// ErrNoController: there is no control channel now.
var ErrNoController = errors.New("not connected to the controller")

// errAlias: the address reaches a member connected through another address.
var errAlias = errors.New("a member connected through another address")

// ctrlBackoff bounds the waits between connection attempts.
const (
	ctrlMinBackoff = 200 * time.Millisecond
	ctrlMaxBackoff = 30 * time.Second
)

// ctrlMember is an open channel to one controller (one cluster member).
type ctrlMember struct {
	id        string // the ControllerID of its Hello reply
	addr      string // the address it was reached at, or inProcess
	clientAPI string // the member's client API, <host>:<port>
	ch        *ctrlproto.Channel
}

// ctrlClient keeps the control channels.
type ctrlClient struct {
	cfg      config.Ctrl
	tls      *tls.Config
	hello    func() *ctrlproto.Hello
	handlers func(*ctrlproto.Channel)
	// onConnect is called with each channel after its accepted Hello, before it is used
	// otherwise: the router tells the (possibly restarted) member what it must know again.
	onConnect func(*ctrlproto.Channel)
	log       *slog.Logger
	// trace, when set (trace.path), receives every frame of every channel.
	trace *traceFile
	// local, when set, opens the channel to a controller in this process (co-located); it
	// is tried before the configured endpoints.
	local func() (net.Conn, error)

	// helloMu makes Hellos one at a time, so that a member reached at a second address is
	// recognised by its certificate before it is greeted twice (a member keeps one channel
	// per router: a second Hello would close the first).
	helloMu sync.Mutex

	mu        sync.Mutex
	ctx       context.Context // connectLoop's, while it runs
	wg        *sync.WaitGroup // connectLoop's address loops
	loops     map[string]context.CancelFunc
	members   map[string]*ctrlMember // open channels by controller id
	aliases   map[string]string      // address -> the member that answered there
	certs     map[string]string      // certificate fingerprint -> member id
	last      string                 // the member that answered a request last
	endpoints []string               // from the last HelloReply or EndpointsUpdate
	connected chan struct{}          // closed while a channel is open
}

func newCtrlClient(cfg config.Ctrl, certs *link.Certificates, cas *x509.CertPool, hello func() *ctrlproto.Hello, handlers func(*ctrlproto.Channel), onConnect func(*ctrlproto.Channel), log *slog.Logger) *ctrlClient {
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
		loops:     map[string]context.CancelFunc{},
		members:   map[string]*ctrlMember{},
		aliases:   map[string]string{},
		certs:     map[string]string{},
		connected: make(chan struct{}),
	}
}

// connectLoop runs the address loops until ctx ends. The co-located controller's is first:
// the other loops start once its first attempt is over, so that its own endpoint, which its
// Hello reply names first, is known as its alias and not dialled.
func (c *ctrlClient) connectLoop(ctx context.Context) {
	var wg sync.WaitGroup
	c.mu.Lock()
	c.ctx, c.wg = ctx, &wg
	c.mu.Unlock()
	if c.local != nil {
		first := make(chan struct{})
		wg.Go(func() {
			c.addressLoop(ctx, inProcess, func(context.Context) (net.Conn, error) { return c.local() }, first)
		})
		select {
		case <-first:
		case <-ctx.Done():
		}
	}
	c.startLoops()
	<-ctx.Done()
	c.mu.Lock()
	c.ctx = nil // no loop starts any more
	c.mu.Unlock()
	wg.Wait()
}

// startLoops starts a loop for every known address that has none, and stops those of
// announced addresses no longer announced (a member removed from the cluster).
func (c *ctrlClient) startLoops() {
	addrs := c.addresses() // the configured addresses first, then those announced
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil || c.ctx.Err() != nil {
		return
	}
	for addr, cancel := range c.loops {
		if !slices.Contains(addrs, addr) {
			cancel()
			delete(c.loops, addr)
		}
	}
	for _, addr := range addrs {
		if _, ok := c.loops[addr]; ok {
			continue
		}
		lctx, cancel := context.WithCancel(c.ctx)
		c.loops[addr] = cancel
		c.wg.Go(func() {
			defer cancel()
			c.addressLoop(lctx, addr, func(dctx context.Context) (net.Conn, error) { return c.dialTLS(dctx, addr) }, nil)
		})
	}
}

// addressLoop connects and reconnects to addr until ctx ends, with a backoff of its own;
// first, when not nil, is closed after the first attempt.
func (c *ctrlClient) addressLoop(ctx context.Context, addr string, dial func(context.Context) (net.Conn, error), first chan struct{}) {
	wait := ctrlMinBackoff
	pause := func() bool {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false
		}
		wait = min(wait*2, ctrlMaxBackoff)
		return true
	}
	for ctx.Err() == nil {
		if done := c.aliasOf(addr); done != nil {
			// Its member is connected through another address: wait until that channel
			// closes, then give that address's loop, which reconnects at once, a head start.
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
			if !pause() {
				return
			}
			continue
		}
		m, err := c.open(ctx, addr, dial)
		if first != nil {
			close(first)
			first = nil
		}
		if errors.Is(err, errAlias) {
			continue
		}
		if err != nil {
			c.log.Warn("control channel: cannot connect", "address", addr, "err", err, "retryIn", wait)
			if !pause() {
				return
			}
			continue
		}
		wait = ctrlMinBackoff
		if c.onConnect != nil {
			c.onConnect(m.ch)
		}
		<-m.ch.Done()
		c.drop(m)
		if ctx.Err() == nil {
			c.log.Warn("control channel lost; reconnecting", "controller", m.id, "address", addr, "err", m.ch.Err())
		}
	}
}

// aliasOf returns, when addr is known to reach a member that is connected through another
// address, that channel's Done; nil otherwise.
func (c *ctrlClient) aliasOf(addr string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.members[c.aliases[addr]]; m != nil && m.addr != addr {
		return m.ch.Done()
	}
	return nil
}

// drop forgets a closed channel.
func (c *ctrlClient) drop(m *ctrlMember) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members[m.id] != m {
		return
	}
	delete(c.members, m.id)
	if len(c.members) == 0 {
		c.connected = make(chan struct{})
	}
}

// addresses are the controller endpoints to try: the configured ones, then those the
// members announced.
func (c *ctrlClient) addresses() []string {
	var out []string
	for _, a := range c.cfg.Addresses() {
		out = append(out, a.HostPort())
	}
	c.mu.Lock()
	for _, e := range c.endpoints {
		if _, hp, ok := strings.Cut(e, ":"); ok && !slices.Contains(out, hp) {
			out = append(out, hp)
		}
	}
	c.mu.Unlock()
	return out
}

// inProcess names the co-located controller's channel in logs and traces.
const inProcess = "in-process"

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
// timeout; addr names the controller in logs and traces. A member connected already
// through another address is not greeted again (errAlias): it is recognised by its TLS
// certificate before the Hello, else by the Hello reply's ControllerID.
func (c *ctrlClient) open(ctx context.Context, addr string, dial func(context.Context) (net.Conn, error)) (*ctrlMember, error) {
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
	m := &ctrlMember{addr: addr}
	fingerprint := "" // of the member's TLS certificate; "" in process
	if tc, ok := conn.(*tls.Conn); ok {
		if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
			fingerprint = certid.Fingerprint(peers[0])
		}
	}
	c.helloMu.Lock()
	defer c.helloMu.Unlock()
	if fingerprint != "" {
		c.mu.Lock()
		id := c.certs[fingerprint]
		open := c.members[id] != nil
		if open {
			c.aliases[addr] = id
		}
		c.mu.Unlock()
		if open {
			conn.Close()
			c.log.Info("control channel: the address reaches a member connected already", "controller", id, "address", addr)
			return nil, errAlias
		}
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
	ch.Handle(ctrlproto.TypeEndpointsUpdate, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		c.saveEndpoints(msg.(*ctrlproto.EndpointsUpdate).Endpoints)
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
	m.id, m.clientAPI, m.ch = reply.ControllerID, reply.ClientAPI, ch
	c.mu.Lock()
	if other := c.members[m.id]; other != nil {
		// Greeted twice: the member has closed the other channel already, whose address
		// reconnects at once; this one waits as an alias.
		c.aliases[addr] = m.id
		c.mu.Unlock()
		ch.Close()
		c.log.Info("control channel: the address reaches a member connected already", "controller", m.id, "address", addr,
			"other", other.addr)
		return nil, errAlias
	}
	c.members[m.id] = m
	c.aliases[addr] = m.id
	if fingerprint != "" {
		c.certs[fingerprint] = m.id
	}
	if len(reply.Endpoints) > 0 {
		// A member names its own endpoint first.
		if _, hp, ok := strings.Cut(reply.Endpoints[0], ":"); ok && hp != addr {
			c.aliases[hp] = m.id
		}
	}
	if len(c.members) == 1 {
		close(c.connected)
	}
	c.mu.Unlock()
	c.saveEndpoints(reply.Endpoints)
	c.log.Info("control channel connected", "controller", m.id, "address", addr)
	return m, nil
}

// ConnectLocally makes the router reach a controller that runs in the same process through
// connect (the controller's ConnectLocal), given the router's client certificate, before it
// tries ctrl.endpoint(s): the co-located control channel then skips TLS and the TCP stack.
// Call it before Run.
func (r *Router) ConnectLocally(connect func(cert *x509.Certificate) (net.Conn, error)) {
	r.localCtrl = connect
}

// clientAPIHost returns the client API's <host>:<port> of the member requests go to; ""
// while no channel is open.
func (c *ctrlClient) clientAPIHost() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.preferredLocked(); m != nil {
		return m.clientAPI
	}
	return ""
}

// saveEndpoints keeps the members' endpoint list, writes it to ctrl.endpointsFile and
// starts loops for new addresses.
func (c *ctrlClient) saveEndpoints(eps []string) {
	c.mu.Lock()
	changed := !slices.Equal(c.endpoints, eps) && len(eps) > 0
	if len(eps) > 0 {
		c.endpoints = eps
	}
	c.mu.Unlock()
	if !changed {
		return
	}
	c.startLoops()
	if c.cfg.EndpointsFile == "" {
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

// preferredLocked returns the member requests go to: the one that answered last, else the
// co-located one, else the first by id; nil when none is open. The caller holds c.mu.
func (c *ctrlClient) preferredLocked() *ctrlMember {
	open := func(m *ctrlMember) bool {
		if m == nil {
			return false
		}
		select {
		case <-m.ch.Done():
			return false
		default:
			return true
		}
	}
	if m := c.members[c.last]; open(m) {
		return m
	}
	better := func(a, b *ctrlMember) bool {
		if (a.addr == inProcess) != (b.addr == inProcess) {
			return a.addr == inProcess
		}
		return a.id < b.id
	}
	var best *ctrlMember
	for _, m := range c.members {
		if open(m) && (best == nil || better(m, best)) {
			best = m
		}
	}
	return best
}

// member returns the member requests go to, waiting up to ctx for one.
func (c *ctrlClient) member(ctx context.Context) (*ctrlMember, error) {
	for {
		c.mu.Lock()
		m, wait := c.preferredLocked(), c.connected
		if len(c.members) > 0 {
			// Closed channels not dropped yet: connected stays closed until their loops
			// drop them, so the timer paces the next look.
			wait = nil
		}
		c.mu.Unlock()
		if m != nil {
			return m, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNoController, ctx.Err())
		case <-time.After(ctrlMinBackoff):
		}
	}
}

// channel returns the channel of the member requests go to, waiting up to ctx for one.
func (c *ctrlClient) channel(ctx context.Context) (*ctrlproto.Channel, error) {
	m, err := c.member(ctx)
	if err != nil {
		return nil, err
	}
	return m.ch, nil
}

// do runs a request that needs one answer with the channel of one member (see
// preferredLocked); a request that its channel could not send, having closed, runs again
// with another member. A member that answered is preferred next.
func (c *ctrlClient) do(ctx context.Context, call func(context.Context, *ctrlproto.Channel) error) error {
	for {
		m, err := c.member(ctx)
		if err != nil {
			return err
		}
		err = call(ctx, m.ch)
		if errors.Is(err, ctrlproto.ErrNotSent) && ctx.Err() == nil {
			<-m.ch.Done() // it is closing: the next member is another
			continue
		}
		if err == nil {
			c.mu.Lock()
			c.last = m.id
			c.mu.Unlock()
		}
		return err
	}
}

// ctrlCall sends msg to one member (see do) and returns its reply.
func ctrlCall[R ctrlproto.Message](ctx context.Context, c *ctrlClient, msg ctrlproto.Message) (R, error) {
	var reply R
	err := c.do(ctx, func(ctx context.Context, ch *ctrlproto.Channel) (err error) {
		reply, err = ctrlproto.Call[R](ctx, ch, msg)
		return err
	})
	return reply, err
}

// isConnected tells whether a control channel is up.
func (c *ctrlClient) isConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members) > 0
}

// channels returns every open channel, by member id.
func (c *ctrlClient) channels() map[string]*ctrlproto.Channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*ctrlproto.Channel, len(c.members))
	for id, m := range c.members {
		out[id] = m.ch
	}
	return out
}

// sendAll gives one-way state to every member with send; it fails with ErrNoController when
// no channel is open, and when no channel took it.
func (c *ctrlClient) sendAll(send func(*ctrlproto.Channel) error) error {
	chs := c.channels()
	if len(chs) == 0 {
		return ErrNoController
	}
	var errs []error
	for id, ch := range chs {
		if err := send(ch); err != nil {
			errs = append(errs, fmt.Errorf("controller %s: %w", id, err))
		}
	}
	if len(errs) == len(chs) {
		return errors.Join(errs...)
	}
	return nil
}

// send sends a one-way message to every member.
func (c *ctrlClient) send(ctx context.Context, msg ctrlproto.Message) error {
	return c.sendAll(func(ch *ctrlproto.Channel) error { return ch.Send(ctx, msg) })
}

// current returns the channel requests go to, or nil while there is none.
func (c *ctrlClient) current() *ctrlproto.Channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.preferredLocked(); m != nil {
		return m.ch
	}
	return nil
}
