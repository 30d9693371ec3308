// Package metrics is the controller's Prometheus instrumentation: one registry per
// controller (never the global one) holding the API's request counts and latencies by route
// and status, authentications by method and result, the store's sizes and entity counts, the
// active API sessions and sessions, the connected routers, and the process and Go runtime
// collectors. The API reports requests and authentications through the Observer methods;
// everything else is read from its source when Prometheus scrapes.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Sources are where the scrape-time values come from.
type Sources struct {
	// Counts returns the number of records of each store collection that holds any.
	Counts func() (map[string]int, error)
	// StoreSizes returns the bytes on disk of the store's LSM tree and value log.
	StoreSizes func() (lsm, vlog int64)
	// ConnectedRouters returns how many routers have their control channel connected.
	ConnectedRouters func() int
	// Cluster, when not nil, returns the raft figures of a cluster member; false while the
	// controller is not one.
	Cluster func() (Cluster, bool)
}

// Authentication methods and results, as label values. Every combination is exported from
// the start at zero, so that rates work from the first scrape.
var (
	authMethods = []string{"password", "cert", "ext-jwt", "mfa"}
	authResults = []string{"success", "failure"}
)

// The collections whose record counts are also the gauges of active API sessions and
// sessions (the store's names, see controlplane/model).
const (
	apiSessionsCollection = "apiSessions"
	sessionsCollection    = "sessions"
)

// Metrics is the registry of one controller and the instruments the API feeds.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	auths    *prometheus.CounterVec
}

// New builds the registry over src.
func New(src Sources) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zmesh_api_requests_total",
			Help: "Requests to the client and management APIs by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "zmesh_api_request_duration_seconds",
			Help:    "Time the client and management APIs took to answer a request, by method and route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
		auths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zmesh_authentications_total",
			Help: "Authentication attempts by method (password, cert, ext-jwt, mfa) and result (success, failure).",
		}, []string{"method", "result"}),
	}
	for _, method := range authMethods {
		for _, result := range authResults {
			m.auths.WithLabelValues(method, result)
		}
	}
	m.reg.MustRegister(
		m.requests, m.duration, m.auths,
		newScrapeCollector(src),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	if src.Cluster != nil {
		m.reg.MustRegister(newClusterCollector(src.Cluster))
	}
	return m
}

// ObserveRequest counts one API request and records its duration.
func (m *Metrics) ObserveRequest(method, route string, code int, elapsed time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(method, route).Observe(elapsed.Seconds())
}

// ObserveAuthentication counts one authentication attempt.
func (m *Metrics) ObserveAuthentication(method string, succeeded bool) {
	result := "failure"
	if succeeded {
		result = "success"
	}
	m.auths.WithLabelValues(method, result).Inc()
}

// Gatherer returns the registry, for the web listener's metrics API (web.Metrics), which
// serves it merged with the health checks' collector.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// scrapeCollector reads the store and the router registry when Prometheus scrapes.
type scrapeCollector struct {
	src                                   Sources
	entities, apiSessions, sessions       *prometheus.Desc
	lsmBytes, vlogBytes, routersConnected *prometheus.Desc

	mu sync.Mutex
	// seen are the collections counted so far: one that empties is reported at zero rather
	// than vanishing from the scrape.
	seen map[string]bool
}

func newScrapeCollector(src Sources) *scrapeCollector {
	return &scrapeCollector{
		src:              src,
		entities:         prometheus.NewDesc("zmesh_store_entities", "Records in the store by collection.", []string{"collection"}, nil),
		apiSessions:      prometheus.NewDesc("zmesh_api_sessions_active", "API sessions in the store (not yet ended or expired and swept).", nil, nil),
		sessions:         prometheus.NewDesc("zmesh_sessions_active", "Dial and bind sessions in the store.", nil, nil),
		lsmBytes:         prometheus.NewDesc("zmesh_store_lsm_size_bytes", "Bytes of the store's LSM tree on disk, as Badger last measured them.", nil, nil),
		vlogBytes:        prometheus.NewDesc("zmesh_store_vlog_size_bytes", "Bytes of the store's value log on disk, as Badger last measured them.", nil, nil),
		routersConnected: prometheus.NewDesc("zmesh_routers_connected", "Routers whose control channel is connected.", nil, nil),
		seen:             map[string]bool{apiSessionsCollection: true, sessionsCollection: true},
	}
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.entities, c.apiSessions, c.sessions, c.lsmBytes, c.vlogBytes, c.routersConnected} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	if counts, err := c.src.Counts(); err != nil {
		// The scrape reports the error for these metrics and serves the others.
		for _, d := range []*prometheus.Desc{c.entities, c.apiSessions, c.sessions} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
	} else {
		c.mu.Lock()
		for name := range counts {
			c.seen[name] = true
		}
		for name := range c.seen {
			ch <- prometheus.MustNewConstMetric(c.entities, prometheus.GaugeValue, float64(counts[name]), name)
		}
		c.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.apiSessions, prometheus.GaugeValue, float64(counts[apiSessionsCollection]))
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(counts[sessionsCollection]))
	}
	lsm, vlog := c.src.StoreSizes()
	ch <- prometheus.MustNewConstMetric(c.lsmBytes, prometheus.GaugeValue, float64(lsm))
	ch <- prometheus.MustNewConstMetric(c.vlogBytes, prometheus.GaugeValue, float64(vlog))
	ch <- prometheus.MustNewConstMetric(c.routersConnected, prometheus.GaugeValue, float64(c.src.ConnectedRouters()))
}
