package quickstart

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// echoServer is the demo service: it writes back every byte it reads, and closes its side
// for writing once the client closed its own, so that `echo hello | nc -N` ends.
type echoServer struct {
	ln net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func listenEcho(addr string) (*echoServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &echoServer{ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

// serve answers connections until ctx ends, then closes the listener and every connection
// and returns once their goroutines are done.
func (e *echoServer) serve(ctx context.Context) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() {
		e.ln.Close()
		e.mu.Lock()
		for c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
	})
	defer func() {
		stop()
		wg.Wait()
	}()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		e.mu.Lock()
		if ctx.Err() != nil { // the AfterFunc already closed the others
			e.mu.Unlock()
			c.Close()
			continue
		}
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		wg.Go(func() {
			defer func() {
				e.mu.Lock()
				delete(e.conns, c)
				e.mu.Unlock()
				c.Close()
			}()
			if _, err := io.Copy(c, c); err == nil || errors.Is(err, io.EOF) {
				if cw, ok := c.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
			}
		})
	}
}
