package certid_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestIssued: a chain for the key, the name and the usage asked for, from the roots, is
// ready to present; each other case is refused, saying why.
func TestIssued(t *testing.T) {
	t.Parallel()
	ca, other := testutil.NewCA(t), testutil.NewCA(t)
	key := testutil.NewKey(t)
	sign := func(ca *testutil.CA, cn string, usage pki.Usage) []byte {
		_, pemBytes, err := ca.SignCSR(testutil.CSR(t, key), pki.SignRequest{CommonName: cn, Usage: usage})
		if err != nil {
			t.Fatal(err)
		}
		return pemBytes
	}
	good := sign(ca, "r1", pki.Client)
	cert, err := certid.Issued(good, key, "r1", ca.Pool(), x509.ExtKeyUsageClientAuth)
	if err != nil || cert.Leaf == nil || cert.PrivateKey != key || len(cert.Certificate) != 1 {
		t.Fatalf("a good chain: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		chain      []byte
		key        *ecdsa.PrivateKey
		cn         string
		usage      x509.ExtKeyUsage
	}{
		{"no certificate", "no PEM certificate", []byte("nothing"), key, "r1", x509.ExtKeyUsageClientAuth},
		{"another key", "not for the key", good, testutil.NewKey(t), "r1", x509.ExtKeyUsageClientAuth},
		{"another name", `names "r1", not "r2"`, good, key, "r2", x509.ExtKeyUsageClientAuth},
		{"another usage", "usage", good, key, "r1", x509.ExtKeyUsageServerAuth},
		{"another CA", "unknown authority", sign(other, "r1", pki.Client), key, "r1", x509.ExtKeyUsageClientAuth},
	} {
		if _, err := certid.Issued(tc.chain, tc.key, tc.cn, ca.Pool(), tc.usage); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
