package e2ee

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// issueCert issues a certificate named cn for key, valid from notBefore to notAfter, a CA's
// when ca, else a client certificate.
func issueCert(t *testing.T, parent *testutil.Authority, cn string, key crypto.Signer, notBefore, notAfter time.Time, ca bool) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage, tmpl.ExtKeyUsage = true, true, x509.KeyUsageCertSign, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.Cert, key.Public(), parent.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// verifyAt runs c.Verify at time at and reports whether it verified the chain in full.
func verifyAt(c *ChainCache, chain []*x509.Certificate, at time.Time) (full bool, err error) {
	c.now = func() time.Time { return at }
	before := c.verified
	err = c.Verify(chain)
	return c.verified > before, err
}

func TestChainCacheHitsOnlyWhileValid(t *testing.T) {
	t.Parallel()
	root := testutil.NewAuthority(t, "root")
	now := time.Now()
	// The intermediate expires before the leaf: the path's validity is the narrower one.
	interKey := testutil.NewKey(t)
	inter := &testutil.Authority{Cert: issueCert(t, root, "inter", interKey, now.Add(-time.Hour), now.Add(2*time.Hour), true), Key: interKey}
	leaf := issueCert(t, inter, "dialer", testutil.NewKey(t), now.Add(-time.Hour), now.Add(24*time.Hour), false)
	chain := []*x509.Certificate{leaf, inter.Cert}
	roots := x509.NewCertPool()
	roots.AddCert(root.Cert)
	c := NewChainCache(roots, 0)

	steps := []struct {
		name     string
		at       time.Time
		wantFull bool
		wantErr  bool
	}{
		{"first use verifies", now, true, false},
		{"second use hits", now.Add(time.Minute), false, false},
		{"after the intermediate expired", now.Add(3 * time.Hour), true, true},
		{"valid again: verified afresh", now, true, false},
		{"hits again", now, false, false},
		{"before the certificates are valid", now.Add(-2 * time.Hour), true, true},
	}
	for _, s := range steps {
		full, err := verifyAt(c, chain, s.at)
		if full != s.wantFull || (err != nil) != s.wantErr {
			t.Fatalf("%s: full verification %v, err %v; want full %v, error %v", s.name, full, err, s.wantFull, s.wantErr)
		}
	}
}

func TestChainCacheAdmitsNoOtherChain(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dialer := p.identity(t, "dialer", testutil.NewKey(t))
	c := NewChainCache(p.roots, 0)
	if err := c.Verify(dialer.chain); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// Another identity of the same CA, the same identity's other certificate: verified in full.
	for _, chain := range [][]*x509.Certificate{
		p.identity(t, "host", testutil.NewKey(t)).chain,
		p.identity(t, "dialer", testutil.NewKey(t)).chain,
		dialer.chain[:1], // without its intermediate: does not chain to the root
	} {
		full, err := verifyAt(c, chain, time.Now())
		if !full {
			t.Errorf("chain of %s (%d certificates) hit the cache", chain[0].Subject.CommonName, len(chain))
		}
		if len(chain) == 1 && err == nil {
			t.Error("a leaf without its intermediate passed")
		}
	}

	// A chain of another network with the cached chain's name and intermediate name.
	other := newPKI(t)
	if err := c.Verify(other.identity(t, "dialer", testutil.NewKey(t)).chain); err == nil {
		t.Error("another network's chain passed")
	}
	// The cached chain does not pass a cache of another network's roots.
	if err := NewChainCache(other.roots, 0).Verify(dialer.chain); err == nil {
		t.Error("the chain passed a cache of other roots")
	}
	// A server-only certificate fails: the cache checks client authentication.
	serverOnly := p.intermediate.Issue(t, "server", testutil.NewKey(t))
	serverOnly.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} // Verify reads the parsed field
	if err := c.Verify([]*x509.Certificate{serverOnly, p.intermediate.Cert}); err == nil {
		t.Error("a certificate without client authentication passed")
	}
}

func TestChainCacheIsBounded(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	c := NewChainCache(p.roots, 2)
	a, b, d := p.identity(t, "a", testutil.NewKey(t)), p.identity(t, "b", testutil.NewKey(t)), p.identity(t, "d", testutil.NewKey(t))
	for _, id := range []identity{a, b, a, d} { // a used last before d: b goes
		if err := c.Verify(id.chain); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 2 {
		t.Fatalf("cache holds %d chains, want 2", c.Len())
	}
	for _, tc := range []struct {
		id   identity
		full bool
	}{{a, false}, {d, false}, {b, true}} {
		if full, err := verifyAt(c, tc.id.chain, time.Now()); err != nil || full != tc.full {
			t.Errorf("%s: full verification %v, err %v; want %v", tc.id.chain[0].Subject.CommonName, full, err, tc.full)
		}
	}
}

// TestHandshakeWithChainCache: the second handshake takes the peer's chain from the cache,
// and the cache admits neither another identity (VerifyPeer still checks the name on every
// handshake) nor a peer that presents a cached chain without its key.
func TestHandshakeWithChainCache(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dialer, host := p.identity(t, "dialer", testutil.NewKey(t)), p.identity(t, "host", testutil.NewKey(t))
	cache := NewChainCache(p.roots, 0)
	serverCfg := func(want string) Config {
		cfg := p.config(host, want)
		cfg.Chains = cache
		cfg.VerifyPeer = func(chain []*x509.Certificate) error {
			if err := cache.Verify(chain); err != nil {
				return err
			}
			if got := chain[0].Subject.CommonName; got != want {
				return errWrongIdentity
			}
			return nil
		}
		return cfg
	}
	handshake := func(client Config, want string) (*Conn, error) {
		cc, sc := net.Pipe()
		t.Cleanup(func() { cc.Close(); sc.Close() })
		_, server, _, serr := handshakeBoth(cc, sc, client, serverCfg(want))
		return server, serr
	}

	first, err := handshake(p.config(dialer, "host"), "dialer")
	if err != nil {
		t.Fatalf("first handshake: %v", err)
	}
	second, err := handshake(p.config(dialer, "host"), "dialer")
	if err != nil {
		t.Fatalf("second handshake: %v", err)
	}
	if first.PeerCertificates()[0] != second.PeerCertificates()[0] || cache.verified != 1 {
		t.Errorf("the second handshake did not take the chain from the cache (%d verifications)", cache.verified)
	}

	// The cached chain, but the server expects another identity.
	if _, err := handshake(p.config(dialer, "host"), "someone else"); !errors.Is(err, errWrongIdentity) {
		t.Errorf("a cached chain of the wrong identity: %v, want %v", err, errWrongIdentity)
	}
	// The cached chain presented by a peer without its key: the signature fails.
	impostor := p.config(dialer, "host")
	impostor.PrivateKey = mismatchedSigner{Signer: testutil.NewKey(t), presented: dialer.key.Public()}
	if _, err := handshake(impostor, "dialer"); !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), "signature") {
		t.Errorf("a cached chain without its key: %v, want a bad signature", err)
	}
}
