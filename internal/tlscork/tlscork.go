// Package tlscork carries TLS over TCP in fewer system calls. crypto/tls writes every
// record of at most 16 KiB with a system call of its own and reads little more than a
// record at a time; on loopback or a fast network those calls cost more than the
// encryption. A Conn is the TCP connection under a TLS connection: corked, it gathers the
// records TLS writes and sends them in one system call per size bytes; reading ahead, it
// reads as much as has arrived. The link's writer corks a batch of frames (package link);
// Batched corks each Write, for connections whose writer writes large chunks (the smux
// sessions of the SDK listener and of the SDK).
package tlscork

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
)

// Conn is the TCP connection under a TLS connection. Uncorked, it writes at once. Corked,
// it gathers what TLS writes, up to the size given to Cork, and writes it in one system
// call when that is reached and at Uncork. Buffers of the pool's size are borrowed for the
// time of a batch, so that idle connections hold none; buffers of other sizes are kept. TLS
// writes from other goroutines too (a KeyUpdate reply from the reader, the close_notify
// alert); mu keeps their records whole and in order. Once ReadAhead was called, reads go
// through a buffer, so that TLS takes what has arrived with fewer system calls.
type Conn struct {
	*net.TCPConn
	pool     *sync.Pool // of *[]byte with a capacity of poolSize; nil for none
	poolSize int
	br       *bufio.Reader // set by the reader before it reads, once the handshake is done

	mu     sync.Mutex
	corked bool
	buf    []byte  // what was gathered; its capacity is the most gathered
	lent   *[]byte // the buffer borrowed from pool, while corked
	own    []byte  // the buffer of other sizes
}

// New returns tcp ready to carry TLS; corked batches of poolSize bytes borrow their buffer
// from pool (nil: every Conn keeps its own).
func New(tcp *net.TCPConn, pool *sync.Pool, poolSize int) *Conn {
	return &Conn{TCPConn: tcp, pool: pool, poolSize: poolSize}
}

// TCP returns the TCP connection.
func (c *Conn) TCP() *net.TCPConn { return c.TCPConn }

func (c *Conn) Read(p []byte) (int, error) {
	if c.br != nil {
		return c.br.Read(p)
	}
	return c.TCPConn.Read(p)
}

// ReadAhead has reads go through a buffer of size bytes. Only the reader calls it, before
// it reads; nothing has been read ahead before.
func (c *Conn) ReadAhead(size int) {
	if c.br == nil {
		c.br = bufio.NewReaderSize(c.TCPConn, size)
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return c.TCPConn.Write(p)
	}
	if len(c.buf)+len(p) > cap(c.buf) {
		if err := c.flush(); err != nil {
			return 0, err
		}
		if len(p) >= cap(c.buf) {
			return c.TCPConn.Write(p)
		}
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// Cork starts gathering writes, at most size bytes.
func (c *Conn) Cork(size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case size == c.poolSize && c.pool != nil:
		c.lent, _ = c.pool.Get().(*[]byte)
		if c.lent == nil {
			b := make([]byte, 0, size)
			c.lent = &b
		}
		c.buf = (*c.lent)[:0]
	default:
		if cap(c.own) != size {
			c.own = make([]byte, 0, size)
		}
		c.buf = c.own[:0]
	}
	c.corked = true
}

// Uncork writes what was gathered and stops gathering.
func (c *Conn) Uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.flush()
	if c.lent != nil {
		*c.lent = c.buf[:0]
		c.pool.Put(c.lent)
		c.lent = nil
	}
	c.corked, c.buf = false, nil
	return err
}

// flush writes what was gathered; mu is held.
func (c *Conn) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.TCPConn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// Batched is a TLS connection over a Conn whose every Write is corked: the records of one
// Write leave in one system call per size bytes.
type Batched struct {
	*tls.Conn
	under *Conn
	size  int
	mu    sync.Mutex // one corked Write at a time
}

// NewBatched returns tc, which runs over under, with every Write corked at size bytes.
func NewBatched(tc *tls.Conn, under *Conn, size int) *Batched {
	return &Batched{Conn: tc, under: under, size: size}
}

func (b *Batched) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.under.Cork(b.size)
	n, err := b.Conn.Write(p)
	if uerr := b.under.Uncork(); err == nil {
		err = uerr
	}
	return n, err
}

// Close closes the connection. With no Write running it sends TLS's close_notify first; while
// one runs (its records may be corked), it closes the TCP connection at once, as crypto/tls
// does when a Write is in progress, rather than let the alert go into the corked buffer.
func (b *Batched) Close() error {
	if !b.mu.TryLock() {
		return b.under.Close()
	}
	defer b.mu.Unlock()
	return b.Conn.Close()
}

// ReadAhead has the reads of the connection under b go through a buffer of size bytes; see
// Conn.ReadAhead.
func (b *Batched) ReadAhead(size int) { b.under.ReadAhead(size) }
