package link

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// The receive path. Each connection's reader reads frames into frames of the pool through a
// buffered reader and hands Payload, Ack and Close frames to the Handler in order. Probes
// are answered here and probe replies measure the link; neither reaches the handler. On a
// split link each connection accepts only the frame types its role carries. Nothing here
// allocates.

// read is the reader of connection c: it runs until a read fails or the link closes.
func (l *Link) read(c *conn) {
	defer l.readers.Done()
	defer close(c.readDone)
	rd := xgress.NewReader(bufio.NewReaderSize(c.s, bufferSize), l.reg.opts.Pool)
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
			l.shutdown(fmt.Errorf("%w: a %s frame on the %s connection", xgress.ErrFrame, f.Type, c.role), abort)
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

// measure takes the round trip of a probe sent at sent (see probe) as the link's latency.
func (l *Link) measure(sent uint64) {
	rtt := time.Since(l.created) - time.Duration(sent)
	if rtt < 0 || rtt > probeMaxRoundTrip {
		return
	}
	l.latency.Store(int64(rtt))
	if fn := l.reg.opts.Events.Latency; fn != nil {
		fn(l, rtt)
	}
}

// readFailed takes the link down after a read error; nothing happens when it is closing
// already. A clean end of stream means the peer is closing the link: this side answers (see
// closeMode), reading what is still in flight on its other connection.
func (l *Link) readFailed(c *conn, err error) {
	if errors.Is(err, io.EOF) {
		l.shutdown(fmt.Errorf("router %q closed the link (%s connection): %w", l.peerID, c.role, err), closeRemote)
		return
	}
	l.shutdown(fmt.Errorf("read %s connection: %w", c.role, err), abort)
}
