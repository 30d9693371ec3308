package sdk

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"

	"github.com/zmesh/zmesh/internal/e2ee"
)

// handshakeError is a failed end-to-end key exchange.
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "end-to-end encryption: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// e2eeContext is the context string both ends of a circuit bind their key exchange to.
func e2eeContext(circuitID uint64, serviceID string) string {
	return fmt.Sprintf("zmesh circuit %d service %s", circuitID, serviceID)
}

// e2eeConfig returns this identity's e2ee configuration for a circuit whose other end must
// be identity peerID.
func (c *Client) e2eeConfig(circuitID uint64, serviceID, peerID string) (e2ee.Config, error) {
	cr := c.creds.Load()
	key, ok := cr.cert.PrivateKey.(crypto.Signer)
	if !ok {
		return e2ee.Config{}, fmt.Errorf("the identity's key (%T) cannot sign", cr.cert.PrivateKey)
	}
	return e2ee.Config{
		Certificates: cr.chain,
		PrivateKey:   key,
		Context:      e2eeContext(circuitID, serviceID),
		Chains:       c.chains,
		Tickets:      c.tickets,
		VerifyPeer:   func(chain []*x509.Certificate) error { return c.verifyPeer(chain, peerID) },
	}, nil
}

// verifyPeer checks that chain is an identity certificate of the network (it chains to the
// identity's CAs) of identity want (its common name, which the controller sets to the
// identity's id). Chains verified before come from the Client's cache while they are valid.
func (c *Client) verifyPeer(chain []*x509.Certificate, want string) error {
	if err := c.chains.Verify(chain); err != nil {
		return fmt.Errorf("the peer's certificate is not an identity certificate of this network: %w", err)
	}
	if got := chain[0].Subject.CommonName; want == "" || got != want {
		return fmt.Errorf("the peer is identity %q, but the router said the circuit reached %q", got, want)
	}
	return nil
}

// encryptClient runs the dialing end's key exchange over conn's stream, expecting the
// hosting identity the router named: from start with the host's ServerHello, which answered
// start's ClientHello, or all of it in-band when the host sent none. ctx can abort it.
func (c *Client) encryptClient(ctx context.Context, conn *Conn, svc Service, start *e2ee.ClientStart, serverHello []byte) error {
	cfg, err := c.e2eeConfig(conn.circuitID, svc.ID, conn.remote.Identity)
	if err != nil {
		conn.stream.Close()
		return &handshakeError{err}
	}
	// The dial ends once the host has proved its identity: the first Read checks that the
	// host accepted this one (which saves the dial a round trip).
	cfg.FalseStart = true
	stop := context.AfterFunc(ctx, func() { conn.stream.Close() })
	var ec *e2ee.Conn
	if len(serverHello) > 0 {
		ec, err = start.Finish(conn.stream, cfg, serverHello)
	} else {
		ec, err = e2ee.Client(conn.stream, cfg)
	}
	if !stop() {
		if err == nil {
			ec.Close()
		}
		return ctx.Err()
	}
	if err != nil {
		return &handshakeError{err} // the handshake closed the stream
	}
	conn.inner, conn.scheme = ec, SchemeZmesh
	return nil
}

// encryptZiti sets up OpenZiti's scheme over conn's stream: key is this end's, peerKey the
// other end's; the dialing end is crypto_kx's client.
func encryptZiti(conn *Conn, key *e2ee.ZitiKey, peerKey []byte, dialing bool) error {
	var zc *e2ee.ZitiConn
	var err error
	if dialing {
		zc, err = e2ee.ZitiClient(conn.stream, key, peerKey)
	} else {
		zc, err = e2ee.ZitiServer(conn.stream, key, peerKey)
	}
	if err != nil {
		conn.stream.Close()
		return &handshakeError{err}
	}
	conn.inner, conn.scheme = zc, SchemeOpenZiti
	return nil
}

// acceptHello answers the dialing end's ClientHello for conn, expecting the dialing identity
// the router named: it returns the ServerHello for the answer to the router, and the
// handshake that finishes over conn's stream (encryptServer).
func (c *Client) acceptHello(conn *Conn, serviceID string, clientHello []byte) (*e2ee.ServerStart, []byte, error) {
	cfg, err := c.e2eeConfig(conn.circuitID, serviceID, conn.remote.Identity)
	if err != nil {
		return nil, nil, &handshakeError{err}
	}
	start, hello, err := e2ee.AcceptHello(conn.stream, cfg, clientHello)
	if err != nil {
		return nil, nil, &handshakeError{err}
	}
	return start, hello, nil
}

// encryptServer runs the hosting end's key exchange over conn's stream, expecting the
// dialing identity the router named: the rest of start, when it answered a ClientHello, else
// all of it in-band.
func (c *Client) encryptServer(conn *Conn, serviceID string, start *e2ee.ServerStart) error {
	var ec *e2ee.Conn
	if start != nil {
		var err error
		if ec, err = start.Finish(); err != nil {
			return &handshakeError{err}
		}
	} else {
		cfg, err := c.e2eeConfig(conn.circuitID, serviceID, conn.remote.Identity)
		if err != nil {
			conn.stream.Close()
			return &handshakeError{err}
		}
		if ec, err = e2ee.Server(conn.stream, cfg); err != nil {
			return &handshakeError{err}
		}
	}
	conn.inner, conn.scheme = ec, SchemeZmesh
	return nil
}
