package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Streams for end-to-end tests that check every byte without holding the data: each
// direction of a connection carries the output of a ChaCha8 generator seeded by a number,
// and the receiving side regenerates it and compares. A receiver therefore knows exactly how
// many bytes arrived intact and whether any byte differed (corruption, loss, duplication or
// reordering), so that a connection cut short can be told from one that delivered garbage.

// genStream returns the data of seed.
func genStream(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	binary.BigEndian.PutUint64(s[:], seed)
	s[31] = 0x5a
	return rand.NewChaCha8(s)
}

// check compares what it is written with the data of its seed.
type check struct {
	gen  *rand.ChaCha8
	want []byte
	n    atomic.Int64 // bytes that matched
	bad  atomic.Bool  // a byte differed; n stops at the first one
}

func newCheck(seed uint64) *check { return &check{gen: genStream(seed)} }

func (c *check) Write(p []byte) (int, error) {
	if c.bad.Load() {
		return len(p), nil
	}
	if cap(c.want) < len(p) {
		c.want = make([]byte, len(p))
	}
	want := c.want[:len(p)]
	c.gen.Read(want)
	if !bytes.Equal(p, want) {
		i := 0
		for p[i] == want[i] {
			i++
		}
		c.n.Add(int64(i))
		c.bad.Store(true)
		return len(p), nil
	}
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// err says whether exactly size intact bytes arrived.
func (c *check) err(size int64) error {
	switch n := c.n.Load(); {
	case c.bad.Load():
		return fmt.Errorf("byte %d differs from what was sent", n)
	case n != size:
		return fmt.Errorf("%d of %d bytes arrived", n, size)
	}
	return nil
}

// sendStream writes size bytes of seed's data to w.
func sendStream(w io.Writer, seed uint64, size int64) (int64, error) {
	return io.CopyBuffer(w, io.LimitReader(genStream(seed), size), make([]byte, 256<<10))
}

// header is what a client sends first: the seed of its own data, and the seed and size of
// the data the server is to send back.
type header struct{ up, down, downSize uint64 }

const headerSize = 24

func (h header) bytes() []byte {
	b := binary.BigEndian.AppendUint64(nil, h.up)
	b = binary.BigEndian.AppendUint64(b, h.down)
	return binary.BigEndian.AppendUint64(b, h.downSize)
}

// result is what the server saw of one connection: the intact bytes it read and how the
// connection ended.
type result struct {
	read    int64
	corrupt bool
	err     error // of reading (nil on EOF) or writing
	wrote   int64
}

// streamServer sends each client the data its header asks for while it checks the client's
// data, and keeps what it saw, by the client's seed.
type streamServer struct {
	ln     net.Listener
	conns  atomic.Int64 // connections accepted
	active atomic.Int64 // connections not closed yet

	mu      sync.Mutex
	results map[uint64]chan result
	open    map[net.Conn]bool
}

func newStreamServer(t testing.TB) *streamServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &streamServer{ln: ln, results: map[uint64]chan result{}, open: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.active.Add(1)
			s.mu.Lock()
			s.open[c] = true
			s.mu.Unlock()
			wg.Go(func() {
				s.serve(c)
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
				s.active.Add(-1)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.open {
			c.Close() // a test that failed may leave connections open
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *streamServer) addr() string { return s.ln.Addr().String() }

func (s *streamServer) slot(seed uint64) chan result {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.results[seed]
	if ch == nil {
		ch = make(chan result, 1)
		s.results[seed] = ch
	}
	return ch
}

// serve answers one connection. Small answers are written before reading, on this
// goroutine, so that a thousand connections cost a thousand goroutines.
func (s *streamServer) serve(c net.Conn) {
	defer c.Close()
	var hb [headerSize]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		return
	}
	h := header{binary.BigEndian.Uint64(hb[:]), binary.BigEndian.Uint64(hb[8:]), binary.BigEndian.Uint64(hb[16:])}
	var res result
	send := func() {
		res.wrote, res.err = sendStream(c, h.down, int64(h.downSize))
		c.(*net.TCPConn).CloseWrite()
	}
	chk := newCheck(h.up)
	var wg sync.WaitGroup
	if h.downSize <= 64<<10 {
		send()
	} else {
		wg.Go(send)
	}
	_, rerr := io.Copy(chk, c)
	wg.Wait()
	res.read, res.corrupt = chk.n.Load(), chk.bad.Load()
	res.err = errors.Join(res.err, rerr)
	s.slot(h.up) <- res
}

// wait returns what the server saw of the connection whose client data has seed up.
func (s *streamServer) wait(up uint64, timeout time.Duration) (result, error) {
	select {
	case r := <-s.slot(up):
		return r, nil
	case <-time.After(timeout):
		return result{}, fmt.Errorf("the server did not finish the connection of seed %d within %s", up, timeout)
	}
}

var seeds atomic.Uint64

// client is one connection to a streamServer through the overlay.
type client struct {
	c        net.Conn
	h        header
	upSize   int64
	got      *check
	sent     atomic.Int64
	readDone chan error // the result of reading to the end
}

// dialClient connects through addr and sends the header; nothing else runs yet.
func dialClient(addr string, upSize, downSize int64) (*client, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	cl := &client{c: c, upSize: upSize, readDone: make(chan error, 1),
		h: header{up: seeds.Add(1)<<20 | 1, down: seeds.Add(1)<<20 | 2, downSize: uint64(downSize)}}
	cl.got = newCheck(cl.h.down)
	if _, err := c.Write(cl.h.bytes()); err != nil {
		c.Close()
		return nil, err
	}
	return cl, nil
}

// send writes the client's data and ends the sending direction.
func (cl *client) send() error {
	n, err := sendStream(cl.c, cl.h.up, cl.upSize)
	cl.sent.Store(n)
	if err != nil {
		return err
	}
	return cl.c.(*net.TCPConn).CloseWrite()
}

// receive reads to the end, checking the data; it reports on readDone too.
func (cl *client) receive() error {
	_, err := io.Copy(cl.got, cl.c)
	cl.readDone <- err
	return err
}

// transfer runs both directions through addr and checks both arrived whole: the client's
// reading and the server's, each within timeout.
func transfer(srv *streamServer, addr string, upSize, downSize int64, timeout time.Duration) error {
	cl, err := dialClient(addr, upSize, downSize)
	if err != nil {
		return err
	}
	defer cl.c.Close()
	cl.c.SetDeadline(time.Now().Add(timeout))
	errc := make(chan error, 1)
	go func() { errc <- cl.send() }()
	rerr := cl.receive()
	serr := <-errc
	if err := errors.Join(rerr, serr); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := cl.got.err(downSize); err != nil {
		return fmt.Errorf("server to client: %w", err)
	}
	return cl.serverSaw(srv, upSize, timeout)
}

// serverSaw checks that the server read exactly upSize intact bytes of the client's data.
func (cl *client) serverSaw(srv *streamServer, upSize int64, timeout time.Duration) error {
	res, err := srv.wait(cl.h.up, timeout)
	if err != nil {
		return err
	}
	switch {
	case res.corrupt:
		return fmt.Errorf("client to server: byte %d differs", res.read)
	case res.read != upSize:
		return fmt.Errorf("client to server: %d of %d bytes arrived", res.read, upSize)
	case res.err != nil:
		return fmt.Errorf("server: %w", res.err)
	}
	return nil
}
