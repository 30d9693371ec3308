package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// serve listens on addr, announces the bound address with ready, and runs handle in its own
// goroutine for every connection until ctx ends; then it closes the listener and every open
// connection and returns once all handlers have.
func serve(ctx context.Context, addr string, ready func(net.Addr) error, handle func(context.Context, net.Conn), log *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	if err := ready(ln.Addr()); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
		}
		wg.Go(func() {
			closeConn := context.AfterFunc(ctx, func() { conn.Close() })
			defer closeConn()
			defer conn.Close()
			log.Debug("connection", "from", conn.RemoteAddr())
			handle(ctx, conn)
		})
	}
}

// closeWriter is a connection that can half-close: *net.TCPConn and *tls.Conn.
type closeWriter interface {
	CloseWrite() error
}

// closeWrite half-closes conn if it can, and closes it otherwise.
func closeWrite(conn net.Conn) error {
	if cw, ok := conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return conn.Close()
}

// isClosed reports whether err is the ordinary end of a connection rather than a failure.
func isClosed(err error) bool {
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}
