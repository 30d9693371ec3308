package dataplane

import (
	"context"
	"net/http"
	"sync"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ops/web"
)

// The router's web listeners (web section), served by the web package over HTTPS with the
// router's server certificate (identity.server_cert), as OpenZiti's web listeners do;
// clients verify it with the network's CA (identity.ca) and present no certificate. The APIs
// are health-checks (the health checks, health.go) and metrics (the registry, metrics.go).

// startWeb opens every bind point of every web listener and serves them until ctx ends. A
// bind point that cannot be opened is an error naming it, and none is served.
func (r *Router) startWeb(ctx context.Context, wg *sync.WaitGroup) error {
	if len(r.cfg.Web) == 0 {
		return nil
	}
	srv, err := web.Listen(web.Options{
		Listeners: r.cfg.Web,
		APIs: map[string]http.Handler{
			config.APIHealthChecks: r.checks,
			config.APIMetrics:      web.Metrics(r.metrics.reg, r.log),
		},
		// The renewed certificate from the next handshake on.
		GetCertificate: r.ident.Certs.GetCertificate,
		Log:            r.log,
	})
	if err != nil {
		return err
	}
	wg.Go(func() {
		// The router runs on without its web listeners: they are for observing it.
		if err := srv.Serve(ctx); err != nil {
			r.log.Error("web listeners stopped", "err", err)
		}
	})
	return nil
}
