package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not the case after 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A failing check makes the endpoint answer 503 with its error and a growing count of
// consecutive failures, and no upSince; once it passes again, 200 with upSince and zero
// failures. The first answer after Start is already a real result.
func TestChecksTurnHealthyAndBack(t *testing.T) {
	t.Parallel()
	good, bad := &flaky{}, &flaky{}
	bad.set(errors.New("disk on fire"))
	c := New(nil,
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
	waitFor(t, "consecutive failures to grow", func() bool {
		_, rep := serve(t, c)
		return rep.Data.Checks[1].ConsecutiveFailures >= 3
	})

	bad.set(nil)
	waitFor(t, "the endpoint to answer 200", func() bool { status, _ := serve(t, c); return status == http.StatusOK })
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
	c := New(nil, Check{ID: "slow", Interval: time.Millisecond, Timeout: 20 * time.Millisecond, Run: func(context.Context) (any, error) {
		runs.Add(1)
		<-release
		return nil, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	wait := c.Start(ctx)
	defer func() { cancel(); wait() }()
	waitFor(t, "several timeouts", func() bool {
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
	waitFor(t, "healthy once the run answers", func() bool { status, _ := serve(t, c); return status == http.StatusOK })
}

// Before Start, every check is unhealthy and says it was not checked yet.
func TestNotCheckedYet(t *testing.T) {
	t.Parallel()
	c := New(nil, Check{ID: "store.read", Interval: time.Second, Timeout: time.Second, Run: (&flaky{}).run})
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
