package metrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zmesh/zmesh/internal/ops/web"
)

// sources are scrape-time values the test sets.
type sources struct {
	mu     sync.Mutex
	counts map[string]int
	err    error
}

func (s *sources) set(counts map[string]int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts, s.err = counts, err
}

func (s *sources) get() (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts, s.err
}

func newTest(src *sources) *Metrics {
	return New(Sources{
		Counts:           src.get,
		StoreSizes:       func() (int64, int64) { return 1 << 20, 3 << 20 },
		ConnectedRouters: func() int { return 2 },
	})
}

func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	web.Metrics(m.Gatherer(), nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, rec.Body)
	}
	return fams
}

// sample returns the value of the sample of name with exactly these labels.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("%s is missing", name)
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for i, lp := range m.GetLabel() { // the exposition sorts labels by name
			if lp.GetName() != labels[2*i] || lp.GetValue() != labels[2*i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("%s%v is missing", name, labels)
	return 0
}

func TestInstrumentsAndScrapeValues(t *testing.T) {
	t.Parallel()
	src := &sources{}
	src.set(map[string]int{"identities": 3, "apiSessions": 2, "terminators": 1}, nil)
	m := newTest(src)
	m.ObserveRequest("GET", "/edge/client/v1/services", 200, 3*time.Millisecond)
	m.ObserveRequest("GET", "/edge/client/v1/services", 200, 30*time.Millisecond)
	m.ObserveRequest("GET", "/edge/client/v1/services", 401, time.Millisecond)
	m.ObserveAuthentication("password", false)
	m.ObserveAuthentication("mfa", true)

	fams := scrape(t, m)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"zmesh_api_requests_total", []string{"code", "200", "method", "GET", "route", "/edge/client/v1/services"}, 2},
		{"zmesh_api_requests_total", []string{"code", "401", "method", "GET", "route", "/edge/client/v1/services"}, 1},
		{"zmesh_api_request_duration_seconds", []string{"method", "GET", "route", "/edge/client/v1/services"}, 3},
		{"zmesh_authentications_total", []string{"method", "password", "result", "failure"}, 1},
		{"zmesh_authentications_total", []string{"method", "mfa", "result", "success"}, 1},
		{"zmesh_authentications_total", []string{"method", "ext-jwt", "result", "success"}, 0},
		{"zmesh_store_entities", []string{"collection", "identities"}, 3},
		{"zmesh_store_entities", []string{"collection", "sessions"}, 0},
		{"zmesh_api_sessions_active", nil, 2},
		{"zmesh_sessions_active", nil, 0},
		{"zmesh_store_lsm_size_bytes", nil, 1 << 20},
		{"zmesh_store_vlog_size_bytes", nil, 3 << 20},
		{"zmesh_routers_connected", nil, 2},
	} {
		if got := sample(t, fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if fams["zmesh_api_request_duration_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("zmesh_api_request_duration_seconds is a %v, want a histogram", fams["zmesh_api_request_duration_seconds"].GetType())
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("%s is missing", name)
		}
	}

	// A collection that empties is reported at zero instead of disappearing.
	src.set(map[string]int{"identities": 3}, nil)
	if got := sample(t, scrape(t, m), "zmesh_store_entities", "collection", "terminators"); got != 0 {
		t.Errorf("emptied collection = %v, want 0", got)
	}
}

// When the store cannot be counted, the scrape still serves everything else.
func TestScrapeSurvivesCountError(t *testing.T) {
	t.Parallel()
	src := &sources{}
	src.set(nil, errors.New("store closed"))
	m := newTest(src)
	fams := scrape(t, m)
	if fams["zmesh_store_entities"] != nil || fams["zmesh_api_sessions_active"] != nil {
		t.Error("counts served although they could not be read")
	}
	if got := sample(t, fams, "zmesh_routers_connected"); got != 2 {
		t.Errorf("zmesh_routers_connected = %v, want 2", got)
	}
}

// Two controllers in one process have registries of their own.
func TestRegistriesAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := newTest(&sources{}), newTest(&sources{})
	a.ObserveAuthentication("cert", true)
	if got := sample(t, scrape(t, b), "zmesh_authentications_total", "method", "cert", "result", "success"); got != 0 {
		t.Errorf("the other registry counted %v authentications", got)
	}
}
