package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/internal/zitiproto"
)

// zitiCircuit is a circuit's end on one connection of an OpenZiti client's channel: a
// net.Conn whose Read yields the client's Data bodies and whose Write sends Data messages.
// On a circuit using OpenZiti's end-to-end encryption (framed), the circuit's bytes are
// frames (a big-endian uint32 length, then that many bytes): each Data body the client sends
// becomes one frame, and each frame the circuit carries becomes one Data body.
type zitiCircuit struct {
	zc           *zitiConn
	id           uint32 // the connection id
	framed       bool
	sessionToken string // the session it uses, for revocation

	q         chan *zitiproto.Message // Data (and a last StateClosed) from the client, at most zitiQueueLen
	qbytes    int                     // bytes of the bodies queued or being read, at most zitiQueueBytes; with zc.qmu
	detached  bool                    // ended: its bytes no longer count toward the channel's; with zc.qmu
	closed    chan struct{}           // closed by Close or closeRemote
	closeOnce sync.Once
	endErr    error // why the client's side ended (closeRemote), set before closed is closed
	// clientClosed: the client sent StateClosed. What it sent before is read first, then
	// EOF; what the circuit sends it from then on is dropped, and zitiCloseLinger after the
	// EOF the end closes.
	clientClosed atomic.Bool
	finRead      atomic.Bool // Read yielded the client's FIN: it reads nothing after it

	// Read side, used by one reader at a time.
	cur    *zitiproto.Message
	off    int
	prefix [4]byte
	poff   int // bytes of prefix still to yield are prefix[poff:]
	eof    bool

	// Write side.
	wmu     sync.Mutex
	pending bool // with wmu: a Connect not yet answered; its answer tells the client
	out     zitiproto.Message
	dataSeq uint32
	sentFIN bool
	fhdr    [4]byte // the frame length being read, framed only
	fhn     int
	frame   []byte // the frame being gathered
	need    int    // bytes of the frame still to come
}

func newZitiCircuit(zc *zitiConn, id uint32, framed bool) *zitiCircuit {
	return &zitiCircuit{zc: zc, id: id, framed: framed, q: make(chan *zitiproto.Message, zitiQueueLen),
		closed: make(chan struct{}), poff: 4}
}

// push queues a Data message from the client, waiting while the circuit's queue or the
// channel's budget is full (in messages or bytes: a body larger than a byte budget is queued
// alone); it owns m.
func (c *zitiCircuit) push(m *zitiproto.Message) {
	for !c.reserve(len(m.Body)) {
		select {
		case <-c.zc.room: // signalled whenever queued bytes of the channel are read
		case <-c.closed:
			c.zc.s.pool.Put(m)
			return
		}
	}
	select {
	case c.q <- m:
	case <-c.closed:
		c.zc.s.pool.Put(m)
	}
}

// reserve counts n body bytes toward the circuit's queue and the channel's budget when both
// have room for them.
func (c *zitiCircuit) reserve(n int) bool {
	zc := c.zc
	zc.qmu.Lock()
	defer zc.qmu.Unlock()
	if c.detached || (c.qbytes > 0 && c.qbytes+n > zitiQueueBytes) || (zc.qbytes > 0 && zc.qbytes+n > zc.budget) {
		return false
	}
	c.qbytes += n
	zc.qbytes += n
	return true
}

// Read yields the client's bytes: Data bodies, each as a frame when framed; io.EOF after the
// client's FIN.
func (c *zitiCircuit) Read(p []byte) (int, error) {
	for {
		if c.cur != nil {
			n := 0
			if c.poff < 4 {
				n = copy(p, c.prefix[c.poff:])
				c.poff += n
			}
			k := copy(p[n:], c.cur.Body[c.off:])
			c.off += k
			n += k
			if c.off == len(c.cur.Body) && c.poff == 4 {
				fin := c.finOf(c.cur)
				c.release(len(c.cur.Body))
				c.zc.s.pool.Put(c.cur)
				c.cur = nil
				c.eof = fin
				if fin {
					c.finRead.Store(true)
					if c.clientClosed.Load() { // its StateClosed, queued after the FIN, is not read
						c.linger()
					}
				}
			}
			if n > 0 {
				return n, nil
			}
		}
		if c.eof {
			return 0, io.EOF
		}
		select {
		case m := <-c.q:
			c.take(m)
		case <-c.closed:
			// What the client sent before it closed is read first.
			select {
			case m := <-c.q:
				c.take(m)
				continue
			default:
			}
			if c.endErr != nil {
				return 0, c.endErr
			}
			return 0, net.ErrClosed
		}
	}
}

// release takes n body bytes read from the circuit's queue off its count and, unless the
// circuit ended, off the channel's budget.
func (c *zitiCircuit) release(n int) {
	if n == 0 {
		return
	}
	zc := c.zc
	zc.qmu.Lock()
	c.qbytes -= n
	if !c.detached {
		zc.qbytes -= n
	}
	zc.qmu.Unlock()
	zc.signalRoom()
}

// detach takes the bytes still queued toward the ended circuit off the channel's budget:
// no one may read them now.
func (c *zitiCircuit) detach() {
	zc := c.zc
	zc.qmu.Lock()
	if !c.detached {
		zc.qbytes -= c.qbytes
		c.detached = true
	}
	zc.qmu.Unlock()
	zc.signalRoom()
}

// zitiKeepFrame bounds the frame buffer a circuit end keeps between frames that span writes.
const zitiKeepFrame = 1 << 20

// zitiCloseLinger is how long a circuit end whose client closed it stays, once the client's
// bytes are read, so that the circuit delivers them before it ends.
const zitiCloseLinger = 5 * time.Second

// closedByClient takes the client's StateClosed, m, in order after its Data. Once Read
// yielded the client's FIN it reads no further, so the linger starts here, or there.
func (c *zitiCircuit) closedByClient(m *zitiproto.Message) {
	c.clientClosed.Store(true)
	if c.finRead.Load() {
		c.zc.s.pool.Put(m)
		c.linger()
		return
	}
	c.push(m)
}

// linger ends the circuit's end zitiCloseLinger from now, so that the circuit delivers what
// the client sent before it closed.
func (c *zitiCircuit) linger() {
	time.AfterFunc(zitiCloseLinger, func() { c.closeRemote(errZitiClientClosed) })
}

// take makes m the message being read.
func (c *zitiCircuit) take(m *zitiproto.Message) {
	if m.ContentType == zitiproto.ContentStateClosed {
		c.zc.s.pool.Put(m)
		c.eof = true
		c.linger()
		return
	}
	c.cur, c.off = m, 0
	if c.framed && len(m.Body) > 0 {
		binary.BigEndian.PutUint32(c.prefix[:], uint32(len(m.Body)))
		c.poff = 0
	}
}

// finOf tells whether m carries the FIN flag.
func (c *zitiCircuit) finOf(m *zitiproto.Message) bool {
	f, _ := m.Uint32(zitiproto.HeaderFlags)
	return f&zitiproto.FlagFIN != 0
}

// Write sends the circuit's bytes to the client as Data messages.
func (c *zitiCircuit) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return 0, err
	}
	if c.clientClosed.Load() {
		return len(p), nil // the client is gone; its end lingers for its own bytes
	}
	if !c.framed {
		for off := 0; off < len(p); {
			n := min(len(p)-off, zitiMaxData)
			if err := c.sendData(p[off:off+n], 0); err != nil {
				return off, err
			}
			off += n
		}
		return len(p), nil
	}
	for off := 0; off < len(p); {
		if c.need == 0 {
			k := copy(c.fhdr[c.fhn:], p[off:])
			c.fhn += k
			off += k
			if c.fhn < 4 {
				break
			}
			c.fhn = 0
			size := int(binary.BigEndian.Uint32(c.fhdr[:]))
			if size > zitiMaxFrame {
				return off, fmt.Errorf("a frame of %d bytes on the end-to-end encrypted circuit of OpenZiti connection %d; at most %d", size, c.id, zitiMaxFrame)
			}
			if size == 0 {
				continue
			}
			if len(c.frame) == 0 && len(p)-off >= size { // the whole frame is here: no copy
				if err := c.sendData(p[off:off+size], 0); err != nil {
					return off, err
				}
				off += size
				continue
			}
			c.need = size
		}
		k := min(c.need, len(p)-off)
		c.frame = append(c.frame, p[off:off+k]...)
		c.need -= k
		off += k
		if c.need == 0 {
			err := c.sendData(c.frame, 0)
			c.frame = c.frame[:0]
			if cap(c.frame) > zitiKeepFrame {
				c.frame = nil
			}
			if err != nil {
				return off, err
			}
		}
	}
	return len(p), nil
}

// writable tells why the circuit can no longer send to the client, if so; with wmu.
func (c *zitiCircuit) writable() error {
	select {
	case <-c.closed:
		if c.endErr != nil {
			return c.endErr
		}
		return net.ErrClosed
	default:
	}
	if c.sentFIN {
		return errors.New("write after CloseWrite")
	}
	return nil
}

// sendData sends one Data message; with wmu.
func (c *zitiCircuit) sendData(body []byte, flags uint32) error {
	c.dataSeq++
	m := &c.out
	m.Reset(zitiproto.ContentData)
	m.PutUint32(zitiproto.HeaderConnID, c.id)
	m.PutUint32(zitiproto.HeaderSeq, c.dataSeq)
	if flags != 0 {
		m.PutUint32(zitiproto.HeaderFlags, flags)
	}
	m.Body = body
	err := c.zc.send(m)
	m.Body = nil
	return err
}

// CloseWrite sends the client the FIN flag: the circuit sends no more.
func (c *zitiCircuit) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return err
	}
	c.sentFIN = true
	if c.clientClosed.Load() {
		return nil
	}
	return c.sendData(nil, zitiproto.FlagFIN)
}

// Close ends the circuit's end: the client gets StateClosed unless it closed first.
func (c *zitiCircuit) Close() error {
	c.end(nil, true)
	return nil
}

// closeQuiet forgets the connection without telling the client (it refused the dial).
func (c *zitiCircuit) closeQuiet() { c.end(nil, false) }

// closeRemote ends the client's side for err (the client closed, its channel or session
// ended): reads return err once what was queued is read, and the client is not told.
func (c *zitiCircuit) closeRemote(err error) { c.end(err, false) }

// end marks the circuit closed and forgets it at once; the client's StateClosed, when it is
// told, is sent on a goroutine of its own after any Write in progress, so that ending never
// waits for a client that does not read (its writes are bounded by the write timeout).
func (c *zitiCircuit) end(err error, tell bool) {
	c.closeOnce.Do(func() {
		c.endErr = err
		c.zc.dropCircuit(c)
		close(c.closed)
		c.detach()
		if tell && !c.clientClosed.Load() {
			go func() {
				c.wmu.Lock()
				defer c.wmu.Unlock()
				if c.pending {
					return
				}
				select {
				case <-c.zc.done:
				default:
					c.zc.sendState(zitiproto.ContentStateClosed, c.id, nil, "", 0)
				}
			}()
		}
	})
}

func (c *zitiCircuit) LocalAddr() net.Addr  { return c.zc.c.LocalAddr() }
func (c *zitiCircuit) RemoteAddr() net.Addr { return c.zc.c.RemoteAddr() }

// errZitiDeadline: a circuit's end on an OpenZiti channel has no deadlines of its own.
var errZitiDeadline = fmt.Errorf("deadlines on a connection of an OpenZiti channel: %w", errors.ErrUnsupported)

func (c *zitiCircuit) SetDeadline(time.Time) error      { return errZitiDeadline }
func (c *zitiCircuit) SetReadDeadline(time.Time) error  { return errZitiDeadline }
func (c *zitiCircuit) SetWriteDeadline(time.Time) error { return errZitiDeadline }
