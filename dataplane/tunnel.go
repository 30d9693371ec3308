package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

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
	for i, l := range r.cfg.Listeners {
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
			r.proxies[i] = p
			for _, s := range l.Tunnel.Services {
				r.proxyAddr[s.Service] = p.Addr(s.Service)
			}
			r.mu.Unlock()
			wg.Go(func() { p.Serve(ctx, r.dialProxy) })
			h := &tunnel.Host{}
			r.tunnelHost = h
			run("host", func() error {
				return h.Run(ctx, r.overlay, tunnel.HostOptions{Logger: log, UDPIdleTimeout: l.Tunnel.UDPIdleTimeout})
			})
		case config.TunnelHost:
			h := &tunnel.Host{}
			r.tunnelHost = h
			run("host", func() error {
				return h.Run(ctx, r.overlay, tunnel.HostOptions{Logger: log, UDPIdleTimeout: l.Tunnel.UDPIdleTimeout})
			})
		case config.TunnelTProxy:
			idle := l.Tunnel.UDPIdleTimeout
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

// tunnelCollector reads the tunnel's counters at scrape time, one snapshot for all of them:
// interceptions and DNS queries in tproxy mode, hosted services in every mode. Without a
// tunnel listener it collects nothing.
type tunnelCollector struct {
	r *Router
	// tproxy mode
	services, interceptions, tcp, udpFlows, udpDropped, unmatched, dialFailures, active *prometheus.Desc
	dnsQueries, dnsAssignments                                                          *prometheus.Desc
	// host mode
	hostBound, hostBindFailures, hostCircuits, hostRefused, hostDialFailures, hostActive *prometheus.Desc
}

func newTunnelCollector(r *Router) tunnelCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return tunnelCollector{r: r,
		services:       d("zmesh_tunnel_intercepted_services", "Services the tproxy tunnel intercepts now."),
		interceptions:  d("zmesh_tunnel_interceptions", "Interceptions (address, protocol and port ranges) installed now."),
		tcp:            d("zmesh_tunnel_intercepted_connections_total", "Intercepted TCP connections a service claimed."),
		udpFlows:       d("zmesh_tunnel_intercepted_udp_flows_total", "Intercepted UDP flows opened."),
		udpDropped:     d("zmesh_tunnel_intercepted_udp_dropped_datagrams_total", "Intercepted datagrams dropped while their flow's queue was full."),
		unmatched:      d("zmesh_tunnel_intercepted_unmatched_total", "Intercepted connections and datagrams no service claimed, dropped."),
		dialFailures:   d("zmesh_tunnel_intercepted_dial_failures_total", "Intercepted connections and flows whose circuit could not be dialed."),
		active:         d("zmesh_tunnel_intercepted_active", "Intercepted TCP connections and UDP flows carried now."),
		dnsQueries:     d("zmesh_tunnel_dns_queries_total", "DNS queries the tproxy resolver answered, by answer: intercepted (an address of dnsSvcIpRange), empty (no record, for an intercepted name), forwarded (an upstream's answer), refused, servfail, rejected (not a supported query).", "answer"),
		dnsAssignments: d("zmesh_tunnel_dns_assignments", "Names holding an address of dnsSvcIpRange now."),

		hostBound:        d("zmesh_tunnel_host_bound_services", "Services the tunnel hosts (binds) now."),
		hostBindFailures: d("zmesh_tunnel_host_bind_failures_total", "Binds of hosted services that failed."),
		hostCircuits:     d("zmesh_tunnel_host_circuits_total", "Circuits to hosted services accepted."),
		hostRefused:      d("zmesh_tunnel_host_refused_total", "Circuits to hosted services that no host config accepted."),
		hostDialFailures: d("zmesh_tunnel_host_dial_failures_total", "Circuits to hosted services whose target could not be reached."),
		hostActive:       d("zmesh_tunnel_host_active", "Circuits to hosted services carried now."),
	}
}

func (c tunnelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.services, c.interceptions, c.tcp, c.udpFlows, c.udpDropped, c.unmatched, c.dialFailures,
		c.active, c.dnsQueries, c.dnsAssignments, c.hostBound, c.hostBindFailures, c.hostCircuits, c.hostRefused, c.hostDialFailures, c.hostActive} {
		ch <- d
	}
}

func (c tunnelCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	var host tunnel.HostStats
	if t := c.r.tproxy; t != nil {
		s := t.Stats()
		host = s.Host
		gauge(c.services, s.Services)
		gauge(c.interceptions, s.Interceptions)
		counter(c.tcp, s.TCPIntercepted)
		counter(c.udpFlows, s.UDPFlows)
		counter(c.udpDropped, s.UDPDropped)
		counter(c.unmatched, s.Unmatched)
		counter(c.dialFailures, s.DialFailures)
		gauge(c.active, s.Active)
		res := s.Resolver
		counter(c.dnsQueries, res.Intercepted, "intercepted")
		counter(c.dnsQueries, res.EmptyAAAA+res.EmptyOther, "empty")
		counter(c.dnsQueries, res.Forwarded, "forwarded")
		counter(c.dnsQueries, res.Refused, "refused")
		counter(c.dnsQueries, res.ServFail, "servfail")
		counter(c.dnsQueries, res.Rejected, "rejected")
		gauge(c.dnsAssignments, int64(res.Assignments))
	} else if h := c.r.tunnelHost; h != nil {
		host = h.Stats()
	} else {
		return
	}
	gauge(c.hostBound, host.Bound)
	counter(c.hostBindFailures, host.BindFailures)
	counter(c.hostCircuits, host.Circuits)
	counter(c.hostRefused, host.Refused)
	counter(c.hostDialFailures, host.DialFailures)
	gauge(c.hostActive, host.Active)
}
