package xgress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Egress: when a circuit ends at this router, the service is dialed by a pool of workers fed
// by a bounded queue, so that a burst of circuits to a slow service neither spawns unbounded
// goroutines nor hangs: a full queue fails the circuit at once.

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
	// Done receives the connection or the error; it is called by a worker.
	Done func(net.Conn, error)
}

// DialPoolOptions are the forwarder.xgressDial* settings.
type DialPoolOptions struct {
	QueueLength int           // xgressDialQueueLength
	Workers     int           // xgressDialWorkerCount
	Dwell       time.Duration // xgressDialDwellTime: wait before each dial
	Timeout     time.Duration // of one dial; 10s when zero
	// TLS is the client configuration of transport dials to tls: addresses.
	TLS *tls.Config
}

// DialPool dials terminators with a fixed number of workers.
type DialPool struct {
	opts  DialPoolOptions
	queue chan DialRequest
	wg    sync.WaitGroup

	mu   sync.Mutex
	busy int
}

// NewDialPool starts the workers; they stop when ctx ends, failing what is still queued.
func NewDialPool(ctx context.Context, opts DialPoolOptions) *DialPool {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	p := &DialPool{opts: opts, queue: make(chan DialRequest, opts.QueueLength)}
	for range opts.Workers {
		p.wg.Add(1)
		go p.work(ctx)
	}
	go func() {
		<-ctx.Done()
		p.wg.Wait()
		for {
			select {
			case r := <-p.queue:
				r.Done(nil, ctx.Err())
			default:
				return
			}
		}
	}()
	return p
}

// Submit queues a dial; it fails at once with ErrDialQueueFull when the queue is full.
func (p *DialPool) Submit(r DialRequest) error {
	select {
	case p.queue <- r:
		return nil
	default:
		return fmt.Errorf("dial %s %s: %w (%d queued)", r.Binding, r.Address, ErrDialQueueFull, cap(p.queue))
	}
}

// Load returns how many dials are queued and how many workers are dialing.
func (p *DialPool) Load() (queued, busy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue), p.busy
}

func (p *DialPool) work(ctx context.Context) {
	defer p.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-p.queue:
			p.mu.Lock()
			p.busy++
			p.mu.Unlock()
			conn, err := p.dial(ctx, r)
			p.mu.Lock()
			p.busy--
			p.mu.Unlock()
			r.Done(conn, err)
		}
	}
}

func (p *DialPool) dial(ctx context.Context, r DialRequest) (net.Conn, error) {
	if p.opts.Dwell > 0 {
		select {
		case <-time.After(p.opts.Dwell):
		case <-ctx.Done():
			return nil, ctx.Err()
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
