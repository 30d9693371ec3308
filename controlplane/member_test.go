package controlplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// member is a controller with a cluster section, serving on loopback for a test.
type member struct {
	cfg  *config.Controller
	ctrl *Controller
	api  *apiclient.Client // no session until one is given
	stop context.CancelFunc
	done chan error
	// health is the URL of its /health-checks.
	health string
}

// clusterHealth returns the status of the member's /health-checks and its cluster check.
func (m *member) clusterHealth(t *testing.T) (int, map[string]any) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: m.ctrl.CA().Pool(), MinVersion: tls.VersionTLS12},
	}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(m.health)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct {
		Data struct {
			Checks []struct {
				ID      string         `json:"id"`
				Healthy bool           `json:"healthy"`
				Details map[string]any `json:"details"`
			} `json:"checks"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Data.Checks {
		if c.ID == checkCluster {
			return resp.StatusCode, c.Details
		}
	}
	t.Fatalf("no %s check in %+v", checkCluster, rep)
	return 0, nil
}

// freeAddr reserves a loopback port and frees it for the caller to listen on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startMember runs a member on dir; the CA of caDir (when not "") is copied first, as
// import-ca does.
func startMember(t *testing.T, dir, id, caDir string) *member {
	t.Helper()
	return runMember(t, dir, id, caDir, nil)
}

// runMember runs a member on dir, on the addresses of prev when not nil (a restart).
func runMember(t *testing.T, dir, id, caDir string, prev *config.Controller) *member {
	t.Helper()
	if caDir != "" {
		if err := ImportCA(filepath.Join(dir, "pki"), filepath.Join(caDir, "pki", pki.CACertFile), filepath.Join(caDir, "pki", pki.CAKeyFile)); err != nil {
			t.Fatal(err)
		}
	}
	apiAddr := "127.0.0.1:0"
	if prev != nil {
		apiAddr = prev.API.Listen
	}
	ln, err := net.Listen("tcp", apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir, ln.Addr().String())
	if prev != nil {
		cfg.Ctrl, cfg.Cluster = prev.Ctrl, prev.Cluster
	} else {
		ctrlAddr := freeAddr(t)
		host, port, _ := net.SplitHostPort(ctrlAddr)
		cfg.Ctrl.Listen.Host = host
		cfg.Ctrl.Listen.Port, _ = strconv.Atoi(port)
		raftAddr := freeAddr(t)
		cfg.Cluster = &config.ControllerCluster{
			ID: id, DataDir: filepath.Join(dir, "raft"), Listen: raftAddr, Advertise: raftAddr,
			HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 500 * time.Millisecond,
			ApplyTimeout: 5 * time.Second, SnapshotInterval: time.Minute, SnapshotThreshold: 8192, TrailingLogs: 10240,
		}
	}
	point := []config.BindPoint{{Interface: "127.0.0.1:0", Address: "127.0.0.1:0"}}
	cfg.Web = []config.WebListener{{Name: "health", BindPoints: point, APIs: []config.WebAPI{{Binding: config.APIHealthChecks}}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctrl, err := Open(cfg, log, Build{Version: "test"})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cfg: cfg, ctrl: ctrl, stop: cancel, done: make(chan error, 1), api: apiclient.New("https://"+cfg.API.Advertise, ctrl.CA().Pool(), nil)}
	ready := make(chan struct{})
	ctrlLn, err := net.Listen("tcp", cfg.Ctrl.Listen.HostPort())
	if err != nil {
		t.Fatal(err)
	}
	go func() { m.done <- ctrl.ServeWithCtrl(ctx, ln, ctrlLn, func(net.Addr) { close(ready) }) }()
	<-ready
	ctrl.webMu.Lock()
	m.health = "https://" + ctrl.webAddrs["health"][0].String() + "/health-checks"
	ctrl.webMu.Unlock()
	t.Cleanup(func() { m.shutdown(t) })
	return m
}

// shutdown stops the member and waits until it has; again, it does nothing.
func (m *member) shutdown(t *testing.T) {
	if m.stop == nil {
		return
	}
	m.stop()
	m.stop = nil
	if err := <-m.done; err != nil {
		t.Errorf("member %s stopped with: %v", m.cfg.Cluster.ID, err)
	}
}

// eventually waits until f holds, up to 15 s.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

type controllerItem struct {
	ID           string `json:"id"`
	CtrlAddress  string `json:"ctrlAddress"`
	CertPem      string `json:"certPem"`
	IsOnline     bool   `json:"isOnline"`
	APIAddresses map[string][]struct {
		URL string `json:"url"`
	} `json:"apiAddresses"`
}

// TestClusterOfThree: a single controller that holds records already is restarted with a
// cluster section: it serves reads, refuses writes until init makes it a cluster of one; two members with its CA are added through the command socket and receive those
// records (by the snapshot taken at init); writes through the leader are read through the
// followers; writes through followers reach every member; /controllers lists every member; the
// leadership moves; a removed member leaves the list.
func TestClusterOfThree(t *testing.T) {
	ctx := context.Background()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	// A single controller with records of its own becomes the first member.
	single := start(t, dirs[0], "")
	before := createIdentity(t, single.admin, map[string]any{"name": "before-the-cluster", "type": "User", "isAdmin": false})
	single.shutdown(t)
	a := startMember(t, dirs[0], "a", "")

	// Not a member yet: the commands say what to do; nothing was written.
	if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "list"}); err == nil || !strings.Contains(err.Error(), "zmesh controller cluster init") {
		t.Fatalf("list before init: %v, want an error naming init", err)
	}
	if _, err := a.api.Do(ctx, "GET", apiclient.ClientAPI+"/version", nil, nil); err != nil {
		t.Fatal(err) // reads are served
	}
	// A write before init is refused with 503: there is no leader.
	_, err := a.api.AuthenticatePassword(ctx, "admin", "admin-pass")
	if ae := (*apiclient.Error)(nil); !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "CLUSTER_HAS_NO_LEADER" {
		t.Fatalf("login before init: %v, want 503 CLUSTER_HAS_NO_LEADER", err)
	}

	if status, d := a.clusterHealth(t); status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(d["error"]), "not in a cluster yet") {
		t.Fatalf("health before init: %d %v", status, d)
	}
	// Not a member: no cluster figure is exported.
	if mfs, err := a.ctrl.Metrics().Gatherer().Gather(); err != nil {
		t.Fatal(err)
	} else if i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return strings.HasPrefix(mf.GetName(), "zmesh_cluster_") }); i >= 0 {
		t.Errorf("before init the metrics export %s", mfs[i].GetName())
	}
	ms, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "init"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].ID != "a" || !ms[0].Leader {
		t.Fatalf("after init: %+v, want a alone, leading", ms)
	}
	if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "init"}); err == nil {
		t.Fatal("a second init succeeded")
	}
	if _, err := a.api.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}

	// A router connected to a is told each member's control channel endpoint.
	var endpointsMu sync.Mutex
	var endpoints []string
	connectRouter(t, a.ctrl, a.cfg.Ctrl.Listen.HostPort(), func(ch *ctrlproto.Channel) {
		ch.Handle(ctrlproto.TypeEndpointsUpdate, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
			endpointsMu.Lock()
			endpoints = m.(*ctrlproto.EndpointsUpdate).Endpoints
			endpointsMu.Unlock()
			return nil, nil
		})
	})

	b := startMember(t, dirs[1], "b", dirs[0])
	c := startMember(t, dirs[2], "c", dirs[0])
	for _, m := range []*member{b, c} {
		if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "add", Arg: m.cfg.API.Advertise}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err = RunClusterCommand(ctx, dirs[1], ClusterRequest{Op: "list"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("list on b: %+v, want 3 members", ms)
	}
	after := createIdentity(t, a.api, map[string]any{"name": "after-the-others", "type": "User", "isAdmin": false})

	// The followers read what the leader wrote, with the session opened on the leader.
	for _, m := range []*member{b, c} {
		m.api.Token = a.api.Token
		for _, id := range []string{before.ID, after.ID} {
			eventually(t, "a follower reads identity "+id, func() bool {
				var d identityDetail
				_, err := m.api.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+id, nil, &d)
				return err == nil && d.ID == id
			})
		}
		for _, base := range []string{apiclient.ClientAPI, apiclient.ManagementAPI} {
			var list []controllerItem
			eventually(t, "a follower lists three controllers at "+base, func() bool {
				_, err := m.api.Do(ctx, "GET", base+"/controllers", nil, &list)
				return err == nil && len(list) == 3
			})
			var ids []string
			for _, it := range list {
				ids = append(ids, it.ID)
				if it.CtrlAddress == "" || it.CertPem == "" || len(it.APIAddresses["edge-management"]) != 1 || !it.IsOnline {
					t.Errorf("controller %+v lacks its addresses or certificate", it)
				}
			}
			if slices.Sort(ids); !slices.Equal(ids, []string{"a", "b", "c"}) {
				t.Errorf("controllers %v, want a, b, c", ids)
			}
		}
		// A follower takes writes (it forwards them to the leader) and reads its own at once;
		// every member then has them.
		name := "on-follower-" + m.cfg.Cluster.ID
		var created struct {
			ID string `json:"id"`
		}
		if _, err := m.api.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", map[string]any{"name": name, "type": "User", "isAdmin": false}, &created); err != nil {
			t.Fatalf("write on follower %s: %v", m.cfg.Cluster.ID, err)
		}
		var d identityDetail
		if _, err := m.api.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+created.ID, nil, &d); err != nil || d.Name != name {
			t.Fatalf("follower %s reading its own write: %v %+v", m.cfg.Cluster.ID, err, d)
		}
		for _, other := range []*member{a, b, c} {
			reader := apiclient.New("https://"+other.cfg.API.Advertise, a.ctrl.CA().Pool(), nil)
			reader.Token = a.api.Token
			eventually(t, "member "+other.cfg.Cluster.ID+" reads "+name, func() bool {
				var d identityDetail
				_, err := reader.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+created.ID, nil, &d)
				return err == nil && d.Name == name
			})
		}
	}

	// Routers are told every member's control channel endpoint, this member's first.
	want := []string{ctrlEndpoint(a.cfg), ctrlEndpoint(b.cfg), ctrlEndpoint(c.cfg)}
	eventually(t, "the router is told three endpoints", func() bool {
		endpointsMu.Lock()
		defer endpointsMu.Unlock()
		return len(endpoints) == 3 && endpoints[0] == want[0] && slices.Contains(endpoints, want[1]) && slices.Contains(endpoints, want[2])
	})
	if eps := b.ctrl.ctrlEndpoints(); len(eps) != 3 || eps[0] != want[1] {
		t.Errorf("b's endpoints %v, want three, its own first", eps)
	}

	// Health and metrics say who leads.
	for _, m := range []*member{a, b, c} {
		details, err := m.ctrl.checkCluster(ctx)
		if d := details.(map[string]any); err != nil || d["leader"] != "a" || d["members"] != 3 {
			t.Errorf("health of %s: %v %v, want a leading three members", m.cfg.Cluster.ID, details, err)
		}
		if got := gauge(t, m.ctrl, "zmesh_cluster_leader"); got != map[bool]float64{true: 1, false: 0}[m == a] {
			t.Errorf("zmesh_cluster_leader of %s = %v", m.cfg.Cluster.ID, got)
		}
		if got := gauge(t, m.ctrl, "zmesh_cluster_members"); got != 3 {
			t.Errorf("zmesh_cluster_members of %s = %v, want 3", m.cfg.Cluster.ID, got)
		}
	}
	if got := gauge(t, a.ctrl, "zmesh_cluster_commit_index"); got < 5 {
		t.Errorf("zmesh_cluster_commit_index of the leader = %v", got)
	}

	// c stops; a write goes on with two of three; c restarted on its directory writes
	// nothing at start, stays a member and catches up.
	c.shutdown(t)
	whileDown := createIdentity(t, a.api, map[string]any{"name": "while-c-was-down", "type": "User", "isAdmin": false})
	c = runMember(t, dirs[2], "c", "", c.cfg)
	c.api.Token = a.api.Token
	eventually(t, "the restarted member reads what it missed", func() bool {
		var d identityDetail
		_, err := c.api.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+whileDown.ID, nil, &d)
		return err == nil && d.ID == whileDown.ID
	})
	if ms, err := RunClusterCommand(ctx, dirs[2], ClusterRequest{Op: "list"}); err != nil || len(ms) != 3 {
		t.Fatalf("list on the restarted member: %v %v", ms, err)
	}

	// The leadership moves to b.
	if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "transfer-leadership", Arg: "b"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b leads", func() bool { return b.ctrl.Node().State() == "Leader" })
	for _, m := range []*member{a, b, c} {
		eventually(t, "the health checks say b leads", func() bool {
			status, d := m.clusterHealth(t)
			return status == http.StatusOK && d["leader"] == "b" && d["members"] == float64(3)
		})
	}
	// A change asked of a follower names the leader's host.
	if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "remove", Arg: "c"}); err == nil || !strings.Contains(err.Error(), "run the command on b's host") {
		t.Errorf("remove on a follower: %v, want an error sending the command to b's host", err)
	}

	// c is removed by the leader.
	ms, err = RunClusterCommand(ctx, dirs[1], ClusterRequest{Op: "remove", Arg: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || slices.ContainsFunc(ms, func(m MemberStatus) bool { return m.ID == "c" }) {
		t.Fatalf("after removing c: %+v", ms)
	}
	// The removed member, its raft state moved aside, cannot start a new cluster on a store
	// that applied the old one's log.
	c.shutdown(t)
	if err := os.Rename(c.cfg.Cluster.DataDir, c.cfg.Cluster.DataDir+".old"); err != nil {
		t.Fatal(err)
	}
	c = runMember(t, dirs[2], "c", "", c.cfg)
	if _, err := RunClusterCommand(ctx, dirs[2], ClusterRequest{Op: "init"}); err == nil || !strings.Contains(err.Error(), "has applied a cluster's log") {
		t.Errorf("init on the removed member: %v, want a refusal", err)
	}
	eventually(t, "a lists two controllers", func() bool {
		list, err := a.ctrl.controllerList()
		return err == nil && len(list) == 2
	})
}

// gauge reads one gauge of the controller's registry.
func gauge(t *testing.T, c *Controller, name string) float64 {
	t.Helper()
	mfs, err := c.Metrics().Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// A single controller lists itself alone, as ctrl1, with its addresses and certificate.
func TestControllersOfASingleController(t *testing.T) {
	t.Parallel()
	r := start(t, t.TempDir(), "")
	var list []struct {
		controllerItem
		Fingerprint string `json:"fingerprint"`
	}
	if _, err := r.admin.Do(context.Background(), "GET", apiclient.ClientAPI+"/controllers", nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "ctrl1" || list[0].CtrlAddress != "tls:127.0.0.1:6262" || !list[0].IsOnline ||
		list[0].APIAddresses["edge-client"][0].URL != r.url+apiclient.ClientAPI || list[0].Fingerprint == "" || list[0].CertPem == "" {
		t.Errorf("controllers %+v, want ctrl1 alone with its addresses and certificate", list)
	}
}

// TestMemberStopsWhenItsStoreFails: a member whose store cannot apply a log entry stops
// serving with an error naming it (for its supervisor to restart it), and the others go on.
func TestMemberStopsWhenItsStoreFails(t *testing.T) {
	ctx := context.Background()
	// Three members, so that a and c keep a quorum once b stops.
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := startMember(t, dirs[0], "a", "")
	if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "init"}); err != nil {
		t.Fatal(err)
	}
	b := startMember(t, dirs[1], "b", dirs[0])
	c := startMember(t, dirs[2], "c", dirs[0])
	for _, m := range []*member{b, c} {
		if _, err := RunClusterCommand(ctx, dirs[0], ClusterRequest{Op: "add", Arg: m.cfg.API.Advertise}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.api.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	if err := b.ctrl.store.Close(); err != nil { // its next apply fails
		t.Fatal(err)
	}
	stopB := b.stop
	b.stop = nil // it stops by itself: its end is read below
	defer stopB()
	createIdentity(t, a.api, map[string]any{"name": "after-b-failed", "type": "User", "isAdmin": false})
	err := <-b.done
	if err == nil || !strings.Contains(err.Error(), "cluster member b") {
		t.Fatalf("b stopped with %v, want an error naming the member", err)
	}
}

// TestLeaderPrunesRecords: the leader deletes the record of a controller that is not in the
// cluster's configuration (one a recovery left out) and keeps the members'.
func TestLeaderPrunesRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := startMember(t, dir, "a", "")
	if _, err := RunClusterCommand(ctx, dir, ClusterRequest{Op: "init"}); err != nil {
		t.Fatal(err)
	}
	c := a.ctrl
	ghost := ControllerRecord{ID: "lost", RaftAddress: "127.0.0.1:1", APIAddress: "127.0.0.1:2", CtrlAddress: "tls:127.0.0.1:3"}
	if err := c.store.Update(func(tx *store.Tx) error { return c.members.Put(tx, &ghost) }); err != nil {
		t.Fatal(err)
	}
	if err := c.pruneRecords(c.Node()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := c.store.View(func(tx *store.Tx) error {
		return c.members.Each(tx, func(r *ControllerRecord) error { ids = append(ids, r.ID); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("records after pruning: %v, want a's alone", ids)
	}
}

// TestRecoverMember: recovery refuses a running controller and another member's id, changing
// nothing; it copies the store and the raft directory aside, and the controller started
// again takes writes.
func TestRecoverMember(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := startMember(t, dir, "a", "")
	if _, err := RunClusterCommand(ctx, dir, ClusterRequest{Op: "init"}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := RecoverMember(a.cfg, log, false); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("recover a running controller: %v", err)
	}
	a.shutdown(t)
	asides := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "before-recover-*"))
		return m
	}
	found, err := RecoverMember(a.cfg, log, true)
	if err != nil || !found.Includes("a") || found.LastIndex == 0 || found.Aside != "" || len(asides()) != 0 {
		t.Fatalf("dry run: %+v (%v), copies %v", found, err, asides())
	}
	other := *a.cfg
	cc := *a.cfg.Cluster
	cc.ID = "z"
	other.Cluster = &cc
	if _, err := RecoverMember(&other, log, false); err == nil || !strings.Contains(err.Error(), "not in the configuration") || len(asides()) != 0 {
		t.Fatalf("recover as another member: %v, copies %v", err, asides())
	}
	r, err := RecoverMember(a.cfg, log, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"db", filepath.Join("raft", "raft.db")} {
		if _, err := os.Stat(filepath.Join(r.Aside, f)); err != nil {
			t.Errorf("the copy aside lacks %s: %v", f, err)
		}
	}
	again := runMember(t, dir, "a", "", a.cfg)
	eventually(t, "a login on the recovered controller", func() bool {
		_, err := again.api.AuthenticatePassword(ctx, "admin", "admin-pass")
		return err == nil
	})
}

// TestSnapshotWithoutRouterDisconnectsIt: a store replaced by a snapshot in which a
// connected router does not exist (a member installing its leader's snapshot) closes the
// router's control channel, as the router's deletion does.
func TestSnapshotWithoutRouterDisconnectsIt(t *testing.T) {
	r := startWithCtrl(t, t.TempDir())
	c := r.ctrl
	before := filepath.Join(t.TempDir(), "before.backup")
	f, err := os.Create(before)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.store.Backup(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	er := &model.EdgeRouter{Name: "er"}
	if err := c.model.CreateEdgeRouter(er); err != nil {
		t.Fatal(err)
	}
	enr, err := c.model.RouterEnrollment(er.ID)
	if err != nil || enr == nil {
		t.Fatalf("the router's enrollment: %v", err)
	}
	key := testutil.NewKey(t)
	certs, err := c.model.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, key, "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	sr := &SimRouter{ID: er.ID, Cert: testutil.TLSCert(t, certs.Cert, key)}
	if err := sr.Connect(context.Background(), r.ctrlAddr, r.roots); err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	if err := c.store.ReplaceFromBackup(before); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the router's channel closed", func() bool {
		select {
		case <-sr.Ch.Done():
			return true
		default:
			return false
		}
	})
}
