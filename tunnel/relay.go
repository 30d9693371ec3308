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

// Join copies a to b and b to a until both directions have ended, or ctx ends, and closes
// both. A direction that reads EOF ends the other side's sending direction (CloseWrite), so
// that a half-closed connection keeps carrying the other way; when the side cannot
// half-close, or a direction fails, both connections are closed at once.
func Join(ctx context.Context, a, b net.Conn) {
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
		_, err := io.Copy(dst, src)
		if err == nil || errors.Is(err, io.EOF) {
			if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
				return
			}
		}
		closeBoth()
	}
	wg.Go(func() { half(b, a) })
	wg.Go(func() { half(a, b) })
	wg.Wait()
}
