// Package ctrlproto is the control channel between a router and the controller, imported by
// both sides: a framed message protocol over one connection (TLS in practice), with
// fire-and-forget sends, requests answered by replies matched on sequence ids, handlers
// per message type, and heartbeats that measure latency and close an unresponsive peer.
// Bodies are the JSON encoding of the message structs defined here. The package holds no
// business logic: what a message means is up to the handlers each side registers.
package ctrlproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Defaults for zero Options fields.
const (
	// DefaultRequestTimeout matches the router's ctrl.defaultRequestTimeout.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultQueueSize is the writer's queue length, in frames.
	DefaultQueueSize = 256
	// DefaultQueueBytes bounds the frame bodies queued for the writer, in bytes.
	DefaultQueueBytes = 4 << 20
	// DefaultMaxAsyncHandlers bounds the HandleAsync handlers running at once.
	DefaultMaxAsyncHandlers = 1024
)

const (
	readBufferSize  = 32 << 10
	writeBufferSize = 32 << 10
	// maxKeptBody bounds the body buffer the reader keeps between frames; a larger body is
	// read into a buffer of its own.
	maxKeptBody = 64 << 10
	// endFlush bounds the writing of what is queued when a channel ends other than by Close.
	endFlush = time.Second
	// asyncIdle is how long an async handler's goroutine waits for another message before
	// it ends.
	asyncIdle = 2 * time.Second
)

var (
	// ErrClosed is the cause of a channel closed by Close.
	ErrClosed = errors.New("channel: closed")
	// ErrPeerClosed is the cause of a channel whose peer closed the connection.
	ErrPeerClosed = errors.New("channel: closed by the peer")
	// ErrUnresponsive is the cause of a channel whose peer stopped answering heartbeats.
	ErrUnresponsive = errors.New("channel: peer unresponsive")
	// ErrNotSent wraps the error of a message that was not sent because the channel closed
	// first: a request that fails with it may be sent elsewhere.
	ErrNotSent = errors.New("not sent")
)

// Options tune a channel; zero fields take the defaults.
type Options struct {
	// RequestTimeout bounds each Request unless its context ends sooner.
	RequestTimeout time.Duration
	// Heartbeats configure liveness probing.
	Heartbeats Heartbeats
	// QueueSize is the writer's queue length in frames; senders wait while it is full.
	QueueSize int
	// QueueBytes bounds the bytes of the frame bodies queued for the writer: senders wait
	// while it is reached (a body larger than it waits for an empty queue), so that a peer
	// that reads slowly holds at most this much of the process's memory in encoded
	// messages, however many are sent to it.
	QueueBytes int
	// MaxBodySize bounds frame bodies both ways, in bytes (DefaultMaxBodySize).
	MaxBodySize int
	// MaxAsyncHandlers bounds the HandleAsync handlers running at once; the reader waits
	// for one to finish when all are busy.
	MaxAsyncHandlers int
	// Trace, when not nil, sees every frame the channel reads (after its header and body
	// are read, before it is dispatched) and every frame it writes (heartbeats and replies
	// included), on the reading and the writing goroutine. It must be quick: the channel
	// waits for it. Nil costs nothing.
	Trace func(TraceEvent)
}

func (o Options) withDefaults() Options {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	o.Heartbeats = o.Heartbeats.withDefaults()
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.MaxBodySize <= 0 || o.MaxBodySize > math.MaxInt32 {
		o.MaxBodySize = DefaultMaxBodySize
	}
	if o.MaxAsyncHandlers <= 0 {
		o.MaxAsyncHandlers = DefaultMaxAsyncHandlers
	}
	return o
}

// Handler handles an incoming message that is not a reply. For a request its result is
// the reply: the returned message, or the error as an Error message (an *Error is sent as
// is). For a one-way message the result is dropped; an error is logged. ctx ends when the
// channel closes.
type Handler func(ctx context.Context, msg Message) (Message, error)

type handlerEntry struct {
	fn    Handler
	async bool
}

// frame is an encoded message on its way to the writer. buf, when set, is the pooled buffer
// body was encoded in, which the writer returns to the channel's pool once it wrote it.
type frame struct {
	h    header
	body []byte
	buf  *[]byte
}

// maxPooledBody is the largest body buffer kept for reuse: circuit messages take a few
// hundred bytes; the rare large one (a Hello listing many circuits) is left to the GC.
const maxPooledBody = 4 << 10

// result is a reply as the reader decoded it, for the request waiting for it.
type result struct {
	msg Message
	err error
}

// asyncJob is a message for an async handler.
type asyncJob struct {
	fn  Handler
	h   header
	msg Message
}

// Channel is one control connection. It is safe for concurrent use. One goroutine reads,
// decodes and dispatches, one writes (batching queued frames into one flush), one sends
// heartbeats; async handlers run on goroutines that, once done, wait a moment for the next
// message rather than end, so that a busy channel does not start (and grow the stack of) a
// goroutine per message.
type Channel struct {
	conn    net.Conn
	log     *slog.Logger
	opts    Options
	maxBody uint32
	ctx     context.Context
	cancel  context.CancelCauseFunc
	out     chan frame
	room    *semaphore.Weighted // bytes of body the queue may still take (Options.QueueBytes)
	bodies  sync.Pool           // of *[]byte, the buffers frames are encoded in
	seq     atomic.Uint32
	async   chan struct{} // semaphore of async handlers
	jobs    chan asyncJob // to the async goroutines waiting for a message

	mu      sync.Mutex
	pending map[uint32]chan result

	hmu      sync.RWMutex
	handlers map[Type]handlerEntry

	startOnce, closeOnce, doneOnce sync.Once
	started                        atomic.Bool
	done                           chan struct{}
	readDone                       chan struct{} // closed when the reader has stopped

	epoch       time.Time
	latency     atomic.Int64 // last measured round trip, nanoseconds
	unanswered  atomic.Int64 // since epoch, when the oldest unanswered ping left; -1 if none
	lastPingOut atomic.Int64 // since epoch, when the last heartbeat ping was queued
}

// New wraps conn, which must already be connected (and its TLS handshake done). The
// channel runs once Start is called: register handlers before. It closes when ctx ends.
func New(ctx context.Context, conn net.Conn, log *slog.Logger, opts Options) *Channel {
	opts = opts.withDefaults()
	c := &Channel{
		conn:     conn,
		log:      log.With("remote", conn.RemoteAddr().String()),
		opts:     opts,
		maxBody:  uint32(opts.MaxBodySize),
		out:      make(chan frame, opts.QueueSize),
		room:     semaphore.NewWeighted(int64(opts.QueueBytes)),
		async:    make(chan struct{}, opts.MaxAsyncHandlers),
		jobs:     make(chan asyncJob),
		pending:  make(map[uint32]chan result),
		handlers: make(map[Type]handlerEntry),
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
		epoch:    time.Now(),
	}
	c.unanswered.Store(-1)
	c.lastPingOut.Store(-int64(opts.Heartbeats.SendInterval))
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	// However the channel ends, a writer stuck on a peer that reads nothing for as long as
	// makes it unresponsive gives up.
	context.AfterFunc(c.ctx, func() { c.conn.SetWriteDeadline(time.Now().Add(c.closeWait())) })
	return c
}

// Handle registers h for messages of type t, run on the reading goroutine in arrival
// order: h must be quick. Ping and Pong are answered by the channel itself.
func (c *Channel) Handle(t Type, h Handler) { c.register(t, handlerEntry{fn: h}) }

// HandleAsync registers h for messages of type t, each run on a goroutine of its own while it
// runs: for handlers that wait (on the store, on other requests).
func (c *Channel) HandleAsync(t Type, h Handler) { c.register(t, handlerEntry{fn: h, async: true}) }

func (c *Channel) register(t Type, e handlerEntry) {
	c.hmu.Lock()
	c.handlers[t] = e
	c.hmu.Unlock()
}

// Start starts reading, writing and heartbeats. Calling it again does nothing.
func (c *Channel) Start() {
	c.startOnce.Do(func() {
		c.started.Store(true)
		go c.readLoop()
		go c.writeLoop()
		go c.heartbeatLoop()
	})
}

// Close writes what is queued, half-closes the connection and waits for the peer to close
// its side (reading on, acting on nothing), then closes the connection; it returns once the
// writer has stopped. A peer that reads nothing for Heartbeats.CloseUnresponsiveTimeout, or
// does not close that long after the last write, is given up on as unresponsive. Err then
// returns ErrClosed, unless the channel had already closed for another reason. Close is
// idempotent, and releases a channel never started.
func (c *Channel) Close() error {
	c.startOnce.Do(func() {}) // a channel never started is not started by closing it
	c.shutdown(ErrClosed)
	if !c.started.Load() {
		c.finish()
	}
	<-c.done
	return nil
}

// Done is closed once the channel is closed and its connection released.
func (c *Channel) Done() <-chan struct{} { return c.done }

// Err returns why the channel closed (ErrClosed, ErrPeerClosed, ErrUnresponsive, a
// framing or I/O error, or its context's cause), or nil while it is open.
func (c *Channel) Err() error {
	if c.ctx.Err() == nil {
		return nil
	}
	return context.Cause(c.ctx)
}

// RemoteAddr is the peer's address.
func (c *Channel) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// shutdown starts closing for cause; the writer finishes the job.
func (c *Channel) shutdown(cause error) {
	c.closeOnce.Do(func() {
		c.cancel(cause)
		if !errors.Is(cause, ErrClosed) {
			c.conn.Close() // nothing more can be written: unblock the writer at once
		}
	})
}

// finish releases the connection and signals Done.
func (c *Channel) finish() {
	c.doneOnce.Do(func() {
		c.conn.Close()
		close(c.done)
	})
}

// Send queues msg, waiting while the queue is full, and returns once it is queued.
func (c *Channel) Send(ctx context.Context, msg Message) error {
	f, err := c.encode(msg, 0, 0)
	if err != nil {
		return err
	}
	return c.enqueue(ctx, f)
}

// SendWithin is Send waiting at most d while the queue is full. A message that finds room
// in the queue costs no timer.
func (c *Channel) SendWithin(d time.Duration, msg Message) error {
	f, err := c.encode(msg, 0, 0)
	if err != nil {
		return err
	}
	if c.ctx.Err() == nil && c.tryQueue(f) {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	return c.enqueue(ctx, f)
}

// Request sends msg and waits for the reply until ctx's deadline, or for at most
// Options.RequestTimeout when ctx has none. A reply of type Error is returned as an error
// wrapping the *Error.
func (c *Channel) Request(ctx context.Context, msg Message) (Message, error) {
	f, err := c.encode(msg, flagWantReply, 0)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	reply := make(chan result, 1)
	c.mu.Lock()
	c.pending[f.h.seq] = reply
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, f.h.seq)
		c.mu.Unlock()
	}()
	if err := c.enqueue(ctx, f); err != nil {
		return nil, err
	}
	answer := func(r result) (Message, error) {
		if r.err != nil {
			return nil, fmt.Errorf("channel: reply to %s: %w", f.h.typ, r.err)
		}
		if e, ok := r.msg.(*Error); ok {
			return nil, fmt.Errorf("channel: %s request refused: %w", f.h.typ, e)
		}
		return r.msg, nil
	}
	select {
	case r := <-reply:
		return answer(r)
	case <-ctx.Done():
		return nil, fmt.Errorf("channel: %s request: no reply: %w", f.h.typ, ctx.Err())
	case <-c.ctx.Done():
		// The reader delivers a reply before it closes the channel: one that came last
		// (ReplyAndClose) is here.
		select {
		case r := <-reply:
			return answer(r)
		default:
		}
		return nil, fmt.Errorf("channel: %s request: %w", f.h.typ, c.Err())
	}
}

// Call is Request with the reply's type checked: R is the expected reply, e.g.
// *ctrlproto.HelloReply.
func Call[R Message](ctx context.Context, c *Channel, msg Message) (R, error) {
	var zero R
	m, err := c.Request(ctx, msg)
	if err != nil {
		return zero, err
	}
	r, ok := m.(R)
	if !ok {
		return zero, fmt.Errorf("channel: %s request answered with %s, want %s", msg.MessageType(), m.MessageType(), zero.MessageType())
	}
	return r, nil
}

func (c *Channel) nextSeq() uint32 {
	s := c.seq.Add(1)
	if s == 0 {
		s = c.seq.Add(1)
	}
	return s
}

// encode encodes msg into a frame whose body is in a buffer from the channel's pool: a
// router sets up thousands of circuits a second, each a few messages.
func (c *Channel) encode(msg Message, flags uint16, replyTo uint32) (frame, error) {
	buf, _ := c.bodies.Get().(*[]byte)
	if buf == nil {
		b := make([]byte, 0, 512)
		buf = &b
	}
	body, err := appendBody((*buf)[:0], msg)
	if err != nil {
		c.bodies.Put(buf)
		return frame{}, fmt.Errorf("channel: encode %s: %w", msg.MessageType(), err)
	}
	if len(body) > int(c.maxBody) {
		c.bodies.Put(buf)
		return frame{}, fmt.Errorf("%w: %s body of %d bytes, maximum %d", ErrFrameTooLarge, msg.MessageType(), len(body), c.maxBody)
	}
	h := header{typ: msg.MessageType(), flags: flags, seq: c.nextSeq(), replyTo: replyTo, size: uint32(len(body))}
	return frame{h: h, body: body, buf: buf}, nil
}

// recycle returns the buffer of a frame that was written, or dropped, to the pool. The
// frame's body must not be used after.
func (c *Channel) recycle(f frame) {
	if f.buf == nil || cap(f.body) > maxPooledBody {
		return
	}
	*f.buf = f.body[:0] // the buffer as the encoder grew it, or the one encoding/json made
	c.bodies.Put(f.buf)
}

func (c *Channel) enqueue(ctx context.Context, f frame) error {
	if c.ctx.Err() != nil {
		return fmt.Errorf("channel: send %s: %w: %w", f.h.typ, ErrNotSent, c.Err())
	}
	w := c.weight(f)
	if !c.room.TryAcquire(w) {
		if err := c.acquire(ctx, w); err != nil {
			if c.ctx.Err() != nil {
				return fmt.Errorf("channel: send %s: %w: %w", f.h.typ, ErrNotSent, c.Err())
			}
			return fmt.Errorf("channel: send %s: queue full: %w", f.h.typ, err)
		}
	}
	select {
	case c.out <- f:
		return nil
	case <-ctx.Done():
		c.room.Release(w)
		return fmt.Errorf("channel: send %s: queue full: %w", f.h.typ, ctx.Err())
	case <-c.ctx.Done():
		c.room.Release(w)
		return fmt.Errorf("channel: send %s: %w: %w", f.h.typ, ErrNotSent, c.Err())
	}
}

// tryQueue queues f if the queue has room for it now, without waiting.
func (c *Channel) tryQueue(f frame) bool {
	w := c.weight(f)
	if !c.room.TryAcquire(w) {
		return false
	}
	select {
	case c.out <- f:
		return true
	default:
		c.room.Release(w)
		return false
	}
}

// weight is what frame f takes of the queue's bytes: its body, at most all of them.
func (c *Channel) weight(f frame) int64 { return min(int64(len(f.body)), int64(c.opts.QueueBytes)) }

// acquire waits for w bytes of room in the queue until ctx or the channel ends.
func (c *Channel) acquire(ctx context.Context, w int64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.ctx, func() { cancel(c.Err()) })
	defer stop()
	if err := c.room.Acquire(ctx, w); err != nil {
		return context.Cause(ctx)
	}
	return nil
}

// reply sends msg as the answer to the request h.
func (c *Channel) reply(h header, msg Message) {
	f, err := c.encode(msg, 0, h.seq)
	if err != nil {
		c.log.Error("encode reply", "request", h.typ, "err", err)
		f, _ = c.encode(&Error{Code: ErrCodeFailed, Message: err.Error()}, 0, h.seq)
	}
	if err := c.enqueue(c.ctx, f); err != nil {
		c.log.Debug("reply not sent", "request", h.typ, "err", err)
	}
}

func (c *Channel) writeLoop() {
	defer c.finish()
	bw := bufio.NewWriterSize(c.conn, writeBufferSize)
	var hbuf [headerSize]byte
	write := func(f frame) error {
		f.h.put(hbuf[:])
		bw.Write(hbuf[:])
		_, err := bw.Write(f.body)
		if c.opts.Trace != nil && err == nil {
			c.trace(TraceOut, f.h, f.body)
		}
		w := c.weight(f)
		c.recycle(f)
		c.room.Release(w)
		return err
	}
	for {
		select {
		case f := <-c.out:
			err := write(f)
			// Batch what is queued into one flush. Once the queue is empty, the writer lets
			// the goroutines that are ready run first, once: those about to send (a handler
			// finishing, the reader answering a ping) join this flush rather than cost a
			// write of their own. With nothing else ready, it goes on at once.
			for yielded := false; err == nil; {
				select {
				case f = <-c.out:
					err = write(f)
					continue
				default:
				}
				if yielded {
					break
				}
				runtime.Gosched()
				yielded = true
			}
			if err == nil {
				err = bw.Flush()
			}
			if err != nil {
				c.shutdown(fmt.Errorf("channel: write: %w", err))
				return
			}
		case <-c.ctx.Done():
			// Closing: write what is already queued, as long as the peer keeps reading.
			for more := true; more; {
				select {
				case f := <-c.out:
					c.conn.SetWriteDeadline(time.Now().Add(c.closeWait()))
					more = write(f) == nil
				default:
					more = false
				}
			}
			c.conn.SetWriteDeadline(time.Now().Add(c.closeWait()))
			if bw.Flush() == nil {
				c.linger()
			}
			return
		}
	}
}

// closeWait is how long closing waits on a peer that makes no progress: as long as the
// heartbeats give a silent peer before it counts as unresponsive, so that a peer slowed by a
// loaded machine still gets every message and a clean end. A channel that ends for another
// reason (its context, a failed peer) writes what is queued within endFlush at most.
func (c *Channel) closeWait() time.Duration {
	if !errors.Is(context.Cause(c.ctx), ErrClosed) {
		return endFlush
	}
	return c.opts.Heartbeats.CloseUnresponsiveTimeout
}

// linger ends a channel this side closed (Close, or a handler's ReplyAndClose): once
// everything queued is written, it half-closes the connection and waits, at most
// closeWait, for the peer to close its side, while the reader reads on. Closing a
// socket that holds unread data (a heartbeat that crossed the close) makes the kernel reset
// the connection, and the peer loses what it had not read yet of the last messages.
func (c *Channel) linger() {
	cw, ok := c.conn.(interface{ CloseWrite() error })
	if !ok || !errors.Is(context.Cause(c.ctx), ErrClosed) || cw.CloseWrite() != nil {
		return
	}
	t := time.NewTimer(c.closeWait())
	defer t.Stop()
	select {
	case <-c.readDone:
	case <-t.C:
	}
}

func (c *Channel) readLoop() {
	defer close(c.readDone)
	br := bufio.NewReaderSize(c.conn, readBufferSize)
	var hbuf [headerSize]byte
	// Bodies are decoded before the next frame is read, so that one buffer serves them all.
	buf := make([]byte, 0, 4<<10)
	for {
		h, body, err := readFrameInto(br, hbuf[:], buf[:cap(buf)], c.maxBody)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = ErrPeerClosed
			} else if !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrBadFrame) {
				err = fmt.Errorf("channel: read: %w", err)
			}
			c.shutdown(err)
			return
		}
		if c.opts.Trace != nil {
			c.trace(TraceIn, h, body)
		}
		if c.ctx.Err() != nil {
			continue // closing: read to the peer's end, acting on nothing
		}
		c.dispatch(h, body)
		if cap(body) > cap(buf) && cap(body) <= maxKeptBody {
			buf = body[:0]
		}
	}
}

func (c *Channel) dispatch(h header, body []byte) {
	switch h.typ {
	case TypePing:
		c.answerPing(h, body)
		return
	case TypePong:
		c.notePong(body)
	}
	if h.replyTo != 0 {
		c.mu.Lock()
		waiter := c.pending[h.replyTo]
		delete(c.pending, h.replyTo)
		c.mu.Unlock()
		if waiter != nil {
			m, err := decodeMessage(h.typ, body)
			waiter <- result{m, err}
		} else if h.typ != TypePong {
			c.log.Debug("reply to no pending request (it timed out?)", "type", h.typ, "replyTo", h.replyTo)
		}
		return
	}
	c.hmu.RLock()
	e, ok := c.handlers[h.typ]
	c.hmu.RUnlock()
	if !ok {
		c.log.Debug("no handler for message", "type", h.typ)
		if h.flags&flagWantReply != 0 {
			c.reply(h, &Error{Code: ErrCodeUnsupported, Message: "no handler for message type " + h.typ.String()})
		}
		return
	}
	msg, err := decodeMessage(h.typ, body)
	if err != nil {
		c.log.Warn("malformed message", "type", h.typ, "err", err)
		if h.flags&flagWantReply != 0 {
			c.reply(h, &Error{Code: ErrCodeBadMessage, Message: err.Error()})
		}
		return
	}
	if !e.async {
		c.handle(e.fn, h, msg)
		return
	}
	select {
	case c.async <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	job := asyncJob{fn: e.fn, h: h, msg: msg}
	select {
	case c.jobs <- job: // a goroutine that finished its last message takes it
	default:
		go c.asyncLoop(job)
	}
}

// asyncLoop runs job, then the messages dispatch hands it, until none comes for asyncIdle.
func (c *Channel) asyncLoop(job asyncJob) {
	idle := time.NewTimer(asyncIdle)
	defer idle.Stop()
	for {
		c.handle(job.fn, job.h, job.msg)
		<-c.async
		job = asyncJob{} // no reference kept while idle
		idle.Reset(asyncIdle)
		select {
		case job = <-c.jobs:
		case <-idle.C:
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// ReplyAndClose marks a handler's reply as the channel's last message: the channel sends
// it, then closes. For refusing a peer, e.g. a Hello that cannot be accepted.
func ReplyAndClose(reply Message) Message { return finalReply{reply} }

type finalReply struct{ Message }

func (c *Channel) handle(fn Handler, h header, msg Message) {
	reply, err := fn(c.ctx, msg)
	if final, ok := reply.(finalReply); ok {
		reply = final.Message
		defer c.shutdown(ErrClosed) // the reply is queued first, and Close flushes the queue
	}
	if h.flags&flagWantReply == 0 {
		if err != nil {
			c.log.Warn("message handler failed", "type", h.typ, "err", err)
		}
		return
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: ErrCodeFailed, Message: err.Error()}
		}
		reply = e
	} else if reply == nil {
		reply = &Error{Code: ErrCodeFailed, Message: "the handler of " + h.typ.String() + " gave no reply"}
	}
	c.reply(h, reply)
}
