package link

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// The receive path. Each connection's reader reads frames into frames of the pool straight
// from the stream, which buffers what it decrypted (a TLS record, QUIC stream frames) and,
// over TLS, what it read ahead from the network (see tlscork.Conn), and hands Payload, Ack and
// Close frames to the Handler in order. Probes are answered here and probe replies measure
// the link; neither reaches the handler. On a split link each connection accepts only the
// frame types its role carries. The payload readers of a link with several payload
// connections read whole batches and leave them to be handed over in order (see
// stripe.go). Nothing here allocates.

// readLoop is the reader of connection c: it runs until a read fails or the link closes.
func (l *Link) readLoop(c *conn) {
	defer l.readers.Done()
	defer close(c.readDone)
	c.s.readAhead(c.corkSize)
	rd := xgress.NewReader(c.s, l.reg.opts.Pool)
	h := l.reg.opts.Handler
	for {
		f, err := rd.Read()
		if err != nil {
			l.readFailed(c, err)
			return
		}
		c.framesIn.Add(1)
		c.bytesIn.Add(uint64(xgress.HeaderSize + len(f.Data)))
		if !c.carries(f.Type) {
			l.shutdown(fmt.Errorf("%w: a %s frame on the %s", xgress.ErrFrame, f.Type, c), abort)
			f.Release()
			return
		}
		switch f.Type {
		case xgress.Probe:
			f.Type = xgress.ProbeReply
			l.trySend(l.ack, f)
		case xgress.ProbeReply:
			l.measure(f.Seq)
			f.Release()
		default:
			h.HandleFrame(l, f)
		}
	}
}

// carries reports whether frames of type t belong on connection c.
func (c *conn) carries(t xgress.Type) bool {
	switch c.role {
	case RolePayload:
		return t == xgress.Payload || t == xgress.Close
	case RoleAck:
		return t != xgress.Payload && t != xgress.Close
	}
	return true
}

// measure takes the round trip of the probe id answers as the link's latency, if this
// router sent that probe and saw no answer to it yet; other replies are counted and
// ignored, so that the peer cannot make the link look faster or slower than it is.
func (l *Link) measure(id uint64) {
	sent, ok := l.probes.answered(id)
	if !ok {
		l.probes.ignored.Add(1)
		return
	}
	rtt := time.Since(sent)
	if rtt > probeMaxRoundTrip {
		return
	}
	l.latency.Store(int64(rtt))
	if fn := l.reg.opts.Events.Latency; fn != nil {
		fn(l, rtt)
	}
}

// readStripedLoop is the reader of payload connection c of a striped link: it reads batches
// into its ring and leaves them there for the handler (see stripe), until a read fails or
// the link closes.
func (l *Link) readStripedLoop(c *conn) {
	defer l.readers.Done()
	defer close(c.readDone)
	defer l.stripe.leave(c.index)
	c.s.readAhead(c.corkSize)
	rd := xgress.NewReader(c.s, l.reg.opts.Pool)
	for {
		b, err := l.stripe.slot(c.index, l)
		if err != nil {
			l.shutdown(fmt.Errorf("%s: %w", c, err), abort)
			return
		}
		first, err := c.readStripeBatch(rd, b)
		if err != nil {
			release(b)
			l.readFailed(c, err)
			return
		}
		if err := l.stripe.deposit(c.index, first, l); err != nil {
			l.shutdown(fmt.Errorf("%s: %w", c, err), abort)
			return
		}
	}
}

// readStripeBatch reads a batch header and the batch's frames into b, and returns the
// number of its first frame.
func (c *conn) readStripeBatch(rd *xgress.Reader, b *stripeBatch) (uint64, error) {
	first, n, err := c.readStripeHeader()
	if err != nil {
		return 0, err
	}
	for range n {
		f, err := rd.Read()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // inside a batch
		}
		if err != nil {
			return 0, err
		}
		c.framesIn.Add(1)
		c.bytesIn.Add(uint64(xgress.HeaderSize + len(f.Data)))
		b.frames = append(b.frames, f)
		if !c.carries(f.Type) {
			return 0, fmt.Errorf("%w: a %s frame on the %s", xgress.ErrFrame, f.Type, c)
		}
	}
	return first, nil
}

// readFailed takes the link down after a read error; nothing happens when it is closing
// already. A clean end of stream means the peer is closing the link: this side answers (see
// closeMode), reading what is still in flight on its other connections.
func (l *Link) readFailed(c *conn, err error) {
	if errors.Is(err, io.EOF) {
		l.shutdown(fmt.Errorf("router %q closed the link (%s): %w", l.peerID, c, err), closeRemote)
		return
	}
	l.shutdown(fmt.Errorf("read %s: %w", c, err), abort)
}
