package link

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// Link is an established link to another router: one connection, or with split one or
// more payload connections and an ack connection. Each connection has a writer goroutine
// and a reader goroutine that hands frames to the Handler (send.go, receive.go); the payload
// connections of a link that has several share one queue and stripe it (see stripe); a
// prober measures the round trip (probe.go). The first error on any connection takes the
// whole link down at once; Close, or the peer's Close, takes it down gracefully (see
// closeMode). Either way it goes down once, and the reason is reported to Events.Down.
type Link struct {
	id        string
	peerID    string
	dialerID  string // the router that dialed the link, which decides between duplicates
	transport string // tls or quic
	split     bool

	conns    []*conn // [single] or [payload 0, ..., payload n-1, ack]
	payloads []*conn // carry Payload and Close frames: the single connection when not split
	ack      *conn   // carries Ack, Probe and ProbeReply frames; the single one when not split
	stripe   *stripe // orders the payload connections' frames when there are several

	reg     *Registry
	latency atomic.Int64
	probes  probes

	closing   atomic.Bool
	err       error         // why the link went down; written before stop is closed
	mode      closeMode     // how; written before stop is closed
	deadline  time.Time     // for a graceful close; written before stop is closed
	stop      chan struct{} // closed when the link starts closing: Send refuses, writers drain
	done      chan struct{} // closed when the link is down and its goroutines have ended
	up        atomic.Bool   // Up was reported, so Down will be
	writers   sync.WaitGroup
	readers   sync.WaitGroup
	stopAfter func() bool // undoes the close on context end
}

// conn is one connection of a link with its send queue and counters.
type conn struct {
	role  Role
	index int // of a payload connection among the link's payload connections
	s     stream
	queue chan *xgress.Frame // shared by the payload connections of a link
	// wmu is held by whoever writes to the stream: the writer, for a batch, or a sender
	// writing a frame itself (SendNow). pending counts the frames of queue not yet written;
	// a sender writes itself only when it is 0, so that it never overtakes them.
	wmu     sync.Mutex
	pending *atomic.Int64 // shared like queue
	bw      *bufio.Writer
	// corkSize is the most the stream gathers for one system call, and reads ahead (see
	// tlscork.Conn).
	corkSize int
	readDone chan struct{} // closed when the reader ends
	// writeTimeout bounds the write of one batch.
	writeTimeout time.Duration

	// Of a striped payload connection (see stripe.go): the batch being written and its
	// header, and the header of the batch being read.
	striped       bool
	out           []*xgress.Frame
	hdrOut, hdrIn [stripeHeaderSize]byte

	framesOut, bytesOut, framesIn, bytesIn atomic.Uint64
}

// String names c in errors: "ack connection", "payload connection 1".
func (c *conn) String() string {
	if c.striped {
		return "payload connection " + strconv.Itoa(c.index)
	}
	return string(c.role) + " connection"
}

// newLink makes a link of streams: one carries everything; of more, the last is the ack
// connection and the others are payload connections, in the order of their index. It starts
// nothing; Registry.add does.
func newLink(reg *Registry, id, peerID, dialerID, transport string, streams ...stream) *Link {
	l := &Link{
		id: id, peerID: peerID, dialerID: dialerID, transport: transport,
		split: len(streams) > 1,
		reg:   reg,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	payloads := max(len(streams)-1, 1)
	queue := make(chan *xgress.Frame, reg.opts.QueueLength) // the payload connections'
	pending := new(atomic.Int64)
	for i, s := range streams {
		c := &conn{
			role:         RoleSingle,
			s:            s,
			queue:        queue,
			pending:      pending,
			corkSize:     corkSize,
			writeTimeout: reg.opts.WriteTimeout,
			bw:           bufio.NewWriterSize(s, s.bufferSize()),
			readDone:     make(chan struct{}),
		}
		switch {
		case !l.split:
		case i == payloads:
			c.role, c.corkSize = RoleAck, ackCorkSize
			c.queue = make(chan *xgress.Frame, reg.opts.QueueLength)
			c.pending = new(atomic.Int64)
		default:
			c.role, c.index = RolePayload, i
		}
		l.conns = append(l.conns, c)
	}
	l.payloads, l.ack = l.conns[:payloads], l.conns[len(l.conns)-1]
	if payloads > 1 {
		l.stripe = newStripe(payloads)
		for _, c := range l.payloads {
			c.striped = true
			c.out = make([]*xgress.Frame, 0, maxStripeBatch)
		}
	}
	l.writers.Add(1) // held until start or abandon, so that finish waits for either
	return l
}

// start runs the link's goroutines; ctx ending closes the link.
func (l *Link) start(ctx context.Context) {
	l.stopAfter = context.AfterFunc(ctx, l.Close)
	for _, c := range l.conns {
		l.writers.Add(1)
		l.readers.Add(1)
		if l.stripe != nil && c.role == RolePayload {
			go l.writeStripedLoop(c)
			go l.readStripedLoop(c)
		} else {
			go l.writeLoop(c)
			go l.readLoop(c)
		}
	}
	l.writers.Add(1)
	go l.probeLoop(l.reg.opts.ProbeInterval)
	l.writers.Done()
}

// abandon closes a link that is never started.
func (l *Link) abandon(err error) {
	l.shutdown(err, abort)
	l.writers.Done()
}

// ID is the link id the dialing router chose.
func (l *Link) ID() string { return l.id }

// PeerID is the id of the router at the other end.
func (l *Link) PeerID() string { return l.peerID }

// Dialed reports whether this router dialed the link.
func (l *Link) Dialed() bool { return l.dialerID == l.reg.opts.Identity.RouterID }

// Split reports whether payloads and acks have their own connections.
func (l *Link) Split() bool { return l.split }

// PayloadConns is the number of connections the link's payloads are striped over: 1 unless
// the link is split and its dialer asked for more (Options.PayloadConns).
func (l *Link) PayloadConns() int { return len(l.payloads) }

// Transport is tls or quic.
func (l *Link) Transport() string { return l.transport }

// RemoteAddr is the address of the peer's end of the (first payload) connection.
func (l *Link) RemoteAddr() net.Addr { return l.conns[0].s.RemoteAddr() }

// Latency is the last round trip a probe measured; 0 until one has.
func (l *Link) Latency() time.Duration { return time.Duration(l.latency.Load()) }

// IgnoredProbeReplies counts the probe replies the peer sent that answered no probe this
// router had sent and not yet seen answered; they do not change Latency.
func (l *Link) IgnoredProbeReplies() uint64 { return l.probes.ignored.Load() }

// Done is closed once the link is down: its goroutines have ended and Events.Down has
// returned.
func (l *Link) Done() <-chan struct{} { return l.done }

// Err says why the link went down, after Done is closed; nil before.
func (l *Link) Err() error {
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}

// ConnStats counts what one connection of a link carried, headers included.
type ConnStats struct {
	Role Role
	// Index is a payload connection's among the link's payload connections.
	Index                         int
	FramesSent, BytesSent         uint64
	FramesReceived, BytesReceived uint64
	// Retransmits is what the transport resent: TCP segments retransmitted (tls:), or
	// QUIC packets declared lost (quic:; it may fall back a little when a packet declared
	// lost arrives after all).
	Retransmits uint64
}

// Stats returns the counters of each connection: the single one, or the payload
// connections in the order of their index, then the ack connection.
func (l *Link) Stats() []ConnStats {
	out := make([]ConnStats, len(l.conns))
	for i, c := range l.conns {
		out[i] = ConnStats{
			Role: c.role, Index: c.index,
			FramesSent: c.framesOut.Load(), BytesSent: c.bytesOut.Load(),
			FramesReceived: c.framesIn.Load(), BytesReceived: c.bytesIn.Load(),
			Retransmits: c.s.retransmits(),
		}
	}
	return out
}

// Close closes the link and returns at once; Done tells when it is down. Close is graceful:
// the frames already queued are sent, and each connection ends only once the peer has read
// all of it, for at most two seconds; then the connections are closed.
func (l *Link) Close() {
	l.shutdown(fmt.Errorf("%w by router %q", ErrLinkClosed, l.reg.opts.Identity.RouterID), closeLocal)
}

// Sever drops the link's connections at the transport, as a network failure would (TCP
// connections are reset), without closing the link first: the link and its peer find out
// through their readers and writers like after any failure. It is there for fault-injection
// tests; routers close links with Close.
func (l *Link) Sever() {
	for _, c := range l.conns {
		c.s.sever()
	}
}

// closeMode is how a link closes.
type closeMode int

const (
	// abort follows an error: the connections are closed at once.
	abort closeMode = iota
	// closeLocal is Close: the writers send what is queued and end their streams; the link is
	// down when the peer has ended its streams too, which it does once it has read ours.
	closeLocal
	// closeRemote answers a peer's closeLocal, seen as the end of one of its streams: the
	// readers read what the peer still sends, and each writer ends its stream once its
	// reader has read the peer's end of that connection.
	closeRemote
)

// shutdown starts closing the link for err, once: Send refuses from now on, and either the
// writers flush or the connections are closed at once. finish completes it.
func (l *Link) shutdown(err error, mode closeMode) {
	if !l.closing.CompareAndSwap(false, true) {
		return
	}
	l.err, l.mode, l.deadline = err, mode, time.Now().Add(closeTimeout)
	close(l.stop)
	if l.stripe != nil && mode == abort {
		l.stripe.fail(err)
	}
	for _, c := range l.conns {
		if mode == abort {
			c.s.Close()
		} else {
			c.s.SetDeadline(l.deadline)
		}
	}
	go l.finish()
}

// finish waits for the link's goroutines, closes the connections, and reports the link down.
func (l *Link) finish() {
	l.writers.Wait()
	l.readers.Wait()
	for _, c := range l.conns {
		if l.mode == closeRemote {
			c.s.linger(l.deadline) // until the peer has the end of our stream
		}
		c.s.Close()
	}
	if l.stopAfter != nil {
		l.stopAfter()
	}
	l.reg.remove(l)
	if l.up.Load() {
		l.reg.down(l, l.err)
	}
	close(l.done)
}
