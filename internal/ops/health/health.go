// Package health runs health checks, each on its own interval after an optional initial
// delay, keeps their latest results, and serves them as JSON on GET /health-checks in the
// shape OpenZiti routers use: {"data":{"healthy":...,"checks":[{id, healthy, lastCheckTime,
// lastCheckDuration, consecutiveFailures, upSince, details}]},"meta":{}}, with status 200
// when every check passed its last run and 503 otherwise. It also exports the results to
// Prometheus. The router (dataplane) and the controller (controlplane) both run their checks
// with it; it knows neither.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// notChecked is the details of a check that has not run yet. Such a check is unhealthy: a
// load balancer should not send traffic to a process before it is known to be healthy.
const notChecked = "not checked yet"

// Check is one health check.
type Check struct {
	// ID names the check in the results, e.g. "store.read".
	ID string
	// InitialDelay is the wait before the first run; until then the check is reported as
	// not checked yet.
	InitialDelay time.Duration
	// Interval is the time between the end of one run and the start of the next.
	Interval time.Duration
	// Timeout bounds a run: a run that has not answered by then counts as failed, and the
	// check is not started again before it has answered.
	Timeout time.Duration
	// Run checks once. An error fails the check. The details are shown with the result:
	// with a failure, the error's text is shown when the details are nil.
	Run func(ctx context.Context) (details any, err error)
}

// Checker runs checks and keeps their latest results.
type Checker struct {
	checks []Check

	mu      sync.Mutex
	results map[string]*result
}

// result is the state of one check.
type result struct {
	checked             bool
	healthy             bool
	lastCheckTime       time.Time
	lastCheckDuration   time.Duration
	consecutiveFailures int
	upSince             time.Time // when the check last went from failing (or unchecked) to passing
	details             any
}

// New returns a checker of checks. They run once it is started.
func New(checks ...Check) *Checker {
	c := &Checker{checks: checks, results: map[string]*result{}}
	for _, chk := range checks {
		c.results[chk.ID] = &result{}
	}
	return c
}

// Start runs every check without an initial delay once and waits for the results (each for
// at most its timeout), so that the first answer of the endpoint is a real one for them;
// then it runs each check every interval (a delayed one first after its delay) until ctx
// ends. The returned function waits for that end.
func (c *Checker) Start(ctx context.Context) (wait func()) {
	runners := make([]*runner, len(c.checks))
	var first sync.WaitGroup
	for i, chk := range c.checks {
		runners[i] = &runner{c: c, chk: chk}
		if chk.InitialDelay <= 0 {
			first.Go(func() { runners[i].step(ctx) })
		}
	}
	first.Wait()
	var loops sync.WaitGroup
	for _, r := range runners {
		loops.Go(func() { r.checkLoop(ctx) })
	}
	return loops.Wait
}

// runner runs one check.
type runner struct {
	c   *Checker
	chk Check
	// pending receives the outcome of a run that outlived its timeout; nil when none runs.
	pending chan outcome
}

type outcome struct {
	at       time.Time
	duration time.Duration
	details  any
	err      error
}

// checkLoop runs the check after its initial delay (when it has one; Start ran it already when
// not), then every interval, until ctx ends.
func (r *runner) checkLoop(ctx context.Context) {
	wait := r.chk.Interval
	if r.chk.InitialDelay > 0 {
		wait = r.chk.InitialDelay
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.step(ctx)
		t.Reset(r.chk.Interval)
	}
}

// step starts a run unless one is still pending, and records its outcome, or a failure
// when it does not answer within the timeout.
func (r *runner) step(ctx context.Context) {
	if r.pending == nil {
		r.pending = make(chan outcome, 1)
		go func(out chan<- outcome) {
			rctx, cancel := context.WithTimeout(ctx, r.chk.Timeout)
			defer cancel()
			start := time.Now()
			details, err := r.chk.Run(rctx)
			out <- outcome{at: start, duration: time.Since(start), details: details, err: err}
		}(r.pending)
	}
	timeout := time.NewTimer(r.chk.Timeout)
	defer timeout.Stop()
	var o outcome
	select {
	case o = <-r.pending:
		r.pending = nil
	case <-timeout.C:
		o = outcome{at: time.Now().Add(-r.chk.Timeout), duration: r.chk.Timeout,
			err: fmt.Errorf("no answer within %s", r.chk.Timeout)}
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		return // stopping: a run cut short says nothing of what it checks
	}
	r.c.record(r.chk.ID, o)
}

func (c *Checker) record(id string, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := c.results[id]
	wasHealthy := res.checked && res.healthy
	res.checked = true
	res.lastCheckTime, res.lastCheckDuration = o.at, o.duration
	res.details = o.details
	if o.err != nil {
		res.healthy = false
		res.consecutiveFailures++
		if o.details == nil {
			res.details = o.err.Error()
		}
		return
	}
	res.healthy = true
	res.consecutiveFailures = 0
	if !wasHealthy {
		res.upSince = o.at
	}
}

// Report is the body of GET /health-checks.
type Report struct {
	Data ReportData     `json:"data"`
	Meta map[string]any `json:"meta"`
}

// ReportData says whether every check passed, and how each did.
type ReportData struct {
	Healthy bool          `json:"healthy"`
	Checks  []CheckResult `json:"checks"`
}

// CheckResult is the latest result of one check. Times are RFC 3339, durations in Go's
// notation (1.5ms); a check not run yet has neither, is unhealthy and says so in its
// details. UpSince is absent while the check is not healthy.
type CheckResult struct {
	ID                  string `json:"id"`
	Healthy             bool   `json:"healthy"`
	LastCheckTime       string `json:"lastCheckTime,omitempty"`
	LastCheckDuration   string `json:"lastCheckDuration,omitempty"`
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	UpSince             string `json:"upSince,omitempty"`
	Details             any    `json:"details,omitempty"`
}

// Report returns the latest results, in the order the checks were given.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	data := ReportData{Healthy: true, Checks: make([]CheckResult, 0, len(c.checks))}
	for _, chk := range c.checks {
		res := c.results[chk.ID]
		out := CheckResult{ID: chk.ID, Healthy: res.checked && res.healthy, ConsecutiveFailures: res.consecutiveFailures, Details: res.details}
		if res.checked {
			out.LastCheckTime = res.lastCheckTime.UTC().Format(time.RFC3339)
			out.LastCheckDuration = res.lastCheckDuration.String()
		} else {
			out.Details = notChecked
		}
		if out.Healthy {
			out.UpSince = res.upSince.UTC().Format(time.RFC3339)
		}
		data.Healthy = data.Healthy && out.Healthy
		data.Checks = append(data.Checks, out)
	}
	return Report{Data: data, Meta: map[string]any{}}
}

// ServeHTTP answers the latest results: 200 when every check is healthy, 503 otherwise.
func (c *Checker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	rep := c.Report()
	body, err := json.Marshal(rep)
	if err != nil {
		// Details that JSON cannot encode: a bug of the check that gave them.
		http.Error(w, fmt.Sprintf("health report: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rep.Data.Healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	w.Write(append(body, '\n'))
}

// collector exports a checker's latest results to Prometheus.
type collector struct {
	c                 *Checker
	healthy, failures *prometheus.Desc
}

// NewCollector returns a Prometheus collector of c's results, read at each scrape:
// zmesh_health_check_healthy and zmesh_health_check_consecutive_failures, by check.
func NewCollector(c *Checker) prometheus.Collector {
	return collector{c: c,
		healthy: prometheus.NewDesc("zmesh_health_check_healthy",
			"1 when the health check passed its last run, 0 when it failed or has not run yet.", []string{"check"}, nil),
		failures: prometheus.NewDesc("zmesh_health_check_consecutive_failures",
			"Runs of the health check that failed in a row.", []string{"check"}, nil),
	}
}

func (m collector) Describe(ch chan<- *prometheus.Desc) { ch <- m.healthy; ch <- m.failures }

func (m collector) Collect(ch chan<- prometheus.Metric) {
	for _, res := range m.c.Report().Data.Checks {
		v := 0.0
		if res.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.healthy, prometheus.GaugeValue, v, res.ID)
		ch <- prometheus.MustNewConstMetric(m.failures, prometheus.GaugeValue, float64(res.ConsecutiveFailures), res.ID)
	}
}
