package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/zmesh/zmesh/sdk"
)

// The load generator's ways onto a path (Target.Via, the loadgen's --via):
const (
	// ViaTCP is a TCP connection to the target's address.
	ViaTCP = "tcp"
	// ViaTLSE2E is a TLS connection to the target's address (the edge hop), and inside it a
	// second TLS session to the far relay (end to end), for BaselineE2ERelay.
	ViaTLSE2E = "tls-e2e"
	// ViaSDK is a zmesh SDK client in the load generator's process dialing a service, as an
	// application embeds the SDK.
	ViaSDK = "sdk"
)

// loadConn is a connection of the load generator; every way onto a path can half-close.
type loadConn interface {
	net.Conn
	CloseWrite() error
}

// connector opens the load generator's connections to a path.
type connector struct {
	// target names the path in errors: an address, or the SDK's service.
	target string
	dial   func(ctx context.Context) (loadConn, error)
	close  func() error
}

// connectorConfig is the load generator's flags that say how it connects.
type connectorConfig struct {
	via       string
	addr      string
	cert, key string // tls-e2e: the relays' certificate, also the only trusted root
	identity  string // sdk: the client's identity file
	service   string // sdk: the service to dial
}

// newConnector returns the connector cfg describes; its close releases what it holds (the
// SDK client).
func newConnector(cfg connectorConfig) (*connector, error) {
	switch cfg.via {
	case "", ViaTCP:
		if cfg.addr == "" {
			return nil, errors.New("--addr is required")
		}
		d := &net.Dialer{Timeout: circuitTimeout}
		return &connector{target: cfg.addr, close: func() error { return nil }, dial: func(ctx context.Context) (loadConn, error) {
			c, err := d.DialContext(ctx, "tcp", cfg.addr)
			if err != nil {
				return nil, err
			}
			return c.(*net.TCPConn), nil
		}}, nil
	case ViaTLSE2E:
		if cfg.addr == "" {
			return nil, errors.New("--addr is required")
		}
		_, client, err := loadTLS(cfg.cert, cfg.key)
		if err != nil {
			return nil, err
		}
		inner := client.Clone()
		inner.ServerName = "127.0.0.1" // the far relay, reached through the edge hop
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: circuitTimeout}, Config: client}
		return &connector{target: cfg.addr, close: func() error { return nil }, dial: func(ctx context.Context) (loadConn, error) {
			edge, err := d.DialContext(ctx, "tcp", cfg.addr)
			if err != nil {
				return nil, err
			}
			e2e := tls.Client(edge, inner)
			if err := e2e.HandshakeContext(ctx); err != nil {
				edge.Close()
				return nil, fmt.Errorf("end-to-end TLS handshake through %s: %w", cfg.addr, err)
			}
			return e2e, nil
		}}, nil
	case ViaSDK:
		if cfg.identity == "" || cfg.service == "" {
			return nil, errors.New("--identity and --service are required with --via sdk")
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		client, err := sdk.Load(cfg.identity, sdk.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		return &connector{target: "service " + cfg.service, close: client.Close, dial: func(ctx context.Context) (loadConn, error) {
			ctx, cancel := context.WithTimeout(ctx, circuitTimeout)
			defer cancel()
			return client.Dial(ctx, cfg.service)
		}}, nil
	}
	return nil, fmt.Errorf("--via %q is not allowed; allowed: %s, %s, %s", cfg.via, ViaTCP, ViaTLSE2E, ViaSDK)
}
