package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// testNet is a controller and routers on loopback, for end-to-end tests of the data plane.
type testNet struct {
	t       testing.TB
	dir     string
	ctl     *ctrltest.Controller // the current one
	ctrl    *controlplane.Controller
	ctrlAdr string
	apiAddr string // the controller's HTTPS API
	m       *model.Model
	routers map[string]*testRouter
	session string // an administrator's API session on the current controller
	// ctlCfg, when set, is the controller's configuration (ctrltest.Config changed);
	// renewAt, when set, is every router's identity.renew_at.
	ctlCfg  *config.Controller
	renewAt string
	// logs, when it has a router's name, is that router's logger instead of testLogger's.
	logs map[string]*slog.Logger
}

type testRouter struct {
	name   string
	id     string
	file   string // configuration file
	r      *Router
	cancel context.CancelFunc
	done   chan error
	log    *slog.Logger // when set, the router's logger
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("ZMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newTestNet(t testing.TB) *testNet {
	t.Helper()
	return newTestNetWith(t, nil, "")
}

// newTestNetWith is newTestNet with the controller's configuration ctlCfg (nil: the
// default) and the routers' identity.renew_at renewAt ("": the default).
func newTestNetWith(t testing.TB, ctlCfg *config.Controller, renewAt string) *testNet {
	t.Helper()
	n := &testNet{t: t, dir: t.TempDir(), routers: map[string]*testRouter{}, ctlCfg: ctlCfg, renewAt: renewAt}
	n.startController()
	t.Cleanup(n.stop)
	return n
}

// stop stops every router, then the controller. A router that released a frame twice (a
// bug that could mix circuits' data) fails the test.
func (n *testNet) stop() {
	var wg sync.WaitGroup
	for _, r := range n.routers {
		wg.Go(r.stop)
	}
	wg.Wait()
	for _, r := range n.routers {
		if r.r == nil {
			continue // it never started
		}
		if d := r.r.pool.DoubleReleases(); d > 0 {
			n.t.Errorf("router %s released %d frames twice", r.name, d)
		}
	}
	n.stopController()
}

// startController starts the controller, or starts it again on the same data directory and
// addresses once stopController stopped it.
func (n *testNet) startController() {
	n.t.Helper()
	if n.ctl == nil {
		n.ctl = ctrltest.StartWith(n.t, ctrltest.Options{Config: n.ctlCfg})
	} else {
		n.ctl = n.ctl.Restart(n.t)
	}
	n.ctrl, n.m, n.ctrlAdr, n.apiAddr = n.ctl.Ctrl, n.ctl.Model, n.ctl.CtrlAddr, n.ctl.APIAddr
}

// stopController stops the controller.
func (n *testNet) stopController() {
	n.ctl.Stop()
	n.session = ""
}

// online asks the controller's management API whether it sees router name online.
func (n *testNet) online(name string) bool {
	t := n.t
	t.Helper()
	if n.session == "" {
		s, _, err := n.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", model.Login{Source: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		n.session = s.Token
	}
	req := httptest.NewRequest("GET", api.ManagementBase+"/edge-routers/"+n.routers[name].id, nil)
	req.Header.Set("zt-session", n.session)
	rec := httptest.NewRecorder()
	n.ctrl.Handler().ServeHTTP(rec, req)
	var body struct {
		Data struct {
			IsOnline bool `json:"isOnline"`
		} `json:"data"`
	}
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &body) != nil {
		t.Fatalf("GET edge router %s: %d %s", name, rec.Code, rec.Body)
	}
	return body.Data.IsOnline
}

// controllerKnows returns the circuits among ids that the controller still knows, asked over
// router name's control channel as its idle check does.
func (n *testNet) controllerKnows(name string, ids []uint64) []uint64 {
	t := n.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := n.routers[name].r.ctrl.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := ctrlproto.Call[*ctrlproto.IdleCircuitsReply](ctx, ch, &ctrlproto.IdleCircuitsCheck{CircuitIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	return reply.Valid
}

// addRouter creates and enrolls an edge router and writes its configuration; yaml is the
// configuration after the identity and ctrl sections, with {{port}} replaced by a free port.
func (n *testNet) addRouter(name string, tunneler bool, yaml string) *testRouter {
	t := n.t
	t.Helper()
	er := &model.EdgeRouter{Name: name, IsTunnelerEnabled: tunneler, RoleAttributes: []string{"edge"}}
	if err := n.m.CreateEdgeRouter(er); err != nil {
		t.Fatal(err)
	}
	e, err := n.m.RouterEnrollment(er.ID)
	if err != nil {
		t.Fatal(err)
	}
	key := testutil.NewKey(t)
	certs, err := n.m.EnrollErOtt(e.Token, testutil.CSR(t, key), testutil.CSR(t, key, "localhost", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(n.dir, name)
	os.MkdirAll(dir, 0o700)
	write := func(f string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("key.pem", testutil.KeyPEM(t, key))
	write("client.cert", certs.Cert)
	write("server.cert", certs.ServerCert)
	write("ca.cert", certs.CA)
	tr := &testRouter{name: name, id: er.ID, file: filepath.Join(dir, "router.yml"), log: n.logs[name]}
	renewAt := ""
	if n.renewAt != "" {
		renewAt = "\n  renew_at: " + n.renewAt
	}
	n.routers[name] = tr
	// The ports are chosen free and released; another test may take one first, so a start
	// that meets a taken port tries other ports.
	for attempt := 1; ; attempt++ {
		text := yaml
		for strings.Contains(text, "{{port}}") {
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			text = strings.Replace(text, "{{port}}", fmt.Sprint(port), 1)
			text = strings.Replace(text, "{{same}}", fmt.Sprint(port), 1) // the port just chosen, again
		}
		write("router.yml", []byte(fmt.Sprintf(`v: 3
identity:
  cert: client.cert
  server_cert: server.cert
  key: key.pem
  ca: ca.cert%s
ctrl:
  endpoint: tls:%s
edge:
  csr:
    sans:
      dns: [localhost]
      ip: [127.0.0.1]
%s`, renewAt, n.ctrlAdr, text)))
		err := tr.tryStart(t)
		if err == nil {
			return tr
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatalf("router %s: %v", name, err)
		}
	}
}

// start starts the router, failing the test if it does not get ready.
func (tr *testRouter) start(t testing.TB) {
	t.Helper()
	if err := tr.tryStart(t); err != nil {
		t.Fatalf("router %s: %v", tr.name, err)
	}
}

// tryStart starts the router and waits until it is ready, or returns why it stopped. Only a
// router that got ready is left for stop to stop.
func (tr *testRouter) tryStart(t testing.TB) error {
	t.Helper()
	cfg, _, err := config.LoadRouter(tr.file, func(string) (string, bool) { return "", false })
	if err != nil {
		return err
	}
	log := tr.log
	if log == nil {
		log = testLogger(t).With("name", tr.name)
	}
	r, err := New(cfg, "test", log)
	if err != nil {
		return err
	}
	tr.r = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Ready():
		tr.cancel, tr.done = cancel, done
		return nil
	case err := <-done:
		cancel()
		return err
	}
}

func (tr *testRouter) stop() {
	if tr.cancel != nil {
		tr.cancel()
		<-tr.done
		tr.cancel = nil
	}
}

// linked reports whether router a has a link to router b that the controller routes over.
func (n *testNet) linked(a, b string) bool {
	if n.routers[a].r.links == nil {
		return false
	}
	l := n.routers[a].r.links.Get(n.routers[b].id)
	if l == nil {
		return false
	}
	// The controller routes over the link once both routers reported it, a moment later.
	return slices.ContainsFunc(n.ctrl.Links(), func(cl paths.Link) bool { return cl.ID == l.ID() })
}

// service creates a service with a terminator on router at address (proxy binding) and a
// Dial policy for the routers' identities.
func (n *testNet) service(name, router, address string) {
	t := n.t
	t.Helper()
	svc := &model.Service{Name: name, RoleAttributes: []string{"bench"}}
	if err := n.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateTerminator(&model.Terminator{ServiceID: svc.ID, RouterID: n.routers[router].id, Binding: "proxy", Address: address}); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServicePolicy(&model.ServicePolicy{Name: "dial-" + name, Type: model.PolicyDial, Semantic: model.SemanticAny,
		IdentityRoles: []string{"#all"}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		t.Fatal(err)
	}
}
