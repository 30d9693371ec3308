package link

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/zmesh/zmesh/config"
)

// Listener accepts links from other routers on one link listener of the configuration.
// Each incoming connection is authenticated (TLS 1.3 with a client certificate of the
// network CA), then its hello is checked; a single connection becomes a link at once, the
// payload and ack connections of a split link once both have arrived.
type Listener struct {
	reg *Registry
	cfg config.LinkListener
	acc acceptor
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]*half // the first connection of split links, by link id
	stopped bool
}

// half is a connection of a split link waiting for the other.
type half struct {
	s     stream
	hello hello
	timer *time.Timer
}

// Listen binds cfg.Bind and accepts links until ctx ends; the links it accepted close then
// too. Over tls the bind address is a TCP one, over quic a UDP one.
func Listen(ctx context.Context, cfg config.LinkListener, reg *Registry) (*Listener, error) {
	if len(cfg.Groups) == 0 {
		return nil, fmt.Errorf("link listener %s: no groups", cfg.Bind)
	}
	acc, err := listen(cfg.Bind, reg.opts.Identity.serverTLS(), reg.opts.HandshakeTimeout)
	if err != nil {
		return nil, fmt.Errorf("link listener: %w", err)
	}
	l := &Listener{
		reg:     reg,
		cfg:     cfg,
		acc:     acc,
		log:     reg.opts.Log.With("listener", cfg.Bind.String()),
		pending: map[string]*half{},
	}
	go l.run(ctx)
	l.log.Info("link listener up", "advertise", cfg.Advertise.String(), "groups", cfg.Groups, "addr", acc.addr().String())
	return l, nil
}

// Addr is the bound address (useful with port 0).
func (l *Listener) Addr() net.Addr { return l.acc.addr() }

// Advertise is the address other routers dial, tls:<host>:<port> or quic:<host>:<port>.
func (l *Listener) Advertise() string { return l.cfg.Advertise.String() }

// Groups are the listener's link groups.
func (l *Listener) Groups() []string { return slices.Clone(l.cfg.Groups) }

func (l *Listener) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { l.acc.close() })
	defer stop()
	defer l.dropPending()
	for {
		open, err := l.acc.accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) || errors.Is(err, quic.ErrServerClosed) {
				return
			}
			l.log.Warn("accept link connection", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(acceptRetryPause):
			}
			continue
		}
		go l.serve(ctx, open)
	}
}

// serve authenticates one incoming connection and reads its hello.
func (l *Listener) serve(ctx context.Context, open func(context.Context) (stream, error)) {
	timeout := l.reg.opts.HandshakeTimeout
	hctx, cancel := context.WithTimeout(ctx, timeout)
	s, err := open(hctx)
	cancel()
	if err != nil {
		l.log.Warn("link connection refused", "reason", err.Error())
		return
	}
	h, err := serverHandshake(s, l.reg.opts.Identity.RouterID, l.cfg.Groups, timeout)
	if err != nil {
		l.log.Warn("link connection refused", "remote", s.RemoteAddr().String(),
			"certificate", s.peerCertificate().Subject.CommonName, "reason", err.Error())
		s.Close()
		return
	}
	if h.Role == RoleSingle {
		l.establish(ctx, h, s)
		return
	}
	l.pair(ctx, s, h)
}

// pair keeps the first connection of a split link until the second arrives, for at most
// the pair timeout, and makes the link of both.
func (l *Listener) pair(ctx context.Context, s stream, h hello) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		s.Close()
		return
	}
	first, ok := l.pending[h.LinkID]
	if !ok {
		w := &half{s: s, hello: h}
		w.timer = time.AfterFunc(l.reg.opts.PairTimeout, func() { l.expire(w) })
		l.pending[h.LinkID] = w
		l.mu.Unlock()
		return
	}
	delete(l.pending, h.LinkID)
	first.timer.Stop()
	l.mu.Unlock()

	if first.hello.RouterID != h.RouterID || first.hello.Role == h.Role {
		l.log.Warn("link connections refused: they do not pair", "link", h.LinkID,
			"first", first.hello.RouterID+"/"+string(first.hello.Role), "second", h.RouterID+"/"+string(h.Role))
		first.s.Close()
		s.Close()
		return
	}
	payload, ack := first.s, s
	if h.Role == RolePayload {
		payload, ack = s, first.s
	}
	l.establish(ctx, h, payload, ack)
}

// expire drops a connection whose partner did not come.
func (l *Listener) expire(w *half) {
	l.mu.Lock()
	if l.pending[w.hello.LinkID] != w {
		l.mu.Unlock()
		return
	}
	delete(l.pending, w.hello.LinkID)
	l.mu.Unlock()
	l.log.Warn("link connection dropped: its partner did not arrive", "link", w.hello.LinkID,
		"peer", w.hello.RouterID, "role", string(w.hello.Role), "waited", l.reg.opts.PairTimeout.String())
	w.s.Close()
}

func (l *Listener) dropPending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	for id, w := range l.pending {
		w.timer.Stop()
		w.s.Close()
		delete(l.pending, id)
	}
}

func (l *Listener) establish(ctx context.Context, h hello, streams ...stream) {
	lk := newLink(l.reg, h.LinkID, h.RouterID, h.RouterID, l.cfg.Bind.Transport, streams...)
	if err := l.reg.add(ctx, lk); err != nil {
		l.log.Info("link dropped", "link", h.LinkID, "peer", h.RouterID, "reason", err.Error())
	}
}
