package link

import (
	"bytes"
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
// payload and ack connections of a split link once all of them have arrived.
type Listener struct {
	reg *Registry
	cfg config.LinkListener
	acc acceptor
	log *slog.Logger

	mu      sync.Mutex
	pending map[pairKey]*pairing // split links whose connections are arriving
	stopped bool
}

// pairKey names a split link being paired: by the router that dialed it as well as by its
// id, so that a connection of another router, even one that knows the link id, can neither
// join the link nor disturb its pairing.
type pairKey struct{ routerID, linkID string }

// pairing holds the connections of a split link that have arrived, until all have or the
// pair timeout ends. Every connection must present the certificate the first one did,
// announce the same number of payload connections, and take a role (and payload index) not
// taken yet; one that does not is refused alone.
type pairing struct {
	key      pairKey
	cert     []byte   // the first connection's certificate (DER)
	payloads []stream // by index
	ack      stream
	arrived  int
	timer    *time.Timer
}

// Listen binds cfg.Bind and accepts links until ctx ends; the links it accepted close then
// too. Over tls the bind address is a TCP one, over quic a UDP one.
func Listen(ctx context.Context, cfg config.LinkListener, reg *Registry) (*Listener, error) {
	if len(cfg.Groups) == 0 {
		return nil, fmt.Errorf("link listener %s: no groups", cfg.Bind)
	}
	acc, err := listen(cfg.Bind, reg.opts.Identity.serverTLS(), reg.opts.HandshakeTimeout, &reg.bufs)
	if err != nil {
		return nil, fmt.Errorf("link listener: %w", err)
	}
	l := &Listener{
		reg:     reg,
		cfg:     cfg,
		acc:     acc,
		log:     reg.opts.Log.With("listener", cfg.Bind.String()),
		pending: map[pairKey]*pairing{},
	}
	go l.acceptLoop(ctx)
	l.log.Info("link listener up", "advertise", cfg.Advertise.String(), "groups", cfg.Groups, "addr", acc.addr().String())
	return l, nil
}

// Addr is the bound address (useful with port 0).
func (l *Listener) Addr() net.Addr { return l.acc.addr() }

// Advertise is the address other routers dial, tls:<host>:<port> or quic:<host>:<port>.
func (l *Listener) Advertise() string { return l.cfg.Advertise.String() }

// Groups are the listener's link groups.
func (l *Listener) Groups() []string { return slices.Clone(l.cfg.Groups) }

// acceptLoop accepts link connections and serves each on its own goroutine until ctx ends.
func (l *Listener) acceptLoop(ctx context.Context) {
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

// pair keeps the connections of a split link until all have arrived, for at most the pair
// timeout from the first, and makes the link of them.
func (l *Listener) pair(ctx context.Context, s stream, h hello) {
	key := pairKey{h.RouterID, h.LinkID}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		s.Close()
		return
	}
	p := l.pending[key]
	if p == nil && l.isUp(h.RouterID, h.LinkID) {
		// A late or repeated connection of a link that has formed: refused at once rather
		// than kept until the pair timeout.
		l.mu.Unlock()
		l.log.Warn("link connection refused", "link", h.LinkID, "peer", h.RouterID, "role", string(h.Role),
			"index", h.Index, "remote", s.RemoteAddr().String(), "reason", "the link is up already")
		s.Close()
		return
	}
	if p == nil {
		p = &pairing{key: key, cert: s.peerCertificate().Raw, payloads: make([]stream, h.payloads())}
		p.timer = time.AfterFunc(l.reg.opts.PairTimeout, func() { l.expire(p) })
		l.pending[key] = p
	}
	if err := p.add(s, h); err != nil {
		l.mu.Unlock()
		l.log.Warn("link connection refused", "link", h.LinkID, "peer", h.RouterID, "role", string(h.Role),
			"index", h.Index, "remote", s.RemoteAddr().String(), "reason", err.Error())
		s.Close()
		return
	}
	if p.arrived < len(p.payloads)+1 {
		l.mu.Unlock()
		return
	}
	delete(l.pending, key)
	p.timer.Stop()
	l.mu.Unlock()
	l.establish(ctx, h, append(p.payloads, p.ack)...)
}

// add takes connection s, whose hello is h, into the pairing, or says why it does not
// belong there.
func (p *pairing) add(s stream, h hello) error {
	switch {
	case !bytes.Equal(s.peerCertificate().Raw, p.cert):
		return errors.New("its certificate is not the one the link's first connection presented")
	case h.payloads() != len(p.payloads):
		return fmt.Errorf("it announces %d payload connections, the link's first connection %d", h.payloads(), len(p.payloads))
	case h.Role == RoleAck && p.ack != nil:
		return errors.New("the link has its ack connection already")
	case h.Role == RolePayload && p.payloads[h.Index] != nil:
		return fmt.Errorf("the link has its payload connection %d already", h.Index)
	case h.Role == RoleAck:
		p.ack = s
	default:
		p.payloads[h.Index] = s
	}
	p.arrived++
	return nil
}

// expire drops the connections of a split link whose other connections did not all come.
func (l *Listener) expire(p *pairing) {
	l.mu.Lock()
	if l.pending[p.key] != p {
		l.mu.Unlock()
		return
	}
	delete(l.pending, p.key)
	l.mu.Unlock()
	l.log.Warn("link connections dropped: the others did not arrive", "link", p.key.linkID,
		"peer", p.key.routerID, "arrived", p.arrived, "want", len(p.payloads)+1, "waited", l.reg.opts.PairTimeout.String())
	p.close()
}

// close closes the connections that have arrived.
func (p *pairing) close() {
	for _, s := range append(p.payloads, p.ack) {
		if s != nil {
			s.Close()
		}
	}
}

func (l *Listener) dropPending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	for key, p := range l.pending {
		p.timer.Stop()
		p.close()
		delete(l.pending, key)
	}
}

func (l *Listener) establish(ctx context.Context, h hello, streams ...stream) {
	lk := newLink(l.reg, h.LinkID, h.RouterID, h.RouterID, l.cfg.Bind.Transport, streams...)
	if err := l.reg.add(ctx, lk); err != nil {
		l.log.Info("link dropped", "link", h.LinkID, "peer", h.RouterID, "reason", err.Error())
	}
}

// isUp reports whether the link linkID to router peer is up.
func (l *Listener) isUp(peer, linkID string) bool {
	lk := l.reg.Get(peer)
	return lk != nil && lk.ID() == linkID
}
