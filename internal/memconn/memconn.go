// Package memconn joins two parts of one process with a pair of connected in-process
// net.Conn ends: a bounded buffer in each direction, half-close (CloseWrite), Close and
// deadlines, without sockets, system calls or a goroutine per connection. The router's tunnel
// reaches each of its circuits through a pair: one end is the circuit's xgress endpoint
// connection, the other the tunnel's (possibly under end-to-end encryption). Besides
// net.Conn, an end can wait until it is readable without consuming anything (WaitReadable,
// Readable) and write what fits without waiting (TryWrite), so that an endpoint treats it
// as it treats a socket.
package memconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Buffering: each direction holds at most MaxBuffered bytes, in chunks taken from the pair's
// Pool when written and given back as soon as they are read, so that an idle pair holds no
// buffer at all and a busy one allocates nothing (the chunks go round through the pool). A
// writer that finds the buffer full waits, as it would on a full socket. 256 KiB is about
// what a Unix socket pair buffered by default (net.core.wmem_default is 208 KiB): the
// tunnel and the circuit's endpoint see the back-pressure they saw through the kernel, and
// a direction holds several of the endpoint's largest frames (64 KiB) so that neither side
// wakes the other at every write.
const (
	chunkSize   = 16 << 10
	maxChunks   = 16
	MaxBuffered = chunkSize * maxChunks
)

type chunk [chunkSize]byte

// A Pool holds the buffer chunks of the pairs it made, for reuse by any of them. The zero
// Pool is ready to use; one Pool serves many pairs at once (a router keeps one for all its
// tunnel's circuits).
type Pool struct {
	chunks sync.Pool // *chunk
}

func (p *Pool) get() *chunk {
	if c, _ := p.chunks.Get().(*chunk); c != nil {
		return c
	}
	return new(chunk)
}

func (p *Pool) put(c *chunk) { p.chunks.Put(c) }

// Pipe returns the two ends of a new connected pair: what one end writes, the other reads.
func (p *Pool) Pipe() (*Conn, *Conn) {
	pr := &pair{}
	for _, d := range []*direction{&pr.ab, &pr.ba} {
		d.pool = p
		d.readable.L = &d.mu
		d.writable.L = &d.mu
	}
	pr.a = Conn{in: &pr.ba, out: &pr.ab}
	pr.b = Conn{in: &pr.ab, out: &pr.ba}
	return &pr.a, &pr.b
}

// pair is both ends and both directions of a pair, made in one allocation.
type pair struct {
	a, b   Conn
	ab, ba direction
}

// direction is the buffer from one end's writer to the other end's reader, and the state of
// both sides of it. Everything but wmu is guarded by mu.
type direction struct {
	pool *Pool

	// wmu is held for the whole of a Write, so that concurrent writes do not interleave
	// their bytes (a socket's writes do not either).
	wmu sync.Mutex

	mu       sync.Mutex
	readable sync.Cond // broadcast when data arrives, or the reader should stop waiting
	writable sync.Cond // broadcast when room frees, or the writer should stop waiting
	// readers and writers count the goroutines waiting on readable and writable: a
	// broadcast to none is skipped.
	readers, writers int

	// ring holds the buffered bytes: count chunks from head, the first read from roff on,
	// the last written up to woff; n bytes in all. One slot more than maxChunks: the first
	// chunk may be partly read already.
	ring        [maxChunks + 1]*chunk
	head, count int
	roff, woff  int
	n           int

	wshut bool // the writer will write no more (CloseWrite or Close): EOF after the data
	wgone bool // the writer's end is closed
	reset bool // and it dropped data it had not read: ECONNRESET instead of EOF
	rgone bool // the reader's end is closed: the data is dropped, writes fail

	rdl deadline // the reader's end's read deadline
	wdl deadline // the writer's end's write deadline
}

// deadline is one deadline of one end, guarded by its direction's mu. A timer marks it
// expired and wakes the waiters; a timer that fires for a deadline set again since does
// nothing (it checks at).
type deadline struct {
	at      time.Time
	timer   *time.Timer
	expired bool
}

// waitReadable waits on readable; called with mu held.
func (d *direction) waitReadable() {
	d.readers++
	d.readable.Wait()
	d.readers--
}

// waitWritable waits on writable; called with mu held.
func (d *direction) waitWritable() {
	d.writers++
	d.writable.Wait()
	d.writers--
}

// wakeReaders and wakeWriters wake the goroutines waiting on readable or writable, if any;
// called with mu held.
func (d *direction) wakeReaders() {
	if d.readers > 0 {
		d.readable.Broadcast()
	}
}

func (d *direction) wakeWriters() {
	if d.writers > 0 {
		d.writable.Broadcast()
	}
}

// put copies into the buffer what fits of p and returns how many bytes it took.
func (d *direction) put(p []byte) int {
	n := 0
	for n < len(p) && d.n < MaxBuffered {
		if d.count == 0 || d.woff == chunkSize {
			d.ring[(d.head+d.count)%len(d.ring)] = d.pool.get()
			d.count++
			d.woff = 0
		}
		c := d.ring[(d.head+d.count-1)%len(d.ring)]
		k := copy(c[d.woff:min(chunkSize, d.woff+MaxBuffered-d.n)], p[n:])
		n += k
		d.woff += k
		d.n += k
	}
	return n
}

// take moves buffered bytes into p, and gives the chunks it empties back to the pool.
func (d *direction) take(p []byte) int {
	n := 0
	for n < len(p) && d.n > 0 {
		c := d.ring[d.head]
		end := chunkSize
		if d.count == 1 {
			end = d.woff
		}
		k := copy(p[n:], c[d.roff:end])
		n += k
		d.roff += k
		d.n -= k
		if d.roff == end {
			d.dropHead()
		}
	}
	return n
}

func (d *direction) dropHead() {
	d.pool.put(d.ring[d.head])
	d.ring[d.head] = nil
	d.head = (d.head + 1) % len(d.ring)
	d.count--
	d.roff = 0
	if d.count == 0 {
		d.woff = 0
	}
}

// drop gives every buffered chunk back to the pool: nobody will read them.
func (d *direction) drop() {
	for d.count > 0 {
		d.dropHead()
	}
	d.n = 0
}

// readErr is what stops a read from waiting for data, nil while it may wait; its
// precedence is a socket's: a closed end, then a deadline, then data, then EOF.
func (d *direction) readErr() error {
	switch {
	case d.rgone:
		return net.ErrClosed
	case d.rdl.expired:
		return os.ErrDeadlineExceeded
	case d.n > 0:
		return nil
	case d.reset:
		return syscall.ECONNRESET
	case d.wshut:
		return io.EOF
	}
	return nil
}

// writeErr is what fails a write now, nil while it may go on.
func (d *direction) writeErr() error {
	switch {
	case d.wgone:
		return net.ErrClosed
	case d.wshut || d.rgone:
		return io.ErrClosedPipe
	case d.wdl.expired:
		return os.ErrDeadlineExceeded
	}
	return nil
}

// setDeadline sets dl, one of d's deadlines, whose waiters wait on cond.
// setDeadline sets dl to t, unless this end of the direction is closed (*gone, read under
// the same lock as Close sets it, so that no timer is armed after Close stopped them).
func (d *direction) setDeadline(dl *deadline, cond *sync.Cond, gone *bool, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if *gone {
		return net.ErrClosed
	}
	dl.at, dl.expired = t, false
	if dl.timer != nil {
		dl.timer.Stop()
	}
	if t.IsZero() {
		return nil
	}
	wait := time.Until(t)
	if wait <= 0 {
		dl.expired = true
		cond.Broadcast()
		return nil
	}
	if dl.timer == nil {
		dl.timer = time.AfterFunc(wait, func() { d.expire(dl, cond) })
	} else {
		dl.timer.Reset(wait)
	}
	return nil
}

func (d *direction) expire(dl *deadline, cond *sync.Cond) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !dl.at.IsZero() && !time.Now().Before(dl.at) {
		dl.expired = true
		cond.Broadcast()
	}
}

func (dl *deadline) stop() {
	if dl.timer != nil {
		dl.timer.Stop()
	}
}

// Conn is one end of a pair. Its methods may be called concurrently; reads and writes of the
// same end and direction are served in turn.
type Conn struct {
	in  *direction // the peer writes, this end reads
	out *direction // this end writes, the peer reads
}

// Read reads what is buffered, waiting for data when there is none; it returns io.EOF once
// the peer has closed its sending direction and everything before was read (ECONNRESET if
// the peer closed its end without reading what this end sent), net.ErrClosed after Close,
// os.ErrDeadlineExceeded after the read deadline.
func (c *Conn) Read(p []byte) (int, error) {
	d := c.in
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if err := d.readErr(); err != nil {
			return 0, err
		}
		if d.n > 0 {
			n := d.take(p)
			d.wakeWriters()
			return n, nil
		}
		if len(p) == 0 {
			return 0, nil
		}
		d.waitReadable()
	}
}

// WaitReadable returns once a Read would not wait: data, EOF or a reset is there (nil), or
// another error (that of the Read). It consumes nothing.
func (c *Conn) WaitReadable() error {
	d := c.in
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		err := d.readErr()
		switch {
		case err == io.EOF || err == syscall.ECONNRESET:
			return nil
		case err != nil:
			return err
		case d.n > 0:
			return nil
		}
		d.waitReadable()
	}
}

// Readable reports whether a Read would return at once (data, EOF or an error).
func (c *Conn) Readable() bool {
	d := c.in
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n > 0 || d.readErr() != nil
}

// Write writes all of p, waiting for room while the buffer is full. It fails with
// io.ErrClosedPipe after CloseWrite or once the peer closed its end, net.ErrClosed after
// Close, os.ErrDeadlineExceeded after the write deadline; n is then what was written.
func (c *Conn) Write(p []byte) (int, error) {
	d := c.out
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	written := 0
	for {
		if err := d.writeErr(); err != nil {
			return written, err
		}
		if written == len(p) {
			return written, nil
		}
		if k := d.put(p[written:]); k > 0 {
			written += k
			d.wakeReaders()
			continue
		}
		d.waitWritable()
	}
}

// TryWrite writes what fits of p now, without waiting, and returns how much; 0 when the
// buffer is full, the end cannot write (a Write would fail) or another Write is under way.
func (c *Conn) TryWrite(p []byte) int {
	d := c.out
	if !d.wmu.TryLock() {
		return 0
	}
	defer d.wmu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.writeErr() != nil {
		return 0
	}
	n := d.put(p)
	if n > 0 {
		d.wakeReaders()
	}
	return n
}

// CloseWrite ends the sending direction: the peer reads what is buffered, then EOF. The end
// still reads.
func (c *Conn) CloseWrite() error {
	d := c.out
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.wgone {
		return net.ErrClosed
	}
	d.wshut = true
	d.wakeReaders()
	d.wakeWriters()
	return nil
}

// Close closes the end: its reads and writes fail with net.ErrClosed, those waiting return;
// the peer reads what this end wrote, then EOF, and its writes fail. What this end had not
// read is dropped, and then the peer reads ECONNRESET instead of EOF, as from a socket
// closed with data in its receive queue: the peer learns that the data it sent was lost.
func (c *Conn) Close() error {
	in := c.in
	in.mu.Lock()
	if in.rgone {
		in.mu.Unlock()
		return net.ErrClosed
	}
	in.rgone = true
	lost := in.n > 0
	in.drop()
	in.rdl.stop()
	in.wakeReaders()
	in.wakeWriters()
	in.mu.Unlock()

	out := c.out
	out.mu.Lock()
	out.wshut, out.wgone = true, true
	out.reset = lost
	out.wdl.stop()
	out.wakeReaders()
	out.wakeWriters()
	out.mu.Unlock()
	return nil
}

// Addr is the address of both ends of every pair: they have none.
type Addr struct{}

// Network returns "memconn".
func (Addr) Network() string { return "memconn" }

// String returns "memconn".
func (Addr) String() string { return "memconn" }

// LocalAddr returns Addr{}.
func (c *Conn) LocalAddr() net.Addr { return Addr{} }

// RemoteAddr returns Addr{}.
func (c *Conn) RemoteAddr() net.Addr { return Addr{} }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the time after which reads, and WaitReadable, fail with
// os.ErrDeadlineExceeded; the zero time means none. It applies to a read already waiting.
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.in.setDeadline(&c.in.rdl, &c.in.readable, &c.in.rgone, t)
}

// SetWriteDeadline sets the time after which writes fail with os.ErrDeadlineExceeded; the
// zero time means none. It applies to a write already waiting.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.out.setDeadline(&c.out.wdl, &c.out.writable, &c.out.wgone, t)
}
