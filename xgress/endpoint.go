package xgress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// An Endpoint is one end of a circuit on this router: it joins a local connection (a client
// socket the router accepted, or the service connection it dialed) to the circuit's frames.
// Data read from the connection leaves as Payload frames through its Hop; Payload
// frames from the other end are written to the connection in order and acknowledged. The
// file reads in the order data flows: first outbound (connection → circuit), then inbound
// (circuit → connection), then closing.

// Hop takes a circuit's frames one step on toward the end they travel to, the end that is
// not their Origin: a router's forwarder (which picks the circuit's next hop), a link to the
// next router, or the endpoint at that end. It owns each frame from then on and must not
// block for long.
type Hop interface {
	Forward(f *Frame)
}

// closeWriter is a connection that can be closed for writing alone (half-close). Connections
// without it are closed when both directions are done.
type closeWriter interface{ CloseWrite() error }

// readWaiter is a connection that is not a socket but can wait until it is readable, and
// tell whether it is, without consuming anything (an in-process pair's end): WaitReadable
// returns once data, EOF or an error is there; Readable reports it without waiting. The
// endpoint's reader then holds no frame while the connection is idle, as with a socket.
type readWaiter interface {
	WaitReadable() error
	Readable() bool
}

// tryWriter is a connection that is not a socket but can write without waiting: TryWrite
// writes what fits of p now and returns how much. Small payloads are then written by
// Receive's caller, as with a socket (writeNow).
type tryWriter interface{ TryWrite(p []byte) int }

// Why an endpoint ended, as passed to its done function.
var (
	// ErrClosedByPeer: the other end sent Close.
	ErrClosedByPeer = errors.New("circuit closed by the other end")
	// errOutOfOrder: a payload did not start where the previous one ended.
	errOutOfOrder = errors.New("payload out of order")
	// errOverrun: the other end sent more than its window.
	errOverrun = errors.New("the other end overran its window")
)

// Endpoint is one end of a circuit. Create it with NewEndpoint and Start it.
type Endpoint struct {
	circuit uint64
	origin  Origin
	conn    net.Conn
	out     Hop // where the frames this end sends go: on a router, its forwarder
	pool    *Pool
	done    func(error) // called once, when the endpoint has finished

	win *window
	// datagram: every read is one datagram of at most mtu bytes, carried whole in one frame.
	datagram bool
	mtu      int
	// raw and readable wait until the connection is readable without holding a frame; raw is
	// nil for connections that are not sockets, which may do it through waiter instead.
	raw      syscall.RawConn
	readable func(fd uintptr) bool
	peek     [1]byte
	waiter   readWaiter
	// tryWrite writes nowData without waiting and leaves in nowN what it wrote (writeNow),
	// made once like readable, so that it costs no allocation. Connections that are not
	// sockets may write without waiting through nowWriter instead.
	tryWrite  func(fd uintptr) bool
	nowData   []byte
	nowN      int
	nowWriter tryWriter

	// writer is writeLoop as a value, made once: a `go e.writeLoop()` would allocate its
	// closure at each burst of payloads.
	writer func()

	mu        sync.Mutex // guards state and the fields below
	state     endState
	queue     []*Frame // payloads from the other end, not yet written
	spare     []*Frame // the writer's previous batch, reused as the next queue
	queued    int      // bytes in queue
	expect    uint64   // Seq the next payload must carry
	delivered uint64   // bytes written to conn
	ackedTo   uint64   // delivered, as last acknowledged
	spliced   uint64   // bytes read from conn and moved by Splice, which the window never sees
}

// endState is where an endpoint stands, guarded by its mu: flags, each set once and never
// cleared except writing and awaitOpen, and the open timer. Its methods are the transitions.
type endState struct {
	flags endFlags
	// openTimer closes a terminator that is not opened in time (StartWithin); opening or
	// closing stops it, so that it keeps nothing of a finished circuit alive.
	openTimer *time.Timer
}

type endFlags uint8

const (
	endOpened    endFlags = 1 << iota // a payload from the other end arrived
	endAwaitOpen                      // started before it did: the first payload starts reading
	endWriting                        // a writer goroutine is draining the queue
	endEOFIn                          // the other end's EOF was written, and every byte before it
	endEOFOut                         // this end's connection reached EOF and the EOF was sent
	endClosed                         // ended: nothing more is queued, written or sent
)

func (s *endState) opened() bool  { return s.flags&endOpened != 0 }
func (s *endState) closed() bool  { return s.flags&endClosed != 0 }
func (s *endState) writing() bool { return s.flags&endWriting != 0 }

// bothEOF reports whether both directions have carried their EOF.
func (s *endState) bothEOF() bool { return s.flags&(endEOFIn|endEOFOut) == endEOFIn|endEOFOut }

func (s *endState) wroteEOF() { s.flags |= endEOFIn }
func (s *endState) sentEOF()  { s.flags |= endEOFOut }

// start is a terminator's Start: it reports whether to read the connection now (it was
// opened already); otherwise the opening payload will start reading.
func (s *endState) start() (read bool) {
	if s.opened() {
		return true
	}
	s.flags |= endAwaitOpen
	return false
}

// open records a payload from the other end and reports whether it is the opening payload
// of a started terminator, which starts reading.
func (s *endState) open() (read bool) {
	read = s.flags&endAwaitOpen != 0
	s.flags = s.flags&^endAwaitOpen | endOpened
	s.stopOpenTimer()
	return read
}

// startWriter reports whether a writer must be started for newly queued payloads: none is
// running. The writer then runs until stopWriter.
func (s *endState) startWriter() bool {
	if s.writing() {
		return false
	}
	s.flags |= endWriting
	return true
}

func (s *endState) stopWriter() { s.flags &^= endWriting }

// close marks the endpoint closed; it reports false when it was closed already.
func (s *endState) close() bool {
	if s.closed() {
		return false
	}
	s.flags |= endClosed
	s.stopOpenTimer()
	return true
}

func (s *endState) stopOpenTimer() {
	if s.openTimer != nil {
		s.openTimer.Stop()
		s.openTimer = nil
	}
}

// NewEndpoint returns the end origin of circuit for conn; frames leave through out. done is
// called once when the endpoint has finished: nil after a clean close in both directions,
// the reason otherwise.
func NewEndpoint(circuit uint64, origin Origin, conn net.Conn, out Hop, pool *Pool, done func(error)) *Endpoint {
	e := &Endpoint{circuit: circuit, origin: origin, conn: conn, out: out, pool: pool, done: done, win: newWindow()}
	e.writer = e.writeLoop
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			e.raw = raw
			e.readable = func(fd uintptr) bool {
				n, _, err := syscall.Recvfrom(int(fd), e.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				return n > 0 || !errors.Is(err, syscall.EAGAIN)
			}
		}
	}
	if w, ok := conn.(readWaiter); ok && e.raw == nil {
		e.waiter = w
	}
	switch c := conn.(type) {
	case *net.TCPConn, *net.UnixConn: // a type that wraps one may do more on Write
		e.tryWrite = func(fd uintptr) bool {
			// A failed or refused write is the writer's to retry and report.
			n, _ := syscall.Write(int(fd), e.nowData)
			e.nowN = max(n, 0)
			return true // one try, no wait
		}
	case tryWriter:
		if e.raw == nil {
			e.nowWriter = c
		}
	}
	return e
}

// SetDatagram makes the endpoint carry datagrams: each read of the connection (one datagram
// of at most mtu bytes) becomes one frame and each frame one write, so that datagram
// boundaries are kept. Call it before Start. The circuit's other end must carry datagrams
// too: a stream end owes the acknowledgement of small payloads (writeNow), which a datagram
// sender, waiting for room for a whole datagram, could wait for forever.
func (e *Endpoint) SetDatagram(mtu int) {
	e.datagram, e.mtu = true, min(max(mtu, 1), MaxData)
}

// Circuit returns the endpoint's circuit id.
func (e *Endpoint) Circuit() uint64 { return e.circuit }

// Origin returns which end of the circuit the endpoint is.
func (e *Endpoint) Origin() Origin { return e.origin }

// Opened reports whether a payload from the other end arrived; a terminator reads its
// connection only from then on.
func (e *Endpoint) Opened() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state.opened()
}

// Start opens the endpoint. The initiator opens the circuit with its first payload: the data
// its connection already holds (clients mostly speak first, and their bytes wait while the
// circuit is set up), or else an empty payload; then it goes on reading its connection. The
// terminator starts reading only once the opening payload arrived, so that a service that
// speaks first is never read before the whole circuit is routed.
func (e *Endpoint) Start() {
	if e.origin == Terminator {
		e.mu.Lock()
		read := e.state.start()
		e.mu.Unlock()
		if read {
			go e.readLoop()
		}
		return
	}
	if !e.readableNow() {
		f := e.pool.Get(0)
		f.Type, f.Origin, f.Circuit = Payload, e.origin, e.circuit
		f.Seq = e.win.recordSent(0)
		e.out.Forward(f)
	}
	go e.readLoop()
}

// StartWithin starts a terminator, as Start does, and closes it with a Close to the other
// end unless the initiator's opening payload arrives within d: an opening payload that does
// not come means the controller or the ingress gave up on the circuit, and the service's
// connection is not kept until the idle check.
func (e *Endpoint) StartWithin(d time.Duration) {
	e.mu.Lock()
	if !e.state.opened() && !e.state.closed() {
		e.state.openTimer = time.AfterFunc(d, func() {
			// Decided under mu, so that an opening payload arriving now is either in time
			// or dropped by the closing endpoint, never queued and then lost.
			e.mu.Lock()
			if e.state.opened() || !e.state.close() {
				e.mu.Unlock()
				return
			}
			queued := e.takeQueue()
			e.mu.Unlock()
			e.finish(queued, fmt.Errorf("the circuit was not opened within %s of its route", d), true)
		})
	}
	e.mu.Unlock()
	e.Start()
}

// readableNow reports, without waiting, whether the connection has data or EOF to read, so
// that its first read can open the circuit; never for datagrams (a datagram may not come) or
// connections that cannot tell (neither sockets nor readWaiters).
func (e *Endpoint) readableNow() bool {
	if e.datagram {
		return false
	}
	if e.waiter != nil {
		return e.waiter.Readable()
	}
	if e.raw == nil {
		return false
	}
	readable := false
	e.raw.Read(func(fd uintptr) bool {
		readable = e.readable(fd)
		return true // one look, no wait
	})
	return readable
}

// readLoop carries data from the connection into the circuit, as much at a time as the window
// allows. While the connection is idle it holds no frame.
func (e *Endpoint) readLoop() {
	full := false // the last read filled its frame: more data is most likely waiting
	for {
		least, most := 1, MaxData
		if e.datagram {
			least, most = e.mtu, e.mtu
		}
		room := e.win.acquire(least, most)
		if room == 0 {
			return // closed
		}
		if !full {
			if err := e.waitReadable(); err != nil {
				e.fail(fmt.Errorf("read: %w", err))
				return
			}
		}
		f := e.pool.Get(room)
		n, err := e.conn.Read(f.Room()[:room])
		full = n == room
		if n > 0 {
			f.Type, f.Origin, f.Circuit = Payload, e.origin, e.circuit
			f.Extend(n)
			f.Seq = e.win.recordSent(n)
			e.out.Forward(f)
		} else {
			f.Release()
		}
		if errors.Is(err, io.EOF) {
			e.sendEOF()
			return
		}
		if err != nil {
			e.fail(fmt.Errorf("read: %w", err))
			return
		}
	}
}

// waitReadable returns once the connection has data, EOF or an error to read, without a
// buffer, so that an idle circuit holds no frame. Connections that are neither sockets nor
// readWaiters return at once.
func (e *Endpoint) waitReadable() error {
	if e.waiter != nil {
		return e.waiter.WaitReadable()
	}
	if e.raw == nil {
		return nil
	}
	return e.raw.Read(e.readable)
}

// sendEOF tells the other end that this end will send no more data.
func (e *Endpoint) sendEOF() {
	f := e.pool.Get(0)
	f.Type, f.Flags, f.Origin, f.Circuit = Payload, FlagEOF, e.origin, e.circuit
	f.Seq = e.win.recordSent(0)
	e.out.Forward(f)
	e.mu.Lock()
	e.state.sentEOF()
	e.mu.Unlock()
	e.finishIfDone()
}

// Receive takes a frame from the other end (Payload, Ack or Close) and owns it. It never
// blocks: payloads are queued for a writer goroutine that runs only while there is data.
func (e *Endpoint) Receive(f *Frame) {
	switch f.Type {
	case Ack:
		e.win.ack(f.Seq)
		f.Release()
		e.finishIfDone()
	case Payload:
		e.mu.Lock()
		if e.state.closed() {
			e.mu.Unlock()
			f.Release()
			return
		}
		e.queued += len(f.Data)
		if e.queued > MaxWindow+MaxData {
			// The sender ignored its window: its peer is faulty or hostile.
			e.mu.Unlock()
			f.Release()
			e.fail(fmt.Errorf("%w: more than %d bytes queued", errOverrun, MaxWindow+MaxData))
			return
		}
		read := e.state.open()
		if e.canWriteNow(f) {
			e.state.startWriter()
			e.mu.Unlock()
			if read {
				go e.readLoop()
			}
			e.writeNow(f)
			return
		}
		e.queue = append(e.queue, f)
		start := e.state.startWriter()
		e.mu.Unlock()
		if start {
			go e.writer()
		}
		if read {
			go e.readLoop()
		}
	case Close:
		reason := string(f.Data)
		f.Release()
		err := ErrClosedByPeer
		if reason != "" {
			err = fmt.Errorf("%w: %s", ErrClosedByPeer, reason)
		}
		e.shutdown(err, false)
	default:
		f.Release()
	}
}

// Small payloads that find no writer running are written at once by Receive's caller,
// without waiting, so that an interactive round trip does not wait for a writer goroutine to
// wake up at each end. Their acknowledgement waits until ackAfter bytes are owed, or the other
// end's EOF (owesAck), as the writer's does: the sender's window, at least MinWindow, has room for that many
// unacknowledged bytes, so the sender never waits for it. Datagrams are left to the writer:
// a datagram sender waits for the acknowledgement of every byte.
const (
	maxWriteNow = 1 << 10
	ackAfter    = MinWindow / 4
)

// canWriteNow reports whether payload f, just arrived, may be written by Receive's caller:
// it carries a little stream data and nothing else, in order, and no writer is running or
// queued. Called with mu held.
func (e *Endpoint) canWriteNow(f *Frame) bool {
	return (e.tryWrite != nil || e.nowWriter != nil) && !e.datagram && len(f.Data) > 0 && len(f.Data) <= maxWriteNow &&
		f.Flags == 0 && f.Seq == e.expect && len(e.queue) == 0 && !e.state.writing()
}

// writeNow writes what the connection takes of f without waiting, and leaves the rest to a
// writer, as it does the acknowledgement once ackAfter bytes are owed. The caller has
// marked the writer running (canWriteNow and startWriter, under mu).
func (e *Endpoint) writeNow(f *Frame) {
	var n int
	if e.nowWriter != nil {
		n = e.nowWriter.TryWrite(f.Data)
	} else {
		e.nowData, e.nowN = f.Data, 0
		e.raw.Write(e.tryWrite)
		n = e.nowN
		e.nowData = nil
	}
	e.mu.Lock()
	e.queued -= n
	e.expect += uint64(n)
	e.delivered += uint64(n)
	if n < len(f.Data) {
		f.Data, f.Seq = f.Data[n:], f.Seq+uint64(n)
		e.queue = slices.Insert(e.queue, 0, f) // ahead of anything queued meanwhile
	} else {
		f.Release()
	}
	start := len(e.queue) > 0 || e.owesAck(false)
	if !start {
		e.state.stopWriter()
	}
	e.mu.Unlock()
	if start {
		go e.writer()
	}
}

// maxKeptQueue is the most frames a stopped writer's queues keep room for (2 KiB each): a
// batch of full frames holds at most a window's worth, 64 of them; a burst of small
// datagrams may hold thousands.
const maxKeptQueue = 256

// writeLoop writes queued payloads to the connection in order until the queue is empty. It
// acknowledges them as writeNow does, once ackAfter bytes are owed, and at the other end's
// EOF; datagrams at every batch.
func (e *Endpoint) writeLoop() {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 && e.owesAck(false) && !e.state.closed() {
			delivered := e.delivered
			e.ackedTo = delivered
			e.mu.Unlock()
			e.sendAck(delivered)
			continue
		}
		if len(e.queue) == 0 || e.state.closed() {
			// The queue and the spare are both kept for the next batch: a writer that stops
			// whenever it has caught up, as it does between bursts, allocates no queue. Not
			// when a burst of many small frames grew them: an idle end keeps little.
			e.state.stopWriter()
			var dropped []*Frame
			if e.state.closed() {
				dropped = e.takeQueue()
			}
			if cap(e.queue) > maxKeptQueue {
				e.queue = nil
			}
			if cap(e.spare) > maxKeptQueue {
				e.spare = nil
			}
			e.mu.Unlock()
			for _, f := range dropped {
				f.Release()
			}
			return
		}
		batch := e.queue
		e.queue, e.spare = e.spare[:0], nil
		expect := e.expect
		e.mu.Unlock()

		var written uint64
		batchBytes := 0
		for _, f := range batch {
			batchBytes += len(f.Data)
		}
		eof := false
		var err error
		for i, f := range batch {
			switch {
			case err != nil:
			case f.Seq != expect+written:
				err = fmt.Errorf("%w: seq %d, expected %d", errOutOfOrder, f.Seq, expect+written)
			case len(f.Data) > 0:
				_, err = e.conn.Write(f.Data)
				written += uint64(len(f.Data))
			}
			if err == nil && f.Flags&FlagEOF != 0 {
				eof = true
			}
			f.Release()
			batch[i] = nil
		}
		if err != nil {
			e.fail(fmt.Errorf("write: %w", err))
			return
		}
		e.mu.Lock()
		e.spare = batch[:0]
		e.queued -= batchBytes
		e.expect += written
		e.delivered += written
		delivered := e.delivered
		ack := e.owesAck(eof)
		if ack {
			e.ackedTo = delivered
		}
		if eof {
			e.state.wroteEOF()
		}
		e.mu.Unlock()
		if ack {
			// A batch of no data (an EOF, an empty opening payload) moves no window:
			// acknowledging it would cost the link a frame for nothing.
			e.sendAck(delivered)
		}
		if eof {
			if cw, ok := e.conn.(closeWriter); ok {
				cw.CloseWrite()
			}
			e.finishIfDone()
		}
	}
}

// owesAck reports whether the bytes written and not yet acknowledged are due for an
// acknowledgement: ackAfter of them, any at the other end's EOF (its end finishes once all it
// sent is acknowledged), any for datagrams. Called with mu held.
func (e *Endpoint) owesAck(eof bool) bool {
	owed := e.delivered - e.ackedTo
	return owed > 0 && (owed >= ackAfter || eof || e.datagram)
}

func (e *Endpoint) sendAck(seq uint64) {
	f := e.pool.Get(0)
	f.Type, f.Origin, f.Circuit, f.Seq = Ack, e.origin, e.circuit, seq
	e.out.Forward(f)
}

// finishIfDone ends the endpoint cleanly once both directions are done: this end sent EOF and
// every byte it sent was acknowledged, and the other end's EOF was written.
func (e *Endpoint) finishIfDone() {
	e.mu.Lock()
	bothEOF := e.state.bothEOF()
	e.mu.Unlock()
	if !bothEOF {
		return
	}
	if _, sent, acked := e.win.state(); acked < sent {
		return
	}
	e.shutdown(nil, false)
}

// fail ends the endpoint after a local error and tells the other end.
func (e *Endpoint) fail(err error) { e.shutdown(err, true) }

// Close ends the endpoint: the connection is closed and, when reason is not empty, the other
// end is told with a Close frame.
func (e *Endpoint) Close(reason string) {
	var err error
	if reason != "" {
		err = errors.New(reason)
	}
	e.shutdown(err, reason != "")
}

// shutdown ends the endpoint for err, once; the other end is told when tellPeer is set.
func (e *Endpoint) shutdown(err error, tellPeer bool) {
	e.mu.Lock()
	if !e.state.close() {
		e.mu.Unlock()
		return
	}
	queued := e.takeQueue()
	e.mu.Unlock()
	e.finish(queued, err, tellPeer)
}

// takeQueue empties the queue and returns what it held. Called with mu held.
func (e *Endpoint) takeQueue() []*Frame {
	q := e.queue
	e.queue = nil
	return q
}

// finish completes a shutdown once the endpoint is closed: the payloads still queued are
// dropped, the sender wakes, the other end is told when tellPeer is set, the connection is
// closed and done is called.
func (e *Endpoint) finish(queued []*Frame, err error, tellPeer bool) {
	for _, f := range queued {
		f.Release()
	}
	e.win.close()
	if tellPeer {
		f := e.pool.Get(len(err.Error()))
		f.Type, f.Origin, f.Circuit = Close, e.origin, e.circuit
		f.SetData([]byte(truncate(err.Error(), SmallData)))
		e.out.Forward(f)
	}
	e.conn.Close()
	if e.done != nil {
		e.done(err)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Stats are an endpoint's counters, for tests and metrics. Sent and Acked count the bytes
// that went into the circuit as payloads; Read counts every byte read from the connection,
// those Sent and those Splice moved; Delivered counts the bytes written to the connection.
type Stats struct {
	Window, Sent, Acked, Delivered, Read uint64
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	size, sent, acked := e.win.state()
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Window: size, Sent: sent, Acked: acked, Delivered: e.delivered, Read: sent + e.spliced}
}
