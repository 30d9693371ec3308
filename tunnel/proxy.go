package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/zmesh/zmesh/config"
)

// Proxy is the tunnel's proxy mode: one TCP listener per configured <service>:<port>, each
// accepted connection carried as a circuit to its service. Update changes the list while it
// serves: connections already accepted are never touched by it.
type Proxy struct {
	host  string
	relay Relay

	mu  sync.Mutex
	lns map[config.TunnelService]net.Listener
	// service is what each listener's connections are carried to, read by its accept loop
	// at each connection: a port that Update moves to another service keeps its listener.
	service map[net.Listener]string
	order   []config.TunnelService                                   // the current list, in its order
	wg      sync.WaitGroup                                           // accept loops and carries, once serving
	ctx     context.Context                                          // Serve's, once serving
	carry   func(ctx context.Context, conn net.Conn, service string) // Serve's, once serving
	closed  bool                                                     // Close was called: no more listeners
	done    chan struct{}                                            // closed by Close
}

// ListenProxy opens the listeners of services on host (127.0.0.1 when empty).
func ListenProxy(host string, services []config.TunnelService) (*Proxy, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	p := &Proxy{host: host, lns: map[config.TunnelService]net.Listener{}, service: map[net.Listener]string{},
		done: make(chan struct{})}
	if _, _, err := p.Update(services); err != nil {
		return nil, err
	}
	return p, nil
}

// Addr returns where the proxy listens for a service.
func (p *Proxy) Addr(service string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.order {
		if s.Service == service {
			return p.lns[s].Addr().String()
		}
	}
	return ""
}

// Services returns the <service>:<port> pairs the proxy listens for now.
func (p *Proxy) Services() []config.TunnelService {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]config.TunnelService(nil), p.order...)
}

// Update makes services the proxy's list: it opens the listeners of the pairs not listened
// for yet, then closes those of the pairs no longer listed, and returns both. A port that
// moves from a service no longer listed to a new one keeps its listener, its connections
// now carried to the new service. Connections accepted on a closed listener go on until
// they end. When a new listener cannot be opened, nothing changes and the error names its
// service.
func (p *Proxy) Update(services []config.TunnelService) (added, removed []config.TunnelService, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errors.New("tunnel proxy: stopped")
	}
	want := make(map[config.TunnelService]bool, len(services))
	for _, s := range services {
		want[s] = true
	}
	leaving := map[int]config.TunnelService{} // fixed ports of the pairs no longer listed
	for _, s := range p.order {
		if !want[s] && s.Port != 0 {
			leaving[s.Port] = s
		}
	}
	opened := map[config.TunnelService]net.Listener{}
	moved := map[config.TunnelService]config.TunnelService{} // new pair: the leaving pair whose listener it takes
	for _, s := range services {
		if _, ok := p.lns[s]; ok || opened[s] != nil {
			continue
		}
		if old, ok := leaving[s.Port]; ok {
			delete(leaving, s.Port)
			moved[s], opened[s] = old, p.lns[old]
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(p.host, strconv.Itoa(s.Port)))
		if err != nil {
			for s, ln := range opened {
				if _, kept := moved[s]; !kept {
					ln.Close()
				}
			}
			return nil, nil, fmt.Errorf("tunnel proxy for service %q: %w", s.Service, err)
		}
		opened[s] = ln
	}
	for _, s := range p.order {
		if !want[s] {
			if _, kept := leaving[s.Port]; kept || s.Port == 0 { // not taken over by a new pair
				p.lns[s].Close()
				delete(p.service, p.lns[s])
			}
			delete(p.lns, s)
			removed = append(removed, s)
		}
	}
	p.order = p.order[:0]
	for _, s := range services {
		if ln := opened[s]; ln != nil {
			p.lns[s] = ln
			p.service[ln] = s.Service
			added = append(added, s)
			if _, kept := moved[s]; !kept && p.ctx != nil {
				p.accept(ln)
			}
			delete(opened, s)
		}
		if _, ok := p.lns[s]; ok && !slices.Contains(p.order, s) {
			p.order = append(p.order, s)
		}
	}
	return added, removed, nil
}

// Serve accepts connections until ctx ends and hands each to carry, on its own goroutine;
// listeners Update adds are served likewise. It returns once the listeners are closed and
// every carry has returned.
func (p *Proxy) Serve(ctx context.Context, carry func(ctx context.Context, conn net.Conn, service string)) {
	p.mu.Lock()
	if !p.closed {
		p.ctx, p.carry = ctx, carry
		for _, s := range p.order {
			p.accept(p.lns[s])
		}
	}
	p.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-p.done:
	}
	p.Close()
	p.wg.Wait()
}

// accept serves one listener until it is closed, each connection to the listener's service
// as it is then; p.mu held, Serve started.
func (p *Proxy) accept(ln net.Listener) {
	ctx, carry := p.ctx, p.carry
	p.wg.Go(func() {
		var wait time.Duration // after a failed accept (e.g. out of file descriptors)
		for {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				wait = min(max(2*wait, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
				continue
			}
			wait = 0
			p.mu.Lock()
			service, listed := p.service[ln]
			p.mu.Unlock()
			if !listed { // removed by Update as it accepted
				conn.Close()
				continue
			}
			// TCP_NODELAY is on already: the net package sets it on every TCP connection.
			p.wg.Go(func() { carry(ctx, conn, service) })
		}
	})
}

// Close closes the listeners; connections already accepted go on.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, ln := range p.lns {
		ln.Close()
	}
	close(p.done)
}

// ServeOverlay serves the proxy ports through an overlay until ctx ends, once the overlay has
// listed its services: each connection is dialed to its service (found by name) and joined
// to it.
func (p *Proxy) ServeOverlay(ctx context.Context, overlay Overlay, log *slog.Logger) {
	var (
		mu       sync.Mutex
		services = map[string]Service{}
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	listed := make(chan struct{})
	var once sync.Once
	go overlay.WatchServices(watchCtx, func(list []Service) {
		byName := make(map[string]Service, len(list))
		for _, s := range list {
			byName[s.Name] = s
		}
		mu.Lock()
		services = byName
		mu.Unlock()
		once.Do(func() { close(listed) })
	})
	// Connections wait in the listeners' backlogs until the services are known.
	select {
	case <-listed:
	case <-ctx.Done():
		p.Close()
		return
	}
	p.Serve(ctx, func(ctx context.Context, conn net.Conn, name string) {
		mu.Lock()
		svc, ok := services[name]
		mu.Unlock()
		if !ok || !svc.Dial {
			log.Info("tunnel proxy: no service of this name may be dialed", "service", name)
			conn.Close()
			return
		}
		app := AppData{Protocol: "tcp"}
		if a, ok := conn.LocalAddr().(*net.TCPAddr); ok {
			app.DstIP, app.DstPort = a.IP.String(), strconv.Itoa(a.Port)
		}
		if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			app.SrcIP, app.SrcPort = a.IP.String(), strconv.Itoa(a.Port)
		}
		circuit, err := overlay.Dial(ctx, svc, app)
		if err != nil {
			log.Info("tunnel proxy: dial failed", "service", name, "err", err)
			conn.Close()
			return
		}
		p.relay.Join(ctx, conn, circuit)
	})
}
