package link

import (
	"errors"
	"fmt"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// The send path. A frame goes from Send into the queue of the connection that carries its
// type; that connection's writer takes it, with every frame queued behind it, into its
// buffered writer, and flushes once the queue is empty, so that frames queued together leave
// in one write. Frames go back to their pool once written. Nothing here allocates.

// Send queues f on the connection that carries its type: Payload and Close on the payload
// connection, so that a Close never overtakes the data before it; Ack, Probe and ProbeReply
// on the ack connection, so that acks never wait behind payloads (without split both are the
// same connection). Send takes ownership of f in every case.
//
// Each connection's queue holds Options.QueueLength frames. When it is full Send blocks
// until the writer makes room or the link closes. On a closing or closed link Send releases
// f and returns an error wrapping ErrLinkClosed.
func (l *Link) Send(f *xgress.Frame) error {
	c := l.ack
	if f.Type == xgress.Payload || f.Type == xgress.Close {
		c = l.payload
	}
	select {
	case <-l.stop:
	default:
		select {
		case c.queue <- f:
			return nil
		case <-l.stop:
		}
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
	select {
	case c.queue <- f:
	default:
		f.Release()
	}
}

// write is the writer of connection c: it runs until the link closes or a write fails.
func (l *Link) write(c *conn) {
	defer l.writers.Done()
	for {
		select {
		case f := <-c.queue:
			if err := c.writeBatch(f); err != nil {
				l.shutdown(fmt.Errorf("write %s connection: %w", c.role, err), abort)
				c.discard()
				return
			}
		case <-l.stop:
			c.drain(l.mode)
			return
		}
	}
}

// writeBatch writes f and every frame queued behind it, then flushes, within the
// connection's write timeout (Options.WriteTimeout).
func (c *conn) writeBatch(f *xgress.Frame) error {
	if err := c.s.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
		f.Release()
		return err
	}
	for {
		b := f.Bytes()
		_, err := c.bw.Write(b)
		f.Release()
		if err != nil {
			return err
		}
		c.framesOut.Add(1)
		c.bytesOut.Add(uint64(len(b)))
		select {
		case f = <-c.queue:
		default:
			return c.bw.Flush()
		}
	}
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
			if mode == closeRemote {
				<-c.readDone
			}
			c.s.CloseWrite()
			return
		}
	}
}

// discard releases the queued frames.
func (c *conn) discard() {
	for {
		select {
		case f := <-c.queue:
			f.Release()
		default:
			return
		}
	}
}
