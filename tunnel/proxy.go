package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/zmesh/zmesh/config"
)

// Proxy is the tunnel's proxy mode: one TCP listener per configured <service>:<port>, each
// accepted connection carried as a circuit to its service.
type Proxy struct {
	lns   []net.Listener
	svc   []string
	addrs map[string]string
	relay Relay
}

// ListenProxy opens the listeners of services on host (127.0.0.1 when empty).
func ListenProxy(host string, services []config.TunnelService) (*Proxy, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	p := &Proxy{addrs: map[string]string{}}
	for _, s := range services {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(s.Port)))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("tunnel proxy for service %q: %w", s.Service, err)
		}
		p.lns = append(p.lns, ln)
		p.svc = append(p.svc, s.Service)
		p.addrs[s.Service] = ln.Addr().String()
	}
	return p, nil
}

// Addr returns where the proxy listens for a service.
func (p *Proxy) Addr(service string) string { return p.addrs[service] }

// Serve accepts connections until ctx ends and hands each to carry, on its own goroutine.
// It returns once the listeners are closed and every carry has returned.
func (p *Proxy) Serve(ctx context.Context, carry func(ctx context.Context, conn net.Conn, service string)) {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, p.Close)
	defer stop()
	for i, ln := range p.lns {
		service := p.svc[i]
		wg.Go(func() {
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
				// TCP_NODELAY is on already: the net package sets it on every TCP connection.
				wg.Go(func() { carry(ctx, conn, service) })
			}
		})
	}
	wg.Wait()
}

// Close closes the listeners.
func (p *Proxy) Close() {
	for _, ln := range p.lns {
		ln.Close()
	}
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
