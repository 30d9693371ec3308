package e2ee

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

const (
	recordData       = 0x20
	recordCloseWrite = 0x21

	headerLen         = 4 // type uint8 | length uint24
	datagramHeaderLen = 9 // type uint8 | sequence uint64
	tagSize           = 16
	nonceLen          = 12

	maxCiphertext = RecordSize + tagSize
	maxRecordLen  = headerLen + maxCiphertext

	// writeBatch is how many full records Write seals before one underlying Write; readAhead
	// is how many fit in the buffer a Read fills from the underlying conn. In stream mode the
	// buffers start small (the read buffer at minReadBuffer) and grow to that as the records
	// call for it, so that a Conn carrying little, such as a short or idle circuit, costs
	// little memory and a handshake allocates no buffer it does not use.
	writeBatch    = 4
	readAhead     = 4
	minReadBuffer = 1 << 10

	maxMaxDatagram = 1 << 20

	// closeTimeout bounds how long Close tries to send the close-write record.
	closeTimeout = 5 * time.Second
)

// errWriteClosed is returned by Write after CloseWrite or Close.
var errWriteClosed = errors.New("e2ee: write after CloseWrite or Close")

// Conn is an end-to-end encrypted connection. Reads and Writes may run concurrently with each
// other; Close may be called at any time.
type Conn struct {
	conn        net.Conn
	datagram    bool
	maxDatagram int
	cipher      Cipher
	peerChain   []*x509.Certificate
	resumed     bool

	wmu  sync.Mutex
	out  direction
	wbuf []byte // sealed records on their way out
	werr error  // sticky: once set, every Write fails with it

	rmu        sync.Mutex
	in         direction
	rbuf       []byte // ciphertext read from conn; rbuf[roff:rend] is not opened yet
	roff, rend int
	pending    []byte // opened plaintext (inside rbuf) that Read has not returned yet
	rerr       error  // sticky: io.EOF after close-write, or the error that killed the Conn
	// finished, set on a client with Config.FalseStart until the first Read checked it, is
	// the ServerFinished value expected before the server's first record; the ticket the
	// handshake gave is kept in tickets only then, once the server has shown it stored it.
	finished []byte
	ticket   *ticket
	tickets  *Tickets
}

// direction is the AEAD state of one direction: key, IV and the next sequence number.
type direction struct {
	aead  cipher.AEAD
	iv    [nonceLen]byte
	seq   uint64
	nonce [nonceLen]byte
}

// newConn sets up the record layer over conn with what the handshake h established.
func newConn(conn net.Conn, cfg *Config, h *handshakeState, client bool) (*Conn, error) {
	c := &Conn{
		conn:        conn,
		datagram:    cfg.Datagram,
		maxDatagram: cfg.MaxDatagram,
		cipher:      h.cipher,
		peerChain:   h.peerChain,
		resumed:     h.resumed,
	}
	if client && cfg.FalseStart {
		c.finished = h.finished
		c.ticket, c.tickets = h.ticket(true), h.tickets
	}
	outKey, outIV, inKey, inIV := h.clientKey, h.clientIV, h.serverKey, h.serverIV
	if !client {
		outKey, outIV, inKey, inIV = inKey, inIV, outKey, outIV
	}
	if err := c.out.init(h.cipher, outKey, outIV); err != nil {
		return nil, err
	}
	if err := c.in.init(h.cipher, inKey, inIV); err != nil {
		return nil, err
	}
	if c.datagram {
		c.wbuf = make([]byte, 0, datagramHeaderLen+c.maxDatagram+tagSize)
		c.rbuf = make([]byte, datagramHeaderLen+c.maxDatagram+tagSize)
	} else {
		c.rbuf = make([]byte, minReadBuffer)
	}
	return c, nil
}

func (d *direction) init(c Cipher, key, iv []byte) error {
	var err error
	switch c {
	case CipherAES256GCM:
		var block cipher.Block
		if block, err = aes.NewCipher(key); err == nil {
			d.aead, err = cipher.NewGCM(block)
		}
	case CipherChaCha20Poly1305:
		d.aead, err = chacha20poly1305.New(key)
	default:
		err = fmt.Errorf("unknown cipher %v", c)
	}
	if err != nil {
		return fmt.Errorf("e2ee: set up %v: %w", c, err)
	}
	copy(d.iv[:], iv)
	return nil
}

// nonceFor returns the nonce of record seq: the IV with seq XORed into its last 8 bytes.
func (d *direction) nonceFor(seq uint64) []byte {
	d.nonce = d.iv
	binary.BigEndian.PutUint64(d.nonce[4:], binary.BigEndian.Uint64(d.iv[4:])^seq)
	return d.nonce[:]
}

// next takes the direction's next sequence number and returns its nonce. The last number is
// never used, so that the count cannot wrap around to a nonce already used.
func (d *direction) next() ([]byte, error) {
	if d.seq == math.MaxUint64 {
		return nil, errors.New("e2ee: record sequence numbers exhausted")
	}
	d.seq++
	return d.nonceFor(d.seq - 1), nil
}

// Write encrypts p and sends it. In stream mode it splits p into records of at most
// RecordSize bytes and sends several records per underlying Write. In datagram mode p is one
// record in one message and must not exceed the maximum datagram size.
func (c *Conn) Write(p []byte) (int, error) {
	if c.datagram {
		return c.writeDatagram(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if len(p) > RecordSize && cap(c.wbuf) < writeBatch*maxRecordLen {
		c.wbuf = make([]byte, 0, writeBatch*maxRecordLen)
	}
	written := 0
	for len(p) > 0 {
		// Seal up to writeBatch records into wbuf, then send them in one write.
		batch, sealed := c.wbuf[:0], 0
		for i := 0; i < writeBatch && sealed < len(p); i++ {
			chunk := p[sealed:min(len(p), sealed+RecordSize)]
			var err error
			if batch, err = c.seal(batch, recordData, chunk); err != nil {
				c.werr = err
				return written, err
			}
			sealed += len(chunk)
		}
		c.wbuf = batch[:0] // keeps what sealing grew it to
		if err := c.send(batch); err != nil {
			return written, err
		}
		written += sealed
		p = p[sealed:]
	}
	return written, nil
}

// seal appends to dst a stream record of type typ carrying plaintext: its header, which is the
// additional data, then the ciphertext and tag, sealed straight into dst.
func (c *Conn) seal(dst []byte, typ byte, plaintext []byte) ([]byte, error) {
	nonce, err := c.out.next()
	if err != nil {
		return dst, err
	}
	n := len(plaintext) + tagSize
	at := len(dst)
	dst = append(dst, typ, byte(n>>16), byte(n>>8), byte(n))
	return c.out.aead.Seal(dst, nonce, plaintext, dst[at:]), nil
}

// send writes sealed records to conn. A failed write leaves the peer with a partial record,
// so it fails the Conn for writing.
func (c *Conn) send(b []byte) error {
	if _, err := c.conn.Write(b); err != nil {
		c.werr = fmt.Errorf("e2ee: write: %w", err)
		return c.werr
	}
	return nil
}

// writeDatagram seals p as one datagram record and writes it as one message.
func (c *Conn) writeDatagram(p []byte) (int, error) {
	if len(p) > c.maxDatagram {
		return 0, fmt.Errorf("e2ee: datagram of %d bytes exceeds the maximum of %d", len(p), c.maxDatagram)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	msg, err := c.sealDatagram(c.wbuf[:0], recordData, p)
	if err != nil {
		c.werr = err
		return 0, err
	}
	if err := c.send(msg); err != nil {
		return 0, err
	}
	return len(p), nil
}

// sealDatagram appends to dst a datagram record of type typ carrying plaintext, with its
// sequence number in its header.
func (c *Conn) sealDatagram(dst []byte, typ byte, plaintext []byte) ([]byte, error) {
	seq := c.out.seq
	nonce, err := c.out.next()
	if err != nil {
		return dst, err
	}
	at := len(dst)
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return c.out.aead.Seal(dst, nonce, plaintext, dst[at:]), nil
}

// CloseWrite sends the authenticated close-write record, after which the peer's Read returns
// io.EOF, and half-closes the underlying conn if it supports CloseWrite. Later Writes fail.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == errWriteClosed {
		return nil
	}
	if err := c.sendCloseWrite(); err != nil {
		return err
	}
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// sendCloseWrite sends the close-write record; the caller holds wmu.
func (c *Conn) sendCloseWrite() error {
	if c.werr != nil {
		return c.werr
	}
	var rec []byte
	var err error
	if c.datagram {
		rec, err = c.sealDatagram(c.wbuf[:0], recordCloseWrite, nil)
	} else {
		rec, err = c.seal(c.wbuf[:0], recordCloseWrite, nil)
		c.wbuf = rec[:0]
	}
	if err != nil {
		c.werr = err
		return err
	}
	if err := c.send(rec); err != nil {
		return err
	}
	c.werr = errWriteClosed
	return nil
}

// Read returns decrypted data in the order it was written. In stream mode it returns
// io.EOF once the peer's close-write record arrived, and an error wrapping
// io.ErrUnexpectedEOF if the stream ended without it. In datagram mode each Read returns one
// datagram. An error wrapping ErrAuthentication means the data was tampered with on the path.
func (c *Conn) Read(p []byte) (int, error) {
	if c.datagram {
		return c.readDatagram(p)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	for {
		if len(c.pending) > 0 {
			k := copy(p[n:], c.pending)
			c.pending = c.pending[k:]
			n += k
		}
		// Once there is data to return, go on only with records that need no more reading.
		if n == len(p) || n > 0 && !c.recordBuffered() {
			return n, nil
		}
		if c.rerr != nil {
			if n > 0 {
				return n, nil
			}
			return 0, c.rerr
		}
		k, err := c.readRecord(p[n:])
		n += k
		if err != nil {
			if n > 0 {
				return n, nil // the error is sticky or will recur
			}
			return 0, err
		}
	}
}

// readRecord reads and opens the next stream record. A data record is decrypted straight
// into p when it fits (and its length returned), else into rbuf, left in c.pending.
func (c *Conn) readRecord(p []byte) (int, error) {
	if c.finished != nil {
		if err := c.readFinished(); err != nil {
			return 0, err
		}
	}
	if err := c.fill(headerLen); err != nil {
		return 0, err
	}
	header := c.rbuf[c.roff : c.roff+headerLen]
	length := int(header[1])<<16 | int(header[2])<<8 | int(header[3])
	if length < tagSize || length > maxCiphertext {
		c.rerr = fmt.Errorf("%w: record length %d out of range", ErrAuthentication, length)
		return 0, c.rerr
	}
	if err := c.fill(headerLen + length); err != nil {
		return 0, err
	}
	header = c.rbuf[c.roff : c.roff+headerLen]
	ciphertext := c.rbuf[c.roff+headerLen : c.roff+headerLen+length]
	c.roff += headerLen + length

	nonce, err := c.in.next()
	if err != nil {
		c.rerr = err
		return 0, err
	}
	dst := ciphertext[:0]
	if len(p) >= length-tagSize {
		dst = p[:0]
	}
	plaintext, err := c.in.aead.Open(dst, nonce, ciphertext, header)
	if err != nil {
		c.rerr = fmt.Errorf("%w: record %d: %w", ErrAuthentication, c.in.seq-1, err)
		return 0, c.rerr
	}
	return c.deliver(header[0], plaintext, len(p) >= len(plaintext))
}

// readFinished reads and checks the ServerFinished message that a client with
// Config.FalseStart gets before the server's first record: in stream mode from rbuf, in
// datagram mode as one message.
func (c *Conn) readFinished() error {
	var msg []byte
	if c.datagram {
		n, err := c.conn.Read(c.rbuf)
		if err != nil {
			return c.finishedError(c.readError(err))
		}
		msg = c.rbuf[:n]
	} else {
		if err := c.fill(headerLen); err != nil {
			return c.finishedError(err)
		}
		if c.rbuf[c.roff] == msgServerFinished {
			if err := c.fill(headerLen + finishedLen); err != nil {
				return c.finishedError(err)
			}
		}
		msg = c.rbuf[c.roff:min(c.rend, c.roff+headerLen+finishedLen)]
	}
	if len(msg) != headerLen+finishedLen || msg[0] != msgServerFinished || msg[1] != 0 || msg[2] != 0 || msg[3] != finishedLen {
		if len(msg) == 0 {
			c.rerr = fmt.Errorf("%w: expected ServerFinished, got nothing", ErrAuthentication)
		} else {
			c.rerr = fmt.Errorf("%w: expected ServerFinished, got a message of type %d, %d bytes", ErrAuthentication, msg[0], len(msg))
		}
		return c.rerr
	}
	if !hmac.Equal(msg[headerLen:], c.finished) {
		c.rerr = fmt.Errorf("%w: wrong ServerFinished", ErrAuthentication)
		return c.rerr
	}
	if !c.datagram {
		c.roff += headerLen + finishedLen
	}
	c.finished = nil
	if c.ticket != nil {
		c.tickets.hold(c.ticket)
		c.ticket, c.tickets = nil, nil
	}
	return nil
}

// finishedError is err of a read that should have brought ServerFinished: the server may
// have refused this end.
func (c *Conn) finishedError(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return err // a Read may retry
	}
	c.rerr = fmt.Errorf("e2ee: receive handshake message %d: %w (the server may have rejected this identity)", msgServerFinished, err)
	return c.rerr
}

// deliver handles an opened record of type typ: data is returned (if it was opened into the
// caller's buffer, inP) or kept pending; close-write ends the stream.
func (c *Conn) deliver(typ byte, plaintext []byte, inP bool) (int, error) {
	switch {
	case typ == recordData && inP:
		return len(plaintext), nil
	case typ == recordData:
		c.pending = plaintext
		return 0, nil
	case typ == recordCloseWrite && len(plaintext) == 0:
		c.rerr = io.EOF
		return 0, io.EOF
	default:
		c.rerr = fmt.Errorf("e2ee: unexpected record type %#x with %d bytes", typ, len(plaintext))
		return 0, c.rerr
	}
}

// fill reads from conn until rbuf holds at least n unopened bytes (n is at most one
// record), growing rbuf for a record larger than it.
func (c *Conn) fill(n int) error {
	if c.roff == c.rend {
		c.roff, c.rend = 0, 0
	}
	for c.rend-c.roff < n {
		if c.roff+n > len(c.rbuf) {
			if n > len(c.rbuf) {
				c.growReadBuffer(n)
			} else {
				c.rend = copy(c.rbuf, c.rbuf[c.roff:c.rend])
				c.roff = 0
			}
		}
		k, err := c.conn.Read(c.rbuf[c.rend:])
		c.rend += k
		if err != nil && c.rend-c.roff < n {
			return c.readError(err)
		}
		if c.rend == len(c.rbuf) && len(c.rbuf) < readAhead*maxRecordLen {
			// The peer sends faster than the buffer holds per read: read ahead.
			c.growReadBuffer(0)
		}
	}
	return nil
}

// growReadBuffer doubles rbuf, or more if it must hold n bytes, up to readAhead records,
// keeping the unopened bytes at its start.
func (c *Conn) growReadBuffer(n int) {
	grown := make([]byte, min(max(2*len(c.rbuf), n), readAhead*maxRecordLen))
	c.rend = copy(grown, c.rbuf[c.roff:c.rend])
	c.rbuf, c.roff = grown, 0
}

// recordBuffered reports whether rbuf holds a whole record, which Read can open without
// blocking.
func (c *Conn) recordBuffered() bool {
	b := c.rbuf[c.roff:c.rend]
	return len(b) >= headerLen && len(b) >= headerLen+(int(b[1])<<16|int(b[2])<<8|int(b[3]))
}

// readError turns an error of the underlying Read into the one Read returns. A timeout may
// be retried; anything else ends the Conn for reading; an end of stream that the peer did not
// announce with close-write is a truncation.
func (c *Conn) readError(err error) error {
	if errors.Is(err, io.EOF) {
		c.rerr = fmt.Errorf("e2ee: stream ended without the peer's close-write: %w", io.ErrUnexpectedEOF)
		return c.rerr
	}
	err = fmt.Errorf("e2ee: read: %w", err)
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		c.rerr = err
	}
	return err
}

// readDatagram reads one message, opens it as a datagram record whose sequence number must
// be above the last one's, and returns its data.
func (c *Conn) readDatagram(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rerr != nil {
		return 0, c.rerr
	}
	if c.finished != nil {
		if err := c.readFinished(); err != nil {
			return 0, err
		}
	}
	n, err := c.conn.Read(c.rbuf)
	if err != nil {
		return 0, c.readError(err)
	}
	if n < datagramHeaderLen+tagSize {
		c.rerr = fmt.Errorf("%w: datagram of %d bytes is too short", ErrAuthentication, n)
		return 0, c.rerr
	}
	header, ciphertext := c.rbuf[:datagramHeaderLen], c.rbuf[datagramHeaderLen:n]
	seq := binary.BigEndian.Uint64(header[1:])
	if seq < c.in.seq || seq == math.MaxUint64 {
		c.rerr = fmt.Errorf("%w: datagram %d replayed or out of order (expected at least %d)", ErrAuthentication, seq, c.in.seq)
		return 0, c.rerr
	}
	dst := ciphertext[:0]
	if len(p) >= len(ciphertext)-tagSize {
		dst = p[:0]
	}
	plaintext, err := c.in.aead.Open(dst, c.in.nonceFor(seq), ciphertext, header)
	if err != nil {
		c.rerr = fmt.Errorf("%w: datagram %d: %w", ErrAuthentication, seq, err)
		return 0, c.rerr
	}
	c.in.seq = seq + 1
	inP := len(p) >= len(plaintext)
	if _, err := c.deliver(header[0], plaintext, inP); err != nil || inP {
		return len(plaintext), err
	}
	k := copy(p, c.pending)
	c.pending = nil
	return k, fmt.Errorf("e2ee: datagram of %d bytes truncated to %d: %w", len(plaintext), k, io.ErrShortBuffer)
}

// Close sends the close-write record unless the write side is closed or busy (a Write in
// progress, which Close then interrupts), and closes the underlying conn.
func (c *Conn) Close() error {
	var closeWriteErr error
	if c.wmu.TryLock() {
		if c.werr == nil {
			c.conn.SetWriteDeadline(time.Now().Add(closeTimeout))
			closeWriteErr = c.sendCloseWrite()
		}
		c.werr = net.ErrClosed
		c.wmu.Unlock()
	}
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("e2ee: close: %w", err)
	}
	if closeWriteErr != nil {
		return fmt.Errorf("e2ee: close: sending close-write: %w", closeWriteErr)
	}
	return nil
}

// Cipher returns the AEAD protecting the records.
func (c *Conn) Cipher() Cipher { return c.cipher }

// Resumed reports whether the handshake resumed an earlier one's session with a ticket
// instead of running in full.
func (c *Conn) Resumed() bool { return c.resumed }

// PeerCertificates returns the chain the peer presented and proved to hold the key of, leaf
// first, as accepted by Config.VerifyPeer.
func (c *Conn) PeerCertificates() []*x509.Certificate { return c.peerChain }

// LocalAddr returns the underlying conn's local address.
func (c *Conn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr returns the underlying conn's remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// SetDeadline sets the underlying conn's deadlines. A Read timing out may be retried; a
// Write timing out fails the Conn for writing, as part of a record may have been sent.
func (c *Conn) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// SetReadDeadline sets the underlying conn's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// SetWriteDeadline sets the underlying conn's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }
