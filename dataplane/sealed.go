package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmesh/zmesh/internal/e2ee"
)

// A sealedTarget is the hosting end of an end-to-end encrypted circuit joined straight to
// its target's TCP connection: the circuit's endpoint reads and writes it as its connection,
// and it encrypts what it reads from the target and decrypts what is written to it. The
// tunnel's host carried these circuits through an in-process pair, a relay goroutine each
// way and the encrypted conn between; here the endpoint's own reader and writer do the work,
// and the reader waits for the target's socket as it would for any socket.
//
// The e2ee Conn runs over a cipherBuffer instead of a connection: the circuit's bytes are
// put in it by Write, the records it seals are taken from it by Read. The key exchange's
// last step (the initiator's ClientAuth, answered by ServerFinished) runs in Write once the
// whole ClientAuth arrived; Read waits for it, as there is nothing to send before.
type sealedTarget struct {
	tcp  *net.TCPConn
	raw  syscall.RawConn
	done func()     // the host's, once the circuit has ended
	bufs *sync.Pool // of *[]byte of sealBufferSize, lent to a Read or Write
	log  *slog.Logger

	// handshook is closed once the key exchange finished (ec set) or failed (hsErr set);
	// expiry closes the end if it has not by the key exchange's timeout.
	handshook chan struct{}
	expiry    *time.Timer
	expired   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	start     *e2ee.ServerStart // until the key exchange finished; the writer's
	ec        *e2ee.Conn
	hsErr     error

	// The writer's: the circuit's ciphertext not yet opened, and whether the initiator's
	// close-write arrived.
	in         cipherBuffer
	peerClosed bool

	// The reader's, once handshook: the sealed records not yet read, and whether the
	// close-write record was sealed; during a Read, the records go into outTo, outN bytes
	// so far, before out.
	out      cipherBuffer
	outTo    []byte
	outN     int
	wroteEOF bool
	peek     [1]byte
	ready    bool // WaitReadable found the socket readable, and no Read came since
}

// sealBufferSize is the size of the plaintext buffers a Read or Write borrows: as many
// records as the e2ee Conn seals per write.
const sealBufferSize = 4 * e2ee.RecordSize

// borrow lends a plaintext buffer; give it back with s.bufs.Put.
func (s *sealedTarget) borrow() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, sealBufferSize)
	return &b
}

// newSealedTarget returns a hosting end whose plaintext buffers come from bufs. Its key
// exchange is begun over s.cipher() (e2ee.AcceptHello), then the target's connection is
// attached and the key exchange handed over (join).
func newSealedTarget(bufs *sync.Pool, log *slog.Logger) *sealedTarget {
	return &sealedTarget{bufs: bufs, log: log, handshook: make(chan struct{}), closed: make(chan struct{})}
}

// join attaches tcp, the target's connection, whose done is called once the end is closed,
// and hands over the key exchange that e2ee.AcceptHello began: the first Writes finish it,
// and the end is closed unless they have within timeout.
func (s *sealedTarget) join(tcp *net.TCPConn, done func(), start *e2ee.ServerStart, timeout time.Duration) error {
	raw, err := tcp.SyscallConn()
	if err != nil {
		return err
	}
	s.tcp, s.raw, s.done, s.start = tcp, raw, done, start
	s.expiry = time.AfterFunc(timeout, func() {
		s.expired.Store(true)
		s.Close()
	})
	return nil
}

// cipher returns the buffer the e2ee handshake and Conn run over, as a net.Conn: what is
// written to it goes to out, what is read from it comes from in.
func (s *sealedTarget) cipher() net.Conn { return cipherConn{s} }

// Write takes the circuit's next ciphertext: it finishes the key exchange once the initiator's
// ClientAuth is all there, then writes the plaintext of every whole record to the target.
// A close-write record half-closes the target's connection.
func (s *sealedTarget) Write(p []byte) (int, error) {
	// The e2ee Conn reads p itself, unless the bytes of an unfinished ClientAuth came before;
	// it reads all of it before it runs out (a read of in with nothing left), so that in keeps
	// nothing of p after Write but what the key exchange still waits for.
	if s.in.len() > 0 {
		s.in.write(p)
	} else {
		s.in.b, s.in.off = p, 0
	}
	defer s.in.keep()
	if s.start != nil {
		if !s.start.CanFinish(s.in.bytes()) {
			return len(p), nil
		}
		ec, err := s.start.Finish() // reads ClientAuth from in, puts ServerFinished in out
		if err != nil {
			s.log.Info("tunnel: end-to-end key exchange failed", "err", err)
			return 0, s.endHandshake(nil, fmt.Errorf("end-to-end key exchange: %w", err))
		}
		s.endHandshake(ec, nil)
	}
	if s.peerClosed {
		return 0, errors.New("e2ee: data after the close-write record")
	}
	bp := s.borrow()
	defer s.bufs.Put(bp)
	for {
		n, err := s.ec.Read(*bp)
		if n > 0 {
			if _, werr := s.tcp.Write((*bp)[:n]); werr != nil {
				return 0, werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded): // no whole record left: wait for more
			return len(p), nil
		case errors.Is(err, io.EOF):
			s.peerClosed = true
			return len(p), s.tcp.CloseWrite()
		default:
			return 0, err
		}
	}
}

// endHandshake ends the key exchange, with ec or with err, which it returns; the writer's.
func (s *sealedTarget) endHandshake(ec *e2ee.Conn, err error) error {
	s.expiry.Stop()
	s.start, s.ec, s.hsErr = nil, ec, err
	close(s.handshook)
	return err
}

// CloseWrite is called once the initiator's end of the circuit finished: its close-write
// record came first (Write half-closed the target), or the stream was cut short, and the
// target's connection is closed rather than half-closed, as the relay did; or it ended
// before the key exchange did, which fails.
func (s *sealedTarget) CloseWrite() error {
	if s.start != nil {
		s.endHandshake(nil, errors.New("end-to-end key exchange: the initiator ended its side before its ClientAuth"))
	}
	if s.peerClosed {
		return nil
	}
	return s.tcp.Close()
}

// Read gives the circuit its next ciphertext: records left from the last Read, else the
// target's next data sealed, else, at the target's EOF, the close-write record, then EOF.
func (s *sealedTarget) Read(p []byte) (int, error) {
	if err := s.waitHandshake(); err != nil {
		return 0, err
	}
	if s.out.len() > 0 {
		return s.out.take(p), nil
	}
	if s.wroteEOF {
		return 0, io.EOF
	}
	// A Read that WaitReadable did not come before (the endpoint reads on after a read that
	// filled its frame) waits for the socket first, so that an idle circuit holds no buffer.
	if !s.ready {
		if err := s.raw.Read(s.readable); err != nil {
			return 0, err
		}
	}
	s.ready = false
	bp := s.borrow()
	defer s.bufs.Put(bp)
	// As much as fits in p once sealed (at least a byte; the rest waits in out). The records
	// go straight into p (outTo).
	room := max(len(p)-sealOverhead*(len(p)/e2ee.RecordSize+1), 1)
	n, err := s.tcp.Read((*bp)[:min(room, len(*bp))])
	s.outTo, s.outN = p, 0
	defer func() { s.outTo = nil }()
	if n > 0 {
		if _, werr := s.ec.Write((*bp)[:n]); werr != nil {
			return 0, werr
		}
	}
	if errors.Is(err, io.EOF) {
		if werr := s.ec.CloseWrite(); werr != nil {
			return 0, werr
		}
		s.wroteEOF, err = true, nil
	}
	if s.outN > 0 {
		return s.outN, nil // an error of the read comes again at the next
	}
	return 0, err
}

// sealOverhead is what sealing adds to a record's plaintext: its header and tag.
const sealOverhead = 4 + 16

// WaitReadable returns once Read has something to return without waiting: the key exchange
// finished and records are left, or the target's socket is readable (or at EOF, or failed).
func (s *sealedTarget) WaitReadable() error {
	if err := s.waitHandshake(); err != nil {
		return err
	}
	if s.out.len() > 0 || s.wroteEOF {
		return nil
	}
	err := s.raw.Read(s.readable)
	s.ready = err == nil
	return err
}

// Readable reports whether Read would return without waiting.
func (s *sealedTarget) Readable() bool {
	select {
	case <-s.handshook:
	default:
		return false
	}
	if s.hsErr != nil || s.out.len() > 0 || s.wroteEOF {
		return true
	}
	readable := false
	s.raw.Read(func(fd uintptr) bool {
		readable = s.readable(fd)
		return true
	})
	return readable
}

func (s *sealedTarget) readable(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), s.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n > 0 || !errors.Is(err, syscall.EAGAIN)
}

func (s *sealedTarget) waitHandshake() error {
	select {
	case <-s.handshook:
		return s.hsErr
	case <-s.closed:
		if s.expired.Load() {
			return errors.New("end-to-end key exchange: the initiator's ClientAuth did not come in time")
		}
		return net.ErrClosed
	}
}

// Close closes the target's connection, and tells the host.
func (s *sealedTarget) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed)
		err = s.tcp.Close()
		s.done()
	})
	return err
}

func (s *sealedTarget) LocalAddr() net.Addr                { return s.tcp.LocalAddr() }
func (s *sealedTarget) RemoteAddr() net.Addr               { return s.tcp.RemoteAddr() }
func (s *sealedTarget) SetDeadline(t time.Time) error      { return s.tcp.SetDeadline(t) }
func (s *sealedTarget) SetReadDeadline(t time.Time) error  { return s.tcp.SetReadDeadline(t) }
func (s *sealedTarget) SetWriteDeadline(t time.Time) error { return s.tcp.SetWriteDeadline(t) }

// cipherBuffer holds ciphertext on its way between the circuit and the e2ee Conn: b[off:]
// is not taken yet. Emptied, it starts over at the front of its storage, which it keeps up
// to maxKeptCipher bytes, so that an idle circuit holds little.
type cipherBuffer struct {
	b   []byte
	off int
}

const maxKeptCipher = 4 << 10

func (c *cipherBuffer) len() int      { return len(c.b) - c.off }
func (c *cipherBuffer) bytes() []byte { return c.b[c.off:] }

func (c *cipherBuffer) write(p []byte) {
	if len(p) > 0 {
		c.b = append(c.b, p...)
	}
}

// keep copies what is left into storage of the buffer's own, when it lies in a caller's
// (Write's p).
func (c *cipherBuffer) keep() {
	if c.len() == 0 {
		c.b, c.off = nil, 0
		return
	}
	c.b, c.off = append([]byte(nil), c.b[c.off:]...), 0
}

// take moves what fits of the buffer into p.
func (c *cipherBuffer) take(p []byte) int {
	n := copy(p, c.b[c.off:])
	c.off += n
	if c.off == len(c.b) {
		c.b, c.off = c.b[:0], 0
		if cap(c.b) > maxKeptCipher {
			c.b = nil
		}
	}
	return n
}

// cipherConn is the sealedTarget's buffers as the net.Conn the e2ee handshake and Conn run
// over. A Read with nothing buffered fails as a read past its deadline does, which the e2ee
// Conn takes as "no more for now" and keeps what it has; the handshake's Finish is called
// only once it need not read more than is buffered (ServerStart.CanFinish).
type cipherConn struct{ s *sealedTarget }

func (c cipherConn) Read(p []byte) (int, error) {
	if c.s.in.len() == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	return c.s.in.take(p), nil
}

func (c cipherConn) Write(p []byte) (int, error) {
	s := c.s
	n := copy(s.outTo[s.outN:], p)
	s.outN += n
	s.out.write(p[n:])
	return len(p), nil
}

func (c cipherConn) Close() error                     { return nil }
func (c cipherConn) LocalAddr() net.Addr              { return nil }
func (c cipherConn) RemoteAddr() net.Addr             { return nil }
func (c cipherConn) SetDeadline(time.Time) error      { return nil }
func (c cipherConn) SetReadDeadline(time.Time) error  { return nil }
func (c cipherConn) SetWriteDeadline(time.Time) error { return nil }
