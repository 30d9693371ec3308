package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// closeWriter is a connection whose sending direction can end on its own (TCP, Unix
// sockets, the SDK's and the router's circuit ends).
type closeWriter interface{ CloseWrite() error }

// A Relay joins connections in pairs (Join). The zero Relay is ready to use; a tunnel
// keeps one for all its connections, so that they share their copy buffers: a circuit
// through the end-to-end encryption or the SDK copies through a buffer, and allocating one
// for each direction of each circuit made the garbage collector a tenth of a hosting
// router's work at a high circuit rate.
type Relay struct {
	bufs sync.Pool // *[]byte of relayBufferSize
}

// relayBufferSize is the size of a copy buffer, io.Copy's own.
const relayBufferSize = 32 << 10

// Join copies a to b and b to a until both directions have ended, or ctx ends, and closes
// both. A direction that reads EOF ends the other side's sending direction (CloseWrite), so
// that a half-closed connection keeps carrying the other way; when the side cannot
// half-close, or a direction fails, both connections are closed at once.
func (r *Relay) Join(ctx context.Context, a, b net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	defer closeBoth()

	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		_, err := r.copy(dst, src)
		if err == nil || errors.Is(err, io.EOF) {
			if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
				return
			}
		}
		closeBoth()
	}
	wg.Go(func() { half(b, a) })
	half(a, b) // in Join's goroutine: one goroutine fewer per connection
	wg.Wait()
}

// copy copies src to dst until EOF or an error: in the kernel when one end is a TCP socket
// and the other a socket too (net.TCPConn's ReadFrom and WriteTo splice), otherwise through
// a buffer of the relay's.
func (r *Relay) copy(dst, src net.Conn) (int64, error) {
	_, dstTCP := dst.(*net.TCPConn)
	_, srcTCP := src.(*net.TCPConn)
	if (dstTCP || srcTCP) && isSocket(dst) && isSocket(src) {
		return io.Copy(dst, src)
	}
	bp, _ := r.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, relayBufferSize)
		bp = &b
	}
	defer r.bufs.Put(bp)
	// Hidden from io.CopyBuffer, which would otherwise let a TCP dst's ReadFrom copy
	// through a buffer of its own.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

func isSocket(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}
