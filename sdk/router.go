package sdk

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/tlscork"
)

// routerRetryDelay is how long a failed connection to a router is remembered: needs within
// it fail at once instead of trying again.
const routerRetryDelay = time.Second

// bindWait bounds how long a connect request for an unknown terminator waits for the binds
// in progress on its router connection: the router may open a circuit to a terminator before
// its bind response reaches the client.
const bindWait = 5 * time.Second

// routerEntry is a connection to an edge router, or one being made: ready is closed once rc
// or err is set.
type routerEntry struct {
	ready   chan struct{}
	rc      *routerConn
	err     error
	retryAt time.Time // after a failure: when a need may try again
}

func (e *routerEntry) done() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// routerEntry returns the entry of the connection to r. It starts a connection, which runs
// for the Client bounded by Options.ConnectTimeout, when there is none, when the previous
// one died, failed more than routerRetryDelay ago, or was made with an API session that
// has since been replaced.
func (c *Client) routerEntry(r edgeRouter) *routerEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		e := &routerEntry{ready: make(chan struct{}), err: ErrClosed}
		close(e.ready)
		return e
	}
	if e := c.routers[r.url]; e != nil {
		switch {
		case !e.done():
			return e
		case e.err == nil && e.rc.alive() && e.rc.apiToken == c.token:
			return e
		case e.err != nil && time.Now().Before(e.retryAt):
			return e
		}
	}
	e := &routerEntry{ready: make(chan struct{})}
	c.routers[r.url] = e
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.life, c.opts.ConnectTimeout)
		defer cancel()
		rc, err := c.connect(ctx, r)
		c.mu.Lock()
		if err == nil && c.closed {
			rc.mux.Close()
			rc, err = nil, ErrClosed
		}
		if err == nil {
			c.conns[rc] = struct{}{}
			e.rc = rc
		} else {
			e.err, e.retryAt = err, time.Now().Add(routerRetryDelay)
		}
		c.mu.Unlock()
		if err == nil {
			rc.start()
		} else {
			c.log.Info("cannot connect to edge router", "router", r.name, "url", r.url, "err", err)
		}
		close(e.ready)
	}()
	return e
}

// routersFor connects to the routers of session s (those not connected yet, in parallel)
// and returns the connected ones, fastest first. It waits until every connection attempt
// ended, or until Options.RouterGrace after the first success, or until ctx ends.
func (c *Client) routersFor(ctx context.Context, s *edgeSession) ([]*routerConn, error) {
	entries := make([]*routerEntry, len(s.routers))
	finished := make(chan int, len(s.routers))
	stop := make(chan struct{})
	defer close(stop)
	for i, r := range s.routers {
		e := c.routerEntry(r)
		entries[i] = e
		go func() {
			select {
			case <-e.ready:
				finished <- i
			case <-stop:
			}
		}()
	}
	var grace <-chan time.Time
	for pending := len(entries); pending > 0; {
		select {
		case i := <-finished:
			pending--
			if entries[i].err == nil && grace == nil {
				t := time.NewTimer(c.opts.RouterGrace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			pending = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var out []*routerConn
	var errs []error
	for i, e := range entries {
		switch {
		case !e.done():
			errs = append(errs, fmt.Errorf("%s: still connecting", s.routers[i].name))
		case e.err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.routers[i].name, e.err))
		case e.rc.alive():
			out = append(out, e.rc)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sdk: no edge router of the %s session of service %s is reachable: %w",
			s.key.typ, s.key.serviceID, errors.Join(errs...))
	}
	slices.SortStableFunc(out, func(a, b *routerConn) int { return cmp.Compare(a.Latency(), b.Latency()) })
	return out, nil
}

// connect connects to router r with the current API session. When the router refuses the
// API session, connect checks it with the controller (which authenticates again when it
// ended) and tries once more.
func (c *Client) connect(ctx context.Context, r edgeRouter) (*routerConn, error) {
	for attempt := 0; ; attempt++ {
		tok, err := c.apiToken(ctx)
		if err != nil {
			return nil, err
		}
		rc, err := c.dialRouter(ctx, r, tok)
		var ee *edgeproto.Error
		if err == nil || attempt > 0 || !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
			return rc, err
		}
		if _, err := c.call(ctx, "GET", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
			return nil, err
		}
	}
}

// routerConn is a connection to an edge router: TLS, one smux session, the control stream.
type routerConn struct {
	c        *Client
	url      string
	name     string // as the session named it
	routerID string // as the router's hello response named it
	apiToken string // the API session the hello presented
	log      *slog.Logger
	mux      *smux.Session
	ctl      *smux.Stream // the control stream; only the ping loop uses it after connect
	seq      uint64       // the last ping's sequence number; ping loop only
	latency  atomic.Int64 // the last ping's round trip, in nanoseconds

	done      chan struct{}
	closeOnce sync.Once

	mu           sync.Mutex
	binds        map[string]*bind // by terminator id
	pendingBinds int              // bind requests awaiting their response
	bindsChanged chan struct{}    // closed and replaced when binds or pendingBinds change
}

// dialRouter connects to r: TLS 1.3 with the identity's certificate, verifying the router
// with the network's CAs and the URL's host; the smux session; hello on the control stream
// with API session token tok; a first latency ping.
func (c *Client) dialRouter(ctx context.Context, r edgeRouter, tok string) (_ *routerConn, err error) {
	u, err := url.Parse(r.url)
	if err != nil || u.Scheme != "tls" || u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("sdk: edge router %s: URL %q is not tls://host:port", r.name, r.url)
	}
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("sdk: edge router %s: %w", r.name, err)
	}
	cc := tlscork.New(raw.(*net.TCPConn), &c.bufs, edgeproto.CorkSize)
	tc := tls.Client(cc, &tls.Config{
		Certificates: []tls.Certificate{c.creds.Load().cert},
		RootCAs:      c.roots,
		ServerName:   u.Hostname(),
		MinVersion:   tls.VersionTLS13,
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("sdk: edge router %s: TLS: %w", r.name, err)
	}
	cc.ReadAhead(edgeproto.ReadAhead)
	mux, err := smux.Client(tlscork.NewBatched(tc, cc, edgeproto.CorkSize), edgeproto.Smux())
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("sdk: edge router %s: smux: %w", r.name, err)
	}
	// Abort the exchanges below when ctx ends.
	stop := context.AfterFunc(ctx, func() { mux.Close() })
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			mux.Close()
		}
	}()
	rc := &routerConn{c: c, url: r.url, name: r.name, apiToken: tok, mux: mux,
		done: make(chan struct{}), binds: map[string]*bind{}, bindsChanged: make(chan struct{})}
	deadline := time.Now().Add(c.opts.ConnectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if rc.ctl, err = mux.OpenStream(); err != nil {
		return nil, fmt.Errorf("sdk: edge router %s: open the control stream: %w", r.name, err)
	}
	rc.ctl.SetDeadline(deadline)
	hello := edgeproto.Request{Op: edgeproto.OpHello, Version: edgeproto.ProtocolVersion, APISessionToken: tok, SDKInfo: c.opts.SDKInfo}
	var resp edgeproto.Response
	if err = edgeproto.Write(rc.ctl, hello); err == nil {
		err = edgeproto.Read(rc.ctl, &resp)
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: edge router %s: hello: %w", r.name, err)
	}
	if err = resp.Err(); err != nil {
		return nil, fmt.Errorf("sdk: edge router %s: hello: %w", r.name, err)
	}
	rc.routerID = resp.RouterID
	rc.log = c.log.With("router", r.name, "routerId", resp.RouterID)
	if err = rc.ping(deadline); err != nil {
		return nil, fmt.Errorf("sdk: edge router %s: %w", r.name, err)
	}
	rc.log.Info("connected to edge router", "url", r.url, "latency", rc.Latency())
	return rc, nil
}

// start runs the connection's ping and accept loops, or closes it and returns false when
// the Client is closed.
func (rc *routerConn) start() bool {
	if !rc.c.spawn(rc.pingLoop) || !rc.c.spawn(rc.acceptLoop) {
		rc.close(ErrClosed)
		return false
	}
	return true
}

// Latency returns the last measured round trip to the router.
func (rc *routerConn) Latency() time.Duration { return time.Duration(rc.latency.Load()) }

func (rc *routerConn) alive() bool {
	select {
	case <-rc.done:
		return false
	default:
		return true
	}
}

// close ends the connection: its streams (binds and circuits) end with it. The Client
// forgets it, so the next need connects again.
func (rc *routerConn) close(cause error) {
	rc.closeOnce.Do(func() {
		close(rc.done)
		rc.mux.Close()
		if rc.log != nil && !errors.Is(cause, ErrClosed) {
			rc.log.Info("edge router connection ended", "reason", cause)
		}
		c := rc.c
		c.mu.Lock()
		if e := c.routers[rc.url]; e != nil && e.rc == rc {
			delete(c.routers, rc.url)
		}
		delete(c.conns, rc)
		c.mu.Unlock()
	})
}

// ping measures the round trip of one ping on the control stream.
func (rc *routerConn) ping(deadline time.Time) error {
	rc.seq++
	start := time.Now()
	rc.ctl.SetDeadline(deadline)
	var resp edgeproto.Response
	err := edgeproto.Write(rc.ctl, edgeproto.Request{Op: edgeproto.OpPing, Seq: rc.seq})
	if err == nil {
		err = edgeproto.Read(rc.ctl, &resp)
	}
	if err == nil {
		err = resp.Err()
	}
	if err == nil && resp.Seq != rc.seq {
		err = fmt.Errorf("answer to ping %d carries sequence number %d", rc.seq, resp.Seq)
	}
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	rc.latency.Store(int64(time.Since(start)))
	return nil
}

// pingLoop pings the router every Options.PingInterval; a failed ping ends the connection.
func (rc *routerConn) pingLoop() {
	t := time.NewTicker(rc.c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-rc.done:
			return
		case <-t.C:
		}
		if err := rc.ping(time.Now().Add(rc.c.opts.pingTimeout())); err != nil {
			rc.close(err)
			return
		}
	}
}

// acceptLoop serves the streams the router opens (connect requests) until the session ends.
// Each stream stays referenced, by the goroutine serving it, until it is handed out or
// closed.
func (rc *routerConn) acceptLoop() {
	for {
		st, err := rc.mux.AcceptStream()
		if err != nil {
			rc.close(fmt.Errorf("session ended: %w", err))
			return
		}
		if !rc.c.spawn(func() { rc.serveStream(st) }) {
			st.Close()
			return
		}
	}
}

// serveStream answers a stream the router opened: a connect request to one of the binds on
// this connection.
func (rc *routerConn) serveStream(st *smux.Stream) {
	st.SetDeadline(time.Now().Add(edgeproto.HandshakeTimeout))
	var req edgeproto.Request
	if err := edgeproto.Read(st, &req); err != nil {
		rc.log.Debug("router-opened stream without a request", "err", err)
		st.Close()
		return
	}
	if req.Op != edgeproto.OpConnect {
		refuse(st, edgeproto.CodeInvalid, fmt.Sprintf("a client accepts only connect requests, not %q", req.Op))
		return
	}
	b := rc.bindFor(req.TerminatorID)
	if b == nil {
		refuse(st, edgeproto.CodeUnavailable, "no bind with terminator "+req.TerminatorID)
		return
	}
	b.l.serveConnect(st, req)
}

// refuse answers a request with a refusal and closes the stream.
func refuse(st *smux.Stream, code, msg string) {
	edgeproto.Write(st, edgeproto.Response{Code: code, Error: msg})
	st.Close()
}

// open opens a stream with request req and returns it once the router answered OK. ctx
// bounds the exchange, as does edgeproto.HandshakeTimeout.
func (rc *routerConn) open(ctx context.Context, req edgeproto.Request) (*smux.Stream, *edgeproto.Response, error) {
	st, err := rc.mux.OpenStream()
	if err != nil {
		rc.close(err)
		return nil, nil, fmt.Errorf("open a stream: %w", err)
	}
	deadline := time.Now().Add(edgeproto.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	st.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	var resp edgeproto.Response
	err = edgeproto.Write(st, req)
	if err == nil {
		err = edgeproto.Read(st, &resp)
	}
	if !stop() {
		st.Close()
		return nil, nil, ctx.Err()
	}
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("%s: %w", req.Op, err)
	}
	if err := resp.Err(); err != nil {
		st.Close()
		return nil, nil, err
	}
	st.SetDeadline(time.Time{})
	return st, &resp, nil
}

// bind is a terminator hosted over a router connection: its bind stream stays open while
// the listener hosts the service.
type bind struct {
	l            *Listener
	rc           *routerConn
	st           *smux.Stream
	terminatorID string
	ended        chan struct{} // closed when the bind stream ended
}

// bind sends bind request req for listener l and returns the bind once the router created
// the terminator. A goroutine watches the bind stream and tells l when it ends.
func (rc *routerConn) bind(ctx context.Context, l *Listener, req edgeproto.Request) (*bind, error) {
	rc.mu.Lock()
	rc.pendingBinds++
	rc.mu.Unlock()
	st, resp, err := rc.open(ctx, req)
	var b *bind
	rc.mu.Lock()
	rc.pendingBinds--
	if err == nil {
		b = &bind{l: l, rc: rc, st: st, terminatorID: resp.TerminatorID, ended: make(chan struct{})}
		rc.binds[b.terminatorID] = b
	}
	close(rc.bindsChanged)
	rc.bindsChanged = make(chan struct{})
	rc.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !rc.c.spawn(b.watch) {
		st.Close()
		b.forget()
		return nil, ErrClosed
	}
	return b, nil
}

// watch waits for the bind stream to end (the listener closed it, the router removed the
// terminator, or the connection ended), then tells the listener.
func (b *bind) watch() {
	io.Copy(io.Discard, b.st)
	b.st.Close()
	b.forget()
	close(b.ended)
	b.l.bindEnded(b)
}

// forget removes the bind from its router connection.
func (b *bind) forget() {
	rc := b.rc
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.binds[b.terminatorID] == b {
		delete(rc.binds, b.terminatorID)
		close(rc.bindsChanged)
		rc.bindsChanged = make(chan struct{})
	}
}

// bindFor returns the bind with this terminator id, waiting up to bindWait while binds are
// in progress; nil if there is none.
func (rc *routerConn) bindFor(terminatorID string) *bind {
	timeout := time.NewTimer(bindWait)
	defer timeout.Stop()
	for {
		rc.mu.Lock()
		b, pending, changed := rc.binds[terminatorID], rc.pendingBinds, rc.bindsChanged
		rc.mu.Unlock()
		if b != nil || pending == 0 {
			return b
		}
		select {
		case <-changed:
		case <-timeout.C:
			return nil
		case <-rc.done:
			return nil
		}
	}
}
