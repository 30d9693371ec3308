package interop

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"
)

// The exchange is the byte protocol the suite's own servers speak over any circuit, so that
// what crossed it either way is checked byte for byte: the client sends a header, then its
// up bytes while it reads the server's down bytes; the server reads the up bytes, then
// answers one verdict byte after its down bytes, and waits for the next exchange on the same
// connection until the client closes it. Checked payloads are two seeded ChaCha8 streams (one per direction),
// which each receiver generates again to compare; unchecked ones (throughput) are zeros.
type exchange struct {
	seed     uint64
	up, down int64 // bytes client -> server, server -> client
	checked  bool
	chunk    int // the client's bytes per Write
}

const (
	headerSize = 8 + 8 + 8 + 1
	verdictOK  = 'K'
	verdictBad = 'X'
	maxChunk   = 1 << 20 // the most bytes one Write carries
)

// Directions of a checked exchange, part of each stream's seed.
const (
	dirUp byte = iota + 1
	dirDown
)

// stream is the checked payload of one direction of an exchange.
func stream(seed uint64, dir byte) *rand.ChaCha8 {
	var key [32]byte
	binary.BigEndian.PutUint64(key[:], seed)
	key[8] = dir
	return rand.NewChaCha8(key)
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// source is what one side sends: the direction's stream, or zeros when unchecked.
func source(seed uint64, dir byte, checked bool) io.Reader {
	if checked {
		return stream(seed, dir)
	}
	return zeros{}
}

// verifier is a writer that compares what is written with a stream, failing at the first
// byte that differs.
type verifier struct {
	want *rand.ChaCha8
	buf  []byte
	off  int64
}

func (v *verifier) Write(p []byte) (int, error) {
	if cap(v.buf) < len(p) {
		v.buf = make([]byte, len(p))
	}
	want := v.buf[:len(p)]
	_, _ = v.want.Read(want)
	if i := firstDiff(p, want); i >= 0 {
		return i, fmt.Errorf("byte %d differs from what was sent", v.off+int64(i))
	}
	v.off += int64(len(p))
	return len(p), nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// sink is where one side's received bytes go: a verifier, or nowhere when unchecked.
func sink(seed uint64, dir byte, checked bool) io.Writer {
	if checked {
		return &verifier{want: stream(seed, dir)}
	}
	return io.Discard
}

// send copies n bytes of src to w, at most chunk bytes per Write. The wrappers keep io's
// ReaderFrom and WriterTo shortcuts out, so that chunk holds.
func send(w io.Writer, src io.Reader, n int64, chunk int) error {
	_, err := io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(struct{ io.Reader }{src}, n), make([]byte, chunk))
	return err
}

// receive reads exactly n bytes of r into dst.
func receive(dst io.Writer, r io.Reader, n int64) error {
	got, err := io.CopyBuffer(struct{ io.Writer }{dst}, io.LimitReader(struct{ io.Reader }{r}, n), make([]byte, 64<<10))
	if err == nil && got < n {
		err = fmt.Errorf("read %d of %d bytes: %w", got, n, io.ErrUnexpectedEOF)
	}
	return err
}

// run carries out the exchange as its client on conn (which it does not close) and returns
// how long it took from the header to the verdict.
func (e exchange) run(conn net.Conn, deadline time.Time) (time.Duration, error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return 0, err
	}
	defer conn.SetDeadline(time.Time{})
	chunk := e.chunk
	if chunk <= 0 || chunk > maxChunk {
		chunk = maxChunk
	}
	var hdr [headerSize]byte
	binary.BigEndian.PutUint64(hdr[0:], e.seed)
	binary.BigEndian.PutUint64(hdr[8:], uint64(e.up))
	binary.BigEndian.PutUint64(hdr[16:], uint64(e.down))
	if e.checked {
		hdr[24] = 1
	}
	start := time.Now()
	if _, err := conn.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("write the header: %w", err)
	}
	sent := make(chan error, 1)
	go func() { sent <- send(conn, source(e.seed, dirUp, e.checked), e.up, chunk) }()
	recvErr := receive(sink(e.seed, dirDown, e.checked), conn, e.down)
	var verdict [1]byte
	if recvErr == nil {
		_, recvErr = io.ReadFull(conn, verdict[:])
	}
	if recvErr != nil || verdict[0] != verdictOK {
		_ = conn.SetDeadline(time.Now()) // the sender must not outlive a failure
	}
	took := time.Since(start)
	sendErr := <-sent
	switch {
	case recvErr != nil:
		return took, errors.Join(wrap("receive", recvErr), wrap("send", sendErr))
	case verdict[0] != verdictOK:
		return took, fmt.Errorf("the server found what it received differ from what was sent (verdict %q)", verdict[0])
	case sendErr != nil:
		return took, wrap("send", sendErr)
	}
	return took, nil
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// serveExchange is the server's end of exchanges on conn, one after another until the client
// closes it; it closes conn.
func serveExchange(conn net.Conn) error {
	defer conn.Close()
	for {
		var hdr [headerSize]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the client is done
			}
			return fmt.Errorf("read the header: %w", err)
		}
		seed := binary.BigEndian.Uint64(hdr[0:])
		up, down := int64(binary.BigEndian.Uint64(hdr[8:])), int64(binary.BigEndian.Uint64(hdr[16:]))
		checked := hdr[24] == 1
		sent := make(chan error, 1)
		go func() { sent <- send(conn, source(seed, dirDown, checked), down, maxChunk) }()
		recvErr := receive(sink(seed, dirUp, checked), conn, up)
		if err := <-sent; err != nil {
			return fmt.Errorf("send: %w", err)
		}
		verdict := []byte{verdictOK}
		if recvErr != nil {
			verdict[0] = verdictBad
		}
		if _, err := conn.Write(verdict); err != nil {
			return errors.Join(recvErr, err)
		}
		if recvErr != nil {
			return fmt.Errorf("receive: %w", recvErr)
		}
	}
}

// serveExchanges accepts connections until ln is closed and serves an exchange on each.
func serveExchanges(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { _ = serveExchange(conn) }()
	}
}
