package xgress

import (
	"sync"
	"time"
)

// Flow control is end to end and per circuit: a sender never has more than its window of
// bytes unacknowledged, and the receiving end acknowledges bytes only once it has written
// them to its connection. The receiving end therefore buffers at most a window per circuit,
// the links in between never hold a circuit's data for long, and one slow consumer slows only
// its own circuit.
//
// The window starts at InitialWindow. It doubles, up to MaxWindow, each time the sender has
// used it all up and the acknowledgement that frees it comes back within a short time (the
// consumer keeps up, so a larger window means more throughput). It halves, down to
// MinWindow, each time the sender has waited longer than StallTimeout for an acknowledgement
// (the consumer is slow, so a smaller window means less data parked at the far end).
const (
	InitialWindow = 256 << 10
	MinWindow     = 64 << 10
	MaxWindow     = 4 << 20
	// growWithin is how quickly the window must be freed, after the sender ran out of it, for
	// the window to grow.
	growWithin = 5 * time.Millisecond
	// StallTimeout is how long a blocked sender waits before the window shrinks.
	StallTimeout = time.Second
)

// window is the sending side of a circuit end's flow control.
type window struct {
	mu      sync.Mutex
	cond    sync.Cond
	size    uint64 // current window
	sent    uint64 // bytes sent: the next payload's Seq
	acked   uint64 // every byte below it was delivered by the far end
	closed  bool
	blocked time.Time // when the sender last ran out of window; zero when it did not
	// stall shrinks the window once the sender has waited stallAfter; made at the first
	// wait and reused, so that waiting for acks allocates nothing.
	stall *time.Timer
	// growWithin and stallAfter are the package's growWithin and StallTimeout; tests
	// shorten or lengthen them.
	growWithin, stallAfter time.Duration
}

func newWindow() *window {
	w := &window{size: InitialWindow, growWithin: growWithin, stallAfter: StallTimeout}
	w.cond.L = &w.mu
	return w
}

// acquire waits until the window allows sending at least least bytes and returns how many
// bytes may be sent now (at most most), or 0 when the window was closed. One sender calls it
// at a time (the endpoint's reader): a second waiter would share the stall timer, and one
// waiter's wake-up would stop the other's.
func (w *window) acquire(least, most int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.closed && w.sent-w.acked+uint64(least) > w.size {
		if w.blocked.IsZero() {
			w.blocked = time.Now()
		}
		w.waitStall()
	}
	if w.closed {
		return 0
	}
	return int(min(uint64(most), w.size-(w.sent-w.acked)))
}

// waitStall waits for an ack or a close; it shrinks the window when none comes for
// stallAfter. Called with mu held.
func (w *window) waitStall() {
	if w.stall == nil {
		w.stall = time.AfterFunc(w.stallAfter, w.stalled)
	} else {
		w.stall.Reset(w.stallAfter)
	}
	w.cond.Wait()
	w.stall.Stop()
}

// stalled halves the window when the sender has been waiting for stallAfter. A timer that
// fires late, after the wait it was set for, finds the sender not blocked, or blocked for
// less, and leaves the window alone.
func (w *window) stalled() {
	w.mu.Lock()
	if !w.blocked.IsZero() && time.Since(w.blocked) >= w.stallAfter && w.size > MinWindow {
		w.size = max(w.size/2, MinWindow)
		w.blocked = time.Now()
	}
	w.mu.Unlock()
}

// recordSent records n more bytes as sent and returns the Seq of the first of them.
func (w *window) recordSent(n int) uint64 {
	w.mu.Lock()
	seq := w.sent
	w.sent += uint64(n)
	w.mu.Unlock()
	return seq
}

// ack records that every byte below seq was delivered, and grows the window when the sender
// had run out of it and the ack came quickly.
func (w *window) ack(seq uint64) {
	w.mu.Lock()
	if seq > w.acked && seq <= w.sent {
		w.acked = seq
		if !w.blocked.IsZero() {
			if time.Since(w.blocked) < w.growWithin && w.size < MaxWindow {
				w.size = min(w.size*2, MaxWindow)
			}
			w.blocked = time.Time{}
		}
		w.cond.Signal()
	}
	w.mu.Unlock()
}

// close wakes a waiting sender for good.
func (w *window) close() {
	w.mu.Lock()
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

// state returns the window, the bytes sent and the bytes acknowledged.
func (w *window) state() (size, sent, acked uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size, w.sent, w.acked
}
