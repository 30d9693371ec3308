package controlplane

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestRouterMayNameControllerHost: an edge router's server certificate may name the
// controller's own host (a router on the controller's gateway host); only the controller's
// certificates carry the controller's policy.
func TestRouterMayNameControllerHost(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir(), "127.0.0.1:1280")
	cfg.API.Advertise = "gateway.zmesh.test:1280"
	c, err := Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Build{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.cert.Leaf.VerifyHostname("gateway.zmesh.test"); err != nil {
		t.Fatalf("the API certificate does not name the advertised host: %v", err)
	}
	m := c.Model()
	r := &model.EdgeRouter{Name: "gateway"}
	if err := m.CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	e, err := m.RouterEnrollment(r.ID)
	if err != nil || e == nil {
		t.Fatalf("enrollment: %v", err)
	}
	key := testutil.NewKey(t)
	certs, err := m.EnrollErOtt(e.Token, testutil.CSR(t, key), testutil.CSR(t, key, "gateway.zmesh.test", "127.0.0.1"))
	if err != nil {
		t.Fatalf("a router server CSR naming the controller's host: %v", err)
	}
	server, err := pki.ParsePEMCert(certs.ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	if err := server.VerifyHostname("gateway.zmesh.test"); err != nil {
		t.Errorf("the router's server certificate: %v", err)
	}
	if certid.IsController(server) || !certid.IsController(c.cert.Leaf) {
		t.Errorf("controller's policy on the router's certificate %v, on the controller's %v; want only the controller's",
			certid.IsController(server), certid.IsController(c.cert.Leaf))
	}
}

// TestServerCertsWithoutControllerPolicyReissued: a data directory whose API and control
// channel certificates came straight from the network's CA without the controller's policy,
// as every certificate did before, gets both reissued with it at start, on the same keys;
// an identity file enrolled before, which holds only the CA, still authenticates.
func TestServerCertsWithoutControllerPolicyReissued(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := start(t, dir, "")
	ctx := context.Background()
	d := createIdentity(t, r.admin, map[string]any{"name": "alice", "type": "User", "isAdmin": false, "enrollment": map[string]any{"ott": true}})
	idf, err := apiclient.Enroll(ctx, d.Enrollment.OTT.JWT, apiclient.EnrollOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.shutdown(t)

	// The certificates as the network's CA issued them before: signed like a router's.
	pkiDir := filepath.Join(dir, "pki")
	ca, err := pki.Open(pkiDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, f := range [][2]string{{pki.ServerCertFile, pki.ServerKeyFile}, {ctrlCertFile, ctrlKeyFile}} {
		certPath, keyPath := filepath.Join(pkiDir, f[0]), filepath.Join(pkiDir, f[1])
		chain, err := pki.ParseCertificatesPEM(readFile(t, certPath))
		if err != nil {
			t.Fatal(err)
		}
		cur := chain[0]
		key, err := pki.ParsePrivateKeyPEM(readFile(t, keyPath))
		if err != nil {
			t.Fatal(err)
		}
		sans := append([]string(nil), cur.DNSNames...)
		for _, ip := range cur.IPAddresses {
			sans = append(sans, ip.String())
		}
		old, oldPEM, err := ca.SignCSR(testutil.CSR(t, key, sans...), pki.SignRequest{CommonName: cur.Subject.CommonName, Usage: pki.Server})
		if err != nil {
			t.Fatal(err)
		}
		if certid.IsController(old) {
			t.Fatal("a certificate signed from a CSR carries the controller's policy")
		}
		if err := os.WriteFile(certPath, append(oldPEM, ca.PEM()...), 0o644); err != nil {
			t.Fatal(err)
		}
		keys[f[0]] = key.Public()
	}

	r = start(t, dir, r.cfg.API.Listen)
	for _, f := range []string{pki.ServerCertFile, ctrlCertFile} {
		chain, err := pki.ParseCertificatesPEM(readFile(t, filepath.Join(pkiDir, f)))
		if err != nil {
			t.Fatal(err)
		}
		leaf := chain[0]
		if !certid.IsController(leaf) {
			t.Errorf("%s was not reissued with the controller's policy", f)
		}
		if k, ok := keys[f].(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(leaf.PublicKey) {
			t.Errorf("%s was reissued for a new key; want the old one", f)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: r.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	host, _, _ := net.SplitHostPort(r.cfg.API.Listen)
	served, err := apiclient.ServerCertificate(ctx, r.cfg.API.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if err := certid.VerifyController(tls.ConnectionState{PeerCertificates: []*x509.Certificate{served}}); err != nil || served.VerifyHostname(host) != nil {
		t.Errorf("the API serves a certificate that is not the controller's for %s: %v", host, err)
	}
	client, err := idf.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AuthenticateCert(ctx); err != nil {
		t.Errorf("an identity file enrolled before the reissue: %v", err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
