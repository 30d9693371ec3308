package xgress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Egress: when a circuit ends at this router, the service is dialed through a pool that runs
// at most Workers dials at a time and lets at most QueueLength more wait for their turn, in
// order, so that a burst of circuits to a slow service neither piles up dials nor hangs: a
// full queue fails the circuit at once. A dial runs in the goroutine that asks for it (the
// route's handler), so that a circuit costs no hand-over to a worker and back; a dial that
// ends hands its turn straight to the first that waits.

// Dialer bindings, as router configurations name them.
const (
	BindingProxy        = "proxy"         // TCP to host:port
	BindingProxyUDP     = "proxy_udp"     // UDP to host:port, one datagram per payload
	BindingTransport    = "transport"     // a transport address: tls:host:port or tcp:host:port
	BindingTransportUDP = "transport_udp" // udp:host:port
)

// ErrDialQueueFull is the error of a dial refused because the queue is full.
var ErrDialQueueFull = errors.New("the dial queue is full")

// DialRequest asks for a connection to a terminator's address.
type DialRequest struct {
	Binding string
	Address string
}

// DialPoolOptions are the forwarder.xgressDial* settings.
type DialPoolOptions struct {
	QueueLength int           // xgressDialQueueLength
	Workers     int           // xgressDialWorkerCount
	Dwell       time.Duration // xgressDialDwellTime: wait before each dial, in its turn
	Timeout     time.Duration // of one dial; 10s when zero
	// TLS is the client configuration of transport dials to tls: addresses.
	TLS *tls.Config
}

// DialPool dials terminators, Workers at a time.
type DialPool struct {
	opts DialPoolOptions
	life context.Context

	mu      sync.Mutex
	running int             // dials that have their turn
	waiters []chan struct{} // dials waiting for a turn, in order; closed when it comes
}

// NewDialPool returns a pool whose waiting and running dials fail when ctx ends.
func NewDialPool(ctx context.Context, opts DialPoolOptions) *DialPool {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	opts.Workers = max(opts.Workers, 1)
	return &DialPool{opts: opts, life: ctx}
}

// Dial dials r in the calling goroutine in its turn: at once when fewer than Workers dials
// run and none waits, else after those that waited before it. It fails at once with
// ErrDialQueueFull when QueueLength dials wait already, and when ctx or the pool ends first;
// ctx bounds the whole: the wait, the dwell and the dial.
func (p *DialPool) Dial(ctx context.Context, r DialRequest) (net.Conn, error) {
	if err := p.turn(ctx, r); err != nil {
		return nil, err
	}
	defer p.done()
	return p.dial(ctx, r)
}

// turn returns once r has a turn, or fails.
func (p *DialPool) turn(ctx context.Context, r DialRequest) error {
	p.mu.Lock()
	if p.running < p.opts.Workers && len(p.waiters) == 0 {
		p.running++
		p.mu.Unlock()
		return nil
	}
	if len(p.waiters) >= p.opts.QueueLength {
		p.mu.Unlock()
		return fmt.Errorf("dial %s %s: %w: %d dials wait for a turn among %d at a time (forwarder.xgressDialQueueLength, forwarder.xgressDialWorkerCount)",
			r.Binding, r.Address, ErrDialQueueFull, p.opts.QueueLength, p.opts.Workers)
	}
	ready := make(chan struct{})
	p.waiters = append(p.waiters, ready)
	p.mu.Unlock()
	var err error
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-p.life.Done():
		err = p.life.Err()
	}
	err = fmt.Errorf("dial %s %s: no turn among %d dials at a time (forwarder.xgressDialWorkerCount): %w", r.Binding, r.Address, p.opts.Workers, err)
	p.mu.Lock()
	if i := slices.Index(p.waiters, ready); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.mu.Unlock()
		return err
	}
	p.mu.Unlock()
	p.done() // the turn came meanwhile: pass it on
	return err
}

// done ends a turn: the first waiter takes it over, or one dial fewer runs.
func (p *DialPool) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiters) > 0 {
		close(p.waiters[0])
		p.waiters = slices.Delete(p.waiters, 0, 1)
		return
	}
	p.running--
}

// Load returns how many dials wait and how many run.
func (p *DialPool) Load() (queued, busy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters), p.running
}

func (p *DialPool) dial(ctx context.Context, r DialRequest) (net.Conn, error) {
	if p.opts.Dwell > 0 {
		select {
		case <-time.After(p.opts.Dwell):
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.life.Done():
			return nil, p.life.Err()
		}
	}
	// One timer per dial: the caller's deadline (a route's timeout) when it comes first.
	var cancel context.CancelFunc
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= p.opts.Timeout {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, p.opts.Timeout)
	}
	defer cancel()
	defer context.AfterFunc(p.life, cancel)() // a pool that stops ends its dials
	network, address, useTLS, err := target(r.Binding, r.Address)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", r.Binding, r.Address, err)
	}
	if !useTLS {
		return conn, nil
	}
	cfg := p.opts.TLS.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(address)
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial %s %s: TLS: %w", r.Binding, r.Address, err)
	}
	return tc, nil
}

// target turns a binding and a terminator address into what to dial.
func target(binding, address string) (network, hostPort string, useTLS bool, err error) {
	switch binding {
	case BindingProxy:
		return "tcp", address, false, nil
	case BindingProxyUDP:
		return "udp", address, false, nil
	case BindingTransport, BindingTransportUDP:
		transport, hp, ok := strings.Cut(address, ":")
		if !ok {
			return "", "", false, fmt.Errorf("terminator address %q is not <transport>:<host>:<port>", address)
		}
		switch {
		case binding == BindingTransport && transport == "tls":
			return "tcp", hp, true, nil
		case binding == BindingTransport && transport == "tcp":
			return "tcp", hp, false, nil
		case binding == BindingTransportUDP && transport == "udp":
			return "udp", hp, false, nil
		}
		allowed := "tls, tcp"
		if binding == BindingTransportUDP {
			allowed = "udp"
		}
		return "", "", false, fmt.Errorf("terminator address %q: transport %q is not allowed for binding %s; allowed: %s", address, transport, binding, allowed)
	}
	return "", "", false, fmt.Errorf("binding %q has no dialer; allowed: proxy, proxy_udp, transport, transport_udp", binding)
}
