package main

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
