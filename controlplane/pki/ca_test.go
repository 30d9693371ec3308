package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOpenCreatesCA(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state", "pki")
	ca := openCA(t, dir, t0)
	c := ca.Certificate()

	if got := fileMode(t, dir); got != 0o700 {
		t.Errorf("dir mode %v, want 0700", got)
	}
	if got := fileMode(t, filepath.Join(dir, CAKeyFile)); got != 0o600 {
		t.Errorf("%s mode %v, want 0600", CAKeyFile, got)
	}
	if got := fileMode(t, filepath.Join(dir, CACertFile)); got != 0o644 {
		t.Errorf("%s mode %v, want 0644", CACertFile, got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{CACertFile, CAKeyFile}; !slices.Equal(names, want) {
		t.Errorf("dir holds %v, want %v (no temp files left)", names, want)
	}

	if !c.IsCA || !c.BasicConstraintsValid {
		t.Error("not a CA certificate")
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("KeyUsage %v", c.KeyUsage)
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("MaxPathLen %d zero=%v, want 0 true", c.MaxPathLen, c.MaxPathLenZero)
	}
	if !regexp.MustCompile(`^zmesh CA [0-9a-f]{8}$`).MatchString(c.Subject.CommonName) {
		t.Errorf("CN %q", c.Subject.CommonName)
	}
	if !slices.Equal(c.Subject.Organization, []string{"zmesh"}) {
		t.Errorf("O %v", c.Subject.Organization)
	}
	if !c.NotBefore.Equal(t0.Add(-time.Minute)) || c.NotAfter.Sub(c.NotBefore) != CAValidity {
		t.Errorf("validity %s .. %s", c.NotBefore, c.NotAfter)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
		t.Errorf("serial %x", c.SerialNumber)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", c.PublicKey)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}

	// Accessors return copies.
	p := ca.PEM()
	p[0] = 'X'
	if ca.PEM()[0] != '-' {
		t.Error("PEM() exposes internal buffer")
	}
	if got, err := ParsePEMCert(ca.PEM()); err != nil || !got.Equal(c) {
		t.Errorf("PEM() does not hold the CA: %v", err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: t0}); err != nil {
		t.Errorf("Pool() does not hold the CA: %v", err)
	}
}

func TestOpenReopensSameCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := openCA(t, dir, t0)
	keyBefore := readFile(t, filepath.Join(dir, CAKeyFile))
	second := openCA(t, dir, t0.Add(24*time.Hour))

	if !first.Certificate().Equal(second.Certificate()) {
		t.Fatal("reopened CA has a different certificate")
	}
	if !bytes.Equal(first.PEM(), second.PEM()) {
		t.Error("PEM differs")
	}
	if !bytes.Equal(keyBefore, readFile(t, filepath.Join(dir, CAKeyFile))) {
		t.Error("key file rewritten on reopen")
	}
	// The reopened key signs certificates the first instance accepts.
	cert, _, err := second.SignCSR(makeCSR(t, newKey(t, "p256"), "x", nil), SignRequest{CommonName: "id-1", Usage: Client})
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(first.Certificate()); err != nil {
		t.Errorf("cert from reopened CA: %v", err)
	}

	other := openCA(t, t.TempDir(), t0)
	if other.Certificate().Subject.CommonName == first.Certificate().Subject.CommonName ||
		other.Certificate().SerialNumber.Cmp(first.Certificate().SerialNumber) == 0 {
		t.Error("two new CAs share a name or serial")
	}
}

// TestOpenOperatorCA loads a CA an operator placed in the directory: RSA key in PKCS#1 form.
func TestOpenOperatorCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "operator root"},
		NotBefore:             t0.Add(-time.Hour),
		NotAfter:              t0.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, CACertFile), encodeCertPEM(der))
	writeFile(t, filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))

	ca := openCA(t, dir, t0)
	cert, _, err := ca.SignCSR(makeCSR(t, newKey(t, "ed25519"), "x", nil), SignRequest{CommonName: "id-2", Usage: Client, Validity: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.Certificate().NotAfter) {
		t.Errorf("NotAfter %s not capped at CA expiry %s", cert.NotAfter, ca.Certificate().NotAfter)
	}
	if err := ca.VerifyClient(cert, nil); err != nil {
		t.Error(err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		now   time.Time
		setup func(t *testing.T, dir string) // dir starts with a valid CA
		want  []string                       // substrings of the error
		is    error
	}{
		{
			name:  "cert missing",
			setup: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, CACertFile)) },
			want:  []string{CAKeyFile + " exists but", CACertFile + " is missing"},
		},
		{
			name:  "key missing",
			setup: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, CAKeyFile)) },
			want:  []string{CACertFile + " exists but", CAKeyFile + " is missing"},
		},
		{
			name: "key of another CA",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				openCA(t, other, t0)
				writeFile(t, filepath.Join(dir, CAKeyFile), readFile(t, filepath.Join(other, CAKeyFile)))
			},
			want: []string{CAKeyFile + " does not match the certificate in", CACertFile},
		},
		{
			name: "cert of another CA",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				openCA(t, other, t0)
				writeFile(t, filepath.Join(dir, CACertFile), readFile(t, filepath.Join(other, CACertFile)))
			},
			want: []string{CAKeyFile + " does not match"},
		},
		{
			name:  "garbage key",
			setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, CAKeyFile), []byte("garbage")) },
			want:  []string{CAKeyFile, "no PEM block"},
		},
		{
			name: "key of wrong PEM type",
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, CAKeyFile), readFile(t, filepath.Join(dir, CACertFile)))
			},
			want: []string{CAKeyFile, `"CERTIFICATE"`},
		},
		{
			name:  "garbage cert",
			setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, CACertFile), []byte("garbage")) },
			want:  []string{CACertFile, "no PEM block of type CERTIFICATE"},
			is:    ErrBadCertificate,
		},
		{
			name: "two certs",
			setup: func(t *testing.T, dir string) {
				p := readFile(t, filepath.Join(dir, CACertFile))
				writeFile(t, filepath.Join(dir, CACertFile), append(p, p...))
			},
			want: []string{CACertFile, "holds 2 certificates"},
		},
		{
			name: "leaf instead of CA",
			setup: func(t *testing.T, dir string) {
				ca := openCA(t, dir, t0)
				srv := t.TempDir()
				if _, err := ca.ServerCert(srv, nil); err != nil {
					t.Fatal(err)
				}
				leaf, _ := pem.Decode(readFile(t, filepath.Join(srv, ServerCertFile)))
				writeFile(t, filepath.Join(dir, CACertFile), pem.EncodeToMemory(leaf))
			},
			want: []string{CACertFile, "is not a CA"},
		},
		{
			name:  "expired",
			now:   t0.AddDate(11, 0, 0),
			setup: func(t *testing.T, dir string) {},
			want:  []string{CACertFile, "expired"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			openCA(t, dir, t0)
			tt.setup(t, dir)
			before := map[string][]byte{}
			for _, f := range []string{CAKeyFile, CACertFile} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					before[f] = b
				}
			}
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			ca, err := Open(dir, at(now))
			if err == nil {
				t.Fatalf("Open succeeded with CA %q", ca.Certificate().Subject.CommonName)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q does not wrap %v", err, tt.is)
			}
			// Nothing is created or overwritten on failure.
			for _, f := range []string{CAKeyFile, CACertFile} {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if _, had := before[f]; had != (err == nil) || !bytes.Equal(b, before[f]) {
					t.Errorf("%s changed by failed Open", f)
				}
			}
		})
	}
}

func TestOpenUnreadableDir(t *testing.T) {
	t.Parallel()
	// A file where the directory should be.
	path := filepath.Join(t.TempDir(), "file")
	writeFile(t, path, []byte("x"))
	if _, err := Open(path, nil); err == nil {
		t.Fatal("Open on a regular file succeeded")
	}
}
