package ctrlproto

import "time"

// Directions of a traced frame.
const (
	TraceIn  = "in"  // read from the peer
	TraceOut = "out" // written to the peer
)

// TraceEvent is one frame as Options.Trace sees it: its header, decoded, and its body, the
// JSON encoding of the message (empty for a message sent as its type's zero value).
type TraceEvent struct {
	Time      time.Time
	Direction string // TraceIn or TraceOut
	Type      Type
	Seq       uint32
	ReplyTo   uint32 // the request's Seq, for a reply; 0 otherwise
	WantReply bool   // the frame is a request
	// Body is valid only during the call: the channel reuses its buffers. A hook that
	// keeps it must copy it.
	Body []byte
}

// trace hands a frame to Options.Trace.
func (c *Channel) trace(dir string, h header, body []byte) {
	c.opts.Trace(TraceEvent{Time: time.Now(), Direction: dir, Type: h.typ, Seq: h.seq, ReplyTo: h.replyTo,
		WantReply: h.flags&flagWantReply != 0, Body: body})
}
