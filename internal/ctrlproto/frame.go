package ctrlproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A frame is a fixed 16-byte header, big-endian, followed by the body:
//
//	offset size field
//	0      2    message type
//	2      2    flags
//	4      4    sequence: the sender's id of this frame, never 0
//	8      4    reply-to: the sequence of the request this frame answers, 0 if none
//	12     4    body length, at most the channel's maximum body size
//
// The body is the message encoded as JSON.
const headerSize = 16

// DefaultMaxBodySize bounds frame bodies when Options.MaxBodySize is zero.
const DefaultMaxBodySize = 4 << 20

// flagWantReply marks a request: the sender waits for a frame whose reply-to is this
// frame's sequence.
const flagWantReply uint16 = 1 << 0

var (
	// ErrFrameTooLarge is returned for a frame whose body exceeds the maximum size; the
	// channel closes, since the stream cannot be trusted past such a header.
	ErrFrameTooLarge = errors.New("channel: frame body too large")
	// ErrBadFrame is returned for a header that breaks the framing rules.
	ErrBadFrame = errors.New("channel: malformed frame")
)

type header struct {
	typ     Type
	flags   uint16
	seq     uint32
	replyTo uint32
	size    uint32
}

func (h *header) put(b []byte) {
	_ = b[headerSize-1]
	binary.BigEndian.PutUint16(b[0:], uint16(h.typ))
	binary.BigEndian.PutUint16(b[2:], h.flags)
	binary.BigEndian.PutUint32(b[4:], h.seq)
	binary.BigEndian.PutUint32(b[8:], h.replyTo)
	binary.BigEndian.PutUint32(b[12:], h.size)
}

func parseHeader(b []byte) header {
	_ = b[headerSize-1]
	return header{
		typ:     Type(binary.BigEndian.Uint16(b[0:])),
		flags:   binary.BigEndian.Uint16(b[2:]),
		seq:     binary.BigEndian.Uint32(b[4:]),
		replyTo: binary.BigEndian.Uint32(b[8:]),
		size:    binary.BigEndian.Uint32(b[12:]),
	}
}

// readFrame reads one frame from r into a fresh body slice, using hbuf (headerSize bytes)
// for the header. A clean end of stream before a header is io.EOF; within a frame it is
// io.ErrUnexpectedEOF.
func readFrame(r io.Reader, hbuf []byte, maxBody uint32) (header, []byte, error) {
	return readFrameInto(r, hbuf, nil, maxBody)
}

// readFrameInto is readFrame reading the body into buf when it is large enough: the body
// is valid until buf is used again.
func readFrameInto(r io.Reader, hbuf, buf []byte, maxBody uint32) (header, []byte, error) {
	if _, err := io.ReadFull(r, hbuf[:headerSize]); err != nil {
		return header{}, nil, err
	}
	h := parseHeader(hbuf)
	if h.size > maxBody {
		return h, nil, fmt.Errorf("%w: %s frame of %d bytes, maximum %d", ErrFrameTooLarge, h.typ, h.size, maxBody)
	}
	if h.seq == 0 {
		return h, nil, fmt.Errorf("%w: %s frame with sequence 0", ErrBadFrame, h.typ)
	}
	if h.size == 0 {
		return h, nil, nil
	}
	var body []byte
	if int(h.size) <= cap(buf) {
		body = buf[:h.size]
	} else {
		body = make([]byte, h.size)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, fmt.Errorf("channel: read %s frame body (%d bytes): %w", h.typ, h.size, err)
	}
	return h, body, nil
}
