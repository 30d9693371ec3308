package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ops/health"
	"github.com/zmesh/zmesh/internal/ops/web"
)

// Health check settings. The store check is a read transaction; the control channel check
// reads a flag, so it runs more often.
const (
	storeCheckInterval = 15 * time.Second
	storeCheckTimeout  = 10 * time.Second
	ctrlCheckInterval  = 5 * time.Second
	ctrlCheckTimeout   = time.Second
	// The cluster check reads the raft node's state in memory.
	clusterCheckInterval = 2 * time.Second
	clusterCheckTimeout  = time.Second
)

// Health check ids, as GET /health-checks names them.
const (
	checkStore        = "store.read"
	checkCtrlListener = "ctrl.listener"
	checkCluster      = "cluster"
)

// healthChecks are the controller's checks: the store answers a read transaction, and,
// when the controller serves the control channel, its listener is accepting routers.
func (c *Controller) healthChecks(withCtrl bool) []health.Check {
	checks := []health.Check{{
		ID: checkStore, Interval: storeCheckInterval, Timeout: storeCheckTimeout,
		Run: func(context.Context) (any, error) {
			if err := c.store.Check(); err != nil {
				return nil, err // shown as the check's details
			}
			lsm, vlog := c.store.Sizes()
			return map[string]any{"lsmSizeBytes": lsm, "vlogSizeBytes": vlog}, nil
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
	if c.Node() != nil {
		checks = append(checks, health.Check{ID: checkCluster, Interval: clusterCheckInterval, Timeout: clusterCheckTimeout, Run: c.checkCluster})
	}
	return checks
}

// openWeb opens every bind point of the web section, to serve the APIs each listener names
// over HTTPS (TLS 1.2 or later) with the API's server certificate (webCert): health-checks (checks),
// metrics (the controller's registry and the checks' results). Nothing is opened when one
// bind point cannot be. The bound addresses are recorded by listener name (webAddrs).
func (c *Controller) openWeb(checks *health.Checker) (*web.Server, error) {
	// The checker is made per run of the controller, its registry of one collector with it.
	checkMetrics := prometheus.NewRegistry()
	if err := checkMetrics.Register(health.NewCollector(checks)); err != nil {
		return nil, fmt.Errorf("health check metrics: %w", err)
	}
	srv, err := web.Listen(web.Options{
		Listeners: c.cfg.Web,
		APIs: map[string]http.Handler{
			config.APIHealthChecks: checks,
			config.APIMetrics:      web.Metrics(prometheus.Gatherers{c.metrics.Gatherer(), checkMetrics}, c.log),
		},
		GetCertificate: c.webCert.GetCertificate,
		Log:            c.log,
	})
	if err != nil {
		return nil, err
	}
	c.webMu.Lock()
	c.webAddrs = srv.Addrs()
	c.webMu.Unlock()
	return srv, nil
}

// ReloadWebCertificate reads the API's server certificate and key files again (server.cert
// and server.key in the data directory's pki/) and has the web listeners present them from
// the next handshake on; it reports whether the certificate changed. A certificate the
// controller would not start with (not its CA's, not for its names, expiring within
// pki.ServerCertRenewBefore) is refused with the reason, and the listeners keep theirs. The
// API and control channel listeners keep their certificates until the next start.
func (c *Controller) ReloadWebCertificate() (changed bool, err error) {
	cert, err := c.ca.ReadServerCert(filepath.Join(c.cfg.DataDir, "pki"), apiHosts(c.cfg))
	if err != nil {
		return false, fmt.Errorf("web listeners' certificate: %w", err)
	}
	if cert.Leaf.Equal(c.webCert.Get().Leaf) {
		return false, nil
	}
	c.webCert.Set(cert)
	return true, nil
}
