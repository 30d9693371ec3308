package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/pproftest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// Operations of a router: the web listener's health-checks and metrics APIs, profiles and
// the message trace.

// opsWeb is a router's web section: one listener, ops, serving both APIs on a free port.
const opsWeb = `web:
  - name: ops
    bindPoints:
      - interface: 127.0.0.1:{{port}}
    apis:
      - binding: health-checks
      - binding: metrics
`

// webClient returns an HTTPS client that trusts the router's CA (identity.ca), as clients of
// the web listener do, and the base URL of the router's first web listener.
func webClient(t *testing.T, tr *testRouter) (*http.Client, string) {
	t.Helper()
	caPEM, err := os.ReadFile(tr.r.cfg.Identity.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate")
	}
	cl := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	t.Cleanup(cl.CloseIdleConnections)
	return cl, "https://" + tr.r.cfg.Web[0].BindPoints[0].Address
}

// healthBody is the health-checks API's answer.
type healthBody struct {
	Data struct {
		Healthy bool `json:"healthy"`
		Checks  []struct {
			ID                  string          `json:"id"`
			Healthy             bool            `json:"healthy"`
			LastCheckTime       string          `json:"lastCheckTime"`
			LastCheckDuration   string          `json:"lastCheckDuration"`
			ConsecutiveFailures int             `json:"consecutiveFailures"`
			UpSince             *string         `json:"upSince"`
			Details             json.RawMessage `json:"details"`
		} `json:"checks"`
	} `json:"data"`
	Meta *struct{} `json:"meta"`
}

// getHealth fetches GET /health-checks and checks its shape.
func getHealth(t *testing.T, cl *http.Client, base string) (int, healthBody) {
	t.Helper()
	resp, err := cl.Get(base + "/health-checks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h healthBody
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		t.Fatalf("health-checks body: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("health-checks Content-Type %q", ct)
	}
	if want := map[bool]int{true: 200, false: 503}[h.Data.Healthy]; resp.StatusCode != want || h.Meta == nil {
		t.Fatalf("health-checks: status %d for healthy=%v, meta %v", resp.StatusCode, h.Data.Healthy, h.Meta)
	}
	var ids []string
	healthy := true
	for _, c := range h.Data.Checks {
		ids = append(ids, c.ID)
		healthy = healthy && c.Healthy
		if (c.UpSince != nil) != c.Healthy {
			t.Fatalf("check %s: healthy=%v with upSince %v", c.ID, c.Healthy, c.UpSince)
		}
		if c.LastCheckTime != "" {
			if _, err := time.Parse(time.RFC3339, c.LastCheckTime); err != nil {
				t.Fatalf("check %s: lastCheckTime: %v", c.ID, err)
			}
			if _, err := time.ParseDuration(c.LastCheckDuration); err != nil {
				t.Fatalf("check %s: lastCheckDuration: %v", c.ID, err)
			}
		}
	}
	if !slices.Equal(ids, []string{checkControllerPing, checkLinkHealth, checkCertificates}) || healthy != h.Data.Healthy {
		t.Fatalf("checks %v, healthy=%v; want controllerPing, link.health and certificates, healthy when all are", ids, h.Data.Healthy)
	}
	return resp.StatusCode, h
}

// getMetrics fetches GET /metrics and parses it as the Prometheus text format.
func getMetrics(t *testing.T, cl *http.Client, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := cl.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics does not parse: %v", err)
	}
	return families
}

// value returns the value of the family's sample whose labels include want (name=value
// pairs), and whether there is one.
func value(families map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			match = match && labels[want[i]] == want[i+1]
		}
		if !match {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// One router carries circuits to a service it terminates itself. Its web listener serves
// healthy checks while the controller answers pings, and 503 with controllerPing failing once
// the controller is gone; its metrics parse, count the circuit once (the router is both its
// ends) and see the control channel go down. At stop, its profiles are valid pprof files and
// its trace holds every control message both ways as JSON lines.
func TestRouterOperations(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	srv := newStreamServer(t)
	a := n.addRouter("A", true, `listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [data:{{port}}]
healthChecks:
  ctrlPingCheck: {interval: 100ms, timeout: 1s, initialDelay: 0s}
  linkCheck: {interval: 100ms, initialDelay: 0s}
profile:
  cpu: {path: cpu.pprof}
  memory: {path: mem.pprof, intervalMs: 100}
trace:
  path: ctrl.trace
`+opsWeb)
	n.service("data", "A", srv.addr())
	cl, base := webClient(t, a)

	var h healthBody
	testutil.Eventually(t, "the checks to have run and passed", func() bool {
		var code int
		code, h = getHealth(t, cl, base)
		return code == 200 && h.Data.Checks[0].LastCheckTime != "" && h.Data.Checks[1].LastCheckTime != "" && h.Data.Checks[2].LastCheckTime != ""
	})
	for _, c := range h.Data.Checks {
		if c.ConsecutiveFailures != 0 {
			t.Fatalf("healthy check %s counts %d failures", c.ID, c.ConsecutiveFailures)
		}
	}
	if links := string(h.Data.Checks[1].Details); links != "[]" {
		t.Fatalf("link.health details %s, want the router's links: none", links)
	}
	var certs map[string]struct {
		NotAfter time.Time `json:"notAfter"`
		DaysLeft float64   `json:"daysLeft"`
	}
	if err := json.Unmarshal(h.Data.Checks[2].Details, &certs); err != nil || certs["client"].DaysLeft < 300 || certs["server"].NotAfter.IsZero() {
		t.Fatalf("certificates details %s (%v), want a year left on both certificates", h.Data.Checks[2].Details, err)
	}

	before := getMetrics(t, cl, base)
	if exp, ok := value(before, "zmesh_certificate_expiry_timestamp_seconds", "certificate", "server"); !ok || exp < float64(time.Now().Add(300*24*time.Hour).Unix()) {
		t.Errorf("zmesh_certificate_expiry_timestamp_seconds{certificate=server} = %v (%v), want a year from now", exp, ok)
	}
	if n, ok := value(before, "zmesh_certificate_renewals_total", "result", "failed"); !ok || n != 0 {
		t.Errorf("zmesh_certificate_renewals_total{result=failed} = %v (%v), want 0", n, ok)
	}
	for _, name := range []string{"zmesh_circuits_active", "zmesh_xgress_dial_queue_depth", "zmesh_xgress_dial_workers_busy",
		"zmesh_forwarder_frames_dropped_total", "zmesh_links", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := value(before, name); !ok {
			t.Errorf("GET /metrics has no %s", name)
		}
	}
	if v, ok := value(before, "zmesh_ctrl_connected"); !ok || v != 1 {
		t.Errorf("zmesh_ctrl_connected = %v (present %v) with the controller up", v, ok)
	}
	created0, _ := value(before, "zmesh_circuits_created_total")

	addr := a.r.ProxyAddress("data")
	if err := transfer(srv, addr, 64<<10, 64<<10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	after := getMetrics(t, cl, base)
	if created, ok := value(after, "zmesh_circuits_created_total"); !ok || created != created0+1 {
		t.Fatalf("zmesh_circuits_created_total went from %v to %v (present %v) over one circuit", created0, created, ok)
	}
	// Both ends of the circuit are on this router: it is spliced, and counted in bytes.
	if spliced, _ := value(after, "zmesh_forwarder_spliced_bytes_total"); spliced < 2*64<<10 {
		t.Fatalf("zmesh_forwarder_spliced_bytes_total is %v after a one-router circuit carried 64 KiB each way", spliced)
	}

	n.stopController()
	testutil.Eventually(t, "503 with controllerPing failing", func() bool {
		code, hb := getHealth(t, cl, base)
		h = hb
		return code == 503 && !hb.Data.Checks[0].Healthy && hb.Data.Checks[0].ConsecutiveFailures >= 1
	})
	if !h.Data.Checks[1].Healthy {
		t.Fatal("link.health fails with minLinks 0")
	}
	if len(h.Data.Checks[0].Details) == 0 {
		t.Fatal("the failing controllerPing check says nothing of why")
	}
	testutil.Eventually(t, "zmesh_ctrl_connected 0", func() bool {
		v, ok := value(getMetrics(t, cl, base), "zmesh_ctrl_connected")
		return ok && v == 0
	})

	a.stop()
	dir := filepath.Dir(a.file)
	if types := pproftest.SampleTypes(t, filepath.Join(dir, "cpu.pprof")); !slices.Contains(types, "cpu/nanoseconds") {
		t.Errorf("the CPU profile holds samples of %v", types)
	}
	if types := pproftest.SampleTypes(t, filepath.Join(dir, "mem.pprof")); !slices.Contains(types, "inuse_space/bytes") {
		t.Errorf("the heap profile holds samples of %v", types)
	}
	checkTrace(t, filepath.Join(dir, "ctrl.trace"))
}

// checkTrace checks every line of a trace file and that it holds the router's Hello and
// circuit request going out and their replies coming in, matched by sequence.
func checkTrace(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("trace file mode %v, want 0600", st.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type line struct {
		Time      time.Time       `json:"time"`
		Direction string          `json:"direction"`
		Remote    string          `json:"remote"`
		Type      string          `json:"type"`
		TypeID    int             `json:"typeId"`
		Seq       uint32          `json:"seq"`
		ReplyTo   uint32          `json:"replyTo"`
		Request   bool            `json:"request"`
		Message   json.RawMessage `json:"message"`
	}
	requests := map[string]map[uint32]bool{} // type → seqs of the requests sent
	answered := map[string]bool{}            // request types whose reply came in
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 8<<20)
	lines := 0
	var replies []line
	for sc.Scan() {
		lines++
		var l line
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("trace line %d %q: %v", lines, sc.Text(), err)
		}
		if l.Time.IsZero() || (l.Direction != "in" && l.Direction != "out") || l.Remote == "" || l.Type == "" || l.Seq == 0 ||
			len(l.Message) == 0 || l.Message[0] != '{' {
			t.Fatalf("trace line %d: %s", lines, sc.Text())
		}
		switch {
		case l.Direction == "out" && l.Request:
			if requests[l.Type] == nil {
				requests[l.Type] = map[uint32]bool{}
			}
			requests[l.Type][l.Seq] = true
		case l.Direction == "in" && l.ReplyTo != 0:
			replies = append(replies, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, rep := range replies {
		for typ, seqs := range requests {
			if seqs[rep.ReplyTo] {
				answered[typ+"→"+rep.Type] = true
			}
		}
	}
	for _, want := range []string{"Hello→HelloReply", "CircuitRequest→CircuitReply", "Ping→Pong"} {
		if !answered[want] {
			t.Errorf("the trace has no %s (request out, reply in); it pairs %v", want, answered)
		}
	}
}

// With linkCheck.minLinks 1 a router without links is unhealthy (503, link.health failing),
// and healthy once a link is up, the link named in the check's details; the link's counters
// and latency probes show in its metrics. A listener serves only the APIs it lists.
func TestHealthMinLinks(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	a := n.addRouter("A", false, `link:
  dialers:
    - binding: transport
      groups: [ab]
forwarder:
  latencyProbeInterval: 100
healthChecks:
  ctrlPingCheck: {interval: 100ms, initialDelay: 0s}
  linkCheck: {interval: 100ms, initialDelay: 0s, minLinks: 1}
web:
  - name: health
    bindPoints:
      - interface: 127.0.0.1:{{port}}
    apis:
      - binding: health-checks
  - name: metrics
    bindPoints:
      - interface: 127.0.0.1:{{port}}
    apis:
      - binding: metrics
`)
	cl, base := webClient(t, a)
	metricsBase := "https://" + a.r.cfg.Web[1].BindPoints[0].Address
	testutil.Eventually(t, "503 with link.health failing", func() bool {
		code, h := getHealth(t, cl, base)
		return code == 503 && h.Data.Checks[0].Healthy && !h.Data.Checks[1].Healthy && h.Data.Checks[1].ConsecutiveFailures >= 1
	})
	for _, probe := range []struct{ method, url string }{{"GET", base + "/metrics"}, {"GET", metricsBase + "/health-checks"}, {"POST", base + "/health-checks"}} {
		req, _ := http.NewRequest(probe.method, probe.url, nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %s, want 404 or 405", probe.method, probe.url, resp.Status)
		}
	}

	b := n.addRouter("B", false, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
      groups: [ab]
`)
	testutil.Eventually(t, "link A–B", func() bool { return n.linked("A", "B") })
	var details []struct {
		LinkID       string `json:"linkId"`
		DestRouterID string `json:"destRouterId"`
		Latency      string `json:"latency"`
	}
	testutil.Eventually(t, "200 with link.health listing the link", func() bool {
		code, h := getHealth(t, cl, base)
		if code != 200 {
			return false
		}
		if err := json.Unmarshal(h.Data.Checks[1].Details, &details); err != nil {
			t.Fatalf("link.health details %s: %v", h.Data.Checks[1].Details, err)
		}
		return len(details) == 1
	})
	if details[0].DestRouterID != b.id || details[0].LinkID == "" {
		t.Fatalf("link.health details %+v, want the link to %s", details, b.id)
	}
	if _, err := time.ParseDuration(details[0].Latency); err != nil {
		t.Fatalf("link latency %q: %v", details[0].Latency, err)
	}
	testutil.Eventually(t, "link metrics and latency probes", func() bool {
		m := getMetrics(t, cl, metricsBase)
		sent, ok1 := value(m, "zmesh_link_sent_bytes_total", "peer", b.id, "link", details[0].LinkID)
		msgs, ok2 := value(m, "zmesh_link_received_messages_total", "peer", b.id)
		probes, ok3 := value(m, "zmesh_link_latency_seconds", "peer", b.id)
		_, ok4 := value(m, "zmesh_link_retransmits_total", "peer", b.id)
		links, _ := value(m, "zmesh_links")
		return ok1 && ok2 && ok3 && ok4 && sent > 0 && msgs > 0 && probes > 0 && links == 1
	})
}

// A check that has not run yet is unhealthy: before its first ping the router answers 503,
// controllerPing saying "not checked yet" with no time of a last run, and the metrics say
// the same.
func TestHealthNotCheckedYet(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	a := n.addRouter("A", false, `healthChecks:
  ctrlPingCheck: {initialDelay: 1h}
  linkCheck: {interval: 100ms, initialDelay: 0s}
`+opsWeb)
	cl, base := webClient(t, a)
	var h healthBody
	testutil.Eventually(t, "link.health to have run", func() bool {
		_, h = getHealth(t, cl, base)
		return h.Data.Checks[1].LastCheckTime != ""
	})
	ping, links := h.Data.Checks[0], h.Data.Checks[1]
	if h.Data.Healthy || ping.Healthy || ping.LastCheckTime != "" || ping.LastCheckDuration != "" || ping.ConsecutiveFailures != 0 ||
		string(ping.Details) != `"not checked yet"` {
		t.Fatalf("controllerPing before its first run: %+v (details %s), report healthy=%v", ping, ping.Details, h.Data.Healthy)
	}
	if !links.Healthy {
		t.Fatalf("link.health with minLinks 0: %+v", links)
	}
	m := getMetrics(t, cl, base)
	if v, ok := value(m, "zmesh_health_check_healthy", "check", checkControllerPing); !ok || v != 0 {
		t.Errorf("zmesh_health_check_healthy{check=controllerPing} = %v (present %v) before its first run, want 0", v, ok)
	}
	if v, ok := value(m, "zmesh_health_check_healthy", "check", checkLinkHealth); !ok || v != 1 {
		t.Errorf("zmesh_health_check_healthy{check=link.health} = %v (present %v), want 1", v, ok)
	}
}

// A web bind point that cannot be opened stops the router's start with an error naming it.
func TestWebBindPointTaken(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	a := n.addRouter("A", false, "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, _, err := config.LoadRouter(a.file, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	at := taken.Addr().String()
	cfg.Web = []config.WebListener{{Name: "ops", BindPoints: []config.BindPoint{{Interface: at, Address: at}},
		APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}}}
	r, err := New(cfg, "test", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`web[0] "ops" bind point %s`, at)) {
		t.Fatalf("Run with the web bind point taken: %v", err)
	}
}
