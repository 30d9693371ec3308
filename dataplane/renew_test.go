package dataplane

import (
	"bytes"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestCertificateRenewal: routers whose certificates last two minutes renew them early
// (identity.renew_at 0.4 of three minutes, the controller backdating them by one: twelve
// seconds after they were issued) while a circuit through all three carries data.
// The circuit's bytes all arrive intact, the control channels and links made before the
// renewal stay up, the new certificates are on disk, a router joining afterwards links with
// the renewed ones, and after a controller restart every router connects again with them.
func TestCertificateRenewal(t *testing.T) {
	t.Parallel()
	ctl := ctrltest.Config(t)
	ctl.Certificates.Routers = 2 * time.Minute
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, ctl: ctl, renewAt: "0.4"})
	routers := []string{"A", "B", "C"}
	type before struct {
		leaf, serverFile []byte
		ctrlChannel      any
	}
	was := map[string]before{}
	for _, name := range routers {
		r := n.routers[name].r
		serverFile, err := os.ReadFile(filepath.Join(filepath.Dir(n.routers[name].file), "server.cert"))
		if err != nil {
			t.Fatal(err)
		}
		was[name] = before{leaf: r.ident.Certs.Client().Leaf.Raw, serverFile: serverFile, ctrlChannel: r.ctrl.current()}
	}
	linkAB, linkCB := n.routers["A"].r.links.Get(n.routers["B"].id), n.routers["C"].r.links.Get(n.routers["B"].id)

	// The circuit: data up from A's proxy to C's server, written in pieces until every
	// router has renewed, every byte checked by the server.
	cl, err := dialClient(addr, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.c.Close()
	gen := genStream(cl.h.up)
	chunk := make([]byte, 16<<10)
	var sent int64
	renewed := func(name string) bool {
		r := n.routers[name].r
		r.renewal.mu.Lock()
		defer r.renewal.mu.Unlock()
		return r.renewal.renewed > 0
	}
	deadline := time.Now().Add(2 * testutil.Patience)
	for !renewed("A") || !renewed("B") || !renewed("C") {
		if time.Now().After(deadline) {
			t.Fatalf("not every router renewed its certificates: A %v, B %v, C %v", renewed("A"), renewed("B"), renewed("C"))
		}
		gen.Read(chunk)
		cl.c.SetWriteDeadline(time.Now().Add(testutil.Patience))
		if _, err := cl.c.Write(chunk); err != nil {
			t.Fatalf("the circuit stopped carrying data after %d bytes: %v", sent, err)
		}
		sent += int64(len(chunk))
	}
	cl.c.(interface{ CloseWrite() error }).CloseWrite()
	if err := cl.serverSaw(srv, sent, testutil.Patience); err != nil {
		t.Fatalf("across the renewal: %v", err)
	}
	if _, err := io.Copy(io.Discard, cl.c); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d KiB carried across the renewals", sent>>10)

	for _, name := range routers {
		tr := n.routers[name]
		r := tr.r
		if bytes.Equal(r.ident.Certs.Client().Leaf.Raw, was[name].leaf) {
			t.Errorf("router %s still presents its first certificate", name)
		}
		if r.ctrl.current() != was[name].ctrlChannel {
			t.Errorf("router %s's control channel was replaced across the renewal", name)
		}
		// The files hold certificates of the router's key, as a restart would load them.
		dir := filepath.Dir(tr.file)
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.cert"), filepath.Join(dir, "key.pem")); err != nil {
			t.Errorf("router %s's client certificate file: %v", name, err)
		}
		if data, err := os.ReadFile(filepath.Join(dir, "server.cert")); err != nil || bytes.Equal(data, was[name].serverFile) {
			t.Errorf("router %s's server certificate file was not rewritten: %v", name, err)
		}
	}
	if n.routers["A"].r.links.Get(n.routers["B"].id) != linkAB || n.routers["C"].r.links.Get(n.routers["B"].id) != linkCB {
		t.Error("a link made before the renewal was replaced")
	}

	// A router that joins now links with B's renewed server certificate, and B accepts it.
	n.addRouter("D", false, `link:
  dialers:
    - binding: transport
      groups: [bc]
`)
	testutil.Eventually(t, "a link D–B after the renewals", func() bool { return n.linked("D", "B") })

	// The controller restarts: every router connects again, with its renewed certificate.
	n.startController()
	for _, name := range routers {
		testutil.Eventually(t, "router "+name+" online again", func() bool { return n.online(name) })
	}
}
