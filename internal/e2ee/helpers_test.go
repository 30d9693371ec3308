package e2ee

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/zmesh/zmesh/internal/testutil"
)

// testPKI is a small network CA: a root, an intermediate that issues identity certificates.
type testPKI struct {
	intermediate *testutil.Authority
	roots        *x509.CertPool
}

// identity is an identity's chain (leaf, intermediate) and key.
type identity struct {
	chain []*x509.Certificate
	key   crypto.Signer
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	root := testutil.NewAuthority(t, "test root")
	p := &testPKI{intermediate: root.Intermediate(t, "test intermediate"), roots: x509.NewCertPool()}
	p.roots.AddCert(root.Cert)
	return p
}

// identity issues a certificate naming id for key.
func (p *testPKI) identity(t testing.TB, id string, key crypto.Signer) identity {
	t.Helper()
	leaf := p.intermediate.Issue(t, id, key)
	return identity{chain: []*x509.Certificate{leaf, p.intermediate.Cert}, key: key}
}

// verifier accepts a chain that leads to the root and names the identity want, as a caller
// that got the peer's id from the controller would.
func (p *testPKI) verifier(want string) func([]*x509.Certificate) error {
	return func(chain []*x509.Certificate) error {
		intermediates := x509.NewCertPool()
		for _, c := range chain[1:] {
			intermediates.AddCert(c)
		}
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: p.roots, Intermediates: intermediates}); err != nil {
			return err
		}
		if got := chain[0].Subject.CommonName; got != want {
			return fmt.Errorf("%w: expected %q, got %q", errWrongIdentity, want, got)
		}
		return nil
	}
}

var errWrongIdentity = errors.New("wrong identity")

func (p *testPKI) config(id identity, expectPeer string) Config {
	return Config{
		Certificates: id.chain,
		PrivateKey:   id.key,
		VerifyPeer:   p.verifier(expectPeer),
		Context:      "circuit-42",
	}
}

// configs returns matching client and server configurations.
func configs(t testing.TB) (client, server Config) {
	t.Helper()
	p := newPKI(t)
	client = p.config(p.identity(t, "dialer", testutil.NewKey(t)), "host")
	server = p.config(p.identity(t, "host", newEd25519Key(t)), "dialer")
	return client, server
}

func newEd25519Key(t testing.TB) crypto.Signer {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func newRSAKey(t testing.TB) crypto.Signer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// handshakeBoth runs Client on cc and Server on sc concurrently.
func handshakeBoth(cc, sc net.Conn, ccfg, scfg Config) (client, server *Conn, clientErr, serverErr error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		server, serverErr = Server(sc, scfg)
	}()
	client, clientErr = Client(cc, ccfg)
	<-done
	return client, server, clientErr, serverErr
}

// mustHandshake runs both handshakes and fails the test if either fails.
func mustHandshake(t testing.TB, cc, sc net.Conn, ccfg, scfg Config) (client, server *Conn) {
	t.Helper()
	client, server, cerr, serr := handshakeBoth(cc, sc, ccfg, scfg)
	if cerr != nil || serr != nil {
		t.Fatalf("handshake: client: %v; server: %v", cerr, serr)
	}
	// Closing the underlying conns, not the Conns, spares a Conn.Close blocking on a net.Pipe
	// that nobody reads any more to send its close-write record.
	t.Cleanup(func() { cc.Close(); sc.Close() })
	return client, server
}
