package xgress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

// Egress: when a circuit ends at this router, the service is dialed through a pool that runs
// at most Workers dials at a time and lets at most QueueLength more wait for their turn, in
// order, so that a burst of circuits to a slow service neither piles up dials nor hangs: a
// full queue fails the circuit at once. A dial runs in the goroutine that asks for it (the
// route's handler), so that a circuit costs no hand-over to a worker and back.

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
	opts    DialPoolOptions
	life    context.Context
	turns   chan struct{} // one per dial running; blocked senders wait in order
	waiting atomic.Int64  // dials waiting for a turn
}

// NewDialPool returns a pool whose waiting dials fail when ctx ends.
func NewDialPool(ctx context.Context, opts DialPoolOptions) *DialPool {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	return &DialPool{opts: opts, life: ctx, turns: make(chan struct{}, max(opts.Workers, 1))}
}

// Dial dials r in the calling goroutine in its turn: at once when fewer than Workers dials
// run, else after those that waited before it. It fails at once with ErrDialQueueFull when
// QueueLength dials wait already, and when its turn does not come within wait, or ctx or the
// pool ends first.
func (p *DialPool) Dial(ctx context.Context, r DialRequest, wait time.Duration) (net.Conn, error) {
	select {
	case p.turns <- struct{}{}:
	default:
		if err := p.await(ctx, r, wait); err != nil {
			return nil, err
		}
	}
	defer func() { <-p.turns }()
	return p.dial(ctx, r)
}

// await queues r until its turn.
func (p *DialPool) await(ctx context.Context, r DialRequest, wait time.Duration) error {
	if n := p.waiting.Add(1); n > int64(p.opts.QueueLength) {
		p.waiting.Add(-1)
		return fmt.Errorf("dial %s %s: %w (%d queued)", r.Binding, r.Address, ErrDialQueueFull, p.opts.QueueLength)
	}
	defer p.waiting.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case p.turns <- struct{}{}:
		return nil
	case <-timer.C:
		return fmt.Errorf("dial %s %s: no turn to dial within %s", r.Binding, r.Address, wait)
	case <-ctx.Done():
		return ctx.Err()
	case <-p.life.Done():
		return p.life.Err()
	}
}

// Load returns how many dials wait and how many run.
func (p *DialPool) Load() (queued, busy int) {
	return int(p.waiting.Load()), len(p.turns)
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
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
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
