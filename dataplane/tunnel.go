package dataplane

import (
	"context"
	"fmt"
	"sync"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/tunnel"
)

// startTunnels opens the on-ramps of the tunnel listeners this version runs: proxy mode.
func (r *Router) startTunnels(ctx context.Context, wg *sync.WaitGroup) error {
	for _, l := range r.cfg.Listeners {
		if l.Binding != config.BindingTunnel || l.Tunnel == nil || l.Tunnel.Mode != config.TunnelProxy {
			continue
		}
		host := ""
		if l.Bind != nil {
			host = l.Bind.Host
		}
		p, err := tunnel.ListenProxy(host, l.Tunnel.Services)
		if err != nil {
			return fmt.Errorf("listeners: %w", err)
		}
		r.mu.Lock()
		for _, s := range l.Tunnel.Services {
			r.proxyAddr[s.Service] = p.Addr(s.Service)
		}
		r.mu.Unlock()
		wg.Go(func() { p.Serve(ctx, r.dialCircuit) })
	}
	return nil
}
