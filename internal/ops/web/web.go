// Package web serves the HTTPS listeners of a web section (config.WebListener, the same for
// the router and the controller): every bind point of every listener, each serving the APIs
// its listener names, by binding, over TLS 1.2 or later with the certificate of the process
// that serves them, until a context ends. The APIs are health-checks (GET /health-checks) and
// metrics (GET /metrics); the caller gives their handlers. Both the router (dataplane) and
// the controller (controlplane) use it; it knows neither.
package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zmesh/zmesh/config"
)

// ShutdownTimeout bounds how long stopping listeners wait for requests in progress.
const ShutdownTimeout = 5 * time.Second

// pattern is the route of an API's binding on a listener's mux; only GET (and so HEAD) is
// served, other methods are answered 405.
func pattern(binding string) (string, bool) {
	switch binding {
	case config.APIHealthChecks:
		return "GET /health-checks", true
	case config.APIMetrics:
		return "GET /metrics", true
	}
	return "", false
}

// Options say what to serve.
type Options struct {
	// Listeners is the web section.
	Listeners []config.WebListener
	// APIs are the handlers of the APIs by binding (config.APIHealthChecks,
	// config.APIMetrics). A listener naming a binding without a handler is an error.
	APIs map[string]http.Handler
	// GetCertificate gives what every bind point presents, with its chain, at each
	// handshake: a certificate that can be replaced while the listeners serve (a
	// CertificateHolder's, the router's renewed one). It is required.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Log receives the bind points as they open and the servers' errors (at debug level:
	// failed TLS handshakes are the client's business).
	Log *slog.Logger
}

// Server is the open bind points of a web section.
type Server struct {
	bound []bound
	addrs map[string][]net.Addr
}

// bound is one bind point and its server.
type bound struct {
	srv   *http.Server
	ln    net.Listener
	where string // the listener and bind point, for errors
}

// Listen opens every bind point of opts.Listeners. When one cannot be opened, or names an
// API without a handler, it closes those it opened and returns an error naming the listener
// and the bind point. Serve serves them.
func Listen(opts Options) (_ *Server, err error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.GetCertificate == nil {
		return nil, errors.New("web: Options.GetCertificate is nil: the listeners have no certificate to present")
	}
	s := &Server{addrs: map[string][]net.Addr{}}
	defer func() {
		if err != nil {
			for _, b := range s.bound {
				b.ln.Close()
			}
		}
	}()
	for i, wl := range opts.Listeners {
		mux := http.NewServeMux()
		apis := make([]string, 0, len(wl.APIs))
		for _, api := range wl.APIs {
			route, known := pattern(api.Binding)
			h := opts.APIs[api.Binding]
			if !known || h == nil {
				return nil, fmt.Errorf("web[%d] %q: API %q is not served here", i, wl.Name, api.Binding)
			}
			mux.Handle(route, h)
			apis = append(apis, api.Binding)
		}
		tlsConf := &tls.Config{GetCertificate: opts.GetCertificate, MinVersion: tls.VersionTLS12}
		// Scrapes and health probes are quick and small; the limits keep idle or slow
		// clients from holding connections.
		srv := &http.Server{
			Handler: mux,
			// A config per server: serving adds the HTTP/2 protocols to it.
			TLSConfig:         tlsConf,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(log.With("web", wl.Name).Handler(), slog.LevelDebug),
		}
		for _, bp := range wl.BindPoints {
			where := fmt.Sprintf("web[%d] %q bind point %s", i, wl.Name, bp.Interface)
			ln, err := net.Listen("tcp", bp.Interface)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			s.bound = append(s.bound, bound{srv: srv, ln: ln, where: where})
			s.addrs[wl.Name] = append(s.addrs[wl.Name], ln.Addr())
			log.Info("web listener open", "name", wl.Name, "listen", ln.Addr().String(), "address", bp.Address, "apis", apis)
		}
	}
	return s, nil
}

// CertificateHolder holds a certificate that listeners present and that can be replaced
// while they serve: a process reloading its certificate files swaps it here.
type CertificateHolder struct {
	cert atomic.Pointer[tls.Certificate]
}

// NewCertificateHolder returns a holder of cert.
func NewCertificateHolder(cert tls.Certificate) *CertificateHolder {
	h := &CertificateHolder{}
	h.Set(cert)
	return h
}

// Set makes cert the certificate presented from the next handshake on.
func (h *CertificateHolder) Set(cert tls.Certificate) { h.cert.Store(&cert) }

// Get returns the certificate presented now.
func (h *CertificateHolder) Get() tls.Certificate { return *h.cert.Load() }

// GetCertificate is for Options.GetCertificate: the certificate presented now.
func (h *CertificateHolder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return h.cert.Load(), nil
}

// Addrs returns the bound addresses of the bind points, by listener name, in the order of
// the configuration.
func (s *Server) Addrs() map[string][]net.Addr {
	out := make(map[string][]net.Addr, len(s.addrs))
	for name, addrs := range s.addrs {
		out[name] = append([]net.Addr(nil), addrs...)
	}
	return out
}

// Serve serves every bind point until ctx ends or one stops serving on its own; then it
// shuts them all down, letting requests in progress finish for at most ShutdownTimeout. It
// returns nil when ctx ended, else the error of the bind point that stopped, naming it.
func (s *Server) Serve(ctx context.Context) error {
	failed := make(chan error, len(s.bound))
	var wg sync.WaitGroup
	for _, b := range s.bound {
		wg.Go(func() {
			if err := b.srv.ServeTLS(b.ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("%s: %w", b.where, err)
			}
		})
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	for _, b := range s.bound {
		// Servers are shared by the bind points of a listener: shutting one down twice is
		// harmless.
		if serr := b.srv.Shutdown(sctx); serr != nil {
			b.srv.Close()
		}
	}
	wg.Wait()
	return err
}

// Metrics is the handler of the metrics API: g in the Prometheus exposition formats. A
// collector that fails is logged and left out; the others are still served.
func Metrics(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError,
		// Scrapes gather everything at once; a few in parallel are plenty.
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	})
}

// promLogger passes the metrics handler's errors to a slog logger.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics scrape", "err", fmt.Sprint(v...)) }
