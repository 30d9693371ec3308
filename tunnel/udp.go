package tunnel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// UDP across the overlay. A circuit is a byte stream, so a UDP flow crosses it as a sequence
// of frames, each a datagram's length as 2 bytes big-endian followed by its bytes (an empty
// datagram is a frame of length 0). One circuit carries one flow: the datagrams between one
// client address and one intercepted destination, both ways. The tproxy tunnel opens the
// circuit on a flow's first datagram; either end closes it once the flow has been idle for
// its timeout, and the other end then ends the flow too.

// MaxDatagram is the largest datagram a frame can carry.
const MaxDatagram = 1<<16 - 1

// DefaultUDPIdleTimeout ends a UDP flow that has carried no datagram either way for so long.
const DefaultUDPIdleTimeout = 5 * time.Minute

// ErrDatagramTooLong is returned (wrapped) by WriteDatagram for more than MaxDatagram bytes,
// and by ReadDatagram for a frame that does not fit in the buffer (the frame is consumed).
var ErrDatagramTooLong = errors.New("datagram too long")

// DatagramConn carries datagrams over a stream connection, framed as described above. One
// goroutine may read while others write; writes are whole frames, never interleaved.
type DatagramConn struct {
	c net.Conn
	r *bufio.Reader

	wmu  sync.Mutex
	wbuf []byte
}

// NewDatagramConn frames datagrams over c.
func NewDatagramConn(c net.Conn) *DatagramConn {
	return &DatagramConn{c: c, r: bufio.NewReaderSize(c, 16<<10)}
}

// ReadDatagram reads the next datagram into b (MaxDatagram bytes hold any) and returns its
// length. At the stream's clean end between frames it returns io.EOF; a frame cut short
// gives io.ErrUnexpectedEOF.
func (d *DatagramConn) ReadDatagram(b []byte) (int, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		return 0, err // io.EOF at a frame boundary, io.ErrUnexpectedEOF within the header
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n > len(b) {
		if _, err := d.r.Discard(n); err != nil {
			return 0, noEOF(err)
		}
		return 0, fmt.Errorf("read datagram of %d bytes into %d: %w", n, len(b), ErrDatagramTooLong)
	}
	if _, err := io.ReadFull(d.r, b[:n]); err != nil {
		return 0, noEOF(err)
	}
	return n, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// WriteDatagram writes p as one frame, in one write to the stream.
func (d *DatagramConn) WriteDatagram(p []byte) error {
	if len(p) > MaxDatagram {
		return fmt.Errorf("write datagram of %d bytes: %w", len(p), ErrDatagramTooLong)
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.wbuf = binary.BigEndian.AppendUint16(d.wbuf[:0], uint16(len(p)))
	d.wbuf = append(d.wbuf, p...)
	_, err := d.c.Write(d.wbuf)
	if cap(d.wbuf) > 64<<10 {
		d.wbuf = nil // keep only a small buffer between large datagrams
	}
	return err
}

// Close closes the stream.
func (d *DatagramConn) Close() error { return d.c.Close() }

// idleTimer calls a function once no activity has been seen for its timeout. Touching it is
// an atomic store: datagrams do not reset a timer each.
type idleTimer struct {
	timeout time.Duration
	start   time.Time    // monotonic origin of last
	last    atomic.Int64 // time.Since(start) of the last activity

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// startIdleTimer calls onIdle once timeout has passed without touch.
func startIdleTimer(timeout time.Duration, onIdle func()) *idleTimer {
	it := &idleTimer{timeout: timeout, start: time.Now()}
	it.mu.Lock()
	defer it.mu.Unlock()
	it.t = time.AfterFunc(timeout, func() {
		it.mu.Lock()
		idle := time.Since(it.start) - time.Duration(it.last.Load())
		if it.stopped {
			it.mu.Unlock()
			return
		}
		if idle < it.timeout {
			it.t.Reset(it.timeout - idle)
			it.mu.Unlock()
			return
		}
		it.stopped = true
		it.mu.Unlock()
		onIdle()
	})
	return it
}

// touch records activity now.
func (it *idleTimer) touch() { it.last.Store(int64(time.Since(it.start))) }

// stop stops the timer: onIdle is not called after stop returns, unless it was running.
func (it *idleTimer) stop() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.stopped = true
	it.t.Stop()
}
