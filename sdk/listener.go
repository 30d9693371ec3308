package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/edgeproto"
)

// Defaults of ListenOptions.
const (
	DefaultMaxBinds   = 2
	DefaultMaxPending = 64
)

// Delays between attempts to bring a listener back to its number of binds.
const (
	minRebindDelay = 500 * time.Millisecond
	maxRebindDelay = 15 * time.Second
)

// Precedence is a terminator's precedence: the controller chooses among the terminators of
// the best precedence present, required before default, failed only when nothing else is.
type Precedence string

// Precedences.
const (
	PrecedenceDefault  Precedence = "default"
	PrecedenceRequired Precedence = "required"
	PrecedenceFailed   Precedence = "failed"
)

// ListenOptions tune a Listen.
type ListenOptions struct {
	// Cost is the terminators' cost, which the controller adds to the path cost when it
	// chooses a terminator.
	Cost int
	// Precedence is the terminators' precedence; the zero value leaves it to the router
	// (PrecedenceDefault).
	Precedence Precedence
	// Identity, when set, hosts the service under this name, which dialers can ask for
	// (DialOptions.Identity).
	Identity string
	// MaxBinds is how many edge routers host the service at once, each with its own
	// terminator (DefaultMaxBinds): more than one keeps the service reachable while a router
	// restarts.
	MaxBinds int
	// MaxPending bounds the connections the routers opened that Accept has not returned yet,
	// key exchanges in progress included (DefaultMaxPending). Beyond it, routers are refused.
	MaxPending int
}

// Listen hosts a service by name: it creates (or reuses) a Bind session and binds on the
// fastest connected edge routers of the session (up to ListenOptions.MaxBinds), each bind
// making the router create a terminator. It returns once one bind succeeded. The listener
// binds again when a bind or its router connection ends, with a backoff, so that it keeps
// hosting through router restarts. Close removes the terminators.
func (c *Client) Listen(ctx context.Context, service string) (*Listener, error) {
	return c.ListenWithOptions(ctx, service, ListenOptions{})
}

// ListenWithOptions is Listen with options.
func (c *Client) ListenWithOptions(ctx context.Context, service string, opts ListenOptions) (*Listener, error) {
	if opts.MaxBinds <= 0 {
		opts.MaxBinds = DefaultMaxBinds
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	svc, err := c.ServiceByName(ctx, service)
	if err != nil {
		return nil, fmt.Errorf("sdk: listen %s: %w", service, err)
	}
	l := &Listener{c: c, svc: svc, opts: opts, log: c.log.With("service", svc.Name),
		accepted: make(chan *Conn), done: make(chan struct{}), changed: make(chan struct{}, 1),
		binds: map[*bind]struct{}{}, pending: map[*Conn]struct{}{}}
	l.ctx, l.cancel = context.WithCancel(c.life)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		l.cancel()
		return nil, ErrClosed
	}
	c.listeners[l] = struct{}{}
	c.mu.Unlock()

	var errs []error
	for attempt := 0; attempt < 2 && l.count() == 0; attempt++ {
		if err := l.bindMore(ctx); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				break
			}
		}
	}
	if l.count() == 0 {
		l.Close()
		if ctx.Err() == nil {
			c.forgetService(service) // it may have changed or gone
		}
		return nil, fmt.Errorf("sdk: listen %s: %w", service, errors.Join(errs...))
	}
	if !c.spawn(l.maintain) {
		l.Close()
		return nil, ErrClosed
	}
	return l, nil
}

// Listener hosts a service through binds on edge routers: a net.Listener whose Accept
// returns the circuits that reach the service, as *Conn. It is safe for concurrent use.
type Listener struct {
	c        *Client
	svc      Service
	opts     ListenOptions
	log      *slog.Logger
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	accepted chan *Conn    // connections handed to Accept
	done     chan struct{} // closed at Close
	changed  chan struct{} // a bind ended

	mu      sync.Mutex
	closed  bool
	binds   map[*bind]struct{}
	pending map[*Conn]struct{} // connected by a router, not yet returned by Accept
}

var _ net.Listener = (*Listener)(nil)

// Accept returns the next connection a router opened to one of the listener's binds, a
// *Conn. After Close it returns an error wrapping net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	conn, err := l.AcceptConn()
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// AcceptConn is Accept returning the *Conn.
func (l *Listener) AcceptConn() (*Conn, error) {
	select {
	case conn := <-l.accepted:
		return conn, nil
	case <-l.done:
		return nil, fmt.Errorf("sdk: accept %s: %w", l.svc.Name, net.ErrClosed)
	}
}

// Addr returns this identity hosting the service.
func (l *Listener) Addr() net.Addr { return Addr{Service: l.svc.Name, Identity: l.c.id} }

// Close stops hosting: it closes the bind streams (the routers remove the terminators) and
// the connections not accepted yet. Connections already accepted stay open.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	binds, pending := l.binds, l.pending
	l.binds, l.pending = map[*bind]struct{}{}, map[*Conn]struct{}{}
	l.mu.Unlock()
	close(l.done)
	l.cancel()
	for b := range binds {
		b.st.Close()
	}
	for conn := range pending {
		conn.stream.Close()
	}
	l.c.mu.Lock()
	delete(l.c.listeners, l)
	l.c.mu.Unlock()
	l.log.Info("stopped hosting")
	return nil
}

// count returns the number of live binds.
func (l *Listener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.binds)
}

// hostedOn reports whether a live bind runs over a connection to the router at url.
func (l *Listener) hostedOn(url string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for b := range l.binds {
		if b.rc.url == url && b.rc.alive() {
			return true
		}
	}
	return false
}

// add records a new bind; false when the listener is closed or the bind already ended.
func (l *Listener) add(b *bind) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-b.ended:
		return false
	default:
	}
	if l.closed {
		return false
	}
	l.binds[b] = struct{}{}
	return true
}

// bindEnded forgets a bind whose stream ended and wakes the maintainer.
func (l *Listener) bindEnded(b *bind) {
	l.mu.Lock()
	_, live := l.binds[b]
	delete(l.binds, b)
	closed := l.closed
	l.mu.Unlock()
	if live && !closed {
		l.log.Info("bind ended", "router", b.rc.name, "terminator", b.terminatorID)
	}
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// bindMore binds on the session's fastest routers that do not host the service yet, until
// the listener has MaxBinds binds. It fails when no bind is left.
func (l *Listener) bindMore(ctx context.Context) error {
	c := l.c
	s, err := c.session(ctx, l.svc.ID, sessionBind)
	if err != nil {
		return err
	}
	routers, err := c.routersFor(ctx, s)
	if err != nil {
		if ctx.Err() == nil {
			c.dropSession(s) // a new session lists the current routers
		}
		return err
	}
	req := edgeproto.Request{Op: edgeproto.OpBind, SessionToken: s.token, ServiceID: l.svc.ID, Identity: l.opts.Identity,
		Cost: l.opts.Cost, Precedence: string(l.opts.Precedence)}
	var errs []error
	for _, rc := range routers {
		if l.count() >= l.opts.MaxBinds {
			break
		}
		if l.hostedOn(rc.url) {
			continue
		}
		b, err := rc.bind(ctx, l, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("bind via %s: %w", rc.name, err))
			var ee *edgeproto.Error
			if errors.As(err, &ee) && ee.Code == edgeproto.CodeInvalidSession {
				c.dropSession(s)
				break
			}
			continue
		}
		if !l.add(b) {
			b.st.Close()
			continue
		}
		l.log.Info("hosting", "router", rc.name, "terminator", b.terminatorID, "latency", rc.Latency())
	}
	if l.count() == 0 {
		return errors.Join(errs...)
	}
	return nil
}

// maintain brings the listener back to MaxBinds binds after a bind ended, and retries while
// it has fewer, with a backoff from minRebindDelay to maxRebindDelay, until Close.
func (l *Listener) maintain() {
	delay := minRebindDelay
	for {
		var wait <-chan time.Time
		if before := l.count(); before < l.opts.MaxBinds {
			ctx, cancel := context.WithTimeout(l.ctx, l.c.opts.ConnectTimeout+edgeproto.HandshakeTimeout)
			err := l.bindMore(ctx)
			cancel()
			if l.ctx.Err() != nil {
				return
			}
			after := l.count()
			if err != nil && after == 0 {
				l.log.Warn("not hosted by any router; retrying", "in", delay, "err", err)
			}
			if after > before {
				delay = minRebindDelay
			}
			if after < l.opts.MaxBinds {
				wait = time.After(delay)
				delay = min(2*delay, maxRebindDelay)
			}
		}
		select {
		case <-l.done:
			return
		case <-l.changed:
			delay = minRebindDelay
		case <-wait:
		}
	}
}

// serveConnect answers a router's connect request to one of the listener's binds and hands
// the stream to Accept. When the service requires encryption it chooses the scheme: zmesh's
// when the dialing end offered it or made no offer (the answer carries the ServerHello to
// the offer's ClientHello and the key exchange finishes first, or all of it runs first
// when the offer had none), else
// OpenZiti's when the dialing end offered a key and the service's openZitiEncryption allows
// it (the answer carries this end's), else it refuses. The stream stays referenced by this
// goroutine, or by the pending set, until then.
func (l *Listener) serveConnect(st *smux.Stream, req edgeproto.Request) {
	cs := newCircuitStream(st)
	conn := &Conn{inner: cs, stream: cs, circuitID: req.CircuitID,
		local:  Addr{Service: l.svc.Name, Identity: l.c.id},
		remote: Addr{Service: l.svc.Name, Identity: req.InitiatorID}, appData: req.AppData}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		refuse(st, edgeproto.CodeUnavailable, "the listener is closed")
		return
	case len(l.pending) >= l.opts.MaxPending:
		l.mu.Unlock()
		refuse(st, edgeproto.CodeFailed, "too many connections waiting to be accepted")
		return
	}
	l.pending[conn] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.pending, conn)
		l.mu.Unlock()
	}()
	resp := edgeproto.Response{OK: true}
	var zitiKey *e2ee.ZitiKey
	var start *e2ee.ServerStart
	if offer := req.E2EE; l.svc.EncryptionRequired && offer != nil && offer.Zmesh && len(offer.ZmeshHello) > 0 {
		var err error
		if start, resp.HostHello, err = l.c.acceptHello(conn, l.svc.ID, offer.ZmeshHello); err != nil {
			l.log.Warn("refused a connection", "circuit", req.CircuitID, "initiator", req.InitiatorID, "err", err)
			refuse(st, edgeproto.CodeFailed, err.Error())
			return
		}
	} else if l.svc.EncryptionRequired && offer != nil && !offer.Zmesh {
		if len(offer.ZitiKey) != e2ee.ZitiKeySize {
			l.log.Warn("refused a connection: no usable end-to-end scheme offered", "circuit", req.CircuitID, "initiator", req.InitiatorID, "zitiKeyBytes", len(offer.ZitiKey))
			refuse(st, edgeproto.CodeInvalid, fmt.Sprintf("service %q requires end-to-end encryption: the dialing end must offer zmesh's scheme or a %d-byte OpenZiti key (it offered a key of %d bytes)",
				l.svc.Name, e2ee.ZitiKeySize, len(offer.ZitiKey)))
			return
		}
		if !l.svc.OpenZitiEncryption {
			l.log.Warn("refused a connection: only OpenZiti's end-to-end scheme offered, which the service does not allow", "circuit", req.CircuitID, "initiator", req.InitiatorID)
			refuse(st, edgeproto.CodeInvalid, fmt.Sprintf("openZitiEncryption is false: OpenZiti's end-to-end encryption is not allowed on service %q", l.svc.Name))
			return
		}
		var err error
		if zitiKey, err = e2ee.NewZitiKey(); err != nil {
			refuse(st, edgeproto.CodeFailed, err.Error())
			return
		}
		resp.HostZitiKey = zitiKey.Public()
	}
	if err := edgeproto.Write(st, resp); err != nil {
		st.Close()
		return
	}
	st.SetDeadline(time.Time{})
	switch {
	case zitiKey != nil:
		if err := encryptZiti(conn, zitiKey, req.E2EE.ZitiKey, false); err != nil {
			l.log.Warn("refused a connection", "circuit", req.CircuitID, "initiator", req.InitiatorID, "err", err)
			return
		}
	case l.svc.EncryptionRequired:
		if err := l.c.encryptServer(conn, l.svc.ID, start); err != nil {
			l.log.Warn("refused a connection", "circuit", req.CircuitID, "initiator", req.InitiatorID, "err", err)
			return
		}
	}
	select {
	case l.accepted <- conn:
	case <-l.done:
		conn.Close()
	}
}
