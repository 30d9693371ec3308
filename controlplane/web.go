package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/health"
)

// Health check settings. The store check is a read transaction; the control channel check
// reads a flag, so it runs more often.
const (
	storeCheckInterval = 15 * time.Second
	storeCheckTimeout  = 10 * time.Second
	ctrlCheckInterval  = 5 * time.Second
	ctrlCheckTimeout   = time.Second
)

// Health check ids, as GET /health-checks names them.
const (
	checkStore        = "store.read"
	checkCtrlListener = "ctrl.listener"
)

// healthChecks are the controller's checks: the store answers a read transaction, and,
// when the controller serves the control channel, its listener is accepting routers.
func (c *Controller) healthChecks(withCtrl bool) []health.Check {
	checks := []health.Check{{
		ID: checkStore, Interval: storeCheckInterval, Timeout: storeCheckTimeout,
		Run: func(context.Context) (any, error) {
			lsm, vlog := c.store.Sizes()
			return map[string]any{"lsmSizeBytes": lsm, "vlogSizeBytes": vlog}, c.store.Check()
		},
	}}
	if withCtrl {
		checks = append(checks, health.Check{
			ID: checkCtrlListener, Interval: ctrlCheckInterval, Timeout: ctrlCheckTimeout,
			Run: func(context.Context) (any, error) {
				addr := c.ctrlServing.Load()
				if addr == nil {
					return nil, errors.New("the control channel listener is not accepting connections")
				}
				return map[string]any{"address": *addr, "connectedRouters": c.routers.Connected()}, nil
			},
		})
	}
	return checks
}

// webServers serve the configuration's web listeners.
type webServers struct {
	servers []*http.Server
	wg      sync.WaitGroup
	// errc receives the first error of a server that stopped serving on its own.
	errc chan error
}

// serveWeb opens every bind point of the web section and serves the APIs each listener
// names over HTTPS (TLS 1.2 or later) with the API's server certificate: health-checks on
// GET /health-checks, metrics on GET /metrics. Nothing is served when one bind point cannot
// be opened. The bound addresses are recorded by listener name (webAddrs).
func (c *Controller) serveWeb(checks http.Handler) (*webServers, error) {
	ws := &webServers{errc: make(chan error, 1)}
	type bound struct {
		srv *http.Server
		ln  net.Listener
	}
	var all []bound
	closeAll := func() {
		for _, b := range all {
			b.ln.Close()
		}
	}
	addrs := map[string][]net.Addr{}
	for i, wl := range c.cfg.Web {
		mux := http.NewServeMux()
		for _, api := range wl.APIs {
			switch api.Binding {
			case config.APIHealthChecks:
				mux.Handle("GET /health-checks", checks)
			case config.APIMetrics:
				mux.Handle("GET /metrics", c.metrics.Handler())
			default:
				// The configuration reader allows only the bindings above.
				closeAll()
				return nil, fmt.Errorf("web[%d] (%s): binding %q is not served by the controller", i, wl.Name, api.Binding)
			}
		}
		srv := &http.Server{
			Handler:           mux,
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{c.cert}, MinVersion: tls.VersionTLS12},
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
		}
		ws.servers = append(ws.servers, srv)
		for j, bp := range wl.BindPoints {
			ln, err := net.Listen("tcp", bp.Interface)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("listen on web[%d].bindPoints[%d].interface %s (web listener %s): %w", i, j, bp.Interface, wl.Name, err)
			}
			all = append(all, bound{srv, ln})
			addrs[wl.Name] = append(addrs[wl.Name], ln.Addr())
			c.log.Info("controller web listener", "name", wl.Name, "listen", ln.Addr().String(), "address", bp.Address, "apis", bindings(wl))
		}
	}
	for _, b := range all {
		ws.wg.Go(func() {
			if err := b.srv.Serve(tls.NewListener(b.ln, b.srv.TLSConfig)); !errors.Is(err, http.ErrServerClosed) {
				select {
				case ws.errc <- fmt.Errorf("web listener on %s: %w", b.ln.Addr(), err):
				default:
				}
			}
		})
	}
	c.webMu.Lock()
	c.webAddrs = addrs
	c.webMu.Unlock()
	return ws, nil
}

// shutdown stops the web servers, letting requests in progress finish for a few seconds.
func (ws *webServers) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range ws.servers {
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	}
	ws.wg.Wait()
}

func bindings(wl config.WebListener) []string {
	out := make([]string, 0, len(wl.APIs))
	for _, a := range wl.APIs {
		out = append(out, a.Binding)
	}
	return out
}
