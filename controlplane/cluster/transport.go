package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
)

// streamLayer carries raft's connections over TLS 1.3 with mutual authentication: both ends
// present a controller certificate of the network's CA (one carrying the controller's
// certificate policy), so no router or identity, whose certificates the same CA issues, can
// join the cluster or pose as a member.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

// newStreamLayer listens on bind; advertise ("" for the listener's address) is the address
// the other members dial.
func newStreamLayer(bind, advertise string, cert func() (*tls.Certificate, error), roots *x509.CertPool) (*streamLayer, error) {
	if cert == nil || roots == nil {
		return nil, errors.New("cluster: the raft transport needs a certificate and the network's CA")
	}
	server := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		GetCertificate:   func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert() },
		ClientAuth:       tls.RequireAnyClientCert, // verified below: controller server certificates
		VerifyConnection: verifyMember(roots),
	}
	client := &tls.Config{
		MinVersion:           tls.VersionTLS13,
		RootCAs:              roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert() },
		VerifyConnection:     certid.VerifyController,
	}
	ln, err := tls.Listen("tcp", bind, server)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen for raft on %s: %w", bind, err)
	}
	s := &streamLayer{Listener: ln, advertise: ln.Addr(), client: client}
	if advertise != "" {
		addr, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("cluster: advertised raft address %q: %w", advertise, err)
		}
		s.advertise = addr
	}
	return s, nil
}

// Addr is the advertised address, which raft gives the other members.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to the member at address and completes the TLS handshake.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{Config: s.client}
	conn, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("cluster: dial member %s: %w", address, err)
	}
	return conn, nil
}

// verifyMember checks, on the accepting end, that the dialing member's certificate chains to
// the network's CA for server authentication (members present their controller server
// certificate in both directions) and carries the controller's certificate policy.
func verifyMember(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("cluster: the dialing member presented no certificate")
		}
		leaf := cs.PeerCertificates[0]
		if err := pki.VerifyChain(leaf, cs.PeerCertificates[1:], roots, time.Now(), x509.ExtKeyUsageServerAuth); err != nil {
			return fmt.Errorf("cluster: the dialing member's certificate: %w", err)
		}
		if !certid.IsController(leaf) {
			return fmt.Errorf("cluster: the dialing member's certificate %q (fingerprint %s) is not a controller's: %w",
				leaf.Subject.CommonName, certid.Fingerprint(leaf), certid.ErrNotController)
		}
		return nil
	}
}
