package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/tunnel"
)

// startTunnels starts the tunnel listeners' modes. Every mode hosts the services the
// router's identity may bind (host mode); proxy mode also listens on its ports, and tproxy
// mode intercepts the services the identity may dial and answers DNS for them. A mode that
// fails after the start (nftables refused, the resolver's port taken) is logged as an error
// and the rest of the router goes on; one that fails to stop cleanly (the interception rules
// could not be removed) is logged and makes Run return the error.
func (r *Router) startTunnels(ctx context.Context, wg *sync.WaitGroup) error {
	for _, l := range r.cfg.Listeners {
		if l.Binding != config.BindingTunnel || l.Tunnel == nil {
			continue
		}
		log := r.log // the modes name themselves in their logs
		run := func(what string, f func() error) {
			wg.Go(func() {
				err := f()
				switch {
				case err == nil || errors.Is(err, context.Canceled):
				case ctx.Err() == nil:
					log.Error("tunnel "+what+" stopped", "err", err)
				default:
					log.Error("tunnel "+what+" did not stop cleanly", "err", err)
					r.mu.Lock()
					r.stopErrs = append(r.stopErrs, fmt.Errorf("tunnel %s: %w", what, err))
					r.mu.Unlock()
				}
			})
		}
		switch l.Tunnel.Mode {
		case config.TunnelProxy:
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
			wg.Go(func() { p.Serve(ctx, r.dialProxy) })
			h := &tunnel.Host{}
			r.tunnelHost = h
			run("host", func() error {
				return h.Run(ctx, r.overlay, tunnel.HostOptions{Logger: log, UDPIdleTimeout: l.Tunnel.UDPIdleTimeout.Std()})
			})
		case config.TunnelHost:
			h := &tunnel.Host{}
			r.tunnelHost = h
			run("host", func() error {
				return h.Run(ctx, r.overlay, tunnel.HostOptions{Logger: log, UDPIdleTimeout: l.Tunnel.UDPIdleTimeout.Std()})
			})
		case config.TunnelTProxy:
			idle := l.Tunnel.UDPIdleTimeout.Std()
			opts := tunnel.TProxyOptions{Host: &tunnel.HostOptions{UDPIdleTimeout: idle}, UDPIdleTimeout: idle, Logger: log}
			if res := l.Tunnel.Resolver; res != nil {
				addr, err := netip.ParseAddr(res.Host)
				if err != nil {
					return fmt.Errorf("listeners: tunnel resolver %q: %w", res.Addr(), err)
				}
				opts.Resolver = netip.AddrPortFrom(addr, uint16(res.Port))
			}
			if p := l.Tunnel.DNSSvcIPRange; p != nil {
				opts.DNSSvcIPRange = *p
			}
			for _, u := range l.Tunnel.Upstreams {
				opts.Upstreams = append(opts.Upstreams, u.String())
			}
			t := &tunnel.TProxy{}
			r.tproxy = t
			run("tproxy", func() error { return t.Run(ctx, r.overlay, opts) })
		}
	}
	return nil
}

// tunnelMetrics adds the tunnel's counters to a metrics report: interceptions and DNS
// answers in tproxy mode, hosted services in every mode.
func (r *Router) tunnelMetrics(v map[string]float64) {
	var host tunnel.HostStats
	if t := r.tproxy; t != nil {
		s := t.Stats()
		host = s.Host
		v["tunnel.intercept.services"] = float64(s.Services)
		v["tunnel.intercept.interceptions"] = float64(s.Interceptions)
		v["tunnel.intercept.tcp"] = float64(s.TCPIntercepted)
		v["tunnel.intercept.udp_flows"] = float64(s.UDPFlows)
		v["tunnel.intercept.udp_dropped"] = float64(s.UDPDropped)
		v["tunnel.intercept.unmatched"] = float64(s.Unmatched)
		v["tunnel.intercept.dial_failures"] = float64(s.DialFailures)
		v["tunnel.intercept.active"] = float64(s.Active)
		v["tunnel.dns.intercepted"] = float64(s.Resolver.Intercepted)
		v["tunnel.dns.empty"] = float64(s.Resolver.EmptyAAAA + s.Resolver.EmptyOther)
		v["tunnel.dns.forwarded"] = float64(s.Resolver.Forwarded)
		v["tunnel.dns.refused"] = float64(s.Resolver.Refused)
		v["tunnel.dns.servfail"] = float64(s.Resolver.ServFail)
		v["tunnel.dns.assignments"] = float64(s.Resolver.Assignments)
	} else if h := r.tunnelHost; h != nil {
		host = h.Stats()
	} else {
		return
	}
	v["tunnel.host.bound"] = float64(host.Bound)
	v["tunnel.host.circuits"] = float64(host.Circuits)
	v["tunnel.host.refused"] = float64(host.Refused)
	v["tunnel.host.dial_failures"] = float64(host.DialFailures)
	v["tunnel.host.active"] = float64(host.Active)
}
