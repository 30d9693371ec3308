package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/xgress"
)

// startMember starts a controller with a cluster section, with id; caDir, when not "", is
// the data directory of the member whose CA it imports first.
func startMember(t *testing.T, id, caDir string) (*ctrltest.Controller, string) {
	t.Helper()
	cfg := ctrltest.Config(t)
	raft := testutil.ClosedAddr(t)
	cfg.Cluster = &config.ControllerCluster{
		ID: id, DataDir: filepath.Join(cfg.DataDir, "raft"), Listen: raft, Advertise: raft,
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 500 * time.Millisecond,
		ApplyTimeout: 5 * time.Second, SnapshotInterval: time.Minute, SnapshotThreshold: 8192, TrailingLogs: 10240,
	}
	if caDir != "" {
		pkiDir := filepath.Join(caDir, "pki")
		if err := controlplane.ImportCA(filepath.Join(cfg.DataDir, "pki"), filepath.Join(pkiDir, pki.CACertFile), filepath.Join(pkiDir, pki.CAKeyFile)); err != nil {
			t.Fatal(err)
		}
	}
	return ctrltest.StartWith(t, ctrltest.Options{Config: cfg}), cfg.DataDir
}

// clusterCommand runs a cluster command on the member whose data directory is dir, again
// while the member knows no leader (a cluster of two that just grew may hold an election).
func clusterCommand(t *testing.T, dir, op, arg string) {
	t.Helper()
	testutil.EventuallyNil(t, "cluster "+op+" "+arg, func() error {
		_, err := controlplane.RunClusterCommand(t.Context(), dir, controlplane.ClusterRequest{Op: op, Arg: arg})
		if err != nil && !strings.Contains(err.Error(), "knows of none") {
			t.Fatalf("cluster %s %s: %v", op, arg, err)
		}
		return err
	})
}

// echo writes a line on c and reads it back.
func echo(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

// memberIDs returns the ids of the members router tr has a control channel to, sorted.
func memberIDs(tr *testRouter) []string {
	var ids []string
	for id := range tr.r.ctrl.channels() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// gathered returns the router's metrics as its registry has them now.
func gathered(t *testing.T, tr *testRouter) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := tr.r.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// TestRoutersConnectToEveryMember: two routers configured with one member's endpoint of a
// cluster of three connect to all three (the metrics and the controllerPing check say so,
// the endpoints file lists them), every member routes over their link, and a circuit A→B
// carries data, and so does an SDK client's through A's edge listener. The member that made
// the circuit (the SDK client's first controller) stops: both routers stay connected to the
// other two, the circuit keeps forwarding, new circuits are made by the others, and the SDK
// client lists its services through another member and dials again.
func TestRoutersConnectToEveryMember(t *testing.T) {
	t.Parallel()
	// The first member, a cluster of one, with the routers and the service; b and c join
	// after. (A member's read caches see only the writes made on it: b and c build theirs
	// from what they receive when they join.)
	a, dirA := startMember(t, "a", "")
	clusterCommand(t, dirA, "init", "")
	members := map[string]*ctrltest.Controller{"a": a}
	n := &testNet{t: t, dir: t.TempDir(), routers: map[string]*testRouter{}, ctl: a, ctrl: a.Ctrl, m: a.Model, ctrlAdr: a.CtrlAddr, apiAddr: a.APIAddr}
	t.Cleanup(n.stop) // before the members stop
	n.addRouter("B", false, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
      groups: [ab]
`)
	n.addRouter("A", true, `link:
  dialers:
    - binding: transport
      groups: [ab]
listeners:
  - binding: edge
    bind: tls:127.0.0.1:{{port}}
    advertise: tls:127.0.0.1:{{same}}
  - binding: tunnel
    options:
      mode: proxy
      services: [echo:{{port}}]
`)
	n.service("echo", "B", echoServer(t))
	// An SDK client may dial echo through router A's edge listener.
	caPEM, err := os.ReadFile(filepath.Join(n.dir, "A", "ca.cert"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "ca.pem"), caPEM, 0o600); err != nil { // identityFile's CA
		t.Fatal(err)
	}
	sdkCert, _ := n.enrolled("sdk-client")
	if err := n.m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny,
		IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"@" + n.routers["A"].id}}); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny,
		ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b", "c"} {
		members[id], _ = startMember(t, id, dirA)
		clusterCommand(t, dirA, "add", members[id].APIAddr)
	}
	all := []string{"a", "b", "c"}
	for _, name := range []string{"A", "B"} {
		tr := n.routers[name]
		testutil.Eventually(t, "router "+name+" connected to every member", func() bool { return slices.Equal(memberIDs(tr), all) })
		fams := gathered(t, tr)
		if v, ok := value(fams, "zmesh_ctrl_members_connected"); !ok || v != 3 {
			t.Errorf("router %s: zmesh_ctrl_members_connected = %v (present %v), want 3", name, v, ok)
		}
		for _, id := range all {
			if v, ok := value(fams, "zmesh_ctrl_member_connected", "controller", id); !ok || v != 1 {
				t.Errorf("router %s: zmesh_ctrl_member_connected{controller=%q} = %v (present %v)", name, id, v, ok)
			}
		}
		details, err := tr.r.pingControllers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var pinged []string
		for _, d := range details.([]ctrlPingDetail) {
			if d.Error == "" {
				pinged = append(pinged, d.ControllerID)
			}
		}
		if !slices.Equal(pinged, all) {
			t.Errorf("router %s: controllerPing answered by %v, want %v", name, pinged, all)
		}
		var want []string
		for _, id := range all {
			want = append(want, "tls:"+members[id].CtrlAddr)
		}
		testutil.Eventually(t, "router "+name+"'s endpoints file listing every member", func() bool {
			data, err := os.ReadFile(filepath.Join(n.dir, name, "endpoints"))
			if err != nil {
				return false
			}
			got := strings.Fields(string(data))
			slices.Sort(got)
			slices.Sort(want)
			return slices.Equal(got, want)
		})
	}
	// Every member routes over the link: each was told of it by both routers.
	routesOver := func(m *ctrltest.Controller) bool {
		l := n.routers["A"].r.links.Get(n.routers["B"].id)
		return l != nil && slices.ContainsFunc(m.Ctrl.Links(), func(cl paths.Link) bool { return cl.ID == l.ID() })
	}
	for _, id := range all {
		testutil.Eventually(t, "member "+id+" routing over the link A–B", func() bool { return routesOver(members[id]) })
	}
	proxy := n.routers["A"].r.ProxyAddress("echo")
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	echo(t, conn, rd, "through the cluster")

	// The member that made the circuit knows it; it stops.
	var ids []uint64
	n.routers["A"].r.fw.Each(func(id uint64, _, _ xgress.Hop) { ids = append(ids, id) })
	if len(ids) != 1 {
		t.Fatalf("router A has circuits %v, want one", ids)
	}
	var creator string
	for id, ch := range n.routers["A"].r.ctrl.channels() {
		reply, err := ctrlproto.Call[*ctrlproto.IdleCircuitsReply](t.Context(), ch, &ctrlproto.IdleCircuitsCheck{CircuitIDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Valid) == 1 {
			creator = id
		}
	}
	if creator == "" {
		t.Fatal("no member knows the circuit")
	}
	t.Logf("member %s made the circuit; it stops", creator)
	// An SDK client whose identity file lists the three members, the one that stops first,
	// dials through router A.
	idFile := n.identityFile(sdkCert)
	idFile.ZtAPIs = []string{"https://" + members[creator].APIAddr}
	for _, id := range all {
		if id != creator {
			idFile.ZtAPIs = append(idFile.ZtAPIs, "https://"+members[id].APIAddr)
		}
	}
	sdkClient, err := sdk.New(sdkIdentity(t, idFile), sdk.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer sdkClient.Close()
	sdkEcho := func(line string) error {
		c, err := sdkClient.Dial(t.Context(), "echo")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintln(c, line); err != nil {
			return err
		}
		if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != line+"\n" {
			return fmt.Errorf("echo: %q, %v", got, err)
		}
		return nil
	}
	testutil.EventuallyNil(t, "an SDK circuit through the cluster", func() error { return sdkEcho("sdk") })
	valid, ok := n.routers["A"].r.validCircuits(t.Context(), ids)
	if !ok || !valid[ids[0]] {
		t.Fatalf("validCircuits: %v, %v; want the circuit valid", valid, ok)
	}
	members[creator].Stop()
	rest := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == creator })
	for _, name := range []string{"A", "B"} {
		tr := n.routers[name]
		testutil.Eventually(t, "router "+name+" connected to the two members left", func() bool { return slices.Equal(memberIDs(tr), rest) })
		if v, ok := value(gathered(t, tr), "zmesh_ctrl_members_connected"); !ok || v != 2 {
			t.Errorf("router %s: zmesh_ctrl_members_connected = %v after a member stopped, want 2", name, v)
		}
	}
	echo(t, conn, rd, "after the member stopped")
	// The SDK client lists its services through another member and dials again.
	if svcs, err := sdkClient.Services(t.Context()); err != nil || len(svcs) != 1 {
		t.Fatalf("the SDK's services with member %s stopped: %v, %v", creator, svcs, err)
	}
	testutil.EventuallyNil(t, "an SDK circuit after the member stopped", func() error { return sdkEcho("sdk again") })

	// A new circuit is made by one of the others.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var conn2 net.Conn
	testutil.EventuallyNil(t, "a new circuit", func() error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", proxy)
		if err != nil {
			return err
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintln(c, "new"); err != nil {
			c.Close()
			return err
		}
		if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "new\n" {
			c.Close()
			return fmt.Errorf("echo: %q, %v", got, err)
		}
		conn2 = c
		return nil
	})
	defer conn2.Close()
	// The first circuit ends: its fault goes to the members left, which did not make it
	// and ignore it; the second circuit goes on.
	conn.Close()
	testutil.Eventually(t, "the first circuit gone from router A", func() bool {
		gone := true
		n.routers["A"].r.fw.Each(func(id uint64, _, _ xgress.Hop) { gone = gone && id != ids[0] })
		return gone
	})
	echo(t, conn2, bufio.NewReader(conn2), "still")
}
