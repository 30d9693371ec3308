package controlplane

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// TestClusterThroughput measures, in one run on one machine, what a cluster of three
// members does against a single controller: password logins (each a new API session, a
// replicated write besides the password hash) and identity creations (a write alone),
// with the clients spread over the members (two of three writes are then forwarded to the
// leader). It prints the rates, the latencies and the ratios; it asserts no timing. Run it
// with `make bench-cluster`.
func TestClusterThroughput(t *testing.T) {
	if os.Getenv("ZMESH_CLUSTER_BENCH") == "" {
		t.Skip("a benchmark: run it with make bench-cluster (ZMESH_CLUSTER_BENCH=1)")
	}
	ctx := context.Background()
	// Logins use four workers: more concurrent attempts on one account than the limiter's
	// free failures are refused (controlplane/model/ratelimit.go).
	const loginWorkers, createWorkers, logins, creates = 4, 8, 400, 2000

	single := start(t, t.TempDir(), "")
	singleURLs := []string{single.url}

	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := startMember(t, dirs[0], "a", "")
	if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "init"}); err != nil {
		t.Fatal(err)
	}
	members := []*member{a, startMember(t, dirs[1], "b", dirs[0]), startMember(t, dirs[2], "c", dirs[0])}
	for _, m := range members[1:] {
		if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "add", Arg: m.cfg.API.Advertise}); err != nil {
			t.Fatal(err)
		}
	}
	var clusterURLs []string
	for _, m := range members {
		clusterURLs = append(clusterURLs, "https://"+m.cfg.API.Advertise)
	}
	type result struct {
		rate     float64
		p50, p99 time.Duration
	}
	// run does n operations with workers clients logged in as the administrator, worker w
	// calling urls[w%len(urls)].
	run := func(name string, workers int, urls []string, roots *x509.CertPool, n int, op func(c *apiclient.Client, i int) error) result {
		t.Helper()
		clients := make([]*apiclient.Client, workers)
		for w := range clients {
			clients[w] = apiclient.New(urls[w%len(urls)], roots, nil)
			if _, err := clients[w].AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
				t.Fatal(err)
			}
		}
		var next atomic.Int64
		lat := make([][]time.Duration, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		begin := time.Now()
		for w := range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					t0 := time.Now()
					if err := op(clients[w], i); err != nil {
						errs[w] = fmt.Errorf("%s %d: %w", name, i, err)
						return
					}
					lat[w] = append(lat[w], time.Since(t0))
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(begin)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		return result{rate: float64(n) / elapsed.Seconds(), p50: all[len(all)/2], p99: all[len(all)*99/100]}
	}
	loginOp := func(roots *x509.CertPool) func(c *apiclient.Client, i int) error {
		return func(c *apiclient.Client, _ int) error {
			// A client of its own, so that each login opens a new API session.
			_, err := apiclient.New(c.URL, roots, nil).AuthenticatePassword(ctx, "admin", "admin-pass")
			return err
		}
	}
	createOp := func(prefix string) func(c *apiclient.Client, i int) error {
		return func(c *apiclient.Client, i int) error {
			body := map[string]any{"name": fmt.Sprintf("%s-%d", prefix, i), "type": "User", "isAdmin": false}
			_, err := c.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", body, nil)
			return err
		}
	}
	singleRoots, clusterRoots := single.roots, a.ctrl.CA().Pool()
	// Interleaved, so that a change of the machine's load falls on both.
	sl := run("single login", loginWorkers, singleURLs, singleRoots, logins, loginOp(singleRoots))
	cl := run("cluster login", loginWorkers, clusterURLs, clusterRoots, logins, loginOp(clusterRoots))
	sc := run("single create", createWorkers, singleURLs, singleRoots, creates, createOp("single"))
	cc := run("cluster create", createWorkers, clusterURLs, clusterRoots, creates, createOp("cluster"))

	// Every identity created through any member is on every member.
	for _, m := range members {
		c := apiclient.New("https://"+m.cfg.API.Advertise, clusterRoots, nil)
		if _, err := c.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
			t.Fatal(err)
		}
		var list []struct{}
		page, err := c.Do(ctx, "GET", apiclient.ManagementAPI+"/identities?filter="+urlQuery(`name contains "cluster-"`)+"&limit=1", nil, &list)
		if err != nil {
			t.Fatal(err)
		}
		if page == nil || page.TotalCount != creates {
			t.Fatalf("member %s lists %v identities created through the cluster, want %d", m.cfg.Cluster.ID, page, creates)
		}
	}

	t.Logf("%d workers for logins, %d for creations; clients spread over the 3 members", loginWorkers, createWorkers)
	t.Logf("logins:    single %7.0f/s p50 %v p99 %v | cluster %7.0f/s p50 %v p99 %v | ratio %.2f×",
		sl.rate, sl.p50, sl.p99, cl.rate, cl.p50, cl.p99, cl.rate/sl.rate)
	t.Logf("creations: single %7.0f/s p50 %v p99 %v | cluster %7.0f/s p50 %v p99 %v | ratio %.2f×",
		sc.rate, sc.p50, sc.p99, cc.rate, cc.p50, cc.p99, cc.rate/sc.rate)
}
