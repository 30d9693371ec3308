package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestScaleController is not a test but a tool, skipped unless ZMESH_SCALE is set: it measures
// one controller (Badger in a temporary directory, the API over loopback HTTPS, routers on
// the real control channel) holding a large network, by default 100,000 identities, 10,000
// services, 1,000 service policies and 100 connected routers, and prints
//
//   - the time to build the data set (for information);
//   - the session state snapshot of a router: from its Hello to the snapshot message marked
//     Complete, for one router alone and for every router connecting at once;
//   - memory once the data set is loaded and the routers connected: the Go heap in use after
//     a collection, the process's resident memory, the store's files on disk;
//   - GET /edge/client/v1/services, paged by 500 as clients page, for an identity that three
//     team policies grant a share of the services, over HTTPS: each page and each whole list;
//   - circuit setup through the controller: a closed loop of circuit requests from one
//     simulated ingress router to services whose terminators are on the other routers.
//
// ZMESH_SCALE is a factor of the default sizes (1 the full size, 0.1 a tenth); each size may
// be set on its own: ZMESH_SCALE_IDENTITIES, ZMESH_SCALE_SERVICES, ZMESH_SCALE_POLICIES,
// ZMESH_SCALE_ROUTERS, ZMESH_SCALE_LOGINS (identities logged in, each with an API session and
// a Dial session; default every identity), ZMESH_SCALE_CIRCUIT_WORKERS (default 16),
// ZMESH_SCALE_CIRCUIT_DURATION (default 10s) and ZMESH_SCALE_LISTS (whole lists, default 50).
//
//	ZMESH_SCALE=0.1 go test -run '^TestScaleController$' -v ./controlplane
//	make bench-controller
//
// The data set is written through the model, not the API (100,000 identities over HTTPS
// would take long): records one transaction each, many at once, so that Badger gathers the
// commits into shared fsyncs. Identities log in with JWTs of an external signer
// (model.AuthenticateExtJWT, the path of the API's ext-jwt login without HTTP). The
// simulated routers are control channel clients with enrolled router certificates that
// answer Hello, take the session state and answer Route; they run in the test's process,
// so the figures include their share of the CPU and of the heap. Run it without -race.
func TestScaleController(t *testing.T) {
	sz, ok := scaleSizes(t)
	if !ok {
		t.Skip("set ZMESH_SCALE (1 for 100,000 identities, 10,000 services, 1,000 policies, 100 routers) to measure the controller at scale")
	}
	t.Logf("sizes: %d identities (%d logged in), %d services, %d service policies, %d routers; GOMAXPROCS %d",
		sz.identities, sz.logins, sz.services, sz.policies, sz.routers, runtime.GOMAXPROCS(0))

	cfg := ctrltest.Config(t)
	c := ctrltest.StartWith(t, ctrltest.Options{Config: cfg})
	m := c.Model
	ctx := t.Context()

	// The data set.
	start := time.Now()
	routers := make([]*controlplane.SimRouter, sz.routers)
	for i := range routers {
		r := ctrltest.EnrollRouter(t, m, fmt.Sprintf("scale-router-%03d", i), "127.0.0.1")
		routers[i] = &controlplane.SimRouter{ID: r.ID, Cert: r.Client}
	}
	lay := newScaleLayout(sz)
	pairs, err := lay.build(ctx, t, m, routers)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("data set built in %v", time.Since(start).Round(time.Millisecond))

	// The identity whose services are listed: in three teams, logged in over HTTPS with its
	// certificate, before any router connects so that every snapshot holds the same state.
	lister := ctrltest.EnrollIdentity(t, m, "scale-lister", lay.team(0), lay.team(1), lay.team(2))
	listerCert := testutil.TLSCert(t, lister.CertPEM, lister.Key)
	client := apiclient.New(c.URL, c.Ctrl.CA().Pool(), &listerCert)
	if _, err := client.AuthenticateCert(ctx); err != nil {
		t.Fatalf("the lister's login: %v", err)
	}
	// The lister's creation changed the identities: the model rebuilds its policy index at
	// the next question.
	rebuild := time.Now()
	access, err := m.ServicesFor(lister.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantServices := len(access)
	t.Logf("policy index rebuilt after a change, in the model: %v", time.Since(rebuild).Round(time.Microsecond))

	apis, sessions, err := m.SessionState()
	if err != nil {
		t.Fatal(err)
	}
	wantEntries := int64(len(apis) + len(sessions))
	t.Logf("session state: %d API sessions, %d sessions", len(apis), len(sessions))
	apis, sessions = nil, nil

	dial := func(r *controlplane.SimRouter) error {
		return r.Connect(ctx, c.CtrlAddr, c.Ctrl.CA().Pool())
	}

	// One router alone, then every router at once.
	one := routers[0]
	if err := dial(one); err != nil {
		t.Fatal(err)
	}
	if err := one.WaitSnapshot(ctx, wantEntries); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot, one router: %v (%d entries, %d messages)", one.SnapshotTime().Round(time.Microsecond), wantEntries, one.Messages.Load())
	one.Close()
	testutil.Eventually(t, "the first router gone", func() bool { return c.Ctrl.Routers().Connected() == 0 })

	burst := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(routers))
	for i, r := range routers {
		wg.Go(func() {
			if errs[i] = dial(r); errs[i] == nil {
				errs[i] = r.WaitSnapshot(ctx, wantEntries)
			}
		})
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	burstWall := time.Since(burst)
	times := make([]time.Duration, len(routers))
	for i, r := range routers {
		times[i] = r.SnapshotTime()
	}
	slices.Sort(times)
	t.Logf("snapshot, %d routers at once: p50 %v, p99 %v, max %v; all done %v after the first dial",
		len(routers), pct(times, 50), pct(times, 99), times[len(times)-1], burstWall.Round(time.Millisecond))

	// Memory, with the data set loaded and the routers connected.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("memory: Go heap in use %.1f MiB (allocated objects %.1f MiB), Go runtime total %.1f MiB, RSS %.1f MiB; store on disk %s; "+
		"the controller's log held in memory %.1f MiB",
		mib(ms.HeapInuse), mib(ms.HeapAlloc), mib(ms.Sys), float64(procStatus(t, "VmRSS"))/1024, storeSize(t, filepath.Join(cfg.DataDir, "db")),
		mib(uint64(len(c.Logs.String()))))

	// The routers' links: the ingress (router 0) to each of the others, reported by both ends.
	ingress := routers[0]
	for _, r := range routers[1:] {
		link := "scale-link-" + r.ID
		if err := ingress.Ch.Send(ctx, &ctrlproto.LinkState{LinkID: link, PeerRouterID: r.ID, Up: true, Latency: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if err := r.Ch.Send(ctx, &ctrlproto.LinkState{LinkID: link, PeerRouterID: ingress.ID, Up: true, Latency: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "every link in the graph", func() bool { return len(c.Ctrl.Links()) == len(routers)-1 })

	// GET /services, paged as clients page.
	first, pages, lists, err := listServices(ctx, client, wantServices, sz.lists)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pages)
	slices.Sort(lists)
	t.Logf("list services (%d of %d, pages of %d): first list %v; then %d lists p50 %v p99 %v, pages p50 %v p99 %v",
		wantServices, sz.services, listPage, first.Round(time.Microsecond), len(lists), pct(lists, 50), pct(lists, 99), pct(pages, 50), pct(pages, 99))

	// Circuit setup, closed loop.
	res := controlplane.SetupCircuits(ctx, []*controlplane.SimRouter{ingress}, pairs, sz.circuitWorkers, sz.circuitDuration)
	if res.Err != nil {
		t.Fatalf("circuit setup: %d circuits, %d failed, the first: %v", len(res.Latencies), res.Failed, res.Err)
	}
	slices.Sort(res.Latencies)
	var routed int64
	for _, r := range routers[1:] {
		routed += r.Routes.Load()
	}
	if routed != int64(len(res.Latencies)) {
		t.Errorf("%d circuits made but the egress routers were sent %d routes", len(res.Latencies), routed)
	}
	t.Logf("circuit setup: %d circuits in %v with %d workers, %.0f/s, p50 %v, p99 %v",
		len(res.Latencies), res.Elapsed.Round(time.Millisecond), sz.circuitWorkers,
		float64(len(res.Latencies))/res.Elapsed.Seconds(), pct(res.Latencies, 50), pct(res.Latencies, 99))
}

// sizes is what TestScaleController builds and measures.
type sizes struct {
	identities, services, policies, routers, logins int
	circuitWorkers                                  int
	circuitDuration                                 time.Duration
	lists                                           int
}

// scaleSizes reads the sizes from the environment; false when ZMESH_SCALE is not set.
func scaleSizes(t *testing.T) (sizes, bool) {
	t.Helper()
	f := os.Getenv("ZMESH_SCALE")
	if f == "" {
		return sizes{}, false
	}
	factor, err := strconv.ParseFloat(f, 64)
	if err != nil || factor <= 0 {
		t.Fatalf("ZMESH_SCALE=%q: want a positive factor of the default sizes", f)
	}
	scaled := func(n, least int) int { return max(least, int(float64(n)*factor+0.5)) }
	sz := sizes{
		identities: scaled(100_000, 1), services: scaled(10_000, 1), policies: scaled(1000, 1), routers: scaled(100, 2),
		circuitWorkers: 16, circuitDuration: 10 * time.Second, lists: 50,
	}
	for _, v := range []struct {
		name  string
		value *int
		least int
	}{
		{"ZMESH_SCALE_IDENTITIES", &sz.identities, 1}, {"ZMESH_SCALE_SERVICES", &sz.services, 1},
		{"ZMESH_SCALE_POLICIES", &sz.policies, 1}, {"ZMESH_SCALE_ROUTERS", &sz.routers, 2},
		{"ZMESH_SCALE_LOGINS", &sz.logins, 1}, {"ZMESH_SCALE_CIRCUIT_WORKERS", &sz.circuitWorkers, 1},
		{"ZMESH_SCALE_LISTS", &sz.lists, 1},
	} {
		s := os.Getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < v.least {
			t.Fatalf("%s=%q: want a whole number of at least %d", v.name, s, v.least)
		}
		*v.value = n
	}
	if sz.logins == 0 || sz.logins > sz.identities {
		sz.logins = sz.identities
	}
	if s := os.Getenv("ZMESH_SCALE_CIRCUIT_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("ZMESH_SCALE_CIRCUIT_DURATION=%q: want a positive duration", s)
		}
		sz.circuitDuration = d
	}
	return sz, true
}

// scaleLayout places the records: services in groups of 50 (role attribute group-N), one
// team per five service policies (team-N), every identity in two teams; four fifths of the
// policies grant a team Dial on a group, the rest Bind, so that each team may dial four groups
// and an identity about 4 % of the services at the full size. An edge router policy and a
// service edge router policy let every identity use every router for every service. Each
// service has one terminator (binding proxy) on one of the routers other than the first.
type scaleLayout struct {
	sz                  sizes
	groups, teams, dial int
}

func newScaleLayout(sz sizes) scaleLayout {
	teams := max(1, sz.policies/5)
	return scaleLayout{sz: sz, groups: max(1, sz.services/50), teams: teams, dial: max(teams, sz.policies-sz.policies/5)}
}

func (l scaleLayout) team(n int) string  { return "team-" + strconv.Itoa(n%l.teams) }
func (l scaleLayout) group(n int) string { return "group-" + strconv.Itoa(n%l.groups) }

// groupOf is the group policy p grants: the policies of one team grant different groups.
func (l scaleLayout) groupOf(p int) int { return (p*13 + p/l.teams) % l.groups }

// identityTeams are the two teams of identity i.
func (l scaleLayout) identityTeams(i int) []string {
	if l.teams == 1 {
		return []string{l.team(0)}
	}
	return []string{l.team(i), l.team(i%l.teams + 1 + (i/l.teams)%(l.teams-1))}
}

// dialService is the index of a service identity i may dial: one of the group its first
// team's first policy grants.
func (l scaleLayout) dialService(i int) int {
	g := l.groupOf(i % l.teams)
	perGroup := l.sz.services / l.groups
	return g + l.groups*((i/l.teams)%perGroup)
}

// maxPairs bounds the Dial sessions the circuit setup cycles through (and the test keeps).
const maxPairs = 1000

// build writes the data set through the model and returns Dial sessions to make circuits
// with. Routers are enrolled already.
func (l scaleLayout) build(ctx context.Context, t *testing.T, m *model.Model, routers []*controlplane.SimRouter) ([]controlplane.CircuitPair, error) {
	step := func(what string, n int, f func(i int) error) error {
		start := time.Now()
		if err := parallel(n, f); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		t.Logf("  %d %s in %v", n, what, time.Since(start).Round(time.Millisecond))
		return nil
	}
	sz := l.sz
	serviceIDs := make([]string, sz.services)
	if err := step("services", sz.services, func(i int) error {
		s := &model.Service{Name: fmt.Sprintf("scale-service-%05d", i), RoleAttributes: []string{l.group(i)},
			Configs: []string{}, TerminatorStrategy: model.DefaultStrat}
		if err := m.CreateService(s); err != nil {
			return err
		}
		serviceIDs[i] = s.ID
		return nil
	}); err != nil {
		return nil, err
	}
	identityIDs := make([]string, sz.identities)
	if err := step("identities", sz.identities, func(i int) error {
		id, err := m.CreateIdentity(model.IdentityCreate{Name: fmt.Sprintf("scale-identity-%06d", i), RoleAttributes: l.identityTeams(i)})
		if err != nil {
			return err
		}
		identityIDs[i] = id.ID
		return nil
	}); err != nil {
		return nil, err
	}
	if err := step("service policies", sz.policies, func(p int) error {
		typ := model.PolicyDial
		if p >= l.dial {
			typ = model.PolicyBind
		}
		return m.CreateServicePolicy(&model.ServicePolicy{Name: fmt.Sprintf("scale-policy-%04d", p), Type: typ, Semantic: model.SemanticAny,
			IdentityRoles: []string{"#" + l.team(p)}, ServiceRoles: []string{"#" + l.group(l.groupOf(p))}, PostureCheckRoles: []string{}})
	}); err != nil {
		return nil, err
	}
	if err := m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "scale-all", Semantic: model.SemanticAny,
		IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		return nil, err
	}
	if err := m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "scale-all", Semantic: model.SemanticAny,
		ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		return nil, err
	}
	if err := step("terminators", sz.services, func(i int) error {
		return m.CreateTerminator(&model.Terminator{ServiceID: serviceIDs[i], RouterID: routers[1+i%(len(routers)-1)].ID,
			Binding: "proxy", Address: fmt.Sprintf("service-%05d.internal:443", i)})
	}); err != nil {
		return nil, err
	}

	// Logins: a JWT of an external signer per identity, then a Dial session.
	idp := testutil.NewAuthority(t, "scale identity provider")
	const issuer, audience, kid = "https://idp.scale.test", "zmesh-scale", "scale-1"
	if err := m.CreateExtJWTSigner(&model.ExtJWTSigner{Name: "scale-idp", Enabled: true, Issuer: issuer, Audience: audience,
		CertPEM: string(idp.PEM()), Kid: kid}); err != nil {
		return nil, err
	}
	pairs := make([]controlplane.CircuitPair, min(sz.logins, maxPairs))
	exp := time.Now().Add(time.Hour).Unix()
	err := step("logins with a Dial session each", sz.logins, func(i int) error {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": issuer, "aud": audience, "sub": identityIDs[i], "exp": exp})
		tok.Header["kid"] = kid
		raw, err := tok.SignedString(idp.Key)
		if err != nil {
			return err
		}
		api, _, err := m.AuthenticateExtJWT(ctx, raw, model.Login{Source: "127.0.0.1"})
		if err != nil {
			return fmt.Errorf("identity %d: %w", i, err)
		}
		svc := serviceIDs[l.dialService(i)]
		s, _, err := m.CreateSession(api, svc, model.PolicyDial, nil)
		if err != nil {
			return fmt.Errorf("identity %d, service %s: %w", i, svc, err)
		}
		if i < len(pairs) {
			pairs[i] = controlplane.CircuitPair{Token: s.Token, ServiceID: svc}
		}
		return nil
	})
	return pairs, err
}

// parallel runs f(0) … f(n-1) on scaleWorkers goroutines and returns the first error; after an error
// no further call starts.
func parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range scaleWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// listPage is the page size of the service lists, OpenZiti's SDKs' own.
const listPage = 500

// listServices lists the client's services n+1 times, each whole list paged by listPage, and
// returns the time of the first list and those of the other lists and of their pages. Every
// list must hold want services.
func listServices(ctx context.Context, client *apiclient.Client, want, n int) (first time.Duration, pages, lists []time.Duration, err error) {
	for round := range n + 1 {
		listStart := time.Now()
		seen := 0
		for offset := 0; ; offset += listPage {
			var page []json.RawMessage
			start := time.Now()
			pg, err := client.Do(ctx, "GET", fmt.Sprintf("%s/services?limit=%d&offset=%d", apiclient.ClientAPI, listPage, offset), nil, &page)
			if err != nil {
				return 0, nil, nil, fmt.Errorf("GET /services at offset %d: %w", offset, err)
			}
			if round > 0 {
				pages = append(pages, time.Since(start))
			}
			seen += len(page)
			if pg == nil || pg.TotalCount != want {
				return 0, nil, nil, fmt.Errorf("GET /services: pagination %+v; want a total of %d", pg, want)
			}
			if len(page) < listPage || seen >= want {
				break
			}
		}
		if seen != want {
			return 0, nil, nil, fmt.Errorf("a list of %d services; want %d", seen, want)
		}
		if round == 0 {
			first = time.Since(listStart)
		} else {
			lists = append(lists, time.Since(listStart))
		}
	}
	return first, pages, lists, nil
}

// pct is the p-th percentile of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)].Round(time.Microsecond)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// storeSize is the disk space the store's files take (allocated blocks: Badger's value log
// is a sparse file of its maximum size while open), in MiB, with their apparent sizes.
func storeSize(t *testing.T, dir string) string {
	t.Helper()
	var used, apparent int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		apparent += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the store's size: %v", err)
	}
	return fmt.Sprintf("%.1f MiB (apparent %.1f MiB)", float64(used)/(1<<20), float64(apparent)/(1<<20))
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// scaleWorkers is how many records the data set's steps write at once: Badger syncs the
// commits waiting together once, so the more wait, the fewer syncs per record.
const scaleWorkers = 32
