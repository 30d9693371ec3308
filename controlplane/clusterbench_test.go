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

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestClusterThroughput measures, in one run on one machine, what a cluster of three
// members does against a single controller: password logins (each a new API session, a
// replicated write besides the password hash) and identity creations (a write alone),
// with the clients spread over the members (two of three writes are then forwarded to the
// leader); then circuit setup, a closed loop of circuit requests from simulated routers
// connected to every member, the requests spread over the members (reads of the members'
// caches and Routes, no write). It prints the rates, the latencies and the ratios; it
// asserts no timing. Run it with `make bench-cluster`.
func TestClusterThroughput(t *testing.T) {
	if os.Getenv("ZMESH_CLUSTER_BENCH") == "" {
		t.Skip("a benchmark: run it with make bench-cluster (ZMESH_CLUSTER_BENCH=1)")
	}
	ctx := context.Background()
	// Logins use four workers: more concurrent attempts on one account than the limiter's
	// free failures are refused (controlplane/model/ratelimit.go).
	const loginWorkers, createWorkers, logins, creates = 4, 8, 400, 2000

	single := startWithCtrl(t, t.TempDir())
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

	// Circuit setup. The networks are built and the routers connected before either run.
	singleNet := buildCircuitNet(t, single.ctrl.Model(), "single")
	clusterNet := buildCircuitNet(t, a.ctrl.Model(), "cluster")
	// Every member has applied the writes made through a before its routers connect, so that
	// every snapshot holds the same state.
	want := sessionEntries(t, a.ctrl)
	for _, m := range members[1:] {
		eventually(t, "member "+m.cfg.Cluster.ID+" holds the session state written through a", func() bool {
			return sessionEntries(t, m.ctrl) == want
		})
	}
	singleRouters := connectCircuitNet(t, singleNet, []*Controller{single.ctrl}, []string{single.ctrlAddr}, singleRoots)
	var clusterCtrls []*Controller
	var clusterCtrlAddrs []string
	for _, m := range members {
		clusterCtrls = append(clusterCtrls, m.ctrl)
		clusterCtrlAddrs = append(clusterCtrlAddrs, m.cfg.Ctrl.Listen.HostPort())
	}
	clusterRouters := connectCircuitNet(t, clusterNet, clusterCtrls, clusterCtrlAddrs, clusterRoots)
	scr := runCircuits(t, "single", singleRouters, singleNet.pairs, circuitDuration)
	ccr := runCircuits(t, "cluster", clusterRouters, clusterNet.pairs, circuitDuration)

	t.Logf("%d workers for logins, %d for creations; clients spread over the 3 members", loginWorkers, createWorkers)
	t.Logf("logins:    single %7.0f/s p50 %v p99 %v | cluster %7.0f/s p50 %v p99 %v | ratio %.2f×",
		sl.rate, sl.p50, sl.p99, cl.rate, cl.p50, cl.p99, cl.rate/sl.rate)
	t.Logf("creations: single %7.0f/s p50 %v p99 %v | cluster %7.0f/s p50 %v p99 %v | ratio %.2f×",
		sc.rate, sc.p50, sc.p99, cc.rate, cc.p50, cc.p99, cc.rate/sc.rate)
	t.Logf("circuits:  single %7.0f/s p50 %v p99 %v | cluster %7.0f/s p50 %v p99 %v | ratio %.2f×",
		scr.rate, scr.p50, scr.p99, ccr.rate, ccr.p50, ccr.p99, ccr.rate/scr.rate)
	t.Logf("circuits: %d simulated routers, each connected to every member; %d requests in flight from the first, "+
		"spread over the members, to %d services whose terminators are on the others, for %v each; made by members a, b, c: %v",
		circuitRouters, circuitWorkers, circuitServices, circuitDuration, ccr.byController)
}

// The circuit setup's network and load: modest, so that the whole benchmark takes a few
// minutes on two cores.
const (
	circuitRouters    = 10 // the first the ingress, the others hold the terminators
	circuitServices   = 18
	circuitIdentities = 16
	circuitPairs      = 48 // Dial sessions, of every identity, over every service
	circuitWorkers    = 16
	circuitDuration   = 5 * time.Second
)

// circuitNet is what the circuit setup runs on, written through one controller's model:
// routers enrolled with their one-time tokens, services with one terminator each on a router
// other than the first, policies that let every identity dial every service through every
// router, and identities logged in with their enrolled certificates, holding the Dial
// sessions the requests name. Everything is written before the measured part.
type circuitNet struct {
	routers []*SimRouter // ID and Cert only: connectCircuitNet makes the channels
	pairs   []CircuitPair
}

func buildCircuitNet(t *testing.T, m *model.Model, prefix string) circuitNet {
	t.Helper()
	var n circuitNet
	for i := range circuitRouters {
		r := &model.EdgeRouter{Name: fmt.Sprintf("%s-router-%02d", prefix, i)}
		if err := m.CreateEdgeRouter(r); err != nil {
			t.Fatal(err)
		}
		enr, err := m.RouterEnrollment(r.ID)
		if err != nil || enr == nil {
			t.Fatalf("the enrollment of router %s: %v", r.Name, err)
		}
		key := testutil.NewKey(t)
		certs, err := m.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, key, "127.0.0.1"))
		if err != nil {
			t.Fatalf("enroll router %s: %v", r.Name, err)
		}
		n.routers = append(n.routers, &SimRouter{ID: r.ID, Cert: testutil.TLSCert(t, certs.Cert, key)})
	}
	serviceIDs := make([]string, circuitServices)
	for i := range serviceIDs {
		s := &model.Service{Name: fmt.Sprintf("%s-service-%02d", prefix, i), Configs: []string{}, TerminatorStrategy: model.DefaultStrat}
		if err := m.CreateService(s); err != nil {
			t.Fatal(err)
		}
		serviceIDs[i] = s.ID
		if err := m.CreateTerminator(&model.Terminator{ServiceID: s.ID, RouterID: n.routers[1+i%(circuitRouters-1)].ID,
			Binding: "proxy", Address: fmt.Sprintf("service-%02d.internal:443", i)}); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"#all"}
	if err := m.CreateServicePolicy(&model.ServicePolicy{Name: prefix + "-dial", Type: model.PolicyDial, Semantic: model.SemanticAny,
		IdentityRoles: all, ServiceRoles: all, PostureCheckRoles: []string{}}); err != nil {
		t.Fatal(err)
	}
	if err := m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: prefix + "-all", Semantic: model.SemanticAny,
		IdentityRoles: all, EdgeRouterRoles: all}); err != nil {
		t.Fatal(err)
	}
	if err := m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: prefix + "-all", Semantic: model.SemanticAny,
		ServiceRoles: all, EdgeRouterRoles: all}); err != nil {
		t.Fatal(err)
	}
	apis := make([]*model.APISession, circuitIdentities)
	for i := range apis {
		name := fmt.Sprintf("%s-client-%02d", prefix, i)
		id, err := m.CreateIdentity(model.IdentityCreate{Name: name, Enrollment: &model.EnrollmentRequest{OTT: true}})
		if err != nil {
			t.Fatal(err)
		}
		ens, err := m.EnrollmentsOf(id.ID)
		if err != nil || len(ens) == 0 {
			t.Fatalf("the enrollments of identity %s: %d, %v", name, len(ens), err)
		}
		certPEM, err := m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
		if err != nil {
			t.Fatalf("enroll identity %s: %v", name, err)
		}
		cert, err := pki.ParsePEMCert(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		if apis[i], _, err = m.AuthenticateCert([]*x509.Certificate{cert}, model.Login{Source: "127.0.0.1"}); err != nil {
			t.Fatalf("identity %s logs in: %v", name, err)
		}
	}
	for k := range circuitPairs {
		svc := serviceIDs[k%circuitServices]
		s, _, err := m.CreateSession(apis[k%circuitIdentities], svc, model.PolicyDial, nil)
		if err != nil {
			t.Fatalf("a Dial session of service %s: %v", svc, err)
		}
		n.pairs = append(n.pairs, CircuitPair{Token: s.Token, ServiceID: svc})
	}
	return n
}

// sessionEntries counts the API sessions and sessions of c's session state.
func sessionEntries(t *testing.T, c *Controller) int64 {
	t.Helper()
	apis, sessions, err := c.Model().SessionState()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(apis) + len(sessions))
}

// connectCircuitNet connects every router of n to every controller (ctrls, serving their
// control channels at addrs), waits for each channel's session state snapshot, and has the
// first router and each other router report the link between them on every channel, as
// routers do. It returns the channels, by router then by controller.
func connectCircuitNet(t *testing.T, n circuitNet, ctrls []*Controller, addrs []string, roots *x509.CertPool) [][]*SimRouter {
	t.Helper()
	ctx := t.Context()
	want := sessionEntries(t, ctrls[0])
	chans := make([][]*SimRouter, len(n.routers))
	for i, r := range n.routers {
		for _, addr := range addrs {
			sr := &SimRouter{ID: r.ID, Cert: r.Cert}
			if err := sr.Connect(ctx, addr, roots); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sr.Close)
			if err := sr.WaitSnapshot(ctx, want); err != nil {
				t.Fatalf("from %s: %v", addr, err)
			}
			chans[i] = append(chans[i], sr)
		}
	}
	for k := range ctrls {
		ingress := chans[0][k]
		for _, egress := range chans[1:] {
			r := egress[k]
			link := "circuit-link-" + r.ID
			if err := ingress.Ch.Send(ctx, &ctrlproto.LinkState{LinkID: link, PeerRouterID: r.ID, Up: true, Latency: time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			if err := r.Ch.Send(ctx, &ctrlproto.LinkState{LinkID: link, PeerRouterID: ingress.ID, Up: true, Latency: time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, c := range ctrls {
		eventually(t, "every link in the graph of "+addrs[k], func() bool { return len(c.Links()) == len(n.routers)-1 })
	}
	return chans
}

// circuitRun is the result of runCircuits.
type circuitRun struct {
	rate     float64
	p50, p99 time.Duration
	// byController counts the circuits each controller made (the Routes its egress channels
	// were sent).
	byController []int64
}

// runCircuits runs SetupCircuits for d with the first router's channels as the ingress,
// worker w requesting through controller w%len(controllers), and checks that every circuit made was
// routed, once, at its egress.
func runCircuits(t *testing.T, name string, chans [][]*SimRouter, pairs []CircuitPair, d time.Duration) circuitRun {
	t.Helper()
	res := SetupCircuits(t.Context(), chans[0], pairs, circuitWorkers, d)
	if res.Err != nil || len(res.Latencies) == 0 {
		t.Fatalf("%s circuit setup: %d circuits, %d failed, the first: %v", name, len(res.Latencies), res.Failed, res.Err)
	}
	out := circuitRun{byController: make([]int64, len(chans[0]))}
	var routed int64
	for _, egress := range chans[1:] {
		for k, r := range egress {
			out.byController[k] += r.Routes.Load()
			routed += r.Routes.Load()
		}
	}
	if routed != int64(len(res.Latencies)) {
		t.Errorf("%s: %d circuits made but the egress routers were sent %d routes", name, len(res.Latencies), routed)
	}
	slices.Sort(res.Latencies)
	out.rate = float64(len(res.Latencies)) / res.Elapsed.Seconds()
	out.p50, out.p99 = res.Latencies[len(res.Latencies)/2].Round(time.Microsecond), res.Latencies[len(res.Latencies)*99/100].Round(time.Microsecond)
	return out
}
