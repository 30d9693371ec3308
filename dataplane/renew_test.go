package dataplane

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/link"
)

// TestCertificateRenewal: routers whose certificates last two minutes renew them early
// (identity.renew_at 0.4 of three minutes, the controller backdating them by one: twelve
// seconds after they were issued) while a circuit through all three carries data.
// The circuit's bytes all arrive intact, the control channels and links made before the
// renewal stay up, the new certificates are on disk, a router joining afterwards links with
// the renewed ones, the web listener presents them, a router restarted from its files links
// again, and after a controller restart every router connects again with them.
func TestCertificateRenewal(t *testing.T) {
	t.Parallel()
	ctl := ctrltest.Config(t)
	ctl.Certificates.Routers = 2 * time.Minute
	n, srv, addr := buildLine(t, lineConfig{transport: "tls", split: true, ctl: ctl, renewAt: "0.4", b: opsWeb})
	firstServerB := n.routers["B"].r.ident.Certs.Server().Leaf
	routers := []string{"A", "B", "C"}
	type before struct {
		leaf, serverFile []byte
		ctrlChannel      any
		renewed          int
	}
	was := map[string]before{}
	for _, name := range routers {
		r := n.routers[name].r
		serverFile, err := os.ReadFile(filepath.Join(filepath.Dir(n.routers[name].file), "server.cert"))
		if err != nil {
			t.Fatal(err)
		}
		r.renewal.mu.Lock()
		renewed := r.renewal.renewed
		r.renewal.mu.Unlock()
		was[name] = before{leaf: r.ident.Certs.Client().Leaf.Raw, serverFile: serverFile, ctrlChannel: r.ctrl.current(), renewed: renewed}
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
		return r.renewal.renewed > was[name].renewed
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
	// B's web listener presents a renewed server certificate.
	cl2, base := webClient(t, n.routers["B"])
	resp, err := cl2.Get(base + "/health-checks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if presented := resp.TLS.PeerCertificates[0]; presented.Equal(firstServerB) {
		t.Error("B's web listener still presents its first server certificate")
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

	// C restarts from its files: it connects and links again with the renewed certificates.
	n.routers["C"].stop()
	n.routers["C"].start(t)
	testutil.Eventually(t, "a link C–B after C's restart", func() bool { return n.linked("C", "B") })

	// The controller restarts: every router connects again, with its renewed certificate.
	n.startController()
	for _, name := range routers {
		testutil.Eventually(t, "router "+name+" online again", func() bool { return n.online(name) })
	}
}

// TestRenewalDueAndCheck: renewal is due at identity.renew_at of the client certificate's
// lifetime, at once for a torn pair; the certificates check passes before that, fails once
// renewal is overdue by half the time that was left, and when a certificate expired.
func TestRenewalDueAndCheck(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	now := time.Now()
	// issue returns a certificate issued at `at` for `life` (the CA backdates it a minute).
	issue := func(at time.Time, life time.Duration, usage pki.Usage) tls.Certificate {
		ca, err := pki.Open(t.TempDir(), func() time.Time { return at })
		if err != nil {
			t.Fatal(err)
		}
		key := testutil.NewKey(t)
		cert, _, err := ca.SignCSR(testutil.CSR(t, key, "127.0.0.1"), pki.SignRequest{CommonName: "r1", Usage: usage, Validity: life})
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	}
	router := func(client, server tls.Certificate) *Router {
		r := &Router{id: "r1", cfg: &config.Router{Identity: config.Identity{ServerCert: "server.cert", RenewAt: 0.5}},
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		r.ident.Certs = link.NewCertificates(client, server)
		return r
	}
	for _, tc := range []struct {
		name           string
		client, server tls.Certificate
		dueIn          time.Duration // from now, give or take a minute
		fails          string        // what the check's error says; "" passes
	}{
		{"fresh", issue(now, 10*day, pki.Client), issue(now, 10*day, pki.Server), 5 * day, ""},
		{"due, not overdue", issue(now.Add(-6*day), 10*day, pki.Client), issue(now.Add(-6*day), 10*day, pki.Server), -day, ""},
		{"overdue", issue(now.Add(-8*day), 10*day, pki.Client), issue(now.Add(-8*day), 10*day, pki.Server), -3 * day, "renewal overdue"},
		{"expired", issue(now.Add(-11*day), 10*day, pki.Client), issue(now.Add(-11*day), 10*day, pki.Server), -6 * day, "expired"},
		{"torn pair", issue(now, 10*day, pki.Client), issue(now.Add(-2*day), 10*day, pki.Server), 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := router(tc.client, tc.server)
			due, torn := r.renewalDue()
			if d := due.Sub(now.Add(tc.dueIn)); d > 2*time.Minute || d < -2*time.Minute {
				t.Errorf("due %s, want about %s", due.Sub(now).Round(time.Minute), tc.dueIn)
			}
			if torn != (tc.name == "torn pair") {
				t.Errorf("torn %v", torn)
			}
			details, err := r.certificatesCheck(t.Context())
			switch {
			case tc.fails == "" && err != nil, tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)):
				t.Errorf("check: %v, want %q", err, tc.fails)
			}
			if details == nil {
				t.Error("the check gives no details")
			}
		})
	}
}

// TestReloadIdentity: a reload puts in use the certificates an operator wrote over the
// identity files, and refuses files that are another router's.
func TestReloadIdentity(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	a := n.addRouter("A", false, "")
	b := n.addRouter("B", false, "")
	dir := filepath.Dir(a.file)
	keyPEM, err := os.ReadFile(filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "A's control channel", a.r.ctrl.isConnected)
	channel := a.r.ctrl.current()
	certs, err := n.m.ExtendRouter([]*x509.Certificate{a.r.ident.Certs.Client().Leaf},
		testutil.CSR(t, key), testutil.CSR(t, key, "localhost", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("client.cert", certs.Cert)
	write("server.cert", certs.ServerCert)
	if _, err := a.r.Reload(a.r.cfg); err != nil {
		t.Fatal(err)
	}
	if got := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.r.ident.Certs.Client().Leaf.Raw})); got != string(certs.Cert) {
		t.Fatal("the reloaded client certificate is not in use")
	}
	if a.r.ctrl.current() != channel {
		t.Error("the control channel was replaced")
	}

	// B's files over A's: refused, A's certificates stay.
	bDir := filepath.Dir(b.file)
	for _, f := range []string{"client.cert", "server.cert", "key.pem"} {
		data, err := os.ReadFile(filepath.Join(bDir, f))
		if err != nil {
			t.Fatal(err)
		}
		write(f, data)
	}
	if _, err := a.r.Reload(a.r.cfg); err == nil || !strings.Contains(err.Error(), "not this router") {
		t.Fatalf("reload with another router's files: %v", err)
	}
	if a.r.ident.Certs.Client().Leaf.Subject.CommonName != a.id {
		t.Fatal("another router's certificate is in use")
	}
}
