package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
)

// Stream kinds: the dialer of a connection to the raft port writes one of these bytes after
// the TLS handshake, so that raft's connections and writes forwarded to the leader share
// the port and its authentication.
const (
	kindRaft    byte = 'R'
	kindForward byte = 'F'
)

// streamLayer carries raft's connections over TLS 1.3 with mutual authentication: both ends
// present a controller certificate of the network's CA (one carrying the controller's
// certificate policy), so no router or identity, whose certificates the same CA issues, can
// join the cluster or pose as a member. It accepts on one goroutine and completes each
// handshake (bounded by handshakeTimeout) on the connection's own, then hands raft's
// connections to Accept and the forwarded writes' to forward.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config
	client    *tls.Config
	log       *slog.Logger
	// handshakeTimeout bounds an accepted connection's TLS handshake and kind byte.
	handshakeTimeout time.Duration
	// handshakes and forwards hold a token per accepted connection not yet through its
	// handshake and kind byte, and per forwarding connection being served: a connection
	// beyond either bound is closed at once.
	handshakes, forwards chan struct{}

	conns chan net.Conn // raft's accepted connections
	done  chan struct{} // closed by Close
	close sync.Once

	mu sync.Mutex
	// forward serves a forwarded-write connection; nil refuses them.
	forward func(net.Conn)
	// contact is when a member dialed at an address last sent something back.
	contact map[string]time.Time
}

// newStreamLayer listens on bind; advertise ("" for the listener's address) is the address
// the other members dial.
func newStreamLayer(bind, advertise string, cert func() (*tls.Certificate, error), roots *x509.CertPool,
	handshakeTimeout time.Duration, log *slog.Logger) (*streamLayer, error) {
	if cert == nil || roots == nil {
		return nil, errors.New("cluster: the raft transport needs a certificate and the network's CA")
	}
	server := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		GetCertificate:   func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert() },
		ClientAuth:       tls.RequireAnyClientCert, // verified below: controller server certificates
		VerifyConnection: VerifyMember(roots),
	}
	client := &tls.Config{
		MinVersion:           tls.VersionTLS13,
		RootCAs:              roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert() },
		VerifyConnection:     certid.VerifyController,
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen for raft on %s: %w", bind, err)
	}
	s := &streamLayer{
		ln: ln, advertise: ln.Addr(), server: server, client: client, log: log,
		handshakeTimeout: handshakeTimeout,
		handshakes:       make(chan struct{}, maxHandshakes), forwards: make(chan struct{}, maxForwarding),
		conns: make(chan net.Conn), done: make(chan struct{}),
		contact: map[string]time.Time{},
	}
	if advertise != "" {
		addr, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("cluster: advertised raft address %q: %w", advertise, err)
		}
		s.advertise = addr
	}
	go s.acceptLoop()
	return s, nil
}

// Bounds of the connections an accepting member serves at once: those still in their
// handshake (any peer that reaches the port can open them), and the forwarding ones (each
// follower forwards its writes one at a time, and asks for an outcome now and then).
const (
	maxHandshakes = 64
	maxForwarding = 64
)

// acquire takes a token of sem, false when there is none left.
func acquire(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// acceptLoop accepts TCP connections until Close and completes each on its own goroutine,
// so that a peer slow to handshake holds up no other; beyond maxHandshakes at once, a new
// connection is closed at once. An accept error (out of file descriptors...) is retried
// after a pause that doubles up to a second.
func (s *streamLayer) acceptLoop() {
	var pause time.Duration
	for {
		raw, err := s.ln.Accept()
		if err == nil {
			pause = 0
			if !acquire(s.handshakes) {
				s.log.Debug("raft listener: too many connections in their handshake; one refused", "remote", raw.RemoteAddr())
				raw.Close()
				continue
			}
			go s.admit(raw)
			continue
		}
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		t := time.NewTimer(pause)
		select {
		case <-s.done:
			t.Stop()
			return
		case <-t.C:
			s.log.Warn("raft listener: accept failed; trying again", "err", err)
		}
	}
}

// admit completes an accepted connection's handshake and reads its kind, both within the
// handshake timeout, and hands it on; a peer that sends nothing is dropped at the deadline.
// It holds a token of handshakes until then, and one of forwards while it serves a
// forwarding connection.
func (s *streamLayer) admit(raw net.Conn) {
	conn := tls.Server(raw, s.server)
	kind, err := func() (byte, error) {
		if err := conn.SetDeadline(time.Now().Add(s.handshakeTimeout)); err != nil {
			return 0, err
		}
		if err := conn.Handshake(); err != nil {
			return 0, err
		}
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil {
			return 0, err
		}
		return b[0], conn.SetDeadline(time.Time{})
	}()
	<-s.handshakes
	if err != nil {
		s.log.Debug("raft listener: connection dropped before it said what it carries", "remote", raw.RemoteAddr(), "err", err)
		conn.Close()
		return
	}
	switch kind {
	case kindRaft:
		select {
		case s.conns <- conn:
		case <-s.done:
			conn.Close()
		}
	case kindForward:
		s.mu.Lock()
		serve := s.forward
		s.mu.Unlock()
		if serve == nil {
			conn.Close()
			return
		}
		if !acquire(s.forwards) {
			s.log.Warn("raft listener: too many forwarding connections at once; one refused", "remote", raw.RemoteAddr())
			conn.Close()
			return
		}
		defer func() { <-s.forwards }()
		serve(conn)
	default:
		s.log.Warn("raft listener: connection of an unknown kind dropped", "remote", raw.RemoteAddr(), "kind", kind)
		conn.Close()
	}
}

// serveForwarded has f serve the forwarded-write connections from now on.
func (s *streamLayer) serveForwarded(f func(net.Conn)) {
	s.mu.Lock()
	s.forward = f
	s.mu.Unlock()
}

// Accept returns raft's next connection.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close stops the listener; connections handed on stay open.
func (s *streamLayer) Close() error {
	err := net.ErrClosed
	s.close.Do(func() {
		close(s.done)
		err = s.ln.Close()
	})
	return err
}

// Addr is the advertised address, which raft gives the other members.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to the member at address for raft. Every read on the connection notes a
// contact with that member (raft's answers and heartbeats' replies).
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := s.dial(ctx, string(address), kindRaft)
	if err != nil {
		return nil, err
	}
	return &contactConn{Conn: conn, s: s, addr: string(address)}, nil
}

// dial connects to the member at address, completes the TLS handshake and writes kind.
func (s *streamLayer) dial(ctx context.Context, address string, kind byte) (net.Conn, error) {
	d := tls.Dialer{Config: s.client}
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial member %s: %w", address, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write([]byte{kind}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cluster: dial member %s: %w", address, err)
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// lastContact returns when the member dialed at address last answered, zero if never.
func (s *streamLayer) lastContact(address string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contact[address]
}

// contactConn notes the time of every successful read.
type contactConn struct {
	net.Conn
	s    *streamLayer
	addr string
}

func (c *contactConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.s.mu.Lock()
		c.s.contact[c.addr] = time.Now()
		c.s.mu.Unlock()
	}
	return n, err
}

// VerifyMember returns the check of a connection accepted from a peer controller (a member
// dialing the raft port, or one asking another controller about itself): the peer's
// certificate must chain to roots, the network's CA, for server authentication (members
// present their controller server certificate in both directions) and carry the
// controller's certificate policy. It fits tls.Config.VerifyConnection.
func VerifyMember(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("cluster: the peer controller presented no certificate: %w", certid.ErrNotController)
		}
		leaf := cs.PeerCertificates[0]
		if err := pki.VerifyChain(leaf, cs.PeerCertificates[1:], roots, time.Now(), x509.ExtKeyUsageServerAuth); err != nil {
			return fmt.Errorf("cluster: the peer controller's certificate %q (fingerprint %s): %w",
				leaf.Subject.CommonName, certid.Fingerprint(leaf), err)
		}
		if !certid.IsController(leaf) {
			return fmt.Errorf("cluster: the peer controller's certificate %q (fingerprint %s) is not a controller's: %w",
				leaf.Subject.CommonName, certid.Fingerprint(leaf), certid.ErrNotController)
		}
		return nil
	}
}
