package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The router's health checks (healthChecks section): controllerPing pings the controller over
// the control channel, link.health counts the router's links. Each runs every interval after
// its initial delay and keeps its last result; the web listener's `health-checks` API serves
// them (GET /health-checks, 200 when every check passes, 503 otherwise) and the registry
// exports them. A check that has not run yet counts as passing: the router is starting, and
// it is not known to be unhealthy.

// Ids of the checks, as the health-checks API names them.
const (
	checkControllerPing = "controllerPing"
	checkLinkHealth     = "link.health"
)

// healthCheck is one check and its latest result.
type healthCheck struct {
	id           string
	interval     time.Duration
	initialDelay time.Duration
	// run performs the check: nil when it passes, else why not. details, when not nil, is
	// shown with the result either way.
	run func(ctx context.Context) (details any, err error)

	mu           sync.Mutex
	healthy      bool
	lastCheck    time.Time // zero until the check has run
	lastDuration time.Duration
	failures     int       // consecutive
	upSince      time.Time // when it last started passing; zero while failing
	details      any
}

// newHealthChecks returns the router's checks, in the order the API lists them.
func newHealthChecks(r *Router) []*healthCheck {
	hc := r.cfg.HealthChecks
	now := time.Now()
	ping := &healthCheck{id: checkControllerPing, interval: hc.CtrlPingCheck.Interval.Std(),
		initialDelay: hc.CtrlPingCheck.InitialDelay.Std(), healthy: true, upSince: now}
	timeout := hc.CtrlPingCheck.Timeout.Std()
	ping.run = func(ctx context.Context) (any, error) {
		ch := r.ctrl.current()
		if ch == nil {
			return nil, ErrNoController
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if _, err := ch.Ping(ctx); err != nil {
			return nil, fmt.Errorf("no answer to a ping within %s: %w", timeout, err)
		}
		return nil, nil
	}
	links := &healthCheck{id: checkLinkHealth, interval: hc.LinkCheck.Interval.Std(),
		initialDelay: hc.LinkCheck.InitialDelay.Std(), healthy: true, upSince: now}
	minLinks := hc.LinkCheck.MinLinks
	links.run = func(context.Context) (any, error) {
		type linkDetail struct {
			LinkID       string `json:"linkId"`
			DestRouterID string `json:"destRouterId"`
			Latency      string `json:"latency"` // a Go duration
		}
		details := []linkDetail{}
		for _, l := range r.links.Links() {
			details = append(details, linkDetail{LinkID: l.ID(), DestRouterID: l.PeerID(), Latency: l.Latency().String()})
		}
		if len(details) < minLinks {
			return details, fmt.Errorf("%d links, fewer than healthChecks.linkCheck.minLinks %d", len(details), minLinks)
		}
		return details, nil
	}
	return []*healthCheck{ping, links}
}

// loop runs the check every interval after the initial delay, until ctx ends.
func (c *healthCheck) loop(ctx context.Context) {
	select {
	case <-time.After(c.initialDelay):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.check(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// check runs the check once and records its result.
func (c *healthCheck) check(ctx context.Context) {
	start := time.Now()
	details, err := c.run(ctx)
	took := time.Since(start)
	if ctx.Err() != nil {
		return // stopping: a ping cut short says nothing of the controller
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastCheck, c.lastDuration = start, took
	c.details = details
	if err != nil {
		c.healthy = false
		c.failures++
		c.upSince = time.Time{}
		if details == nil {
			c.details = err.Error()
		}
		return
	}
	if !c.healthy {
		c.upSince = start
	}
	c.healthy, c.failures = true, 0
}

// checkResult is one check in the health-checks API.
type checkResult struct {
	ID                  string `json:"id"`
	Healthy             bool   `json:"healthy"`
	LastCheckTime       string `json:"lastCheckTime,omitempty"`     // RFC 3339; absent before the first run
	LastCheckDuration   string `json:"lastCheckDuration,omitempty"` // a Go duration; absent before the first run
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	UpSince             string `json:"upSince,omitempty"` // RFC 3339; absent while failing
	Details             any    `json:"details,omitempty"`
}

func (c *healthCheck) result() checkResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := checkResult{ID: c.id, Healthy: c.healthy, ConsecutiveFailures: c.failures, Details: c.details}
	if !c.lastCheck.IsZero() {
		res.LastCheckTime = c.lastCheck.UTC().Format(time.RFC3339)
		res.LastCheckDuration = c.lastDuration.String()
	}
	if c.healthy {
		res.UpSince = c.upSince.UTC().Format(time.RFC3339)
	}
	return res
}

// healthReport is the body of GET /health-checks, in the API's envelope.
type healthReport struct {
	Data struct {
		Healthy bool          `json:"healthy"`
		Checks  []checkResult `json:"checks"`
	} `json:"data"`
	Meta struct{} `json:"meta"`
}

// health returns every check's latest result; healthy when they all pass.
func (r *Router) health() healthReport {
	var rep healthReport
	rep.Data.Healthy = true
	rep.Data.Checks = []checkResult{}
	for _, c := range r.checks {
		res := c.result()
		rep.Data.Healthy = rep.Data.Healthy && res.Healthy
		rep.Data.Checks = append(rep.Data.Checks, res)
	}
	return rep
}

// serveHealth answers GET /health-checks: 200 when healthy, 503 when not.
func (r *Router) serveHealth(w http.ResponseWriter, _ *http.Request) {
	rep := r.health()
	body, err := json.Marshal(rep)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rep.Data.Healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	w.Write(append(body, '\n'))
}

// healthCollector exports the checks' results.
type healthCollector struct {
	r                 *Router
	healthy, failures *prometheus.Desc
}

func newHealthCollector(r *Router) healthCollector {
	return healthCollector{r: r,
		healthy:  prometheus.NewDesc("zmesh_health_check_healthy", "1 when the health check passed its last run (or has not run yet), 0 otherwise.", []string{"check"}, nil),
		failures: prometheus.NewDesc("zmesh_health_check_consecutive_failures", "Runs of the health check that failed in a row.", []string{"check"}, nil),
	}
}

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.healthy; ch <- c.failures }

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, hc := range c.r.checks {
		res := hc.result()
		v := 0.0
		if res.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, v, res.ID)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, float64(res.ConsecutiveFailures), res.ID)
	}
}
