package controlplane

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
)

// ImportCA installs a CA the controller opens, and refuses what pki refuses to open: an
// expired CA, a file of two certificates, a key of another CA.
func TestImportCA(t *testing.T) {
	t.Parallel()
	newCA := func(now func() time.Time) string {
		dir := t.TempDir()
		if _, err := pki.Open(dir, now); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	good, other := newCA(nil), newCA(nil)
	expired := newCA(func() time.Time { return time.Now().Add(-pki.CAValidity - time.Hour) })
	both := filepath.Join(t.TempDir(), "both.cert")
	var two []byte
	for _, d := range []string{good, other} {
		b, err := os.ReadFile(filepath.Join(d, pki.CACertFile))
		if err != nil {
			t.Fatal(err)
		}
		two = append(two, b...)
	}
	if err := os.WriteFile(both, two, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"expired", filepath.Join(expired, pki.CACertFile), filepath.Join(expired, pki.CAKeyFile), "expired"},
		{"two certificates", both, filepath.Join(good, pki.CAKeyFile), "holds 2 certificates"},
		{"another key", filepath.Join(good, pki.CACertFile), filepath.Join(other, pki.CAKeyFile), "does not match"},
	} {
		dst := filepath.Join(t.TempDir(), "pki")
		if err := ImportCA(dst, tc.cert, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Errorf("%s: %s was created (%v)", tc.name, dst, err)
		}
	}

	dst := filepath.Join(t.TempDir(), "pki")
	if err := ImportCA(dst, filepath.Join(good, pki.CACertFile), filepath.Join(good, pki.CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dst, pki.CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the imported key: %v %v, want mode 0600", fi, err)
	}
	ca, err := pki.Open(dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pki.Open(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca.Certificate().Raw, want.Certificate().Raw) {
		t.Error("the imported CA is not the one given")
	}
	if err := ImportCA(dst, filepath.Join(other, pki.CACertFile), filepath.Join(other, pki.CAKeyFile)); err == nil || !strings.Contains(err.Error(), "has a CA already") {
		t.Errorf("import over a CA: %v, want a refusal", err)
	}
}
