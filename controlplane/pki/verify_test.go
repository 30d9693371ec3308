package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/certid"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := openCA(t, dir, t0)
	fp := certid.Fingerprint(ca.Certificate())
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(fp) {
		t.Fatalf("fingerprint %q is not 40 lowercase hex chars", fp)
	}
	sum := sha1.Sum(ca.Certificate().Raw)
	if fp != hex.EncodeToString(sum[:]) {
		t.Error("fingerprint is not SHA-1 of the DER")
	}
	if again := certid.Fingerprint(openCA(t, dir, t0).Certificate()); again != fp {
		t.Errorf("fingerprint changed on reopen: %s vs %s", again, fp)
	}
	cert, _, err := ca.SignCSR(makeCSR(t, newKey(t, "p256"), "x", nil), SignRequest{Usage: Client})
	if err != nil {
		t.Fatal(err)
	}
	if certid.Fingerprint(cert) == fp {
		t.Error("distinct certificates share a fingerprint")
	}

	// The openssl CLI prints the same value in upper case with colons.
	out, err := exec.Command("/usr/bin/openssl", "x509", "-noout", "-fingerprint", "-sha1", "-in", filepath.Join(dir, CACertFile)).Output()
	if err != nil {
		t.Skipf("openssl: %v", err)
	}
	_, val, _ := strings.Cut(strings.TrimSpace(string(out)), "=")
	if got := strings.ToLower(strings.ReplaceAll(val, ":", "")); got != fp {
		t.Errorf("openssl fingerprint %s, ours %s", got, fp)
	}
}

func TestVerifyClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := openCA(t, dir, t0)
	other := openCA(t, t.TempDir(), t0)
	sign := func(ca *CA, usage Usage, validity time.Duration) *x509.Certificate {
		c, _, err := ca.SignCSR(makeCSR(t, newKey(t, "p256"), "x", func(r *x509.CertificateRequest) {
			r.DNSNames = []string{"r.zmesh.test"}
		}), SignRequest{CommonName: "ident", Usage: usage, Validity: validity})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client := sign(ca, Client, 24*time.Hour)
	tests := []struct {
		name   string
		ca     *CA
		cert   *x509.Certificate
		inter  []*x509.Certificate
		ok     bool
		reason x509.InvalidReason // when the error is a CertificateInvalidError
		unk    bool               // when the error is an UnknownAuthorityError
		isCA   bool               // when the certificate is a CA
	}{
		{name: "client", ca: ca, cert: client, ok: true},
		{name: "client+server", ca: ca, cert: sign(ca, ClientServer, time.Hour), ok: true},
		{name: "irrelevant intermediates", ca: ca, cert: client, inter: []*x509.Certificate{other.Certificate(), nil}, ok: true},
		{name: "server only", ca: ca, cert: sign(ca, Server, time.Hour), reason: x509.IncompatibleUsage},
		{name: "other CA", ca: ca, cert: sign(other, Client, time.Hour), unk: true},
		{name: "expired", ca: openCA(t, dir, t0.Add(25*time.Hour)), cert: client, reason: x509.Expired},
		{name: "not yet valid", ca: openCA(t, dir, t0.Add(-2*time.Minute)), cert: client, reason: x509.Expired},
		{name: "CA as client", ca: ca, cert: ca.Certificate(), isCA: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.ca.VerifyClient(tt.cert, tt.inter)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("verified")
			}
			if !strings.Contains(err.Error(), certid.Fingerprint(tt.cert)) {
				t.Errorf("error %q does not name the certificate", err)
			}
			var inv x509.CertificateInvalidError
			var unk x509.UnknownAuthorityError
			switch {
			case tt.isCA:
				if !strings.Contains(err.Error(), "a CA certificate") {
					t.Errorf("error %q does not say the certificate is a CA", err)
				}
			case tt.unk && !errors.As(err, &unk):
				t.Errorf("error %q is not UnknownAuthorityError", err)
			case !tt.unk && (!errors.As(err, &inv) || inv.Reason != tt.reason):
				t.Errorf("error %q, want reason %d", err, tt.reason)
			}
		})
	}
}

// thirdParty builds root -> intermediate -> leaf the way an external PKI would.
func thirdParty(t *testing.T, leafEKU []x509.ExtKeyUsage) (root, inter, leaf *x509.Certificate) {
	t.Helper()
	mk := func(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) *x509.Certificate {
		tmpl.NotBefore, tmpl.NotAfter = t0.Add(-time.Hour), t0.Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	rootKey, interKey, leafKey := newKey(t, "p256"), newKey(t, "p384"), newKey(t, "ed25519")
	rt := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ext root"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	root = mk(rt, rt, rootKey.Public(), rootKey)
	inter = mk(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "ext issuing"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, root, interKey.Public(), rootKey)
	leaf = mk(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "ext device"},
		ExtKeyUsage: leafEKU, KeyUsage: x509.KeyUsageDigitalSignature}, inter, leafKey.Public(), interKey)
	return root, inter, leaf
}

func TestVerifyChain(t *testing.T) {
	t.Parallel()
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	root, inter, leaf := thirdParty(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	_, inter2, leaf2 := thirdParty(t, both)
	roots := x509.NewCertPool()
	roots.AddCert(root)
	tests := []struct {
		name   string
		cert   *x509.Certificate
		inter  []*x509.Certificate
		roots  *x509.CertPool
		now    time.Time
		usages []x509.ExtKeyUsage
		ok     bool
	}{
		{name: "with intermediate", cert: leaf, inter: []*x509.Certificate{inter}, roots: roots, now: t0, ok: true},
		{name: "explicit client usage", cert: leaf, inter: []*x509.Certificate{inter}, roots: roots, now: t0, usages: both[:1], ok: true},
		{name: "missing intermediate", cert: leaf, roots: roots, now: t0},
		{name: "intermediate of another root", cert: leaf2, inter: []*x509.Certificate{inter2}, roots: roots, now: t0},
		{name: "server usage lacking", cert: leaf, inter: []*x509.Certificate{inter}, roots: roots, now: t0, usages: both},
		{name: "expired", cert: leaf, inter: []*x509.Certificate{inter}, roots: roots, now: t0.Add(2 * time.Hour)},
		{name: "nil roots", cert: leaf, inter: []*x509.Certificate{inter}, now: t0},
		{name: "nil cert", roots: roots, now: t0},
		{name: "root as leaf", cert: root, roots: roots, now: t0},
		{name: "intermediate as leaf", cert: inter, roots: roots, now: t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := VerifyChain(tt.cert, tt.inter, tt.roots, tt.now, tt.usages...)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestFileModesUnderUmask(t *testing.T) {
	t.Parallel()
	// The modes are set explicitly, so they hold whatever the process umask.
	dir := filepath.Join(t.TempDir(), "ca")
	ca := openCA(t, dir, t0)
	if _, err := ca.ServerCert(dir, []string{"ctrl.zmesh.test"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{CAKeyFile: 0o600, CACertFile: 0o644, ServerKeyFile: 0o600, ServerCertFile: 0o644}
	for f, m := range want {
		if got := fileMode(t, filepath.Join(dir, f)); got != m {
			t.Errorf("%s mode %v, want %v", f, got, m)
		}
	}
}
