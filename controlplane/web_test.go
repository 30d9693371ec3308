package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ops/health"
	"github.com/zmesh/zmesh/internal/testutil"
)

// opsController is a controller serving its API, its control channel and two web
// listeners on loopback: "health" (health-checks) and "metrics" (metrics).
type opsController struct {
	ctrl     *Controller
	url      string
	ctrlAddr string
	admin    *apiclient.Client
	web      *http.Client // trusts the controller's CA
	health   string       // https://host:port of the health listener
	metrics  string       // https://host:port of the metrics listener
}

func startOps(t *testing.T) *opsController {
	t.Helper()
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t.TempDir(), apiLn.Addr().String())
	cfg.Ctrl.Listen.Port = ctrlLn.Addr().(*net.TCPAddr).Port
	point := []config.BindPoint{{Interface: "127.0.0.1:0", Address: "127.0.0.1:0"}}
	cfg.Web = []config.WebListener{
		{Name: "health", BindPoints: point, APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}},
		{Name: "metrics", BindPoints: point, APIs: []config.WebAPI{{Binding: config.APIMetrics}}},
	}
	ctrl, err := Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Build{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- ctrl.ServeWithCtrl(ctx, apiLn, ctrlLn, func(net.Addr) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("the controller stopped at start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller stopped with: %v", err)
		}
	})
	o := &opsController{
		ctrl: ctrl, url: "https://" + cfg.API.Advertise, ctrlAddr: ctrlLn.Addr().String(),
		web: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ctrl.CA().Pool(), MinVersion: tls.VersionTLS12},
		}},
	}
	t.Cleanup(o.web.CloseIdleConnections)
	ctrl.webMu.Lock()
	o.health = "https://" + ctrl.webAddrs["health"][0].String()
	o.metrics = "https://" + ctrl.webAddrs["metrics"][0].String()
	ctrl.webMu.Unlock()
	o.admin = apiclient.New(o.url, ctrl.CA().Pool(), nil)
	if _, err := o.admin.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	return o
}

// get fetches url from a web listener and returns the status and body.
func (o *opsController) get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := o.web.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// scrape fetches and parses /metrics.
func (o *opsController) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := o.get(t, o.metrics+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return families
}

// value returns the value of the sample of family name whose labels include labels; ok is
// false when there is none.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// The metrics listener serves the registry in the Prometheus text format: API requests by
// route pattern and code with their durations, authentications by method and result, the
// store's entities and sessions, connected routers, the health checks' results, and the
// process and Go collectors. Each
// listener serves only the APIs it names.
func TestWebMetrics(t *testing.T) {
	t.Parallel()
	o := startOps(t)
	ctx := context.Background()
	_, err := apiclient.New(o.url, o.ctrl.CA().Pool(), nil).AuthenticatePassword(ctx, "admin", "wrong-pass")
	wantStatus(t, err, http.StatusUnauthorized, "INVALID_AUTH")
	id := createIdentity(t, o.admin, map[string]any{"name": "laptop", "type": "Device", "isAdmin": false, "enrollment": map[string]any{"ott": true}})
	_, err = o.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/edge-routers/"+id.ID+"/metrics", nil, nil)
	wantStatus(t, err, http.StatusNotFound, "NOT_FOUND")
	_, err = o.admin.Do(ctx, "GET", "/edge/management/v1/no-such-thing/"+id.ID, nil, nil)
	wantStatus(t, err, http.StatusNotFound, "NOT_FOUND")
	routerID, _ := connectRouter(t, o.ctrl, o.ctrlAddr)

	fams := o.scrape(t)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"zmesh_authentications_total", map[string]string{"method": "password", "result": "success"}, 1},
		{"zmesh_authentications_total", map[string]string{"method": "password", "result": "failure"}, 1},
		{"zmesh_authentications_total", map[string]string{"method": "cert", "result": "success"}, 0},
		{"zmesh_api_requests_total", map[string]string{"method": "POST", "route": "/edge/management/v1/identities", "code": "201"}, 1},
		{"zmesh_api_requests_total", map[string]string{"method": "GET", "route": "/edge/management/v1/identities/{id}", "code": "200"}, 1},
		{"zmesh_api_requests_total", map[string]string{"method": "GET", "route": "/edge/management/v1/edge-routers/{id}/metrics", "code": "404"}, 1},
		{"zmesh_api_requests_total", map[string]string{"method": "GET", "route": "unmatched", "code": "404"}, 1},
		{"zmesh_api_request_duration_seconds", map[string]string{"method": "GET", "route": "/edge/management/v1/identities/{id}"}, 1},
		{"zmesh_api_sessions_active", nil, 1},
		{"zmesh_sessions_active", nil, 0},
		{"zmesh_store_entities", map[string]string{"collection": "edgeRouters"}, 1},
		{"zmesh_store_entities", map[string]string{"collection": "identities"}, 2},
		{"zmesh_routers_connected", nil, 1},
		// The health checks ran once before the listeners opened.
		{"zmesh_health_check_healthy", map[string]string{"check": checkStore}, 1},
		{"zmesh_health_check_healthy", map[string]string{"check": checkCtrlListener}, 1},
		{"zmesh_health_check_consecutive_failures", map[string]string{"check": checkStore}, 0},
	} {
		if got, ok := value(fams, tt.name, tt.labels); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present: %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	for _, name := range []string{"zmesh_store_lsm_size_bytes", "zmesh_store_vlog_size_bytes", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := value(fams, name, nil); !ok {
			t.Errorf("%s is missing", name)
		}
	}
	// Raw paths never become label values.
	for _, m := range fams["zmesh_api_requests_total"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "route" && (strings.Contains(lp.GetValue(), id.ID) || strings.Contains(lp.GetValue(), routerID)) {
				t.Errorf("route label %q holds an id", lp.GetValue())
			}
		}
	}

	if status, _ := o.get(t, o.health+"/metrics"); status != http.StatusNotFound {
		t.Errorf("the health listener answers /metrics with %d, want 404", status)
	}
	if status, _ := o.get(t, o.metrics+"/health-checks"); status != http.StatusNotFound {
		t.Errorf("the metrics listener answers /health-checks with %d, want 404", status)
	}
}

// The health listener reports the store and control channel checks, healthy.
func TestWebHealthChecks(t *testing.T) {
	t.Parallel()
	o := startOps(t)
	connectRouter(t, o.ctrl, o.ctrlAddr)
	status, body := o.get(t, o.health+"/health-checks")
	if status != http.StatusOK {
		t.Fatalf("GET /health-checks: %d %s", status, body)
	}
	var rep health.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if !rep.Data.Healthy || len(rep.Data.Checks) != 2 {
		t.Fatalf("report %s, want two healthy checks", body)
	}
	for i, id := range []string{checkStore, checkCtrlListener} {
		c := rep.Data.Checks[i]
		if c.ID != id || !c.Healthy || c.ConsecutiveFailures != 0 || c.UpSince == "" {
			t.Errorf("check %d = %+v, want %s healthy since a time", i, c, id)
		}
		if _, err := time.Parse(time.RFC3339, c.LastCheckTime); err != nil {
			t.Errorf("check %s: lastCheckTime %q: %v", id, c.LastCheckTime, err)
		}
		if _, err := time.ParseDuration(c.LastCheckDuration); err != nil {
			t.Errorf("check %s: lastCheckDuration %q: %v", id, c.LastCheckDuration, err)
		}
	}
	if d, _ := rep.Data.Checks[1].Details.(map[string]any); d["address"] != o.ctrlAddr {
		t.Errorf("ctrl.listener details %v, want the address %s", rep.Data.Checks[1].Details, o.ctrlAddr)
	}
}

// connectRouter enrolls an edge router and connects its control channel; setup, when given,
// registers handlers before the channel starts.
func connectRouter(t *testing.T, c *Controller, ctrlAddr string, setup ...func(*ctrlproto.Channel)) (string, *ctrlproto.Channel) {
	t.Helper()
	r := &model.EdgeRouter{Name: "er-" + t.Name()}
	if err := c.Model().CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	enr, err := c.Model().RouterEnrollment(r.ID)
	if err != nil || enr == nil {
		t.Fatalf("enrollment: %v", err)
	}
	key := testutil.NewKey(t)
	certs, err := c.Model().EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "er.example"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParsePEMCert(certs.Cert)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", ctrlAddr, &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}},
		RootCAs:      c.CA().Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := ctrlproto.New(context.Background(), conn, slog.New(slog.NewTextHandler(io.Discard, nil)), ctrlproto.Options{RequestTimeout: 5 * time.Second})
	for _, f := range setup {
		f(ch)
	}
	ch.Start()
	t.Cleanup(func() { ch.Close() })
	reply, err := ctrlproto.Call[*ctrlproto.HelloReply](context.Background(), ch, &ctrlproto.Hello{RouterID: r.ID, Version: "test", Protocol: ctrlproto.ProtocolVersion})
	if err != nil || !reply.Accepted {
		t.Fatalf("Hello: %+v %v", reply, err)
	}
	return r.ID, ch
}

// TestReloadWebCertificate: the web listeners present the server certificate re-read from
// its files, from the next handshake on, while the API listener keeps its own; a certificate
// that does not load is refused and the listeners keep theirs.
func TestReloadWebCertificate(t *testing.T) {
	t.Parallel()
	o := startOps(t)
	c := o.ctrl
	presented := func(url string) *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: c.CA().Pool(), MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	old := c.cert.Leaf
	if changed, err := c.ReloadWebCertificate(); changed || err != nil {
		t.Fatalf("a reload with the same files: changed %v, %v", changed, err)
	}
	dir := filepath.Join(c.cfg.DataDir, "pki")
	for _, f := range []string{pki.ServerCertFile, pki.ServerKeyFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	renewed, err := c.CA().ServerCert(dir, apiHosts(c.cfg))
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := c.ReloadWebCertificate(); !changed || err != nil {
		t.Fatalf("a reload with new files: changed %v, %v", changed, err)
	}
	if got := presented(o.health); !got.Equal(renewed.Leaf) {
		t.Errorf("the web listener presents serial %v, not the new certificate", got.SerialNumber)
	}
	if got := presented(o.url); !got.Equal(old) {
		t.Errorf("the API listener presents serial %v, not its own certificate", got.SerialNumber)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.ServerCertFile), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := c.ReloadWebCertificate(); changed || err == nil || !strings.Contains(err.Error(), pki.ServerCertFile) {
		t.Errorf("a reload of a broken file: changed %v, %v; want an error naming the file", changed, err)
	}
	if got := presented(o.metrics); !got.Equal(renewed.Leaf) {
		t.Errorf("after a refused reload the web listener presents serial %v", got.SerialNumber)
	}
}
