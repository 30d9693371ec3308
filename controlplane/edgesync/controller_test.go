package edgesync_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/edgeclient"
)

// TestController: the controller runs the syncer: a router that connects to its control
// channel gets the edge state, and a login through the API reaches it as an update.
func TestController(t *testing.T) {
	t.Parallel()
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctrlLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := apiLn.Addr().String()
	cfg := &config.Controller{
		V: 1, DataDir: t.TempDir(),
		API:            config.ControllerAPI{Listen: addr, Advertise: addr},
		Ctrl:           config.ControllerCtrl{Listen: config.Address{Transport: "tls", Host: "127.0.0.1", Port: ctrlLn.Addr().(*net.TCPAddr).Port}},
		Admin:          config.Admin{Username: "admin", Password: "admin-pass"},
		SessionTimeout: config.Duration(30 * time.Minute),
	}
	ctrl, err := controlplane.Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), controlplane.Build{Version: "test"})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- ctrl.ServeWithCtrl(ctx, apiLn, ctrlLn, func(net.Addr) { close(ready) }) }()
	<-ready
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller stopped with: %v", err)
		}
	})
	m := ctrl.Model()
	admin := edgeclient.New("https://"+addr, ctrl.CA().Pool(), nil)
	if _, err := admin.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}

	routerID, cert := enrollRouter(t, m, "er1")
	r := newEdgeRouter()
	r.connect(t, ctrlLn.Addr().String(), ctrl.CA().Pool(), routerID, cert)
	waitInSync(t, r, m, 5*time.Second)
	if apis, _, _ := r.state(); len(apis) != 1 {
		t.Fatalf("the router got %d API sessions, want the administrator's", len(apis))
	}
	if _, err := edgeclient.New("https://"+addr, ctrl.CA().Pool(), nil).AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, r, m, time.Second)
	if apis, _, _ := r.state(); len(apis) != 2 {
		t.Fatalf("after a second login the router has %d API sessions, want 2", len(apis))
	}
	r.check(t)
}
