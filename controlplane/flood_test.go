package controlplane_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

// floodLogins is how many bad password logins a flood sends at once.
const floodLogins = 150

// floodRSSBudget is the RSS growth a login flood may cause: floodRSSBase, plus for each of
// the GOMAXPROCS argon2id computations the controller runs at once its 19 MiB a few times
// over, for the garbage the collector has not returned yet.
func floodRSSBudget() int64 {
	const argonMemory, slack = 19 << 20, 4
	return floodRSSBase + int64(runtime.GOMAXPROCS(0))*argonMemory*slack
}

// floodResult is what a login flood did to the controller's process.
type floodResult struct {
	rssBefore, rssPeak int64           // kB
	statuses           map[int]int     // of the logins
	loginErrs          []error         // logins without an answer
	version            []time.Duration // GET /version latencies during the flood
	versionErrs        []error         // GET /version requests that failed
}

// flood sends floodLogins concurrent password logins with unknown usernames, each on its own
// TLS connection, while GET /version is polled on another, and records the process's RSS
// before and at its peak (VmHWM, reset before the flood) and the /version latencies.
func flood(t testing.TB, c *ctrltest.Controller) floodResult {
	t.Helper()
	roots := c.Ctrl.CA().Pool()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	r := floodResult{rssBefore: procStatus(t, "VmRSS"), statuses: map[int]int{}}

	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range floodLogins {
		wg.Go(func() {
			cl := newClient(roots, true)
			body := fmt.Sprintf(`{"username":"nobody-%d","password":"not-the-password"}`, i)
			<-start
			resp, err := cl.Post(c.URL+api.ClientBase+"/authenticate?method=password", "application/json", strings.NewReader(body))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.loginErrs = append(r.loginErrs, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				r.loginErrs = append(r.loginErrs, fmt.Errorf("a 429 without Retry-After"))
			}
		})
	}
	poller := newClient(roots, false)
	if err := get(poller, c.URL+api.ClientBase+"/version"); err != nil {
		t.Fatal(err)
	}
	close(start)
	done := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			start := time.Now()
			if err := get(poller, c.URL+api.ClientBase+"/version"); err != nil {
				r.versionErrs = append(r.versionErrs, err)
			} else {
				r.version = append(r.version, time.Since(start))
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()

	wg.Wait()
	close(done)
	<-polled
	r.rssPeak = procStatus(t, "VmHWM")
	return r
}

func newClient(roots *x509.CertPool, fresh bool) *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: fresh,
	}}
}

func get(cl *http.Client, url string) error {
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// procStatus reads a kB field of /proc/self/status.
func procStatus(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("%s in /proc/self/status: %v", field, err)
		}
		return n
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// quantile returns the q-quantile of ds (sorted in place); 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// TestLoginFlood checks that a flood of bad password logins leaves the controller's memory
// bounded (floodRSSBudget) and its other requests answered, and that every login gets an
// answer: 401 or 429 with Retry-After. make test runs it without the race detector too.
func TestLoginFlood(t *testing.T) {
	c := ctrltest.Start(t)
	r := flood(t, c)
	growth := r.rssPeak - r.rssBefore
	t.Logf("RSS before %d MB, peak %d MB; logins %v; GET /version during the flood: %d, p50 %v, p99 %v",
		r.rssBefore>>10, r.rssPeak>>10, r.statuses, len(r.version), quantile(r.version, 0.5), quantile(r.version, 0.99))
	if budget := floodRSSBudget(); growth<<10 >= budget {
		t.Errorf("RSS grew by %d MB during the flood, want < %d MB", growth>>10, budget>>20)
	}
	for _, err := range r.loginErrs {
		t.Errorf("login: %v", err)
	}
	for _, err := range r.versionErrs {
		t.Errorf("GET /version during the flood: %v", err)
	}
	for status, n := range r.statuses {
		if status != http.StatusUnauthorized && status != http.StatusTooManyRequests {
			t.Errorf("%d logins answered %d, want 401 or 429", n, status)
		}
	}
}

// BenchmarkVersionDuringLoginFlood reports the latency of GET /version while floodLogins bad
// logins arrive at once, and the RSS growth they cause.
func BenchmarkVersionDuringLoginFlood(b *testing.B) {
	c := ctrltest.Start(b)
	var all []time.Duration
	var growth int64
	for b.Loop() {
		r := flood(b, c)
		all = append(all, r.version...)
		growth = max(growth, r.rssPeak-r.rssBefore)
	}
	b.ReportMetric(float64(quantile(all, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(quantile(all, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(growth>>10), "rss-growth-MB")
}
