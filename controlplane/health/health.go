// Package health runs the controller's health checks, each on its own interval, and serves
// their latest results as JSON on GET /health-checks in the shape OpenZiti routers use:
// {"data":{"healthy":...,"checks":[{id, healthy, lastCheckTime, lastCheckDuration,
// consecutiveFailures, upSince, details}]},"meta":{}}, with status 200 when every check
// passed its last run and 503 otherwise.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Check is one health check.
type Check struct {
	// ID names the check in the results, e.g. "store.read".
	ID string
	// Interval is the time between the end of one run and the start of the next.
	Interval time.Duration
	// Timeout bounds a run: a run that has not answered by then counts as failed, and the
	// check is not started again before it has answered.
	Timeout time.Duration
	// Run checks once. The details are shown with a passing result (nil: null); an error
	// fails the check and is shown as its details.
	Run func(ctx context.Context) (details any, err error)
}

// Checker runs checks and keeps their latest results.
type Checker struct {
	checks []Check
	now    func() time.Time

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

// New returns a checker of checks; now is the clock (time.Now when nil).
func New(now func() time.Time, checks ...Check) *Checker {
	if now == nil {
		now = time.Now
	}
	c := &Checker{checks: checks, now: now, results: map[string]*result{}}
	for _, chk := range checks {
		c.results[chk.ID] = &result{}
	}
	return c
}

// Start runs every check once and waits for the results (each for at most its timeout),
// so that the first answer of the endpoint is a real one; then it runs each check again
// every interval until ctx ends. The returned function waits for that end.
func (c *Checker) Start(ctx context.Context) (wait func()) {
	runners := make([]*runner, len(c.checks))
	var first sync.WaitGroup
	for i, chk := range c.checks {
		runners[i] = &runner{c: c, chk: chk}
		first.Go(func() { runners[i].step(ctx) })
	}
	first.Wait()
	var loops sync.WaitGroup
	for _, r := range runners {
		loops.Go(func() { r.loop(ctx) })
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

func (r *runner) loop(ctx context.Context) {
	t := time.NewTimer(r.chk.Interval)
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
			start := r.c.now()
			details, err := r.chk.Run(rctx)
			out <- outcome{at: start, duration: r.c.now().Sub(start), details: details, err: err}
		}(r.pending)
	}
	timeout := time.NewTimer(r.chk.Timeout)
	defer timeout.Stop()
	select {
	case o := <-r.pending:
		r.pending = nil
		r.c.record(r.chk.ID, o)
	case <-timeout.C:
		r.c.record(r.chk.ID, outcome{at: r.c.now().Add(-r.chk.Timeout), duration: r.chk.Timeout,
			err: fmt.Errorf("no answer within %s", r.chk.Timeout)})
	case <-ctx.Done():
	}
}

func (c *Checker) record(id string, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := c.results[id]
	wasHealthy := res.checked && res.healthy
	res.checked = true
	res.lastCheckTime, res.lastCheckDuration = o.at, o.duration
	if o.err != nil {
		res.healthy = false
		res.consecutiveFailures++
		res.details = o.err.Error()
		return
	}
	res.healthy = true
	res.consecutiveFailures = 0
	res.details = o.details
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
// notation (1.5ms); a check not run yet has neither and is unhealthy.
type CheckResult struct {
	ID                  string `json:"id"`
	Healthy             bool   `json:"healthy"`
	LastCheckTime       string `json:"lastCheckTime,omitempty"`
	LastCheckDuration   string `json:"lastCheckDuration,omitempty"`
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	UpSince             string `json:"upSince,omitempty"`
	Details             any    `json:"details"`
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
			out.Details = "not checked yet"
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
	status := http.StatusOK
	if !rep.Data.Healthy {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(rep)
}
