package quickstart

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

func offset(n int) *int { return &n }

func prepare(t *testing.T, dir string, opts Options) *Network {
	t.Helper()
	n, err := Prepare(dir, opts)
	if err != nil {
		t.Fatalf("Prepare(%s, %+v): %v", dir, opts, err)
	}
	return n
}

// startPrepared starts the prepared controller (its configuration, data directory and
// administrator) on loopback listeners of its own until the end of the test.
func startPrepared(t *testing.T, n *Network) *ctrltest.Controller {
	t.Helper()
	cfg, err := LoadController(n.ControllerConfig, strings.TrimSpace(readFile(t, n.PasswordFile)))
	if err != nil {
		t.Fatal(err)
	}
	return ctrltest.StartWith(t, ctrltest.Options{Config: cfg})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The first Prepare makes everything, private; a second one with more routers reuses the
// password, router-1's identity and the client file, and adds router-2, which the Dial
// policy then grants too.
func TestPrepareMakesThenReuses(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "qs")
	n := prepare(t, dir, Options{Routers: 1, PortOffset: offset(100)})
	if !n.Created || n.Dir != dir || n.Ports.Offset != 100 || len(n.Routers) != 1 || n.Routers[0].Name != "router-1" {
		t.Fatalf("first Prepare: %+v", n)
	}
	for name, mode := range map[string]os.FileMode{
		"": os.ModeDir | 0o700, StateFile: 0o600, PasswordFile: 0o600, ControllerFile: 0o600, ClientFile: 0o600,
		"router-1": os.ModeDir | 0o700, "router-1/" + RouterKeyFile: 0o600, "router-1/" + RouterCertFile: 0o600,
		"router-1/" + RouterServerCertFile: 0o600, "router-1/" + RouterCAFile: 0o600, "router-1/" + RouterConfigFile: 0o600,
	} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), mode)
		}
	}
	password := readFile(t, n.PasswordFile)
	if p := strings.TrimSpace(password); len(p) < 32 || strings.Contains(readFile(t, n.ControllerConfig), p) {
		t.Errorf("password %q: too short, or written into the controller's configuration", p)
	}
	cert1, client := readFile(t, filepath.Join(dir, "router-1", RouterCertFile)), readFile(t, n.ClientIdentity)
	id1 := n.Routers[0].ID

	n2 := prepare(t, dir, Options{Routers: 2})
	if n2.Created || n2.Ports.Offset != 100 || len(n2.Routers) != 2 || n2.Routers[0].ID != id1 || n2.Routers[1].Name != "router-2" {
		t.Fatalf("second Prepare: %+v", n2)
	}
	if readFile(t, n.PasswordFile) != password || readFile(t, filepath.Join(dir, "router-1", RouterCertFile)) != cert1 ||
		readFile(t, n.ClientIdentity) != client {
		t.Error("the second Prepare did not keep the password, router-1's certificate and the client identity file")
	}

	m := startPrepared(t, n2).Model
	svc, err := m.ServiceByName(ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	if !svc.EncryptionRequired || len(svc.Configs) != 1 {
		t.Errorf("service %+v", svc)
	}
	cfg, err := m.Config(svc.Configs[0])
	if err != nil || cfg.ConfigTypeID != "host.v1" || !sameJSON(cfg.Data, map[string]any{"protocol": "tcp", "address": Host, "port": 2100}) {
		t.Errorf("host config %+v (%v)", cfg, err)
	}
	policies, err := m.ServicePolicies()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range policies {
		got[p.Name] = p.IdentityRoles
	}
	wantDial := []string{"#" + clientRole, "@" + id1, "@" + n2.Routers[1].ID}
	if !slices.Equal(got[dialPolicyName], wantDial) || !slices.Equal(got[bindPolicyName], []string{"@" + id1}) || len(got) != 2 {
		t.Errorf("service policies %v; want dial %v, bind [@%s]", got, wantDial, id1)
	}
	ids, err := m.Identities()
	if err != nil {
		t.Fatal(err)
	}
	var clients int
	for _, id := range ids {
		if id.Name == ClientName {
			clients++
			if !slices.Contains(id.RoleAttributes, clientRole) {
				t.Errorf("client identity %+v", id)
			}
		}
	}
	if clients != 1 {
		t.Errorf("%d client identities", clients)
	}
	f, err := apiclient.LoadIdentity(n.ClientIdentity)
	if err != nil || f.ZtAPI != "https://127.0.0.1:1380/edge/client/v1" {
		t.Errorf("client identity file %+v (%v)", f, err)
	}
}

// What an interrupted or damaged directory lacks is made again: a router whose key is gone
// is enrolled anew under the same id, a router created but never enrolled is enrolled, and a
// client file that is gone gives a new identity.
func TestPrepareRepairs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() // an empty directory is taken over
	n := prepare(t, dir, Options{Routers: 1})
	cert := readFile(t, filepath.Join(dir, "router-1", RouterCertFile))
	for _, f := range []string{filepath.Join(dir, "router-1", RouterKeyFile), n.ClientIdentity} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	// A run stopped right after creating router-2.
	ctrl := startPrepared(t, n)
	pending := &model.EdgeRouter{Name: RouterName(2), IsTunnelerEnabled: true}
	if err := ctrl.Model.CreateEdgeRouter(pending); err != nil {
		t.Fatal(err)
	}
	ctrl.Stop()

	n2 := prepare(t, dir, Options{Routers: 2})
	if n2.Created || n2.Routers[0].ID != n.Routers[0].ID || n2.Routers[1].ID != pending.ID {
		t.Fatalf("second Prepare: %+v", n2)
	}
	if readFile(t, filepath.Join(dir, "router-1", RouterCertFile)) == cert {
		t.Error("router-1 was not enrolled again")
	}
	m := startPrepared(t, n2).Model
	for _, r := range n2.Routers {
		er, err := m.EdgeRouter(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := routerFilesMatch(r.Dir, er.Fingerprint, m.CA()); !er.IsVerified || err != nil {
			t.Errorf("%s: enrolled %v, files: %v", r.Name, er.IsVerified, err)
		}
	}
	ids, err := m.Identities()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id.Name == ClientName {
			if err := clientFileMatches(m, m.CA(), n2, id); err != nil {
				t.Errorf("the new client identity file: %v", err)
			}
		}
	}
}

// Directories Prepare must not touch, and options it refuses, give errors that say what is
// wrong and how to go on.
func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o600)

	otherVersion := t.TempDir()
	os.WriteFile(filepath.Join(otherVersion, StateFile), []byte(`{"version": 2, "portOffset": 0}`), 0o600)

	made := filepath.Join(t.TempDir(), "qs")
	prepare(t, made, Options{Routers: 1, PortOffset: offset(10)})

	lostPassword := filepath.Join(t.TempDir(), "qs")
	prepare(t, lostPassword, Options{Routers: 1})
	os.Remove(filepath.Join(lostPassword, PasswordFile))

	for _, tc := range []struct {
		name string
		dir  string
		opts Options
		want string
	}{
		{"foreign directory", foreign, Options{Routers: 1}, "is not empty and is not a quickstart directory (it has no quickstart.json): choose another directory, or remove it"},
		{"other version", otherVersion, Options{Routers: 1}, "version 2 is not supported; supported: 1"},
		{"port offset changed", made, Options{Routers: 1, PortOffset: offset(20)}, "was made with port offset 10 and cannot change to 20"},
		{"password lost", lostPassword, Options{Routers: 1}, "admin-password is missing but the controller's store"},
		{"no router", t.TempDir(), Options{Routers: 0}, "routers: 0 is not allowed; allowed: 1 to 9"},
		{"too many routers", t.TempDir(), Options{Routers: 10}, "routers: 10 is not allowed; allowed: 1 to 9"},
		{"port offset too large", t.TempDir(), Options{Routers: 1, PortOffset: offset(MaxPortOffset + 1)}, "port offset: 50001 is not allowed; allowed: 0 to 50000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Prepare(tc.dir, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if readFile(t, filepath.Join(foreign, "notes.txt")) != "mine" {
		t.Error("the foreign directory was changed")
	}
}

// A taken port stops Run before anything starts, with the port and its role named.
func TestRunPortInUse(t *testing.T) {
	t.Parallel()
	o := freeOffset(t)
	port := Ports{Offset: o}.API()
	ln, err := net.Listen("tcp", Addr(port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n := prepare(t, t.TempDir(), Options{Routers: 1, PortOffset: offset(o)})
	err = Run(context.Background(), n, RunOptions{})
	var pe *PortInUseError
	if !errors.As(err, &pe) || pe.Port.Port != port || pe.Role != "the controller's API" ||
		!strings.Contains(err.Error(), "is in use on 127.0.0.1") {
		t.Fatalf("Run: %v, want the API port %d in use", err, port)
	}
}

// Run serves the demo through the proxy port once it calls Ready, and stops cleanly when
// its context ends: every port is closed and the data directory is unlocked again.
func TestRunServesAndStops(t *testing.T) {
	t.Parallel()
	n := prepare(t, t.TempDir(), Options{Routers: 1, PortOffset: offset(freeOffset(t))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Run(ctx, n, RunOptions{Ready: func() { close(ready) }}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("not ready within 2 minutes")
	}
	if err := Echo(ctx, Addr(n.Ports.Proxy(1)), "hello\n"); err != nil {
		t.Fatalf("echo: %v", err)
	}
	// A second quickstart on the same directory is told that one runs there, and what to do.
	if _, err := Prepare(n.Dir, Options{Routers: 1}); err == nil || !strings.Contains(err.Error(), "is already running") || !strings.Contains(err.Error(), "--dir") {
		t.Errorf("Prepare while the quickstart runs: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	for _, p := range n.Ports.Listening(1) {
		if c, err := net.Dial("tcp", p.Addr()); err == nil {
			c.Close()
			t.Errorf("%s still listens on %d", p.Role, p.Port)
		}
	}
	// Prepare opens the controller: it would fail while the data directory were locked.
	prepare(t, n.Dir, Options{Routers: 1})
}

// freeOffset returns a port offset whose ports (one router) are free now, below the
// ephemeral port range.
func freeOffset(t *testing.T) int {
	t.Helper()
	for range 100 {
		o := 1000 + rand.IntN(19000)
		free := true
		for _, p := range (Ports{Offset: o}).Listening(1) {
			ln, err := net.Listen("tcp", p.Addr())
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return o
		}
	}
	t.Fatal("no port offset with every port free")
	return 0
}
