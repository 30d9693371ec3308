package dataplane

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

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zmesh/zmesh/config"
)

// The router's web listeners (web section): each serves its APIs on each of its bind points
// over HTTPS with the router's server certificate (identity.server_cert), as OpenZiti's web
// listeners do; clients verify it with the network's CA (identity.ca) and present no
// certificate. The APIs are health-checks (GET /health-checks, health.go) and metrics
// (GET /metrics, the registry in the Prometheus exposition formats).

// webShutdownTimeout bounds how long a stopping web listener waits for requests in progress.
const webShutdownTimeout = 2 * time.Second

// startWeb opens every bind point of every web listener and serves them until ctx ends. A
// bind point that cannot be opened is an error naming it; those opened before it close
// when ctx ends.
func (r *Router) startWeb(ctx context.Context, wg *sync.WaitGroup) error {
	for i, w := range r.cfg.Web {
		mux := http.NewServeMux()
		for _, api := range w.APIs {
			switch api.Binding {
			case config.APIHealthChecks:
				mux.HandleFunc("GET /health-checks", r.serveHealth)
			case config.APIMetrics:
				mux.Handle("GET /metrics", promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{
					ErrorLog: promLogger{r.log}, ErrorHandling: promhttp.ContinueOnError}))
			}
		}
		tlsConf := &tls.Config{Certificates: []tls.Certificate{r.ident.Server}, MinVersion: tls.VersionTLS12}
		for _, bp := range w.BindPoints {
			where := fmt.Sprintf("web[%d] %q bind point %s", i, w.Name, bp.Interface)
			ln, err := net.Listen("tcp", bp.Interface)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			// Scrapes and health probes are quick; the timeouts keep idle or slow clients from
			// holding connections.
			srv := &http.Server{Handler: mux, TLSConfig: tlsConf, ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
				ErrorLog: slog.NewLogLogger(r.log.With("web", w.Name).Handler(), slog.LevelDebug)}
			r.log.Info("web listener serving", "name", w.Name, "bind", ln.Addr().String(), "address", bp.Address)
			wg.Go(func() {
				if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
					r.log.Error("web listener stopped", "where", where, "err", err)
				}
			})
			wg.Go(func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), webShutdownTimeout)
				defer cancel()
				if err := srv.Shutdown(sctx); err != nil {
					srv.Close()
				}
			})
		}
	}
	return nil
}

// promLogger passes the metrics handler's errors (a collector that failed) to the router's
// log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }
