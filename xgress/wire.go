package xgress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// The wire format of circuit traffic, shared by links and the ends of circuits. Every frame is
// a fixed 24-byte header followed by Length bytes of data:
//
//	offset size field
//	0      1    Type      Payload, Ack, Close, Probe, ProbeReply
//	1      1    Flags     FlagEOF on a Payload: the sender will send no more data (half-close)
//	2      1    Origin    which end of the circuit sent it: Initiator or Terminator
//	3      1    reserved  0
//	4      4    Length    bytes of data that follow (Payload, Close reason, Probe body)
//	8      8    Circuit   circuit id; 0 on Probe and ProbeReply
//	16     8    Seq       Payload: offset of its first data byte in the stream of its origin;
//	                      Ack: every byte below Seq has been delivered; Probe: probe id
//
// Integers are big-endian. A Payload carries at most MaxData bytes.

// Type is a frame type.
type Type uint8

const (
	Payload    Type = 1
	Ack        Type = 2
	Close      Type = 3 // the circuit ends; data, if any, is the reason
	Probe      Type = 4 // link latency probe, answered by ProbeReply with the same Seq
	ProbeReply Type = 5
)

func (t Type) String() string {
	switch t {
	case Payload:
		return "payload"
	case Ack:
		return "ack"
	case Close:
		return "close"
	case Probe:
		return "probe"
	case ProbeReply:
		return "probe-reply"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Origin tells which end of a circuit sent a frame; forwarders send it toward the other end.
type Origin uint8

const (
	Initiator  Origin = 0 // the end that asked for the circuit (ingress)
	Terminator Origin = 1 // the end at the service (egress)
)

// Other returns the opposite end.
func (o Origin) Other() Origin { return o ^ 1 }

func (o Origin) String() string {
	if o == Initiator {
		return "initiator"
	}
	return "terminator"
}

// Flags of a frame.
const (
	FlagEOF uint8 = 1 << 0
)

const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 24
	// MaxData is the largest data a frame carries.
	MaxData = 64 << 10
)

// ErrFrame is wrapped by errors about malformed frames.
var ErrFrame = errors.New("malformed frame")

// Frame is one frame with its data. Frames come from a Pool and go back to it once written;
// buf holds the header and the data, so that a frame is written with one call. Frames come in
// two sizes, so that small frames (acks, short payloads) do not hold 64 KiB each.
type Frame struct {
	Type    Type
	Flags   uint8
	Origin  Origin
	Circuit uint64
	Seq     uint64
	// Data is the frame's data, a slice of buf after the header.
	Data []byte

	buf   []byte // HeaderSize + capacity of the frame's size class
	pool  *Pool
	large bool // of the large size class
	free  bool // in the pool: a second Release would hand the frame to two owners
}

// SmallData is the data capacity of small frames.
const SmallData = 2 << 10

// Pool recycles frames so that the forwarding path allocates nothing in steady state.
type Pool struct {
	small, large   sync.Pool
	doubleReleases atomic.Uint64
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	p := &Pool{}
	p.small.New = func() any { return &Frame{buf: make([]byte, HeaderSize+SmallData), pool: p} }
	p.large.New = func() any { return &Frame{buf: make([]byte, HeaderSize+MaxData), pool: p, large: true} }
	return p
}

// DoubleReleases counts the frames released again while already in the pool: a bug of the
// caller, refused so that the pool never hands one frame to two owners. Routers report it in
// their metrics; it should stay 0.
func (p *Pool) DoubleReleases() uint64 { return p.doubleReleases.Load() }

// Get returns a frame with no data and room for at least size bytes (at most MaxData).
func (p *Pool) Get(size int) *Frame {
	var f *Frame
	if size <= SmallData {
		f = p.small.Get().(*Frame)
	} else {
		f = p.large.Get().(*Frame)
	}
	f.Data = f.buf[HeaderSize:HeaderSize]
	f.free = false
	return f
}

// Release returns the frame to its pool. The frame must not be used afterwards. A frame
// released while already in the pool is not put back a second time (the pool would give it
// to two owners, and one circuit's data could leave on another): the release is counted in
// Pool.DoubleReleases and otherwise ignored.
func (f *Frame) Release() {
	if f.free {
		f.pool.doubleReleases.Add(1)
		return
	}
	f.Type, f.Flags, f.Origin, f.Circuit, f.Seq, f.Data = 0, 0, 0, 0, 0, nil
	f.free = true
	if f.large {
		f.pool.large.Put(f)
	} else {
		f.pool.small.Put(f)
	}
}

// Room returns the free data space of the frame, for reading data into it; Extend(n) then
// takes n bytes of it as data.
func (f *Frame) Room() []byte { return f.buf[HeaderSize+len(f.Data):] }

// Extend extends Data by the first n bytes of Room.
func (f *Frame) Extend(n int) { f.Data = f.buf[HeaderSize : HeaderSize+len(f.Data)+n] }

// SetData copies data into the frame; it fails when data does not fit.
func (f *Frame) SetData(data []byte) error {
	if len(data) > len(f.buf)-HeaderSize {
		return fmt.Errorf("%w: %d bytes of data, more than the frame's %d", ErrFrame, len(data), len(f.buf)-HeaderSize)
	}
	f.Data = f.buf[HeaderSize : HeaderSize+copy(f.buf[HeaderSize:], data)]
	return nil
}

// Bytes encodes the header in place and returns header and data, ready to write.
func (f *Frame) Bytes() []byte {
	h := f.buf[:HeaderSize]
	h[0], h[1], h[2], h[3] = byte(f.Type), f.Flags, byte(f.Origin), 0
	binary.BigEndian.PutUint32(h[4:], uint32(len(f.Data)))
	binary.BigEndian.PutUint64(h[8:], f.Circuit)
	binary.BigEndian.PutUint64(h[16:], f.Seq)
	return f.buf[:HeaderSize+len(f.Data)]
}

// Reader reads frames from a connection into frames of a pool. One Reader serves one
// connection; it is not safe for concurrent use.
type Reader struct {
	r    io.Reader
	pool *Pool
	h    [HeaderSize]byte // the header is read here first, so that the frame's size class can follow the data length
}

// NewReader returns a Reader of r, which should be buffered.
func NewReader(r io.Reader, pool *Pool) *Reader { return &Reader{r: r, pool: pool} }

// Read reads the next frame. At the end of the stream it returns io.EOF, or
// io.ErrUnexpectedEOF when the stream ends inside a frame.
func (rd *Reader) Read() (*Frame, error) {
	h := rd.h[:]
	if _, err := io.ReadFull(rd.r, h); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[4:])
	switch {
	case Type(h[0]) < Payload || Type(h[0]) > ProbeReply:
		return nil, fmt.Errorf("%w: unknown type %d", ErrFrame, h[0])
	case Origin(h[2]) > Terminator:
		return nil, fmt.Errorf("%w: unknown origin %d", ErrFrame, h[2])
	case n > MaxData:
		return nil, fmt.Errorf("%w: %d bytes of data, more than %d", ErrFrame, n, MaxData)
	}
	f := rd.pool.Get(int(n))
	f.Type, f.Flags, f.Origin = Type(h[0]), h[1], Origin(h[2])
	f.Circuit = binary.BigEndian.Uint64(h[8:])
	f.Seq = binary.BigEndian.Uint64(h[16:])
	f.Data = f.buf[HeaderSize : HeaderSize+n]
	if _, err := io.ReadFull(rd.r, f.Data); err != nil {
		f.Release()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f, nil
}
