package link

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
)

// ALPN is the application protocol links negotiate, over TLS and over QUIC.
const ALPN = "zmesh-link/1"

// Identity is who a router is on the mesh. The controller issues both certificates with
// CommonName = RouterID; routers authenticate each other by these certificates, chained to
// the network CA.
type Identity struct {
	RouterID string
	Certs    *Certificates  // the client certificate presented when dialing, the server one by listeners
	CAs      *x509.CertPool // the network CA
	// Authorize, when set, is asked about every peer's certificate once it verified against
	// the CA and names the router: it accepts only the router's current certificates, so that
	// another certificate of the network (an identity's, an older one of the router) cannot
	// make a link.
	Authorize func(routerID string, leaf *x509.Certificate) error
}

// Certificates hold a router's current client and server certificates. Renewal replaces
// both at once; TLS handshakes read them when they happen, so that connections made before
// keep theirs and every later one presents the new ones.
type Certificates struct {
	pair atomic.Pointer[certPair]
}

type certPair struct{ client, server tls.Certificate }

// NewCertificates returns the holder of client and server.
func NewCertificates(client, server tls.Certificate) *Certificates {
	c := &Certificates{}
	c.Set(client, server)
	return c
}

// Set replaces both certificates.
func (c *Certificates) Set(client, server tls.Certificate) {
	c.pair.Store(&certPair{withLeaf(client), withLeaf(server)})
}

// withLeaf parses the leaf of c when it is missing; Check reports one that does not parse.
func withLeaf(c tls.Certificate) tls.Certificate {
	if c.Leaf == nil && len(c.Certificate) > 0 {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	return c
}

// Pair returns the current client and server certificates, read together.
func (c *Certificates) Pair() (client, server tls.Certificate) {
	p := c.pair.Load()
	return p.client, p.server
}

// Client returns the current client certificate.
func (c *Certificates) Client() tls.Certificate { return c.pair.Load().client }

// Server returns the current server certificate.
func (c *Certificates) Server() tls.Certificate { return c.pair.Load().server }

// GetClientCertificate is for tls.Config: the current client certificate.
func (c *Certificates) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &c.pair.Load().client, nil
}

// GetCertificate is for tls.Config: the current server certificate.
func (c *Certificates) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return &c.pair.Load().server, nil
}

// Check verifies that both certificates are certificates naming routerID.
func (c *Certificates) Check(routerID string) error {
	p := c.pair.Load()
	for _, cert := range []struct {
		name string
		cert tls.Certificate
	}{{"client", p.client}, {"server", p.server}} {
		if cert.cert.Leaf == nil {
			return fmt.Errorf("%s certificate: empty or not a certificate", cert.name)
		}
		if cn := cert.cert.Leaf.Subject.CommonName; cn != routerID {
			return fmt.Errorf("%s certificate names %q, not the router id %q", cert.name, cn, routerID)
		}
	}
	return nil
}

// check verifies that the identity is complete and that both certificates name RouterID.
func (id Identity) check() error {
	if id.RouterID == "" {
		return errors.New("link identity: the router id is empty")
	}
	if id.CAs == nil {
		return errors.New("link identity: no CA pool")
	}
	if id.Certs == nil {
		return errors.New("link identity: no certificates")
	}
	if err := id.Certs.Check(id.RouterID); err != nil {
		return fmt.Errorf("link identity: %w", err)
	}
	return nil
}

// serverTLS is the configuration of link listeners: TLS 1.3, and a client certificate that
// chains to the CA is required; the peer's router id is its CommonName.
func (id Identity) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: id.Certs.GetCertificate,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      id.CAs,
		NextProtos:     []string{ALPN},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName == "" {
				return errors.New("the client certificate names no router")
			}
			if id.Authorize != nil {
				return id.Authorize(cs.PeerCertificates[0].Subject.CommonName, cs.PeerCertificates[0])
			}
			return nil
		},
	}
}

// clientTLS is the configuration for dialing router peerID. Routers are dialed by address,
// so the name checked is not a SAN but the router id in the certificate's CommonName: the
// standard verification is replaced by verifyPeer, which checks the chain and that name.
func (id Identity) clientTLS(peerID string) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: id.Certs.GetClientCertificate,
		NextProtos:           []string{ALPN},
		InsecureSkipVerify:   true, // verification is done by VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyPeer(cs.PeerCertificates, id.CAs, peerID); err != nil {
				return err
			}
			if id.Authorize != nil {
				return id.Authorize(peerID, cs.PeerCertificates[0])
			}
			return nil
		},
	}
}

// verifyPeer checks that the server's chain leads to the CA and that it is router peerID's.
func verifyPeer(chain []*x509.Certificate, roots *x509.CertPool, peerID string) error {
	if len(chain) == 0 {
		return errors.New("the router presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := chain[0].Verify(opts); err != nil {
		return fmt.Errorf("the certificate of router %q does not verify: %w", chain[0].Subject.CommonName, err)
	}
	if cn := chain[0].Subject.CommonName; cn != peerID {
		return fmt.Errorf("%w: dialed router %q but reached router %q", ErrWrongPeer, peerID, cn)
	}
	return nil
}
