package e2ee

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/openziti/secretstream"
	"github.com/openziti/secretstream/kx"
)

// OpenZiti's end-to-end scheme, for circuits whose other end is an OpenZiti client.
//
// The ends exchange crypto_kx (X25519) public keys through the controller, outside the
// circuit: the dialing end's in its dial request, the hosting end's in the dial's answer.
// The dialing end derives crypto_kx client session keys, the hosting end server session
// keys; each direction is then a crypto_secretstream_xchacha20poly1305 stream keyed by its
// sender's tx key. Nothing authenticates the public keys: a router or controller that
// substitutes its own reads everything, while routers that only forward see ciphertext.
//
// The circuit is a byte stream and secretstream needs message boundaries, so every message
// is framed
//
//	length uint32 (big endian) | message [length]byte
//
// with 0 < length <= MaxZitiFrame. Each end's first frame is its 24-byte secretstream header;
// every later frame is one secretstream message (tag MESSAGE; other tags are read as MESSAGE,
// as OpenZiti's clients read them). Half-close is the circuit's own: no frame marks the end.
// OpenZiti's routers carry each frame as one edge Data message.

// ZitiKeySize is the size of a crypto_kx public key.
const ZitiKeySize = kx.PublicKeyBytes

// MaxZitiMessage is the most plaintext one frame of OpenZiti's scheme carries when read;
// MaxZitiFrame is the most a frame holds: that plus secretstream's overhead.
const (
	MaxZitiMessage = 16 << 20
	MaxZitiFrame   = MaxZitiMessage + secretstream.StreamABytes
)

// zitiWriteChunk is the most plaintext Write puts in one frame: OpenZiti's edge messages of
// that size are common, and pooled buffers of it stay small.
const zitiWriteChunk = 64 << 10

// zitiFrameHeader is the size of a frame's length prefix.
const zitiFrameHeader = 4

// ZitiKey is one end's crypto_kx key pair for one circuit.
type ZitiKey struct{ kp *kx.KeyPair }

// NewZitiKey makes a fresh key pair.
func NewZitiKey() (*ZitiKey, error) {
	kp, err := kx.NewKeyPair()
	if err != nil {
		return nil, fmt.Errorf("e2ee: OpenZiti key pair: %w", err)
	}
	return &ZitiKey{kp: kp}, nil
}

// Public returns the public key, ZitiKeySize bytes, for the peer.
func (k *ZitiKey) Public() []byte { return k.kp.Public() }

// ZitiConn is a connection encrypted with OpenZiti's scheme. Reads and Writes may run
// concurrently with each other; Close may be called at any time.
type ZitiConn struct {
	conn net.Conn

	wmu  sync.Mutex
	enc  secretstream.Encryptor
	werr error // sticky

	rmu     sync.Mutex
	rxKey   []byte // until the peer's header arrives
	dec     secretstream.Decryptor
	hdr     [zitiFrameHeader]byte // the length of the frame being read
	hdrN    int                   // bytes of hdr read
	bodyLen int                   // the length of the frame being read, once known
	body    []byte                // its buffer, grown as its bytes arrive, up to bodyLen
	bodyBuf *[]byte               // body's pooled buffer, until body outgrows it
	bodyN   int                   // bytes of the frame read
	opened  uint64                // messages opened, for errors
	pending []byte                // opened plaintext Read has not returned yet
	rerr    error                 // sticky
}

// zitiBuffers pools frame buffers of up to zitiFrameHeader+zitiWriteChunk+StreamABytes
// bytes; larger frames, which only a peer that writes more at once sends, get their own.
var zitiBuffers = sync.Pool{New: func() any {
	b := make([]byte, zitiFrameHeader+zitiWriteChunk+secretstream.StreamABytes)
	return &b
}}

// ZitiClient is the dialing end: key is the key pair whose public half the dial offered,
// hostKey the hosting end's public key from the dial's answer. It sends its header at once.
func ZitiClient(conn net.Conn, key *ZitiKey, hostKey []byte) (*ZitiConn, error) {
	return newZitiConn(conn, key, hostKey, true)
}

// ZitiServer is the hosting end: key is the key pair whose public half the hosting end
// answers with, dialerKey the dialing end's public key from its offer. It sends its header
// at once.
func ZitiServer(conn net.Conn, key *ZitiKey, dialerKey []byte) (*ZitiConn, error) {
	return newZitiConn(conn, key, dialerKey, false)
}

func newZitiConn(conn net.Conn, key *ZitiKey, peerKey []byte, client bool) (*ZitiConn, error) {
	if len(peerKey) != ZitiKeySize {
		return nil, fmt.Errorf("e2ee: the peer's OpenZiti key is %d bytes, not %d", len(peerKey), ZitiKeySize)
	}
	var rx, tx []byte
	var err error
	if client {
		rx, tx, err = key.kp.ClientSessionKeys(peerKey)
	} else {
		rx, tx, err = key.kp.ServerSessionKeys(peerKey)
	}
	if err != nil {
		return nil, fmt.Errorf("e2ee: OpenZiti key exchange: %w", err)
	}
	enc, header, err := secretstream.NewEncryptor(tx)
	if err != nil {
		return nil, fmt.Errorf("e2ee: OpenZiti stream: %w", err)
	}
	c := &ZitiConn{conn: conn, enc: enc, rxKey: rx}
	if err := c.writeFrame(header); err != nil {
		return nil, err
	}
	return c, nil
}

// writeFrame sends one frame holding msg. A failed write leaves the peer with a partial
// frame, so it fails the conn for writing. Called with wmu held, or before the conn is
// shared.
func (c *ZitiConn) writeFrame(msg []byte) error {
	n := zitiFrameHeader + len(msg)
	bp := zitiBuffers.Get().(*[]byte)
	b := *bp
	if cap(b) < n {
		b = make([]byte, n) // larger than pooled buffers: not pooled
	}
	b = b[:n]
	binary.BigEndian.PutUint32(b, uint32(len(msg)))
	copy(b[zitiFrameHeader:], msg)
	_, err := c.conn.Write(b)
	zitiBuffers.Put(bp)
	if err != nil {
		c.werr = fmt.Errorf("e2ee: write: %w", err)
		return c.werr
	}
	return nil
}

// Write encrypts p and sends it, as one message per zitiWriteChunk bytes.
func (c *ZitiConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), zitiWriteChunk)]
		msg, err := c.enc.Push(chunk, secretstream.TagMessage)
		if err != nil {
			c.werr = fmt.Errorf("e2ee: encrypt: %w", err)
			return written, c.werr
		}
		if err := c.writeFrame(msg); err != nil {
			return written, err
		}
		written += len(chunk)
		p = p[len(chunk):]
	}
	return written, nil
}

// Read returns decrypted data in the order it was written, and io.EOF when the circuit's
// stream ended at a frame boundary. An error wrapping ErrAuthentication means a message was
// altered, dropped, reordered or replayed on the path, or the peer's header was malformed.
func (c *ZitiConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	for len(c.pending) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if err := c.readMessage(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// readMessage reads the next frame, the peer's header first, then a message, which it
// opens into c.pending. A frame read in part when a deadline passes is read on by the next
// call.
func (c *ZitiConn) readMessage() error {
	for c.hdrN < zitiFrameHeader {
		k, err := c.conn.Read(c.hdr[c.hdrN:])
		c.hdrN += k
		if err != nil && c.hdrN < zitiFrameHeader {
			if errors.Is(err, io.EOF) && c.hdrN == 0 {
				c.rerr = io.EOF // at a frame boundary
				return c.rerr
			}
			return c.readError(err)
		}
	}
	if c.body == nil {
		n := binary.BigEndian.Uint32(c.hdr[:])
		switch {
		case n == 0:
			c.rerr = fmt.Errorf("%w: an empty frame after message %d", ErrAuthentication, c.opened)
			return c.rerr
		case n > MaxZitiFrame:
			c.rerr = fmt.Errorf("%w: an oversize frame of %d bytes after message %d; at most %d", ErrAuthentication, n, c.opened, MaxZitiFrame)
			return c.rerr
		case c.rxKey != nil && n != secretstream.StreamHeaderBytes:
			c.rerr = fmt.Errorf("%w: bad stream header: a first frame of %d bytes, not %d", ErrAuthentication, n, secretstream.StreamHeaderBytes)
			return c.rerr
		}
		// The length is the peer's word: the buffer starts pooled and grows only as bytes
		// arrive, so that a peer that stalls pins no more than it sent.
		c.bodyLen = int(n)
		c.bodyBuf = zitiBuffers.Get().(*[]byte)
		c.body = (*c.bodyBuf)[:min(cap(*c.bodyBuf), c.bodyLen)]
	}
	for c.bodyN < c.bodyLen {
		if c.bodyN == len(c.body) {
			c.growBody()
		}
		k, err := c.conn.Read(c.body[c.bodyN:])
		c.bodyN += k
		if err != nil && c.bodyN < c.bodyLen {
			return c.readError(err)
		}
	}
	frame := c.body[:c.bodyLen]
	defer c.releaseFrame()
	if c.rxKey != nil {
		dec, err := secretstream.NewDecryptor(c.rxKey, frame)
		if err != nil {
			c.rerr = fmt.Errorf("%w: bad stream header: %w", ErrAuthentication, err)
			return c.rerr
		}
		c.dec, c.rxKey = dec, nil
		return nil
	}
	msg, _, err := c.dec.Pull(frame)
	if err != nil {
		c.rerr = fmt.Errorf("%w: message %d of %d bytes: %w", ErrAuthentication, c.opened, len(frame), err)
		return c.rerr
	}
	c.opened++
	c.pending = msg
	return nil
}

// growBody doubles the full frame buffer, up to the frame's length; a buffer larger than
// the pool's is the frame's own, and the pooled one goes back.
func (c *ZitiConn) growBody() {
	b := make([]byte, min(2*len(c.body), c.bodyLen))
	copy(b, c.body[:c.bodyN])
	c.body = b
	if c.bodyBuf != nil {
		zitiBuffers.Put(c.bodyBuf)
		c.bodyBuf = nil
	}
}

// releaseFrame readies the read state for the next frame and returns the pooled buffer.
func (c *ZitiConn) releaseFrame() {
	if c.bodyBuf != nil {
		zitiBuffers.Put(c.bodyBuf)
	}
	c.hdrN, c.bodyLen, c.body, c.bodyBuf, c.bodyN = 0, 0, nil, nil, 0
}

// readError turns an error of the underlying Read into the one Read returns: a timeout may be
// retried (the frame's place is kept); an end of stream inside a frame is a truncation;
// anything else ends the conn for reading.
func (c *ZitiConn) readError(err error) error {
	if errors.Is(err, io.EOF) {
		c.rerr = fmt.Errorf("e2ee: the stream ended inside a frame: %w", io.ErrUnexpectedEOF)
		return c.rerr
	}
	err = fmt.Errorf("e2ee: read: %w", err)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return err
	}
	c.rerr = err
	return err
}

// CloseWrite half-closes the circuit: the peer reads io.EOF after the last message.
func (c *ZitiConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil && !errors.Is(c.werr, errWriteClosed) {
		return c.werr
	}
	c.werr = errWriteClosed
	cw, ok := c.conn.(interface{ CloseWrite() error })
	if !ok {
		return fmt.Errorf("e2ee: %T cannot half-close", c.conn)
	}
	return cw.CloseWrite()
}

// Close closes the underlying conn.
func (c *ZitiConn) Close() error { return c.conn.Close() }

// LocalAddr returns the underlying conn's local address.
func (c *ZitiConn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr returns the underlying conn's remote address.
func (c *ZitiConn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// SetDeadline sets the underlying conn's deadlines.
func (c *ZitiConn) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// SetReadDeadline sets the underlying conn's read deadline.
func (c *ZitiConn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// SetWriteDeadline sets the underlying conn's write deadline.
func (c *ZitiConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }
