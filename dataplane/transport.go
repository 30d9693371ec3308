package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/tlscork"
)

// The transport listener (listener binding transport) is the fabric on-ramp: a client
// connects with TLS 1.3 and a certificate of an identity of the network, sends a hello that
// names the service (one byte of length, then the name), and the rest of the connection is
// the circuit, dialed as that identity.

// transportHelloTimeout bounds the TLS handshake and the hello.
const transportHelloTimeout = 10 * time.Second

// startTransportListeners opens the transport listeners.
func (r *Router) startTransportListeners(ctx context.Context, wg *sync.WaitGroup) error {
	for _, l := range r.cfg.Listeners {
		if l.Binding != config.BindingTransport || l.Bind == nil {
			continue
		}
		addr, err := r.listenClients(ctx, wg, "transport", l.Bind, r.serveTransport)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.transportAddr = append(r.transportAddr, addr)
		r.mu.Unlock()
	}
	return nil
}

// listenClients listens on bind for clients that present a certificate of an identity of
// the network over TLS 1.3, and serves each connection with serve on its own goroutine until
// ctx ends; it returns the address it listens on.
func (r *Router) listenClients(ctx context.Context, wg *sync.WaitGroup, kind string, bind *config.Address, serve func(context.Context, *tlscork.Batched)) (string, error) {
	ln, err := net.Listen("tcp", bind.HostPort())
	if err != nil {
		return "", fmt.Errorf("listeners: %s %s: %w", kind, bind, err)
	}
	tc := &tls.Config{
		GetCertificate: r.ident.Certs.GetCertificate,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      r.ident.CAs,
		MinVersion:     tls.VersionTLS13,
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	wg.Go(func() {
		defer stop()
		var conns sync.WaitGroup
		defer conns.Wait()
		var wait time.Duration // after a failed accept (e.g. out of file descriptors)
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				wait = min(max(2*wait, 5*time.Millisecond), time.Second)
				time.Sleep(wait)
				continue
			}
			wait = 0
			cc := tlscork.New(c.(*net.TCPConn), &r.clientBufs, edgeproto.CorkSize)
			conns.Go(func() { serve(ctx, tlscork.NewBatched(tls.Server(cc, tc), cc, edgeproto.CorkSize)) })
		}
	})
	return ln.Addr().String(), nil
}

// TransportAddresses returns where the transport listeners listen, once ready.
func (r *Router) TransportAddresses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.transportAddr...)
}

func (r *Router) serveTransport(ctx context.Context, c *tlscork.Batched) {
	c.SetDeadline(time.Now().Add(transportHelloTimeout))
	if err := c.HandshakeContext(ctx); err != nil {
		r.log.Debug("transport listener: handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	c.ReadAhead(edgeproto.ReadAhead)
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil || n[0] == 0 {
		r.log.Debug("transport listener: no hello", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	name := make([]byte, n[0])
	if _, err := io.ReadFull(c, name); err != nil {
		r.log.Debug("transport listener: short hello", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	leaf := c.ConnectionState().PeerCertificates[0]
	r.carry(ctx, c, &ctrlproto.CircuitRequest{ServiceName: string(name), ClientCert: leaf.Raw})
}
