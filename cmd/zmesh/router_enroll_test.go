package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestRouterKeyCreatedOrReused: enrollment generates the key when its file is absent (mode
// 0600) and reuses the file's key, in any of the PEM forms, when it is present.
func TestRouterKeyCreatedOrReused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "certs", "router.key")
	k1, err := loadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated key file: %v %v", fi, err)
	}
	k2, err := loadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Public().(*ecdsa.PublicKey).Equal(k2.Public()) {
		t.Fatal("the key file was not reused")
	}

	ec := testutil.NewKey(t)
	der, _ := x509.MarshalECPrivateKey(ec)
	legacy := filepath.Join(dir, "legacy.key")
	os.WriteFile(legacy, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
	k3, err := loadOrCreateKey(legacy)
	if err != nil || !ec.PublicKey.Equal(k3.Public()) {
		t.Fatalf("EC PRIVATE KEY file: %v", err)
	}

	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), 0o600)
	if _, err := loadOrCreateKey(bad); err == nil || !strings.Contains(err.Error(), "want PRIVATE KEY") {
		t.Fatalf("certificate as key: %v", err)
	}
}

// TestRouterEnrollNeedsServerCert: without identity.server_cert there is nowhere to write the
// server certificate, and the command says so before contacting anyone.
func TestRouterEnrollNeedsServerCert(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "router.yml", "v: 3\nidentity:\n  cert: c\n  key: k\n  ca: ca\nctrl:\n  endpoint: tls:127.0.0.1:6262\n")
	jwtFile := writeFile(t, "router.jwt", "x.y.z")
	_, _, err := run(t, nil, "router", "enroll", cfg, "--jwt", jwtFile)
	if err == nil || !strings.Contains(err.Error(), "identity.server_cert") {
		t.Fatalf("enroll without server_cert: %v", err)
	}
}

// TestRouterReEnroll: after `edge re-enroll edge-router`, `router re-enroll` makes new keys,
// writes them over the old ones, and the certificates it writes are for them and are the
// router's; the old certificate is not.
func TestRouterReEnroll(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "router.yml")
	writeFileAt(t, cfg, "v: 3\nidentity:\n  cert: client.cert\n  server_cert: server.cert\n  key: router.key\n  ca: ca.cert\n"+
		"ctrl:\n  endpoint: tls:"+c.CtrlAddr+"\nedge:\n  csr:\n    sans:\n      dns: [localhost]\n")
	er := &model.EdgeRouter{Name: "r1"}
	if err := c.Model.CreateEdgeRouter(er); err != nil {
		t.Fatal(err)
	}
	enroll := func(verb string) (crypto.PublicKey, *x509.Certificate) {
		t.Helper()
		e, err := c.Model.RouterEnrollment(er.ID)
		if err != nil || e == nil {
			t.Fatalf("the router's enrollment: %v", err)
		}
		jwt := filepath.Join(dir, verb+".jwt")
		writeFileAt(t, jwt, e.JWT)
		if _, stderr, err := run(t, nil, "router", verb, cfg, "--jwt", jwt); err != nil {
			t.Fatalf("router %s: %v %s", verb, err, stderr)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.cert"), filepath.Join(dir, "router.key"))
		if err != nil {
			t.Fatalf("after router %s, the key and certificate: %v", verb, err)
		}
		if _, err := c.Model.EdgeRouterByCert(pair.Leaf); err != nil {
			t.Fatalf("after router %s, the certificate is not the router's: %v", verb, err)
		}
		return pair.Leaf.PublicKey, pair.Leaf
	}
	oldKey, oldCert := enroll("enroll")
	if _, err := c.Model.ReEnrollEdgeRouter(er.ID); err != nil {
		t.Fatal(err)
	}
	newKey, _ := enroll("re-enroll")
	if newKey.(*ecdsa.PublicKey).Equal(oldKey) {
		t.Error("router re-enroll kept the old key")
	}
	if _, err := c.Model.EdgeRouterByCert(oldCert); err == nil {
		t.Error("the certificate of before the re-enrollment is still the router's")
	}
	if fi, err := os.Stat(filepath.Join(dir, "router.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the new key file: %v %v", fi, err)
	}
}
