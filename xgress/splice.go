package xgress

import (
	"errors"
	"fmt"
	"io"
	"net"
)

// Splicing: when both ends of a circuit are on this router (the on-ramp and the terminator
// of a one-router path) and both are TCP connections, nothing needs frames, windows or acks:
// the bytes go from one socket to the other inside the kernel (splice(2), through
// net.TCPConn.ReadFrom), in each direction, as an io.Copy proxy would move them. The two
// endpoints keep their circuit's identity and life cycle: a Close from either side, a
// connection error or a clean end in both directions finishes both, and half-close works
// as it does with frames.

// spliceChunk is the most one splice call moves before the endpoint counts the bytes and
// reports activity.
const spliceChunk = 1 << 20

// Splice joins a circuit's two local ends, a (the initiator) and b (the terminator), and
// starts moving bytes between their connections; activity is called with the size of each
// chunk moved, for idle detection and metrics. It reports false, and changes nothing, when the ends cannot be spliced:
// either connection is not a *net.TCPConn or carries datagrams, or b was already opened.
// Call it instead of a.Start, after b was started.
func Splice(a, b *Endpoint, activity func(n int64)) bool {
	ac, ok := a.conn.(*net.TCPConn)
	if !ok || a.datagram || a.origin != Initiator {
		return false
	}
	bc, ok := b.conn.(*net.TCPConn)
	if !ok || b.datagram || b.origin != Terminator {
		return false
	}
	b.mu.Lock()
	if b.state.opened() || b.state.closed() {
		b.mu.Unlock()
		return false
	}
	b.state.open() // spliceLoop reads b's connection, not readLoop
	b.mu.Unlock()
	go spliceLoop(a, b, ac, bc, activity)
	go spliceLoop(b, a, bc, ac, activity)
	return true
}

// spliceLoop moves bytes from src's connection to dst's until src reaches EOF (then dst's
// connection is closed for writing) or either fails (then both ends fail).
func spliceLoop(src, dst *Endpoint, from, to *net.TCPConn, activity func(n int64)) {
	lr := &io.LimitedReader{R: from}
	for {
		lr.N = spliceChunk
		n, err := to.ReadFrom(lr)
		if n > 0 {
			src.mu.Lock()
			src.spliced += uint64(n)
			src.mu.Unlock()
			dst.mu.Lock()
			dst.delivered += uint64(n)
			dst.mu.Unlock()
			activity(n)
		}
		if err != nil {
			err = fmt.Errorf("splice: %w", err)
			src.fail(err)
			dst.fail(err)
			return
		}
		if lr.N == 0 {
			continue // the chunk was full: more may follow
		}
		// ReadFrom returned before its limit without an error: from reached EOF.
		if err := to.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("splice: close write: %w", err)
			src.fail(err)
			dst.fail(err)
			return
		}
		src.mu.Lock()
		src.state.sentEOF()
		src.mu.Unlock()
		dst.mu.Lock()
		dst.state.wroteEOF()
		dst.mu.Unlock()
		src.finishIfDone()
		dst.finishIfDone()
		return
	}
}
