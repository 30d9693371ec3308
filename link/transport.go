package link

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sys/unix"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/tlscork"
)

// A link connection runs over one of two transports: tls (TLS 1.3 over TCP, Nagle off) or
// quic (one QUIC connection carrying one bidirectional stream). Either way the link sees a
// stream: a net.Conn whose peer certificate has been verified.
//
// TLS writes every record of at most 16 KiB with its own system call, and on loopback or a
// fast network those calls cost more than the encryption. So a TLS stream runs over a
// tlscork.Conn: while the link's writer has it corked (a batch, see send.go), the records TLS
// writes are gathered and leave in one system call per corkSize bytes, and the receiving
// kernel and router see fewer, larger segments; the reader reads as much at a time.

// stream is one authenticated byte stream of a link.
type stream interface {
	net.Conn
	// CloseWrite ends the sending direction after the data already written.
	CloseWrite() error
	// peerCertificate is the verified certificate of the other router.
	peerCertificate() *x509.Certificate
	// linger waits, until deadline at most, for what was written to reach the peer before
	// Close; closing a QUIC connection drops what it has not delivered yet.
	linger(deadline time.Time)
	// sever drops the connection as a network failure would: a TCP connection is reset, a
	// QUIC connection closed with an error.
	sever()
	// retransmits is what the transport resent below the link: the segments TCP
	// retransmitted, or the packets QUIC declared lost (and so resent the frames of).
	retransmits() uint64
	// cork and uncork bracket a batch of writes of the link's writer: the stream may hold
	// back what is written in between, and sends it by the time uncork returns, size bytes
	// at most at a time.
	cork(size int)
	uncork() error
	// readAhead has the stream read up to size bytes from the network at a time from now
	// on; streams that buffer what they receive anyway ignore it.
	readAhead(size int)
	// bufferSize is the size of the buffered writer the link's writer puts in front of the
	// stream.
	bufferSize() int
}

// Buffered writers in front of the streams: a TLS record's worth, so that small frames are
// gathered into full records while large ones go to TLS uncopied (the tlscork.Conn gathers the
// records); QUIC streams copy what they are given and wake their connection's sender on
// every write, so they get larger writes.
const (
	tlsBufferSize  = 16 << 10
	quicBufferSize = 64 << 10
)

// QUIC settings: the idle timeout drops a silent peer; keep-alives hold healthy idle links.
const (
	quicIdleTimeout = 30 * time.Second
	quicKeepAlive   = 10 * time.Second
)

// dialStream opens a stream to addr from local (zero: any) and completes the TLS handshake.
// A TLS stream borrows the buffers it gathers batches in from bufs (see tlscork.Conn).
func dialStream(ctx context.Context, addr config.Address, local netip.AddrPort, tlsConf *tls.Config, timeout time.Duration, bufs *sync.Pool) (stream, error) {
	switch addr.Transport {
	case config.TransportTLS:
		return dialTLS(ctx, addr, local, tlsConf, bufs)
	case config.TransportQUIC:
		return dialQUIC(ctx, addr, local, tlsConf, timeout)
	}
	return nil, fmt.Errorf("dial %s: transport %q is not one of tls, quic", addr, addr.Transport)
}

func dialTLS(ctx context.Context, addr config.Address, local netip.AddrPort, tlsConf *tls.Config, bufs *sync.Pool) (stream, error) {
	var d net.Dialer
	if local.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(local)
	}
	raw, err := d.DialContext(ctx, "tcp", addr.HostPort())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	tcp := raw.(*net.TCPConn)
	if err := tcp.SetNoDelay(true); err != nil {
		raw.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	cc := tlscork.New(tcp, bufs, corkSize)
	tc := tls.Client(cc, tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return tlsStream{tc, cc}, nil
}

func dialQUIC(ctx context.Context, addr config.Address, local netip.AddrPort, tlsConf *tls.Config, timeout time.Duration) (stream, error) {
	network := "udp"
	if local.IsValid() { // the peer's address must be of the local address's family
		network = "udp6"
		if local.Addr().Is4() {
			network = "udp4"
		}
	}
	remote, err := net.ResolveUDPAddr(network, addr.HostPort())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	var la *net.UDPAddr
	if local.IsValid() {
		la = net.UDPAddrFromAddrPort(local)
	}
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, fmt.Errorf("dial %s: local UDP socket: %w", addr, err)
	}
	qc, err := quic.Dial(ctx, udp, remote, tlsConf, quicConfig(timeout, false))
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("QUIC handshake with %s: %w", addr, err)
	}
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		udp.Close()
		return nil, fmt.Errorf("open QUIC stream to %s: %w", addr, err)
	}
	return &quicStream{Stream: st, conn: qc, udp: udp}, nil
}

func quicConfig(timeout time.Duration, server bool) *quic.Config {
	c := &quic.Config{
		HandshakeIdleTimeout:  timeout,
		MaxIdleTimeout:        quicIdleTimeout,
		KeepAlivePeriod:       quicKeepAlive,
		MaxIncomingStreams:    -1, // the dialer opens the one stream
		MaxIncomingUniStreams: -1,
	}
	if server {
		c.MaxIncomingStreams = 1
	}
	return c
}

// acceptor yields incoming connections; the returned function completes the handshake of
// one, off the accept loop, and releases it when it fails.
type acceptor interface {
	accept(ctx context.Context) (func(ctx context.Context) (stream, error), error)
	addr() net.Addr
	close() error
}

func listen(bind config.Address, tlsConf *tls.Config, timeout time.Duration, bufs *sync.Pool) (acceptor, error) {
	switch bind.Transport {
	case config.TransportTLS:
		ln, err := net.Listen("tcp", bind.HostPort())
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", bind, err)
		}
		return tlsAcceptor{ln: ln, conf: tlsConf, bufs: bufs}, nil
	case config.TransportQUIC:
		ln, err := quic.ListenAddr(bind.HostPort(), tlsConf, quicConfig(timeout, true))
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", bind, err)
		}
		return quicAcceptor{ln: ln}, nil
	}
	return nil, fmt.Errorf("listen on %s: transport %q is not one of tls, quic", bind, bind.Transport)
}

type tlsAcceptor struct {
	ln   net.Listener
	conf *tls.Config
	bufs *sync.Pool
}

func (a tlsAcceptor) accept(context.Context) (func(context.Context) (stream, error), error) {
	raw, err := a.ln.Accept()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (stream, error) { return a.handshake(ctx, raw) }, nil
}

func (a tlsAcceptor) handshake(ctx context.Context, raw net.Conn) (stream, error) {
	tcp := raw.(*net.TCPConn)
	if err := tcp.SetNoDelay(true); err != nil {
		raw.Close()
		return nil, err
	}
	cc := tlscork.New(tcp, a.bufs, corkSize)
	tc := tls.Server(cc, a.conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tlsStream{tc, cc}, nil
}

func (a tlsAcceptor) addr() net.Addr { return a.ln.Addr() }
func (a tlsAcceptor) close() error   { return a.ln.Close() }

type quicAcceptor struct{ ln *quic.Listener }

func (a quicAcceptor) accept(ctx context.Context) (func(context.Context) (stream, error), error) {
	qc, err := a.ln.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (stream, error) {
		st, err := qc.AcceptStream(ctx)
		if err != nil {
			qc.CloseWithError(0, "")
			return nil, fmt.Errorf("accept QUIC stream: %w", err)
		}
		return &quicStream{Stream: st, conn: qc}, nil
	}, nil
}

func (a quicAcceptor) addr() net.Addr { return a.ln.Addr() }
func (a quicAcceptor) close() error   { return a.ln.Close() }

// tlsStream is a TLS connection over a tlscork.Conn. Close closes the TCP connection without a
// close_notify alert, so that it never blocks; the link ends its streams with CloseWrite
// when it can.
type tlsStream struct {
	*tls.Conn
	cc *tlscork.Conn
}

func (s tlsStream) Close() error { return s.cc.Close() }

// linger returns at once: the kernel delivers what was written after the socket closes.
func (s tlsStream) linger(time.Time) {}

func (s tlsStream) sever() {
	s.cc.TCP().SetLinger(0) // close with a reset
	s.cc.Close()
}

// retransmits is the connection's count of retransmitted segments; 0 when it cannot be read.
func (s tlsStream) retransmits() uint64 {
	n, _ := tcpRetransmits(s.cc.TCP())
	return n
}

// tcpRetransmits reads the kernel's count of c's retransmitted segments (TCP_INFO
// tcpi_total_retrans).
func tcpRetransmits(c *net.TCPConn) (uint64, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n uint64
	var infoErr error
	if err := raw.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); infoErr == nil {
			n = uint64(info.Total_retrans)
		}
	}); err != nil {
		return 0, err
	}
	return n, infoErr
}

func (s tlsStream) cork(size int)      { s.cc.Cork(size) }
func (s tlsStream) uncork() error      { return s.cc.Uncork() }
func (s tlsStream) readAhead(size int) { s.cc.ReadAhead(size) }
func (s tlsStream) bufferSize() int    { return tlsBufferSize }

func (s tlsStream) peerCertificate() *x509.Certificate {
	return s.ConnectionState().PeerCertificates[0]
}

// quicStream is the one stream of a QUIC connection; closing it closes the connection, and
// the UDP socket when the stream was dialed.
type quicStream struct {
	*quic.Stream
	conn *quic.Conn
	udp  *net.UDPConn // nil on the listening side, where the listener owns the socket
}

func (s *quicStream) LocalAddr() net.Addr  { return s.conn.LocalAddr() }
func (s *quicStream) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }
func (s *quicStream) CloseWrite() error    { return s.Stream.Close() }
func (s *quicStream) retransmits() uint64  { return s.conn.ConnectionStats().PacketsLost }
func (s *quicStream) cork(int)             {}
func (s *quicStream) uncork() error        { return nil }
func (s *quicStream) readAhead(int)        {}
func (s *quicStream) bufferSize() int      { return quicBufferSize }

func (s *quicStream) Close() error {
	err := s.conn.CloseWithError(0, "link closed")
	if s.udp != nil {
		s.udp.Close()
	}
	return err
}

func (s *quicStream) sever() {
	s.conn.CloseWithError(quic.ApplicationErrorCode(1), "severed")
	if s.udp != nil {
		s.udp.Close()
	}
}

// linger waits for the peer to close the connection, which it does once it has read the end
// of the stream.
func (s *quicStream) linger(deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.conn.Context().Done():
	case <-t.C:
	}
}

func (s *quicStream) peerCertificate() *x509.Certificate {
	return s.conn.ConnectionState().TLS.PeerCertificates[0]
}
