package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
)

// zmesh controller cluster reaches the running controller through its data directory's
// socket: init makes it a cluster of one, list shows it; import-ca installs a CA into a new
// data directory once, 0600, and refuses a second time; a file without a cluster section is
// refused with what to do.
func TestControllerClusterCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	dataDir := filepath.Join(dir, "a")
	file := writeFile(t, "a.yml", "v: 1\ndataDir: "+dataDir+"\napi: {listen: '"+free()+"'}\nctrl: {listen: 'tls:"+free()+"'}\n"+
		"admin: {password: admin-pass}\ncluster: {id: a, listen: '"+free()+"', heartbeatTimeout: 100ms, electionTimeout: 100ms, leaderLeaseTimeout: 50ms}\n")
	cfg, _, err := config.LoadController(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "controller", "cluster", "list", "-c", file); err == nil || !strings.Contains(err.Error(), "is it running with a cluster section") {
		t.Fatalf("list with no controller running: %v", err)
	}
	ctrl, err := controlplane.Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), controlplane.Build{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- ctrl.Serve(ctx, ln, func(net.Addr) { close(ready) }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-ready

	if _, _, err := run(t, nil, "controller", "cluster", "list", "-c", file); err == nil || !strings.Contains(err.Error(), "run zmesh controller cluster init") {
		t.Fatalf("list before init: %v", err)
	}
	out, _, err := run(t, nil, "controller", "cluster", "init", "-c", file)
	if err != nil || !strings.Contains(out, "\na   ") || !strings.HasSuffix(out, "true   true\n") {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if _, _, err := run(t, nil, "controller", "cluster", "remove", "-c", file, "nobody"); err == nil || !strings.Contains(err.Error(), "no member nobody") {
		t.Fatalf("remove of an unknown member: %v", err)
	}

	newFile := writeFile(t, "b.yml", "v: 1\ndataDir: "+filepath.Join(dir, "b")+"\nadmin: {password: admin-pass}\ncluster: {listen: '127.0.0.1:6363'}\n")
	caCert, caKey := filepath.Join(dataDir, "pki", "ca.cert"), filepath.Join(dataDir, "pki", "ca.key")
	if out, _, err := run(t, nil, "controller", "cluster", "import-ca", "-c", newFile, caCert, caKey); err != nil || !strings.Contains(out, "the network's CA is in") {
		t.Fatalf("import-ca: %v %q", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "b", "pki", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("imported key: %v %v", fi, err)
	}
	if _, _, err := run(t, nil, "controller", "cluster", "import-ca", "-c", newFile, caCert, caKey); err == nil || !strings.Contains(err.Error(), "has a CA already") {
		t.Fatalf("second import-ca: %v", err)
	}
	single := writeFile(t, "s.yml", "v: 1\ndataDir: "+filepath.Join(dir, "s")+"\nadmin: {password: admin-pass}\n")
	if _, _, err := run(t, nil, "controller", "cluster", "import-ca", "-c", single, caCert, caCert); err == nil || !strings.Contains(err.Error(), "has no cluster section") {
		t.Fatalf("import-ca without a cluster section: %v", err)
	}
}

// A member's file is refused by restore, which names the ways to do it; the cluster commands
// log the file's warnings as the others do.
func TestControllerClusterFileChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	file := writeFile(t, "member.yml", "v: 1\ndataDir: "+dataDir+"\nadmin: {password: admin-pass}\n"+
		"cluster: {id: a, listen: '127.0.0.1:6363'}\nunknownTopKey: 1\n")
	backup := filepath.Join(dir, "store.backup")
	if err := os.WriteFile(backup, []byte("not read"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := run(t, nil, "controller", "restore", "-c", file, backup)
	if err == nil || !strings.Contains(err.Error(), "has a cluster section") || !strings.Contains(err.Error(), "zmesh controller cluster recover") {
		t.Errorf("restore of a member's file: %v, want a refusal naming recover", err)
	}
	if !strings.Contains(errOut, "unknownTopKey") {
		t.Errorf("restore did not log the unknown key:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "db")); !os.IsNotExist(err) {
		t.Errorf("restore refused and wrote %s (%v)", filepath.Join(dataDir, "db"), err)
	}
	_, errOut, err = run(t, nil, "controller", "cluster", "list", "-c", file)
	if err == nil || !strings.Contains(errOut, "unknownTopKey") {
		t.Errorf("cluster list with no controller running: %v, want an error and the unknown key logged:\n%s", err, errOut)
	}
}
