package web

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
)

// certs returns a server certificate for 127.0.0.1 issued by a new CA, and a client that
// trusts that CA only.
func certs(t *testing.T) (tls.Certificate, *http.Client, *pki.CA) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCert(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	t.Cleanup(cl.CloseIdleConnections)
	return cert, cl, ca
}

// loopback is a bind point on a free loopback port.
var loopback = config.BindPoint{Interface: "127.0.0.1:0", Address: "127.0.0.1:0"}

// text is a handler answering s.
func text(s string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, s) })
}

// serve runs s until the test ends and checks that it stopped cleanly.
func serve(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func get(t *testing.T, cl *http.Client, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// Each listener serves, on every one of its bind points, the APIs it names and nothing else,
// over TLS 1.2 or later with the certificate it was given.
func TestServesAPIsByBinding(t *testing.T) {
	t.Parallel()
	cert, cl, ca := certs(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zmesh_test_answer", Help: "The answer."}, func() float64 { return 42 }))
	s, err := Listen(Options{
		Listeners: []config.WebListener{
			{Name: "health", BindPoints: []config.BindPoint{loopback}, APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}},
			{Name: "ops", BindPoints: []config.BindPoint{loopback, loopback},
				APIs: []config.WebAPI{{Binding: config.APIHealthChecks}, {Binding: config.APIMetrics}}},
		},
		APIs:           map[string]http.Handler{config.APIHealthChecks: text("healthy"), config.APIMetrics: Metrics(reg, nil)},
		GetCertificate: NewCertificateHolder(cert).GetCertificate,
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	addrs := s.Addrs()
	if len(addrs["health"]) != 1 || len(addrs["ops"]) != 2 {
		t.Fatalf("bound addresses %v, want one for health and two for ops", addrs)
	}
	health := "https://" + addrs["health"][0].String()
	if code, body := get(t, cl, "GET", health+"/health-checks"); code != 200 || body != "healthy" {
		t.Errorf("health GET /health-checks: %d %q", code, body)
	}
	if code, _ := get(t, cl, "GET", health+"/metrics"); code != http.StatusNotFound {
		t.Errorf("health GET /metrics: %d, want 404: the listener does not name the metrics API", code)
	}
	if code, _ := get(t, cl, "POST", health+"/health-checks"); code != http.StatusMethodNotAllowed {
		t.Errorf("health POST /health-checks: %d, want 405", code)
	}
	for _, a := range addrs["ops"] {
		base := "https://" + a.String()
		if code, body := get(t, cl, "GET", base+"/health-checks"); code != 200 || body != "healthy" {
			t.Errorf("ops %s GET /health-checks: %d %q", a, code, body)
		}
		code, body := get(t, cl, "GET", base+"/metrics")
		if code != 200 {
			t.Fatalf("ops %s GET /metrics: %d %q", a, code, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("GET /metrics does not parse: %v\n%s", err, body)
		}
		if f := fams["zmesh_test_answer"]; f == nil || f.GetMetric()[0].GetGauge().GetValue() != 42 {
			t.Errorf("GET /metrics: zmesh_test_answer is %v", f)
		}
	}

	// The server's certificate is the one given; TLS 1.1 is refused.
	conn, err := tls.Dial("tcp", addrs["health"][0].String(), &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().PeerCertificates[0]; !got.Equal(cert.Leaf) {
		t.Errorf("the listener presents %s, not the certificate it was given", got.Subject)
	}
	conn.Close()
	if conn, err := tls.Dial("tcp", addrs["health"][0].String(), &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

// A bind point that cannot be opened, or an API without a handler, is an error naming the
// listener and the bind point or API; the bind points opened before it are closed again.
func TestListenErrors(t *testing.T) {
	t.Parallel()
	cert, _, _ := certs(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// A port free now, for the first bind point: it must be free again after the failure.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := probe.Addr().String()
	probe.Close()
	at := taken.Addr().String()
	health := []config.WebAPI{{Binding: config.APIHealthChecks}}
	for _, tt := range []struct {
		name      string
		listeners []config.WebListener
		want      string
	}{
		{"bind point taken", []config.WebListener{
			{Name: "a", BindPoints: []config.BindPoint{{Interface: first, Address: first}}, APIs: health},
			{Name: "ops", BindPoints: []config.BindPoint{loopback, {Interface: at, Address: at}}, APIs: health},
		}, `web[1] "ops" bind point ` + at + ": listen tcp " + at},
		{"API without handler", []config.WebListener{
			{Name: "a", BindPoints: []config.BindPoint{{Interface: first, Address: first}}, APIs: health},
			{Name: "scrape", BindPoints: []config.BindPoint{loopback}, APIs: []config.WebAPI{{Binding: config.APIMetrics}}},
		}, `web[1] "scrape": API "metrics" is not served here`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Listen(Options{Listeners: tt.listeners, GetCertificate: NewCertificateHolder(cert).GetCertificate,
				APIs: map[string]http.Handler{config.APIHealthChecks: text("ok")}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Listen: %v, %v; want an error with %q", s, err, tt.want)
			}
			ln, err := net.Listen("tcp", first)
			if err != nil {
				t.Fatalf("the first bind point is still open after the failure: %v", err)
			}
			ln.Close()
		})
	}
}

// When its context ends, Serve lets a request in progress finish, then returns nil with
// every bind point closed.
func TestServeStopsWithContext(t *testing.T) {
	t.Parallel()
	cert, cl, _ := certs(t)
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	s, err := Listen(Options{
		Listeners:      []config.WebListener{{Name: "ops", BindPoints: []config.BindPoint{loopback}, APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}}},
		APIs:           map[string]http.Handler{config.APIHealthChecks: slow},
		GetCertificate: NewCertificateHolder(cert).GetCertificate,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addrs()["ops"][0].String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()

	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := cl.Get("https://" + addr + "/health-checks")
		if err != nil {
			t.Error(err)
			answered <- answer{}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(body)}
	}()
	<-entered
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a request in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if a := <-answered; a.code != 200 || a.body != "done" {
		t.Errorf("the request in progress at the stop got %d %q", a.code, a.body)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatal("the bind point still accepts connections after Serve returned")
	}
}

// A bind point that stops serving on its own ends Serve with an error naming it.
func TestServeReportsFailure(t *testing.T) {
	t.Parallel()
	cert, _, _ := certs(t)
	s, err := Listen(Options{
		Listeners:      []config.WebListener{{Name: "ops", BindPoints: []config.BindPoint{loopback}, APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}}},
		APIs:           map[string]http.Handler{config.APIHealthChecks: text("ok")},
		GetCertificate: NewCertificateHolder(cert).GetCertificate,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Closing the listener under the server makes its Accept fail, as a dead socket would.
	s.bound[0].ln.Close()
	err = s.Serve(context.Background())
	if err == nil || !strings.Contains(err.Error(), `web[0] "ops" bind point 127.0.0.1:0`) || errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve with a dead listener: %v", err)
	}
}

// TestCertificateHolder: listeners serving from a holder present the certificate set last,
// from the next handshake on.
func TestCertificateHolder(t *testing.T) {
	t.Parallel()
	first, _, ca := certs(t)
	second, err := ca.ServerCert(t.TempDir(), []string{"127.0.0.1", "ops.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	holder := NewCertificateHolder(first)
	s, err := Listen(Options{
		Listeners:      []config.WebListener{{Name: "ops", BindPoints: []config.BindPoint{loopback}, APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}}},
		APIs:           map[string]http.Handler{config.APIHealthChecks: text("ok")},
		GetCertificate: holder.GetCertificate,
	})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	presented := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", s.Addrs()["ops"][0].String(), &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	if got := presented(); !got.Equal(first.Leaf) {
		t.Fatalf("presents %v, not the first certificate", got.DNSNames)
	}
	holder.Set(second)
	if got := presented(); !got.Equal(second.Leaf) {
		t.Fatalf("presents %v after Set, not the second certificate", got.DNSNames)
	}
	if !holder.Get().Leaf.Equal(second.Leaf) {
		t.Error("Get does not return the certificate set")
	}
}
