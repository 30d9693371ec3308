package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/zmesh/zmesh/xgress"
)

// Striping. A split link may have several payload connections, so that more than one
// goroutine on each side encrypts, writes, reads and decrypts its payloads. They carry one
// stream of frames between them, in order:
//
//   - Sending, the payload connections share one queue. A writer takes the frame at its
//     head and every frame queued behind it (at most maxStripeBatch frames or corkSize
//     bytes) as a batch, and numbers the batch's frames, one after the other, while it holds
//     taking, so that numbers follow the order frames were queued in. It writes the batch
//     behind a header: the number of its first frame (8 bytes) and its frame count (4
//     bytes), big-endian. A sender that writes a frame itself (SendNow) makes it a batch of
//     one, on whichever payload connection no writer is writing on.
//   - Receiving, each payload reader reads whole batches and leaves them in its ring of
//     stripeDepth batches; whichever reader finds the batch with the next number in a ring
//     hands it, and every batch that follows it in number, to the handler. So the handler
//     sees the frames one at a time in the order they were queued, as over one connection,
//     and no circuit's frames overtake each other, whatever connection they took; and as
//     every frame joins one queue, circuits share the link as fairly as on one connection.
//
// A reader whose ring is full waits. The batch with the next number comes on a connection
// whose reader can still read (each connection carries its batches in number order), so the
// readers never all wait, except when the peer broke the order or its connections failed:
// then they give up, and the link goes down.

const (
	// stripeHeaderSize is the size of a batch header on a striped payload connection.
	stripeHeaderSize = 12
	// maxStripeBatch is the most frames a batch holds.
	maxStripeBatch = 64
	// stripeDepth is the number of batches a payload reader may read ahead of the handler.
	stripeDepth = 4
)

// errStripe says that the payload connections of a link cannot go on in order.
var errStripe = errors.New("striped payload connections out of order")

// stripe holds the order of the frames of a link's payload connections.
type stripe struct {
	// Sending.
	taking   sync.Mutex    // held by the writer taking and numbering the next batch
	numbered atomic.Uint64 // frames numbered so far

	// Receiving.
	mu      sync.Mutex
	room    sync.Cond // broadcast when a batch was handed over or the stripe broke
	next    uint64    // number of the next frame for the handler
	handing bool      // a reader is handing batches to the handler
	readers []stripeReader
	broken  error
}

// stripeReader is one payload reader's ring of batches read ahead of the handler.
type stripeReader struct {
	ring    [stripeDepth]stripeBatch
	head, n int    // the oldest batch and the number of batches in the ring
	last    uint64 // number of the frame after the latest batch
	waiting bool   // for room in the ring
	gone    bool   // the reader has ended
}

// stripeBatch is a batch read: the number of its first frame and its frames.
type stripeBatch struct {
	first  uint64
	frames []*xgress.Frame
}

func newStripe(conns int) *stripe {
	s := &stripe{readers: make([]stripeReader, conns)}
	s.room.L = &s.mu
	for i := range s.readers {
		for j := range s.readers[i].ring {
			s.readers[i].ring[j].frames = make([]*xgress.Frame, 0, maxStripeBatch)
		}
	}
	return s
}

// take waits until a frame is queued on c's (shared) queue, takes it and the frames queued
// behind it into c.out, numbers them and puts the batch header in c.hdrOut, with c.wmu
// locked until writeStripeBatch has written them. It takes nothing and returns false once
// stop is closed.
func (s *stripe) take(c *conn, stop <-chan struct{}) bool {
	s.taking.Lock()
	defer s.taking.Unlock()
	select {
	case f := <-c.queue:
		s.batch(c, f)
		return true
	case <-stop:
		return false
	}
}

// takeQueued is take without waiting: it returns false when nothing is queued.
func (s *stripe) takeQueued(c *conn) bool {
	s.taking.Lock()
	defer s.taking.Unlock()
	select {
	case f := <-c.queue:
		s.batch(c, f)
		return true
	default:
		return false
	}
}

// batch makes f and the frames queued behind it c's next batch, and locks c.wmu for its
// writing; taking is held.
func (s *stripe) batch(c *conn, f *xgress.Frame) {
	c.wmu.Lock()
	c.out = append(c.out[:0], f)
	size := len(f.Data)
	b := batcher{queue: c.queue}
	for len(c.out) < maxStripeBatch && size < c.corkSize {
		if f = b.next(); f == nil {
			break
		}
		c.out = append(c.out, f)
		size += len(f.Data)
	}
	c.putStripeHeader(s.number(len(c.out)), len(c.out))
}

// number numbers n frames about to be written on a payload connection, and returns the
// number of the first. The caller holds that connection's wmu until they are written, so
// that each connection carries its batches in number order; a writer holds taking too, so
// that numbers follow the order of the queue. A sender writing a frame itself (SendNow)
// does so only with nothing queued, so its frame follows every frame it queued before.
func (s *stripe) number(n int) uint64 {
	return s.numbered.Add(uint64(n)) - uint64(n)
}

// readStripeHeader reads a batch header into c.hdrIn and returns the number of the batch's
// first frame and its frame count.
func (c *conn) readStripeHeader() (first uint64, n int, err error) {
	if _, err := io.ReadFull(c.s, c.hdrIn[:]); err != nil {
		return 0, 0, err
	}
	first, n = binary.BigEndian.Uint64(c.hdrIn[:8]), int(binary.BigEndian.Uint32(c.hdrIn[8:]))
	if n < 1 || n > maxStripeBatch {
		return 0, 0, fmt.Errorf("%w: a batch of %d frames; want 1 to %d", xgress.ErrFrame, n, maxStripeBatch)
	}
	c.bytesIn.Add(stripeHeaderSize)
	return first, n, nil
}

// slot waits for room in payload reader i's ring and returns the batch to read into.
// Waiting, it hands over what can go to the handler, and gives up when no reader can bring
// the next batch.
func (s *stripe) slot(i int, l *Link) (*stripeBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.readers[i]
	for r.n == stripeDepth && s.broken == nil {
		if s.handOver(l) {
			continue
		}
		if !s.handing && s.stuck(i) {
			s.broken = fmt.Errorf("%w: every payload reader waits, none with frame %d", errStripe, s.next)
			s.room.Broadcast()
			break
		}
		r.waiting = true
		s.room.Wait()
		r.waiting = false
	}
	if s.broken != nil {
		return nil, s.broken
	}
	return &r.ring[(r.head+r.n)%stripeDepth], nil
}

// deposit puts the batch payload reader i read into its slot, numbered from first, in its
// ring, and hands over what can go to the handler.
func (s *stripe) deposit(i int, first uint64, l *Link) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.readers[i]
	b := &r.ring[(r.head+r.n)%stripeDepth]
	if first < max(s.next, r.last) && s.broken == nil {
		s.broken = fmt.Errorf("%w: frame %d arrived after frame %d", errStripe, first, max(s.next, r.last))
		s.room.Broadcast()
	}
	if s.broken != nil {
		release(b)
		return s.broken
	}
	b.first, r.last = first, first+uint64(len(b.frames))
	r.n++
	for s.handOver(l) {
	}
	return nil
}

// handOver hands the batch with the next number, if a ring holds it and no other reader is
// handing batches over, to the handler, and reports whether it did. mu is held, and
// released while the handler runs.
func (s *stripe) handOver(l *Link) bool {
	if s.handing || s.broken != nil {
		return false
	}
	for i := range s.readers {
		r := &s.readers[i]
		if r.n == 0 || r.ring[r.head].first != s.next {
			continue
		}
		b := &r.ring[r.head]
		s.handing = true
		s.mu.Unlock()
		h := l.reg.opts.Handler
		for j, f := range b.frames {
			h.HandleFrame(l, f)
			b.frames[j] = nil
		}
		s.mu.Lock()
		s.handing = false
		s.next += uint64(len(b.frames))
		b.frames = b.frames[:0]
		r.head, r.n = (r.head+1)%stripeDepth, r.n-1
		s.room.Broadcast()
		return true
	}
	return false
}

// stuck reports whether no reader but i, which waits for room, can bring the next batch:
// every other reader has ended or waits too, and no ring holds the next batch. mu is held.
func (s *stripe) stuck(i int) bool {
	for j := range s.readers {
		r := &s.readers[j] // not a copy: another reader may be filling a slot of the ring
		full := r.waiting && r.n == stripeDepth
		if r.n > 0 && r.ring[r.head].first == s.next || j != i && !r.gone && !full {
			return false
		}
	}
	return true
}

// leave records that payload reader i has ended; the last to end releases the frames left
// in the rings.
func (s *stripe) leave(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers[i].gone = true
	s.room.Broadcast()
	for i := range s.readers {
		if !s.readers[i].gone {
			return
		}
	}
	for i := range s.readers {
		r := &s.readers[i]
		for ; r.n > 0; r.head, r.n = (r.head+1)%stripeDepth, r.n-1 {
			release(&r.ring[r.head])
		}
	}
}

// fail breaks the stripe: the readers give up.
func (s *stripe) fail(err error) {
	s.mu.Lock()
	if s.broken == nil {
		s.broken = err
	}
	s.room.Broadcast()
	s.mu.Unlock()
}

// release releases the frames of a batch that will not reach the handler.
func release(b *stripeBatch) {
	for i, f := range b.frames {
		f.Release()
		b.frames[i] = nil
	}
	b.frames = b.frames[:0]
}
