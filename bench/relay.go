package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// handshakeTimeout bounds a relay's TLS handshakes.
const handshakeTimeout = 10 * time.Second

// relayConfig is a relay worker's flags: every connection accepted on listen (plain TCP or
// TLS 1.3) is forwarded over a new connection to `to` (plain TCP or TLS 1.3). Both TLS sides
// authenticate with the one certificate, which is also the only trusted root.
type relayConfig struct {
	listen, to string
	in, out    string
	cert, key  string
}

// runRelay forwards connections as cfg says until ctx ends.
func runRelay(ctx context.Context, cfg relayConfig, ready func(net.Addr) error, log *slog.Logger) error {
	if cfg.to == "" {
		return errors.New("relay: --to is required")
	}
	for _, side := range []string{cfg.in, cfg.out} {
		if side != "tcp" && side != "tls" {
			return fmt.Errorf("relay: side %q is not allowed; allowed: tcp, tls", side)
		}
	}
	var server, client *tls.Config
	if cfg.in == "tls" || cfg.out == "tls" {
		var err error
		if server, client, err = loadTLS(cfg.cert, cfg.key); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	}
	var dial func(context.Context) (net.Conn, error)
	if cfg.out == "tls" {
		d := &tls.Dialer{Config: client}
		dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", cfg.to) }
	} else {
		var d net.Dialer
		dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", cfg.to) }
	}
	return serve(ctx, cfg.listen, ready, func(ctx context.Context, in net.Conn) {
		if cfg.in == "tls" {
			conn := tls.Server(in, server)
			hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
			err := conn.HandshakeContext(hctx)
			cancel()
			if err != nil {
				log.Warn("relay: TLS handshake failed", "from", in.RemoteAddr(), "err", err)
				return
			}
			in = conn
		}
		defer in.Close()
		out, err := dial(ctx)
		if err != nil {
			log.Warn("relay: dial failed", "to", cfg.to, "err", err)
			return
		}
		defer out.Close()
		if err := pipe(ctx, in, out); err != nil && ctx.Err() == nil {
			log.Warn("relay: connection failed", "from", in.RemoteAddr(), "err", err)
		}
	}, log)
}

// pipe copies a to b and b to a with io.Copy until both directions have ended. Each direction
// half-closes its destination at EOF so that a half-close travels through the relay; an error
// in either direction closes both connections.
func pipe(ctx context.Context, a, b net.Conn) error {
	abort := func() {
		a.Close()
		b.Close()
	}
	stop := context.AfterFunc(ctx, abort)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	forward := func(i int, dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			errs[i] = fmt.Errorf("copy %s to %s: %w", src.RemoteAddr(), dst.RemoteAddr(), err)
			abort()
			return
		}
		if err := closeWrite(dst); err != nil && !isClosed(err) {
			errs[i] = fmt.Errorf("half-close %s: %w", dst.RemoteAddr(), err)
		}
	}
	wg.Add(2)
	go forward(0, b, a)
	go forward(1, a, b)
	wg.Wait()
	return errors.Join(errs...)
}
