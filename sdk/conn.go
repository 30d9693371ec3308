package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/edgeproto"
)

// Addr is an end of a zmesh connection: an identity using a service.
type Addr struct {
	Service  string // the service's name
	Identity string // the identity's id
}

// Network returns "zmesh".
func (a Addr) Network() string { return "zmesh" }

// String returns identity@service.
func (a Addr) String() string { return a.Identity + "@" + a.Service }

// Conn is a connection over a zmesh circuit: from Dial, or from a Listener's Accept. It is
// a net.Conn that can also half-close (CloseWrite); its deadlines work as net.Conn's. When
// the service requires encryption, the bytes are end-to-end encrypted between the two ends
// and the routers see only ciphertext; Scheme tells which scheme protects them.
type Conn struct {
	inner     net.Conn // the router stream, or the encrypted conn over it
	stream    *circuitStream
	circuitID uint64
	local     Addr
	remote    Addr
	scheme    Scheme
	appData   json.RawMessage
}

// Scheme is an end-to-end encryption scheme.
type Scheme string

const (
	// SchemeNone: the Conn is not end-to-end encrypted (the service does not require it).
	SchemeNone Scheme = ""
	// SchemeZmesh is zmesh's scheme, between two zmesh ends: a key exchange signed with
	// both identities' certificate keys and bound to the circuit, so that no router or
	// controller can read or substitute keys.
	SchemeZmesh Scheme = "zmesh"
	// SchemeOpenZiti is OpenZiti's scheme (crypto_kx and crypto_secretstream), which a zmesh
	// end uses with an OpenZiti client: its public keys are relayed unsigned by the routers
	// and the controller, so it stops routers that only forward from reading, not a router
	// or controller that substitutes keys.
	SchemeOpenZiti Scheme = "openziti"
)

var _ net.Conn = (*Conn)(nil)

// Read reads from the circuit.
func (c *Conn) Read(p []byte) (int, error) { return c.inner.Read(p) }

// Write writes to the circuit.
func (c *Conn) Write(p []byte) (int, error) { return c.inner.Write(p) }

// Close closes the connection both ways (an encrypted Conn first tells the other end it
// has finished writing).
func (c *Conn) Close() error { return c.inner.Close() }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error { return c.inner.SetDeadline(t) }

// SetReadDeadline sets the read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.inner.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.inner.SetWriteDeadline(t) }

// LocalAddr returns this end: this identity and the service.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the other end: the identity hosting the service (for a dialed Conn) or
// the identity that dialed (for an accepted one), and the service.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// AppData returns the app data the dialing end sent (DialOptions.AppData), on a connection
// from a Listener's Accept.
func (c *Conn) AppData() json.RawMessage { return c.appData }

// CircuitID returns the id of the circuit the Conn runs over.
func (c *Conn) CircuitID() uint64 { return c.circuitID }

// Encrypted reports whether the Conn is end-to-end encrypted.
func (c *Conn) Encrypted() bool { return c.scheme != SchemeNone }

// Scheme returns the end-to-end encryption scheme that protects the Conn: SchemeZmesh when
// both ends are zmesh's, SchemeOpenZiti when the other end is an OpenZiti client, or
// SchemeNone.
func (c *Conn) Scheme() Scheme { return c.scheme }

// CloseWrite half-closes the Conn: the other end reads EOF once it has read everything
// written before, and this end can still read. (The stream sends its FIN; a Conn with
// zmesh's scheme first sends its authenticated close-write record.)
func (c *Conn) CloseWrite() error {
	if cw, ok := c.inner.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("sdk: the connection does not support half-close")
}

// DialOptions tune a Dial.
type DialOptions struct {
	// Identity, when set, reaches the terminator a host bound under this name
	// (ListenOptions.Identity) rather than any terminator of the service.
	Identity string
	// AppData travels with the circuit to the hosting end (Conn.AppData there), at most
	// 4 KiB: a tunnel sends what it intercepted.
	AppData json.RawMessage
}

// Dial connects to a service by name: it creates (or reuses) a Dial session, asks the
// fastest connected edge router of the session for a circuit, and returns the stream as a
// *Conn once the circuit is up (and, when the service requires encryption, once the hosting
// identity proved itself in the key exchange: Dial does not wait for the host to confirm that
// it accepted this identity, so that a host that refuses it fails the Conn's first Read, as
// a TLS 1.3 server that refuses a client certificate does). On a router that cannot connect, refuses or
// fails, Dial tries the session's next router; a session the router does not know any more
// is replaced once.
func (c *Client) Dial(ctx context.Context, service string) (*Conn, error) {
	return c.DialWithOptions(ctx, service, DialOptions{})
}

// DialContext dials the service that addr names, as net.Dialer.DialContext dials an address,
// so that it can serve as http.Transport.DialContext and wherever a dial function is taken.
// The service's name is addr's host part (addr itself when it is not host:port): the port
// means nothing to a circuit and is ignored, so that http://myservice/ reaches the service
// named myservice. A circuit carries a byte stream: network is "tcp", "tcp4", "tcp6" or
// "zmesh" (Addr.Network); any other is refused with an error wrapping
// net.UnknownNetworkError. The connection is a *Conn.
func (c *Client) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6", "zmesh":
	default:
		return nil, fmt.Errorf("sdk: dial %s %q: a circuit carries a byte stream (tcp or zmesh): %w",
			network, addr, net.UnknownNetworkError(network))
	}
	conn, err := c.Dial(ctx, serviceOf(addr))
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// serviceOf returns the name of the service addr names for DialContext: its host part
// ("myservice" for "myservice:80" or "[myservice]:80"), or addr itself when it is not
// host:port.
func serviceOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// DialWithOptions is Dial with options.
func (c *Client) DialWithOptions(ctx context.Context, service string, opts DialOptions) (*Conn, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	svc, err := c.ServiceByName(ctx, service)
	if err != nil {
		return nil, fmt.Errorf("sdk: dial %s: %w", service, err)
	}
	var errs []error
	for attempt := 0; attempt < 2; attempt++ {
		s, err := c.session(ctx, svc.ID, sessionDial)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
				c.forgetService(service) // it may have changed or gone
			}
			return nil, fmt.Errorf("sdk: dial %s: %w", service, err)
		}
		conn, renew, err := c.dialSession(ctx, svc, s, opts)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sdk: dial %s: %w", service, ctx.Err())
		}
		errs = append(errs, err)
		if !renew {
			break
		}
		c.dropSession(s)
	}
	return nil, fmt.Errorf("sdk: dial %s: %w", service, errors.Join(errs...))
}

// dialSession dials with session s through its routers, fastest first, until one succeeds
// or fails in a way another would too. renew tells whether to try again with a new session:
// the router refused s, or no router could be reached or answered (their connections may
// have died: a new session lists the current routers, which are connected again).
func (c *Client) dialSession(ctx context.Context, svc Service, s *edgeSession, opts DialOptions) (_ *Conn, renew bool, _ error) {
	routers, err := c.routersFor(ctx, s)
	if err != nil {
		return nil, true, err
	}
	req := edgeproto.Request{Op: edgeproto.OpDial, SessionToken: s.token, ServiceID: svc.ID, Identity: opts.Identity, AppData: opts.AppData}
	var errs []error
	answered := false
	for _, rc := range routers {
		conn, err := c.dialVia(ctx, rc, svc, req)
		if err == nil {
			return conn, false, nil
		}
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("via %s: %w", rc.name, err))
		var ee *edgeproto.Error
		if errors.As(err, &ee) && ee.Code == edgeproto.CodeInvalidSession {
			return nil, true, errors.Join(errs...)
		}
		if !retriable(err) {
			return nil, false, errors.Join(errs...)
		}
		answered = answered || ee != nil
		rc.log.Info("dial failed; trying the next router", "service", svc.Name, "err", err)
	}
	return nil, !answered, errors.Join(errs...)
}

// retriable reports whether a failure on one router may not happen on another: anything but
// a refusal of the request as malformed, or a failed end-to-end handshake.
func retriable(err error) bool {
	var ee *edgeproto.Error
	if errors.As(err, &ee) {
		return ee.Code != edgeproto.CodeInvalid
	}
	var he *handshakeError
	return !errors.As(err, &he)
}

// dialVia asks router rc for a circuit and, when the service requires it, sets up the
// end-to-end encryption with the host the router reached: it offers zmesh's scheme with its
// ClientHello, and OpenZiti's (with a fresh key) when the service's openZitiEncryption
// allows it, and runs the one the host chose: zmesh's goes on from the ServerHello in the
// answer, or runs in-band when the host answered without one. A host key on a service that
// does not allow OpenZiti's scheme, or a ServerHello on one that is not encrypted, fails the
// dial before anything is written: only a router could have put it there.
func (c *Client) dialVia(ctx context.Context, rc *routerConn, svc Service, req edgeproto.Request) (*Conn, error) {
	var key *e2ee.ZitiKey
	var start *e2ee.ClientStart
	if svc.EncryptionRequired {
		var err error
		if start, err = e2ee.StartResumable(e2ee.CipherAuto, c.tickets, svc.ID); err != nil {
			return nil, &handshakeError{err}
		}
		req.E2EE = &edgeproto.E2EEOffer{Zmesh: true, ZmeshHello: start.Hello()}
		if svc.OpenZitiEncryption {
			if key, err = e2ee.NewZitiKey(); err != nil {
				return nil, &handshakeError{err}
			}
			req.E2EE.ZitiKey = key.Public()
		}
	}
	st, resp, err := rc.open(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(resp.HostZitiKey) > 0 && key == nil || len(resp.HostHello) > 0 && start == nil {
		st.Close()
		scheme, why := "OpenZiti's end-to-end scheme", "openZitiEncryption is false"
		if len(resp.HostZitiKey) == 0 {
			scheme = "zmesh's end-to-end key exchange"
		}
		if !svc.EncryptionRequired {
			why = "encryptionRequired is false"
		}
		return nil, &handshakeError{fmt.Errorf("sdk: dial service %q: router %s answered with %s, "+
			"which the service does not allow (%s)", svc.Name, rc.name, scheme, why)}
	}
	cs := newCircuitStream(st)
	conn := &Conn{inner: cs, stream: cs, circuitID: resp.CircuitID,
		local: Addr{Service: svc.Name, Identity: c.id}, remote: Addr{Service: svc.Name, Identity: resp.HostID}}
	switch {
	case key != nil && len(resp.HostZitiKey) > 0:
		if err := encryptZiti(conn, key, resp.HostZitiKey, true); err != nil {
			return nil, err
		}
	case svc.EncryptionRequired:
		if err := c.encryptClient(ctx, conn, svc, start, resp.HostHello); err != nil {
			return nil, err
		}
	}
	rc.log.Debug("dialed", "service", svc.Name, "circuit", resp.CircuitID, "host", resp.HostID)
	return conn, nil
}
