package health

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zmesh/zmesh/internal/testutil"
)

// flaky is a check whose outcome the test sets.
type flaky struct {
	mu  sync.Mutex
	err error
}

func (f *flaky) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *flaky) run(context.Context) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return map[string]any{"ok": true}, nil
}

func serve(t *testing.T, c *Checker) (int, Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/health-checks", nil))
	var rep Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q", rec.Header().Get("Content-Type"))
	}
	return rec.Code, rep
}

// A failing check makes the endpoint answer 503 with its error and a growing count of
// consecutive failures, and no upSince; once it passes again, 200 with upSince and zero
// failures. The first answer after Start is already a real result.
func TestChecksTurnHealthyAndBack(t *testing.T) {
	t.Parallel()
	good, bad := &flaky{}, &flaky{}
	bad.set(errors.New("disk on fire"))
	c := New(
		Check{ID: "good", Interval: time.Millisecond, Timeout: time.Second, Run: good.run},
		Check{ID: "bad", Interval: time.Millisecond, Timeout: time.Second, Run: bad.run},
	)
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.Start(ctx)
	defer func() { cancel(); wait() }()

	status, rep := serve(t, c)
	if status != http.StatusServiceUnavailable || rep.Data.Healthy {
		t.Fatalf("status %d, report %+v; want 503 unhealthy", status, rep)
	}
	g, b := rep.Data.Checks[0], rep.Data.Checks[1]
	if g.ID != "good" || !g.Healthy || g.UpSince == "" || g.ConsecutiveFailures != 0 {
		t.Errorf("good check: %+v", g)
	}
	if d, _ := g.Details.(map[string]any); d["ok"] != true {
		t.Errorf("good check details %v, want the check's", g.Details)
	}
	if b.ID != "bad" || b.Healthy || b.UpSince != "" || b.Details != "disk on fire" || b.ConsecutiveFailures < 1 {
		t.Errorf("bad check: %+v", b)
	}
	if _, err := time.Parse(time.RFC3339, b.LastCheckTime); err != nil {
		t.Errorf("lastCheckTime %q: %v", b.LastCheckTime, err)
	}
	if _, err := time.ParseDuration(b.LastCheckDuration); err != nil {
		t.Errorf("lastCheckDuration %q: %v", b.LastCheckDuration, err)
	}
	testutil.Eventually(t, "consecutive failures to grow", func() bool {
		_, rep := serve(t, c)
		return rep.Data.Checks[1].ConsecutiveFailures >= 3
	})

	bad.set(nil)
	testutil.Eventually(t, "the endpoint to answer 200", func() bool { status, _ := serve(t, c); return status == http.StatusOK })
	_, rep = serve(t, c)
	if b := rep.Data.Checks[1]; !b.Healthy || b.ConsecutiveFailures != 0 || b.UpSince == "" {
		t.Errorf("recovered check: %+v", b)
	}
}

// A run that does not answer within the timeout counts as a failure, and the check is not
// started again while that run is still going.
func TestTimeoutFailsWithoutPilingUp(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var runs atomic.Int64
	c := New(Check{ID: "slow", Interval: time.Millisecond, Timeout: 20 * time.Millisecond, Run: func(context.Context) (any, error) {
		runs.Add(1)
		<-release
		return nil, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.Start(ctx)
	defer func() { cancel(); wait() }()
	testutil.Eventually(t, "several timeouts", func() bool {
		_, rep := serve(t, c)
		return rep.Data.Checks[0].ConsecutiveFailures >= 3
	})
	status, rep := serve(t, c)
	if status != http.StatusServiceUnavailable || rep.Data.Checks[0].Details != "no answer within 20ms" {
		t.Fatalf("status %d, report %+v", status, rep)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the check was started %d times while its first run was still going", n)
	}
	close(release)
	testutil.Eventually(t, "healthy once the run answers", func() bool { status, _ := serve(t, c); return status == http.StatusOK })
}

// Before Start, every check is unhealthy and says it was not checked yet.
func TestNotCheckedYet(t *testing.T) {
	t.Parallel()
	c := New(Check{ID: "store.read", Interval: time.Second, Timeout: time.Second, Run: (&flaky{}).run})
	status, rep := serve(t, c)
	want := CheckResult{ID: "store.read", Details: "not checked yet"}
	if status != http.StatusServiceUnavailable || rep.Data.Healthy || len(rep.Data.Checks) != 1 || rep.Data.Checks[0] != want {
		t.Fatalf("status %d, report %+v; want 503 with %+v", status, rep, want)
	}
	// The body as clients read it: the envelope of OpenZiti's health API.
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/health-checks", nil))
	const body = `{"data":{"healthy":false,"checks":[{"id":"store.read","healthy":false,"consecutiveFailures":0,"details":"not checked yet"}]},"meta":{}}` + "\n"
	if rec.Body.String() != body {
		t.Errorf("body %s, want %s", rec.Body, body)
	}
}

// A check with an initial delay is not run by Start, which does not wait for it: until its
// delay has passed it is reported as not checked yet, and the whole report as unhealthy.
// Its first run comes no earlier than the delay after Start.
func TestInitialDelay(t *testing.T) {
	t.Parallel()
	const delay = 50 * time.Millisecond
	var lateRun atomic.Pointer[time.Time]
	c := New(
		Check{ID: "now", Interval: time.Hour, Timeout: time.Second, Run: (&flaky{}).run},
		Check{ID: "later", InitialDelay: delay, Interval: time.Hour, Timeout: time.Second, Run: func(context.Context) (any, error) {
			now := time.Now()
			lateRun.CompareAndSwap(nil, &now)
			return nil, nil
		}},
		Check{ID: "much-later", InitialDelay: time.Hour, Interval: time.Hour, Timeout: time.Second, Run: func(context.Context) (any, error) {
			t.Error("a check with an initial delay of an hour ran")
			return nil, nil
		}},
	)
	ctx, cancel := context.WithCancel(context.Background())
	started := time.Now()
	wait := c.Start(ctx)
	defer func() { cancel(); wait() }()

	status, rep := serve(t, c)
	if status != http.StatusServiceUnavailable || rep.Data.Healthy {
		t.Fatalf("status %d, report %+v; want 503 while a check has not run", status, rep)
	}
	if now := rep.Data.Checks[0]; !now.Healthy || now.LastCheckTime == "" {
		t.Errorf("the check without delay after Start: %+v, want run and healthy", now)
	}
	if want := (CheckResult{ID: "much-later", Details: "not checked yet"}); rep.Data.Checks[2] != want {
		t.Errorf("the delayed check: %+v, want %+v", rep.Data.Checks[2], want)
	}
	testutil.Eventually(t, "the check with a short delay to pass", func() bool {
		_, rep := serve(t, c)
		return rep.Data.Checks[1].Healthy
	})
	ran := lateRun.Load()
	if ran == nil {
		t.Fatal("the delayed check passed without running")
	}
	if ran.Sub(started) < delay {
		t.Fatalf("the delayed check first ran %v after Start began, before its delay %s", ran.Sub(started), delay)
	}
}

// A run cut short because the checker stops is not recorded: it says nothing of what it
// checks.
func TestStopDoesNotRecord(t *testing.T) {
	t.Parallel()
	running := make(chan struct{})
	c := New(Check{ID: "ping", InitialDelay: time.Millisecond, Interval: time.Hour, Timeout: time.Hour, Run: func(ctx context.Context) (any, error) {
		close(running)
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.Start(ctx)
	<-running
	cancel()
	wait()
	if got, want := c.Report().Data.Checks[0], (CheckResult{ID: "ping", Details: "not checked yet"}); got != want {
		t.Fatalf("after a run cut short by the stop: %+v, want %+v", got, want)
	}
}

// A failing check that gives details shows them rather than its error (the router's link
// check lists its links either way).
func TestFailureWithDetails(t *testing.T) {
	t.Parallel()
	c := New(Check{ID: "link.health", Interval: time.Hour, Timeout: time.Second, Run: func(context.Context) (any, error) {
		return []string{"link-1"}, errors.New("1 link, fewer than 2")
	}})
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.Start(ctx)
	defer func() { cancel(); wait() }()
	_, rep := serve(t, c)
	got := rep.Data.Checks[0]
	if d, _ := got.Details.([]any); got.Healthy || got.ConsecutiveFailures != 1 || len(d) != 1 || d[0] != "link-1" {
		t.Fatalf("failing check with details: %+v", got)
	}
}

// The collector exports each check's state by its id: unhealthy before the first run, then
// the latest result and the consecutive failures.
func TestCollector(t *testing.T) {
	t.Parallel()
	bad := &flaky{}
	bad.set(errors.New("no"))
	c := New(
		Check{ID: "good", Interval: time.Hour, Timeout: time.Second, Run: (&flaky{}).run},
		Check{ID: "bad", Interval: time.Millisecond, Timeout: time.Second, Run: bad.run},
	)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c))
	gather := func() map[string]float64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "check" {
					t.Fatalf("%s has labels %v, want check", f.GetName(), m.GetLabel())
				}
				out[f.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	want := map[string]float64{
		"zmesh_health_check_healthy/good": 0, "zmesh_health_check_consecutive_failures/good": 0,
		"zmesh_health_check_healthy/bad": 0, "zmesh_health_check_consecutive_failures/bad": 0,
	}
	if got := gather(); !maps.Equal(got, want) {
		t.Fatalf("before the first run: %v, want %v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.Start(ctx)
	defer func() { cancel(); wait() }()
	testutil.Eventually(t, "the bad check to fail three times", func() bool {
		return gather()["zmesh_health_check_consecutive_failures/bad"] >= 3
	})
	got := gather()
	if got["zmesh_health_check_healthy/good"] != 1 || got["zmesh_health_check_consecutive_failures/good"] != 0 || got["zmesh_health_check_healthy/bad"] != 0 {
		t.Fatalf("after runs: %v", got)
	}
}
