package link

import (
	"log/slog"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// Handler takes the frames links receive. HandleFrame is called from the link's readers,
// one frame at a time for each kind: Payload and Close frames in the order the peer sent
// them, whichever of the payload connections carried them; Ack frames likewise, from the
// ack reader, at the same time. The handler owns f: it releases it or passes it on (to
// another link's Send, for instance). A handler that blocks stalls the connections of that
// kind. Probe and ProbeReply frames never reach the handler.
type Handler interface {
	HandleFrame(l *Link, f *xgress.Frame)
}

// Events tell the router runtime about its links; every field is optional. They are called
// from the links' goroutines and should return quickly.
type Events struct {
	// Up is called once a link is established and registered, before it delivers frames.
	Up func(l *Link)
	// Down is called once a link that was Up is down, with the reason; the link delivers no
	// frames afterwards. When a link replaces a duplicate, Down of the old one comes first.
	Down func(l *Link, err error)
	// Latency is called with every round trip a latency probe measures.
	Latency func(l *Link, rtt time.Duration)
}

// Options are what a router's link listeners and dialers share. Zero values take defaults.
type Options struct {
	Identity Identity
	Handler  Handler
	Events   Events
	// ProbeInterval is how often each link measures its latency
	// (forwarder.latencyProbeInterval); DefaultProbeInterval when zero.
	ProbeInterval time.Duration
	// DialQueueLength and DialWorkerCount bound the link dials waiting and running
	// (forwarder.linkDialQueueLength, linkDialWorkerCount); DefaultDialQueue and
	// DefaultDialWorkers when zero.
	DialQueueLength int
	DialWorkerCount int
	// Pool gives the frames links read into; the runtime passes the pool it forwards with.
	Pool *xgress.Pool
	// Log receives the links' logs; it should already name the router (the runtime's logger
	// does), since the link package adds only the peer and link attributes.
	Log *slog.Logger

	// QueueLength is the number of frames each connection of a link queues for its writer.
	QueueLength int
	// HandshakeTimeout bounds dialing, TLS and the link hello of each connection.
	HandshakeTimeout time.Duration
	// PairTimeout is how long a listener keeps one connection of a split link waiting for
	// the other.
	PairTimeout time.Duration
	// WriteTimeout bounds how long one batch of frames may take to write: a peer that stops
	// reading for that long is taken for dead and the link goes down, rather than stalling
	// every circuit and every link that forwards into it. DefaultWriteTimeout when zero.
	WriteTimeout time.Duration
	// PayloadConns is the number of payload connections a split link this router dials
	// stripes its payloads over, 1 to MaxPayloadConns; DefaultPayloadConns when zero. The
	// listening router takes the number the dialer announces. Links that are not split have
	// one connection.
	PayloadConns int
}

// Defaults of the options left at zero.
const (
	DefaultQueueLength      = 128
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultPairTimeout      = 10 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
	// DefaultProbeInterval is used when forwarder.latencyProbeInterval is 0; the
	// configuration's own default is the same 10 s.
	DefaultProbeInterval = 10 * time.Second
	DefaultDialQueue     = 1000
	DefaultDialWorkers   = 32
	// DefaultPayloadConns payload connections let two writers and two readers encrypt and
	// decrypt one link's payloads at once.
	DefaultPayloadConns = 2
	// MaxPayloadConns bounds the payload connections of a link, dialed or accepted.
	MaxPayloadConns = 8
)

const (
	// corkSize is the most a TLS connection gathers for one system call, and reads at a
	// time (see tlscork.Conn): on payload and single connections, where batches are large, and
	// on ack connections.
	corkSize          = 256 << 10
	ackCorkSize       = 16 << 10
	closeTimeout      = 2 * time.Second // how long a closing link may flush and wait for its peer
	probeMaxRoundTrip = time.Minute     // longer round trips are taken as bogus replies
	acceptRetryPause  = 50 * time.Millisecond
)

func (o *Options) fill() {
	if o.Pool == nil {
		o.Pool = xgress.NewPool()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.QueueLength <= 0 {
		o.QueueLength = DefaultQueueLength
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.PairTimeout <= 0 {
		o.PairTimeout = DefaultPairTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.PayloadConns <= 0 {
		o.PayloadConns = DefaultPayloadConns
	}
	o.PayloadConns = min(o.PayloadConns, MaxPayloadConns)
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.DialQueueLength <= 0 {
		o.DialQueueLength = DefaultDialQueue
	}
	if o.DialWorkerCount <= 0 {
		o.DialWorkerCount = DefaultDialWorkers
	}
}
