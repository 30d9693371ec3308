package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// The send path. A frame goes from Send into the queue of the connection that carries its
// type; that connection's writer takes it, with every frame queued behind it, into its
// buffered writer, and flushes once the queue is empty, so that frames queued together leave
// in one write; under the buffered writer a TLS stream is corked for the batch, so that the
// records of the batch leave in as few system calls as corkSize allows (see tlscork.Conn). The
// payload connections of a striped link share one queue: a writer takes a numbered batch
// from it and writes it behind a batch header (see stripe.go). Frames go back to their pool
// once written. Nothing here allocates.

// Send queues f on the connection that carries its type: Payload and Close on the payload
// connections, so that a Close never overtakes the data before it; Ack, Probe and ProbeReply
// on the ack connection, so that acks never wait behind payloads (without split both are the
// same connection). Send takes ownership of f in every case.
//
// Each connection's queue holds Options.QueueLength frames; the payload connections of a
// link share one. When it is full Send blocks until a writer makes room or the link closes.
// On a closing or closed link Send releases f and returns an error wrapping ErrLinkClosed.
func (l *Link) Send(f *xgress.Frame) error {
	return l.queue(l.connFor(f.Type), f)
}

// SendNow is Send for a sender that may wait on the network: a small Payload or Ack, when
// nothing is queued or being written on its connections, is written and flushed by the
// caller, which spares the hand-off to the writer that an interactive round trip would pay
// at every hop. The caller may then block for up to Options.WriteTimeout, so a link's own
// reader must never use it: two routers whose readers each wait for the other's would
// stall. Everything else is queued as Send does.
func (l *Link) SendNow(f *xgress.Frame) error {
	home := l.connFor(f.Type)
	if f.Type == xgress.Close || len(f.Data) > maxNowData || home.pending.Load() != 0 {
		return l.queue(home, f)
	}
	c := l.idleConn(home)
	if c == nil {
		return l.queue(home, f)
	}
	// Under wmu: no writer is in the middle of a batch on c, and the stream is not ended.
	if c.pending.Load() != 0 || l.closing.Load() {
		c.wmu.Unlock()
		return l.queue(c, f)
	}
	if c.striped {
		c.putStripeHeader(l.stripe.number(1), 1)
	}
	err := c.writeNow(f)
	c.wmu.Unlock()
	if err != nil {
		err = fmt.Errorf("write %s: %w", c, err)
		l.shutdown(err, abort)
		return fmt.Errorf("send on link %s to router %q: %w: %w", l.id, l.peerID, ErrLinkClosed, err)
	}
	return nil
}

// maxNowData is the most data a frame SendNow writes itself carries: interactive traffic
// is small, while bulk data is written fastest by the writers, which batch it and write in
// parallel with the endpoint's reading.
const maxNowData = 1 << 10

// idleConn returns c, or for a striped payload connection any of the link's payload
// connections, with its wmu locked, or nil when all are being written.
func (l *Link) idleConn(c *conn) *conn {
	if !c.striped {
		if c.wmu.TryLock() {
			return c
		}
		return nil
	}
	for _, c := range l.payloads {
		if c.wmu.TryLock() {
			return c
		}
	}
	return nil
}

// connFor returns the connection that carries frames of type t.
func (l *Link) connFor(t xgress.Type) *conn {
	if t == xgress.Payload || t == xgress.Close {
		return l.payloads[0]
	}
	return l.ack
}

// queue queues f on c, as Send describes.
func (l *Link) queue(c *conn, f *xgress.Frame) error {
	select {
	case <-l.stop:
	default:
		c.pending.Add(1)
		select {
		case c.queue <- f:
			return nil
		case <-l.stop:
		}
		c.pending.Add(-1)
	}
	t := f.Type
	f.Release()
	if errors.Is(l.err, ErrLinkClosed) {
		return fmt.Errorf("send %s on link %s to router %q: %w", t, l.id, l.peerID, l.err)
	}
	return fmt.Errorf("send %s on link %s to router %q: %w: %w", t, l.id, l.peerID, ErrLinkClosed, l.err)
}

// trySend queues f if there is room and drops it otherwise. Probes and probe replies use it:
// a reader that waited for its writer could deadlock two routers whose writers each wait for
// the other's reader.
func (l *Link) trySend(c *conn, f *xgress.Frame) {
	c.pending.Add(1)
	select {
	case c.queue <- f:
	default:
		c.pending.Add(-1)
		f.Release()
	}
}

// writeLoop is the writer of connection c: it runs until the link closes or a write fails.
func (l *Link) writeLoop(c *conn) {
	defer l.writers.Done()
	for {
		select {
		case f := <-c.queue:
			if err := c.writeBatch(f); err != nil {
				l.shutdown(fmt.Errorf("write %s: %w", c, err), abort)
				c.discard()
				return
			}
		case <-l.stop:
			c.drain(l.mode)
			return
		}
	}
}

// writeBatch writes f, taken from the queue, and every frame queued behind it, then flushes,
// within the connection's write timeout (Options.WriteTimeout).
func (c *conn) writeBatch(f *xgress.Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.s.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
		c.pending.Add(-1)
		f.Release()
		return err
	}
	c.s.cork(c.corkSize)
	b := batcher{queue: c.queue}
	for ; f != nil; f = b.next() {
		err := c.writeFrame(f)
		c.pending.Add(-1)
		if err != nil {
			return err
		}
	}
	return c.flush()
}

// writeNow writes f alone and flushes, within the write timeout, behind the batch header in
// c.hdrOut on a striped connection. The caller holds wmu.
func (c *conn) writeNow(f *xgress.Frame) error {
	if err := c.s.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
		f.Release()
		return err
	}
	c.s.cork(c.corkSize)
	if c.striped {
		if _, err := c.bw.Write(c.hdrOut[:]); err != nil {
			f.Release()
			return err
		}
		c.bytesOut.Add(stripeHeaderSize)
	}
	if err := c.writeFrame(f); err != nil {
		return err
	}
	return c.flush()
}

// batcher gathers a batch for a writer: the frames queued behind the one it took.
type batcher struct {
	queue   <-chan *xgress.Frame
	yielded bool
}

// next returns the next frame of the batch, or nil once the batch is complete. When the
// queue is empty, it lets the goroutines that are ready run first, once per batch, so that
// the frames they are about to send (an endpoint's ack or EOF) join this batch rather than
// cost a write of their own; with nothing else ready it goes on at once.
func (b *batcher) next() *xgress.Frame {
	for {
		select {
		case f := <-b.queue:
			return f
		default:
		}
		if b.yielded {
			return nil
		}
		runtime.Gosched()
		b.yielded = true
	}
}

// writeFrame puts f into the buffered writer and releases it.
func (c *conn) writeFrame(f *xgress.Frame) error {
	b := f.Bytes()
	_, err := c.bw.Write(b)
	f.Release()
	if err != nil {
		return err
	}
	c.framesOut.Add(1)
	c.bytesOut.Add(uint64(len(b)))
	return nil
}

// flush sends what the buffered writer and the stream hold of a batch.
func (c *conn) flush() error {
	err := c.bw.Flush()
	if uerr := c.s.uncork(); err == nil {
		err = uerr
	}
	return err
}

// drain sends what is still queued when the link closes and ends the sending direction; see
// closeMode. On a link closed for an error the connection is closed already and this only
// releases frames.
func (c *conn) drain(mode closeMode) {
	for {
		select {
		case f := <-c.queue:
			if err := c.writeBatch(f); err != nil {
				c.discard()
				return
			}
		default:
			c.end(mode)
			return
		}
	}
}

// end ends the sending direction of c once nothing is left to send: at once, or, answering
// the peer's close (closeRemote), once the reader has read the end of the peer's direction.
func (c *conn) end(mode closeMode) {
	if mode == closeRemote {
		<-c.readDone
	}
	c.wmu.Lock() // after a SendNow that began before the link closed
	c.s.CloseWrite()
	c.wmu.Unlock()
}

// discard releases the queued frames.
func (c *conn) discard() {
	for {
		select {
		case f := <-c.queue:
			c.pending.Add(-1)
			f.Release()
		default:
			return
		}
	}
}

// writeStripedLoop is the writer of payload connection c of a striped link: it takes numbered
// batches from the queue the payload connections share and writes them, until the link
// closes or a write fails. Closing, the writers share out what is still queued the same way.
func (l *Link) writeStripedLoop(c *conn) {
	defer l.writers.Done()
	for l.stripe.take(c, l.stop) {
		if err := c.writeStripeBatch(); err != nil {
			l.shutdown(fmt.Errorf("write %s: %w", c, err), abort)
			c.discard()
			return
		}
	}
	for l.stripe.takeQueued(c) {
		if err := c.writeStripeBatch(); err != nil {
			c.discard()
			return
		}
	}
	c.end(l.mode)
}

// writeStripeBatch writes the batch header and the frames of c.out, then flushes, within
// the connection's write timeout, and unlocks wmu, which take locked.
func (c *conn) writeStripeBatch() error {
	defer c.wmu.Unlock()
	err := c.s.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if err == nil {
		c.s.cork(c.corkSize)
		_, err = c.bw.Write(c.hdrOut[:])
		c.bytesOut.Add(stripeHeaderSize)
	}
	for i, f := range c.out {
		if err != nil {
			f.Release()
		} else {
			err = c.writeFrame(f)
		}
		c.pending.Add(-1)
		c.out[i] = nil
	}
	c.out = c.out[:0]
	if err != nil {
		return err
	}
	return c.flush()
}

// putStripeHeader writes the header of a batch of n frames, the first numbered first, into
// c.hdrOut.
func (c *conn) putStripeHeader(first uint64, n int) {
	binary.BigEndian.PutUint64(c.hdrOut[:8], first)
	binary.BigEndian.PutUint32(c.hdrOut[8:], uint32(n))
}
