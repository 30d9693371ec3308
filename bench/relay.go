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

// relayConfig is a relay worker's flags: every connection accepted on listen (plain TCP, TLS
// 1.3, or relayInE2E) is forwarded over a new connection to `to` (plain TCP or TLS 1.3). All
// TLS sides authenticate with the one certificate, which is also the only trusted root.
type relayConfig struct {
	listen, to string
	in, out    string
	cert, key  string
}

// relayInE2E is the incoming side of BaselineE2ERelay's far relay: TLS 1.3 (the link), and
// inside it a second TLS 1.3 session (end to end from the load generator) whose plaintext
// is forwarded.
const relayInE2E = "tls-e2e"

// runRelay forwards connections as cfg says until ctx ends.
func runRelay(ctx context.Context, cfg relayConfig, ready func(net.Addr) error, log *slog.Logger) error {
	if cfg.to == "" {
		return errors.New("relay: --to is required")
	}
	if cfg.in != "tcp" && cfg.in != "tls" && cfg.in != relayInE2E {
		return fmt.Errorf("relay: --in %q is not allowed; allowed: tcp, tls, %s", cfg.in, relayInE2E)
	}
	if cfg.out != "tcp" && cfg.out != "tls" {
		return fmt.Errorf("relay: --out %q is not allowed; allowed: tcp, tls", cfg.out)
	}
	var server, client *tls.Config
	if cfg.in != "tcp" || cfg.out == "tls" {
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
		layers := 0
		switch cfg.in {
		case "tls":
			layers = 1
		case relayInE2E:
			layers = 2
		}
		for range layers {
			conn := tls.Server(in, server)
			hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
			err := conn.HandshakeContext(hctx)
			cancel()
			if err != nil {
				log.Warn("relay: TLS handshake failed", "from", in.RemoteAddr(), "err", err)
				in.Close()
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
