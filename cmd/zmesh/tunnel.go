package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
	"github.com/zmesh/zmesh/tunnel/sdkoverlay"
)

// zmesh tunnel proxy|tproxy|host: the tunnel modes driven by an enrolled identity through
// the SDK, without a router. They are daemons without a file to reload: SIGHUP stops them
// with the full cleanup (tproxy's rules removed), as SIGTERM does.

func newTunnelCommand(lookupEnv env, sigs signals) *cobra.Command {
	cmd := &cobra.Command{Use: "tunnel", Short: "Run a standalone tunneler with an identity file"}
	var identity string
	var lf logFlags
	var udpIdle time.Duration
	var renewAt float64
	cmd.PersistentFlags().StringVar(&identity, "identity", "", "the `FILE` of an identity, as zmesh enroll wrote it (required)")
	cmd.PersistentFlags().Float64Var(&renewAt, "renew-at", sdk.DefaultRenewAt, "renew the identity's certificate, and rewrite the identity file, once this `FRACTION` of its lifetime has passed (0 < FRACTION < 1; 0: never)")
	lf.register(cmd.PersistentFlags())
	cmd.PersistentFlags().DurationVar(&udpIdle, "udp-idle-timeout", tunnel.DefaultUDPIdleTimeout, "end a UDP flow that carried nothing either way for so long")
	// daemon runs f as a daemon (daemonRun), once the identity is loaded;
	// the SDK client closes when f's context ends.
	daemon := func(cmd *cobra.Command, f func(ctx context.Context, overlay tunnel.Overlay, log *slog.Logger) error) error {
		log, err := newLogger(cmd.ErrOrStderr(), lf, lookupEnv)
		if err != nil {
			return err
		}
		if identity == "" {
			return usagef("--identity is required: the identity file of an enrolled identity")
		}
		if renewAt < 0 || renewAt >= 1 {
			return usagef("--renew-at %v: want a fraction of the certificate's lifetime, 0 < FRACTION < 1, or 0 for no renewal", renewAt)
		}
		if renewAt == 0 {
			renewAt = -1 // the SDK's "no renewal"
		}
		c, err := sdk.Load(identity, sdk.Options{Logger: log, RenewAt: renewAt})
		if err != nil {
			return err
		}
		d := daemonRun{log: log, stderr: cmd.ErrOrStderr(), sigs: sigs}
		return d.run(cmd.Context(), func(ctx context.Context, _ func()) error {
			context.AfterFunc(ctx, func() { c.Close() })
			return f(ctx, sdkoverlay.Overlay{C: c}, log)
		})
	}

	var services []string
	var bind string
	proxy := &cobra.Command{
		Use:   "proxy --identity FILE --service NAME:PORT...",
		Short: "Listen on local TCP ports, one per service, and carry each connection to its service",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []config.TunnelService
			for _, s := range services {
				cut := strings.LastIndexByte(s, ':')
				port, err := strconv.Atoi(s[cut+1:])
				if cut <= 0 || err != nil || port < 1 || port > 65535 {
					return fmt.Errorf("--service %q is not <service>:<port> with a port from 1 to 65535", s)
				}
				list = append(list, config.TunnelService{Service: s[:cut], Port: port})
			}
			if len(list) == 0 {
				return usagef("--service is required: <service>:<port>, once per service")
			}
			return daemon(cmd, func(ctx context.Context, overlay tunnel.Overlay, log *slog.Logger) error {
				p, err := tunnel.ListenProxy(bind, list)
				if err != nil {
					return err
				}
				for _, s := range list {
					fmt.Fprintf(cmd.OutOrStdout(), "service %s on %s\n", s.Service, p.Addr(s.Service))
				}
				h := &tunnel.Host{}
				done := make(chan error, 1)
				go func() { done <- h.Run(ctx, overlay, tunnel.HostOptions{Logger: log, UDPIdleTimeout: udpIdle}) }()
				p.ServeOverlay(ctx, overlay, log)
				return ignoreCanceled(<-done)
			})
		},
	}
	proxy.Flags().StringArrayVar(&services, "service", nil, "a service and the local port to listen on for it, <service>:<port> (repeatable)")
	proxy.Flags().StringVar(&bind, "bind", "127.0.0.1", "the address the ports listen on")

	var resolverAddr, dnsRange string
	var upstreams []string
	tproxy := &cobra.Command{
		Use:   "tproxy --identity FILE",
		Short: "Intercept the identity's services transparently (Linux, CAP_NET_ADMIN) and answer DNS for their names",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := tunnel.TProxyOptions{Host: &tunnel.HostOptions{UDPIdleTimeout: udpIdle}, Upstreams: upstreams, UDPIdleTimeout: udpIdle}
			addr, err := netip.ParseAddrPort(strings.TrimPrefix(resolverAddr, "udp://"))
			if err != nil || !strings.HasPrefix(resolverAddr, "udp://") {
				return fmt.Errorf("--resolver %q is not udp://<ip>:<port>, e.g. udp://127.0.0.1:53", resolverAddr)
			}
			opts.Resolver = addr
			if opts.DNSSvcIPRange, err = netip.ParsePrefix(dnsRange); err != nil {
				return fmt.Errorf("--dns-svc-ip-range %q is not a CIDR range such as 100.64.0.1/10", dnsRange)
			}
			return daemon(cmd, func(ctx context.Context, overlay tunnel.Overlay, log *slog.Logger) error {
				opts.Logger = log
				t := &tunnel.TProxy{}
				return ignoreCanceled(t.Run(ctx, overlay, opts))
			})
		},
	}
	tproxy.Flags().StringVar(&resolverAddr, "resolver", "udp://127.0.0.1:53", "where the DNS server listens, udp://<ip>:<port>")
	tproxy.Flags().StringVar(&dnsRange, "dns-svc-ip-range", "100.64.0.1/10", "the range intercepted names get their addresses from")
	tproxy.Flags().StringArrayVar(&upstreams, "upstream", nil, "a DNS server other names are forwarded to, <ip>:<port> (repeatable; default: /etc/resolv.conf)")

	host := &cobra.Command{
		Use:   "host --identity FILE",
		Short: "Host the services the identity may bind that have a host.v1 or host.v2 config",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon(cmd, func(ctx context.Context, overlay tunnel.Overlay, log *slog.Logger) error {
				h := &tunnel.Host{}
				return ignoreCanceled(h.Run(ctx, overlay, tunnel.HostOptions{Logger: log, UDPIdleTimeout: udpIdle}))
			})
		},
	}
	cmd.AddCommand(markDaemon(proxy), markDaemon(tproxy), markDaemon(host))
	return cmd
}

// ignoreCanceled treats the end of the command's context (a stop signal) as a clean stop.
func ignoreCanceled(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
