// Package zitiproto is OpenZiti's edge protocol as its clients speak it: channel v2 framing
// (magic, content type, sequence, headers, body), the channel's own messages (hello and its
// result, latency probes, heartbeats) and the edge messages a router exchanges with
// sdk-golang clients (connect, dial, bind, data and their answers), with the numbers of
// sdk-golang's edge_client_pb.
//
// A message on the wire is a 20-byte section (the magic 03 06 09 0c, then the content type,
// the sequence, the length of the headers and the length of the body, each a little-endian
// 32-bit integer), then the headers (each a little-endian 32-bit key, a little-endian 32-bit
// length and that many bytes), then the body. A reply carries the sequence of the message it
// answers in header ReplyFor, and the request's headers 128 to 255 (reflected headers).
//
// A Reader refuses a message whose headers exceed MaxHeaders or whose body exceeds MaxBody
// (ErrTooLarge) and one that is malformed (ErrMalformed); the connection cannot be read past
// either, so its owner closes it and logs why.
package zitiproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Magic opens every channel v2 message.
var Magic = [4]byte{0x03, 0x06, 0x09, 0x0c}

// IsMagic tells whether b starts with Magic: a connection whose first bytes are these speaks
// OpenZiti's channel.
func IsMagic(b []byte) bool {
	return len(b) >= 4 && b[0] == Magic[0] && b[1] == Magic[1] && b[2] == Magic[2] && b[3] == Magic[3]
}

// Bounds of a message read.
const (
	SectionSize = 20
	MaxHeaders  = 64 << 10
	// MaxBody admits one secretstream message of the largest circuit frame
	// (e2ee.MaxZitiFrame, 16 MiB + 17) with room to spare.
	MaxBody = 16<<20 + 64
	// MaxHello bounds a hello's headers and its body, each, as OpenZiti's channel does: a
	// client not yet admitted holds little.
	MaxHello = 4192
)

// Errors of Reader.Read.
var (
	ErrBadMagic  = errors.New("zitiproto: not a channel v2 message (bad magic)")
	ErrTooLarge  = errors.New("zitiproto: message too large")
	ErrMalformed = errors.New("zitiproto: malformed headers")
)

// Channel content types.
const (
	ContentHello           int32 = 0
	ContentPing            int32 = 1
	ContentResult          int32 = 2
	ContentLatency         int32 = 3
	ContentLatencyResponse int32 = 4
	ContentHeartbeat       int32 = 5
)

// Edge content types (edge_client_pb.ContentType).
const (
	ContentConnect             int32 = 60783
	ContentStateConnected      int32 = 60784
	ContentStateClosed         int32 = 60785
	ContentData                int32 = 60786
	ContentDial                int32 = 60787
	ContentDialSuccess         int32 = 60788
	ContentDialFailed          int32 = 60789
	ContentBind                int32 = 60790
	ContentUnbind              int32 = 60791
	ContentStateSessionEnded   int32 = 60792
	ContentProbe               int32 = 60793
	ContentUpdateBind          int32 = 60794
	ContentHealthEvent         int32 = 60795
	ContentTraceRoute          int32 = 60796
	ContentTraceRouteResponse  int32 = 60797
	ContentConnInspectRequest  int32 = 60798
	ContentConnInspectResponse int32 = 60799
	ContentBindSuccess         int32 = 60800
	ContentUpdateTokenSuccess  int32 = 60801
	ContentUpdateTokenFailure  int32 = 60802
	ContentUpdateToken         int32 = 60803
	ContentInspectRequest      int32 = 60804
	ContentInspectResponse     int32 = 60805
	ContentPostureResponse     int32 = 10800
)

// Channel header ids.
const (
	HeaderConnectionID      int32 = 0
	HeaderReplyFor          int32 = 1
	HeaderResultSuccess     int32 = 2
	HeaderHelloVersion      int32 = 4
	HeaderHeartbeat         int32 = 5
	HeaderHeartbeatResponse int32 = 6
	HeaderType              int32 = 7
	HeaderID                int32 = 8
	HeaderIsGrouped         int32 = 9
	// HeaderProbeTime is the latency probe's send time, reflected in its reply.
	HeaderProbeTime int32 = 128
	// Reflected headers are copied from a request into its reply.
	firstReflected int32 = 128
	lastReflected  int32 = 255
)

// Edge header ids (edge_client_pb.HeaderId).
const (
	HeaderUUID                     int32 = 128
	HeaderConnID                   int32 = 1000
	HeaderSeq                      int32 = 1001
	HeaderSessionToken             int32 = 1002
	HeaderPublicKey                int32 = 1003
	HeaderCost                     int32 = 1004
	HeaderPrecedence               int32 = 1005
	HeaderTerminatorIdentity       int32 = 1006
	HeaderTerminatorIdentitySecret int32 = 1007
	HeaderCallerID                 int32 = 1008
	HeaderCryptoMethod             int32 = 1009
	HeaderFlags                    int32 = 1010
	HeaderAppData                  int32 = 1011
	HeaderRouterProvidedConnID     int32 = 1012
	HeaderHealthStatus             int32 = 1013
	HeaderErrorCode                int32 = 1014
	HeaderListenerID               int32 = 1021
	HeaderSupportsInspect          int32 = 1023
	HeaderSupportsBindSuccess      int32 = 1024
	HeaderConnectionMarker         int32 = 1025
	HeaderCircuitID                int32 = 1026
	HeaderStickinessToken          int32 = 1027
	HeaderUseXgressToSdk           int32 = 1028
	HeaderSupportsPostureChecks    int32 = 1032
)

// Data flags (HeaderFlags).
const (
	FlagFIN       uint32 = 1
	FlagMultipart uint32 = 4
)

// Precedences of a bind (HeaderPrecedence).
const (
	PrecedenceDefault  byte = 0
	PrecedenceRequired byte = 1
	PrecedenceFailed   byte = 2
)

// CryptoLibsodium is the crypto method of crypto_kx with secretstream (HeaderCryptoMethod).
const CryptoLibsodium byte = 0

// Error codes (HeaderErrorCode, edge_client_pb.Error).
const (
	ErrorInternal          uint32 = 1
	ErrorInvalidAPISession uint32 = 2
	ErrorInvalidSession    uint32 = 3
	ErrorWrongSessionType  uint32 = 4
	ErrorInvalidService    uint32 = 6
	ErrorInvalidTerminator uint32 = 8
	ErrorEncryptionMissing uint32 = 11
)

// header is a header's key and where its value lies in Message.hbuf.
type header struct {
	key    int32
	off, n int
}

// Message is one channel message. Its storage is reused: Reset for a new message to send,
// Reader.Read for one received.
type Message struct {
	ContentType int32
	Sequence    int32
	Body        []byte

	hdrs  []header
	hbuf  []byte // header values: the header section read, or arena
	arena []byte // storage of the header values put
	buf   []byte // storage of a message read, and of a text body set
}

// Reset empties m for a new message of content type ct.
func (m *Message) Reset(ct int32) {
	m.ContentType, m.Sequence, m.Body = ct, 0, nil
	m.hdrs, m.hbuf = m.hdrs[:0], m.arena[:0]
}

// Header returns the value of header key.
func (m *Message) Header(key int32) ([]byte, bool) {
	for _, h := range m.hdrs {
		if h.key == key {
			return m.hbuf[h.off : h.off+h.n], true
		}
	}
	return nil, false
}

// Uint32 returns header key as a little-endian uint32.
func (m *Message) Uint32(key int32) (uint32, bool) {
	v, ok := m.Header(key)
	if !ok || len(v) != 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(v), true
}

// Uint64 returns header key as a little-endian uint64.
func (m *Message) Uint64(key int32) (uint64, bool) {
	v, ok := m.Header(key)
	if !ok || len(v) != 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(v), true
}

// Uint16 returns header key as a little-endian uint16.
func (m *Message) Uint16(key int32) (uint16, bool) {
	v, ok := m.Header(key)
	if !ok || len(v) != 2 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(v), true
}

// Byte returns header key as one byte.
func (m *Message) Byte(key int32) (byte, bool) {
	v, ok := m.Header(key)
	if !ok || len(v) != 1 {
		return 0, false
	}
	return v[0], true
}

// Bool returns header key as a boolean (one byte, 1 for true); absent is false.
func (m *Message) Bool(key int32) bool {
	b, ok := m.Byte(key)
	return ok && b == 1
}

// String returns header key as a string (a copy).
func (m *Message) String(key int32) (string, bool) {
	v, ok := m.Header(key)
	return string(v), ok
}

// ReplyFor returns the sequence of the message m answers, if it is a reply.
func (m *Message) ReplyFor() (int32, bool) {
	v, ok := m.Uint32(HeaderReplyFor)
	return int32(v), ok
}

// Put sets header key to a copy of v.
func (m *Message) Put(key int32, v []byte) {
	off := len(m.hbuf)
	m.hbuf = append(m.hbuf, v...)
	m.set(key, off, len(v))
}

// PutString sets header key to s.
func (m *Message) PutString(key int32, s string) {
	off := len(m.hbuf)
	m.hbuf = append(m.hbuf, s...)
	m.set(key, off, len(s))
}

// PutUint32 sets header key to v, little-endian.
func (m *Message) PutUint32(key int32, v uint32) {
	off := len(m.hbuf)
	m.hbuf = binary.LittleEndian.AppendUint32(m.hbuf, v)
	m.set(key, off, 4)
}

// PutUint64 sets header key to v, little-endian.
func (m *Message) PutUint64(key int32, v uint64) {
	off := len(m.hbuf)
	m.hbuf = binary.LittleEndian.AppendUint64(m.hbuf, v)
	m.set(key, off, 8)
}

// PutUint16 sets header key to v, little-endian.
func (m *Message) PutUint16(key int32, v uint16) {
	off := len(m.hbuf)
	m.hbuf = binary.LittleEndian.AppendUint16(m.hbuf, v)
	m.set(key, off, 2)
}

// PutByte sets header key to one byte.
func (m *Message) PutByte(key int32, b byte) {
	off := len(m.hbuf)
	m.hbuf = append(m.hbuf, b)
	m.set(key, off, 1)
}

// PutBool sets header key to a boolean.
func (m *Message) PutBool(key int32, b bool) {
	var v byte
	if b {
		v = 1
	}
	m.PutByte(key, v)
}

func (m *Message) set(key int32, off, n int) {
	m.arena = m.hbuf
	for i := range m.hdrs {
		if m.hdrs[i].key == key {
			m.hdrs[i].off, m.hdrs[i].n = off, n
			return
		}
	}
	m.hdrs = append(m.hdrs, header{key: key, off: off, n: n})
}

// ReplyTo makes m a reply to req: header ReplyFor is req's sequence and req's reflected
// headers are copied.
func (m *Message) ReplyTo(req *Message) {
	m.PutUint32(HeaderReplyFor, uint32(req.Sequence))
	for _, h := range req.hdrs {
		if h.key >= firstReflected && h.key <= lastReflected {
			m.Put(h.key, req.hbuf[h.off:h.off+h.n])
		}
	}
}

// Clone returns a copy of m in storage of its own, sized to it, so that m can be reused.
func (m *Message) Clone() *Message {
	c := &Message{ContentType: m.ContentType, Sequence: m.Sequence, hdrs: append([]header(nil), m.hdrs...)}
	c.buf = make([]byte, len(m.hbuf)+len(m.Body))
	copy(c.buf, m.hbuf)
	copy(c.buf[len(m.hbuf):], m.Body)
	c.hbuf = c.buf[:len(m.hbuf):len(m.hbuf)]
	c.Body = c.buf[len(m.hbuf):]
	return c
}

// Each calls f with every header of m, in wire order.
func (m *Message) Each(f func(key int32, value []byte)) {
	for _, h := range m.hdrs {
		f(h.key, m.hbuf[h.off:h.off+h.n])
	}
}

// Reader reads messages from a connection.
type Reader struct {
	r       io.Reader
	section [SectionSize]byte
	skip    int // bytes of the first section already read
}

// NewReader returns a Reader of r. pre are the first bytes of the stream, already read from r
// (at most a section's, e.g. the magic a listener read to tell the protocol).
func NewReader(r io.Reader, pre []byte) *Reader {
	rd := &Reader{r: r}
	rd.skip = copy(rd.section[:], pre)
	return rd
}

// Read reads the next message into m, whose storage it reuses (the body and header values
// stay valid until m is read into or reset again).
func (rd *Reader) Read(m *Message) error { return rd.ReadMax(m, MaxHeaders, MaxBody) }

// ReadMax is Read with smaller bounds of the headers and the body (e.g. MaxHello).
func (rd *Reader) ReadMax(m *Message, maxHeaders, maxBody uint32) error {
	if _, err := io.ReadFull(rd.r, rd.section[rd.skip:]); err != nil {
		return err
	}
	rd.skip = 0
	s := rd.section[:]
	if !IsMagic(s) {
		return ErrBadMagic
	}
	hlen, blen := binary.LittleEndian.Uint32(s[12:16]), binary.LittleEndian.Uint32(s[16:20])
	if hlen > maxHeaders || blen > maxBody {
		return fmt.Errorf("%w: headers %d bytes (at most %d), body %d bytes (at most %d)", ErrTooLarge, hlen, maxHeaders, blen, maxBody)
	}
	n := int(hlen) + int(blen)
	if err := rd.fill(m, n); err != nil {
		return fmt.Errorf("zitiproto: read message: %w", err)
	}
	m.ContentType = int32(binary.LittleEndian.Uint32(s[4:8]))
	m.Sequence = int32(binary.LittleEndian.Uint32(s[8:12]))
	m.hbuf, m.Body = m.buf[:hlen:hlen], m.buf[hlen:n]
	return m.parseHeaders()
}

// growFrom is the buffer a message larger than its storage starts with; it doubles as the
// message's bytes arrive.
const growFrom = 64 << 10

// fill reads n bytes into m.buf. The lengths are the peer's word: a buffer too small grows
// only as bytes arrive, so that a peer that stalls pins no more than it sent.
func (rd *Reader) fill(m *Message, n int) error {
	if cap(m.buf) >= n {
		m.buf = m.buf[:n]
		if _, err := io.ReadFull(rd.r, m.buf); err != nil {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	b := m.buf[:0]
	if start := min(n, growFrom); cap(b) < start {
		b = make([]byte, 0, start)
	}
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), n))
			copy(nb, b)
			b = nb
		}
		k, err := rd.r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err != nil && len(b) < n {
			m.buf = b[:0]
			return io.ErrUnexpectedEOF
		}
	}
	m.buf = b
	return nil
}

func (m *Message) parseHeaders() error {
	m.hdrs = m.hdrs[:0]
	h := m.hbuf
	for i := 0; i < len(h); {
		if len(h)-i < 8 {
			return fmt.Errorf("%w: %d bytes left for a header of at least 8", ErrMalformed, len(h)-i)
		}
		key, n := int32(binary.LittleEndian.Uint32(h[i:])), binary.LittleEndian.Uint32(h[i+4:])
		if uint64(n) > uint64(len(h)-i-8) {
			return fmt.Errorf("%w: header %d of %d bytes overruns the section", ErrMalformed, key, n)
		}
		m.hdrs = append(m.hdrs, header{key: key, off: i + 8, n: int(n)})
		i += 8 + int(n)
	}
	return nil
}

// Writer writes messages to a connection, each in one Write; it is not safe for concurrent
// use.
type Writer struct {
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// keepBuf bounds the encoding buffer a Writer keeps between messages.
const keepBuf = 1 << 20

// Write sends m.
func (wr *Writer) Write(m *Message) error {
	b := wr.buf[:0]
	b = append(b, Magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.ContentType))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Sequence))
	hlen := 0
	for _, h := range m.hdrs {
		hlen += 8 + h.n
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(hlen))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Body)))
	for _, h := range m.hdrs {
		b = binary.LittleEndian.AppendUint32(b, uint32(h.key))
		b = binary.LittleEndian.AppendUint32(b, uint32(h.n))
		b = append(b, m.hbuf[h.off:h.off+h.n]...)
	}
	b = append(b, m.Body...)
	_, err := wr.w.Write(b)
	if cap(b) <= keepBuf {
		wr.buf = b[:0]
	} else {
		wr.buf = nil
	}
	return err
}

// Pool keeps Messages for reuse; a message whose storage grew past keepBuf is dropped
// rather than kept.
type Pool struct{ p sync.Pool }

// Get returns an empty message.
func (p *Pool) Get() *Message {
	if m, ok := p.p.Get().(*Message); ok {
		return m
	}
	return &Message{}
}

// Put returns m to the pool; m must not be used after.
func (p *Pool) Put(m *Message) {
	if cap(m.buf) > keepBuf || cap(m.arena) > keepBuf {
		return
	}
	m.Reset(0)
	m.buf = m.buf[:0]
	p.p.Put(m)
}

// Builders of the messages a router sends. Each resets m first; text bodies are copied into
// m's storage when m has room, so that a reused message sends without allocating.

// SetResult makes m the channel's Result: the answer to a hello or a latency probe.
func (m *Message) SetResult(req *Message, ok bool, text string) {
	m.Reset(ContentResult)
	m.PutBool(HeaderResultSuccess, ok)
	if req != nil {
		m.ReplyTo(req)
	}
	m.setText(text)
}

// SetState makes m a connection state message of content type ct (StateConnected,
// StateClosed, BindSuccess, Data …) for conn id connID; text is its body.
func (m *Message) SetState(ct int32, connID uint32, text string) {
	m.Reset(ct)
	m.PutUint32(HeaderConnID, connID)
	m.setText(text)
}

// setText sets the body to text, in m's storage.
func (m *Message) setText(text string) {
	if text == "" {
		m.Body = nil
		return
	}
	if cap(m.buf) < len(text) {
		m.buf = make([]byte, len(text))
	}
	m.Body = append(m.buf[:0], text...)
}
