package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// serveEcho accepts connections and answers each with what it read, upper-cased, once the
// dialer half-closed.
func serveEcho(t *testing.T, l net.Listener) {
	t.Helper()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				data, err := io.ReadAll(conn)
				if err != nil {
					return
				}
				conn.Write(bytes.ToUpper(data))
			}()
		}
	}()
}

// roundTrip dials service, sends msg, half-closes and returns the answer.
// expectEcho fails the test unless a round trip of msg through service comes back upper-cased
// (the echo servers of these tests); what says which step of the test it was.
func expectEcho(t *testing.T, c *Client, service, msg, what string) {
	t.Helper()
	if got, err := roundTrip(t, c, service, msg); err != nil || got != strings.ToUpper(msg) {
		t.Fatalf("%s: round trip through %s: %q, %v; want %q", what, service, got, err, strings.ToUpper(msg))
	}
}

func roundTrip(t *testing.T, c *Client, service, msg string) (string, error) {
	t.Helper()
	conn, err := c.Dial(testCtx(t), service)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(msg)); err != nil {
		return "", err
	}
	if err := conn.CloseWrite(); err != nil {
		return "", err
	}
	got, err := io.ReadAll(conn)
	return string(got), err
}

func listen(t *testing.T, c *Client, service string, opts ListenOptions) *Listener {
	t.Helper()
	l, err := c.ListenWithOptions(testCtx(t), service, opts)
	check(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// The Client connects to the session's routers, says hello, measures their latency with
// pings, keeps pinging, and dials through the fastest.
func TestHelloAndLatency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fast, slow := e.router("fast"), e.router("slow")
	const delay = 400 * time.Millisecond // beyond what a loaded machine adds to a ping
	slow.pingDelay.Store(int64(delay))
	e.service("echo", false)
	// Both Clients wait for both routers, however late the slow one connects.
	waitAll := func(o *Options) { o.RouterGrace = time.Minute }
	host, client := e.sdkWith("host", waitAll), e.sdkWith("client", waitAll)
	serveEcho(t, listen(t, host, "echo", ListenOptions{}))
	testutil.Eventually(t, "a terminator on each router", func() bool { return fast.terminators() == 1 && slow.terminators() == 1 })

	expectEcho(t, client, "echo", "hi", "round trip")
	if fast.dials.Load() != 1 || slow.dials.Load() != 0 {
		t.Errorf("dials: fast %d, slow %d; want the fast router", fast.dials.Load(), slow.dials.Load())
	}
	if fast.hellos.Load() != 2 || slow.hellos.Load() != 2 {
		t.Errorf("hellos: fast %d, slow %d; want one per Client", fast.hellos.Load(), slow.hellos.Load())
	}
	client.mu.Lock()
	for rc := range client.conns {
		lat := rc.Latency()
		if rc.routerID == slow.id && lat < delay || rc.routerID == fast.id && (lat <= 0 || lat >= delay) {
			t.Errorf("latency of %s: %v", rc.name, lat)
		}
	}
	client.mu.Unlock()
	before := fast.pings.Load()
	testutil.Eventually(t, "pings go on, every 100ms from each Context", func() bool { return fast.pings.Load()-before >= 4 })
}

// Dial and Accept meet through a router: bytes both ways, half-close, addresses, circuit
// ids, deadlines.
func TestDialAccept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.router("r")
	e.service("echo", false)
	host, client := e.sdk("host"), e.sdk("client")
	l := listen(t, host, "echo", ListenOptions{})
	if a := l.Addr().(Addr); a.Service != "echo" || a.Identity != host.IdentityID() || a.Network() != "zmesh" {
		t.Errorf("listener address %v", a)
	}
	accepted := make(chan *Conn, 1)
	go func() {
		conn, err := l.AcceptConn()
		if err != nil {
			t.Error(err)
			close(accepted)
			return
		}
		accepted <- conn
	}()
	conn, err := client.Dial(testCtx(t), "echo")
	check(t, err)
	defer conn.Close()
	hc := <-accepted
	if hc == nil {
		t.FailNow()
	}
	defer hc.Close()
	if conn.RemoteAddr().(Addr).Identity != host.IdentityID() || conn.LocalAddr().(Addr).Identity != client.IdentityID() {
		t.Errorf("dialer addresses %v -> %v", conn.LocalAddr(), conn.RemoteAddr())
	}
	if hc.RemoteAddr().(Addr).Identity != client.IdentityID() || hc.LocalAddr().String() != host.IdentityID()+"@echo" {
		t.Errorf("host addresses %v <- %v", hc.LocalAddr(), hc.RemoteAddr())
	}
	if conn.CircuitID() == 0 || conn.CircuitID() != hc.CircuitID() || conn.Encrypted() || hc.Encrypted() {
		t.Errorf("circuit %d/%d encrypted %v/%v", conn.CircuitID(), hc.CircuitID(), conn.Encrypted(), hc.Encrypted())
	}

	// A deadline interrupts a Read; the connection stays usable.
	conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := conn.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v", err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	hc.SetDeadline(time.Now().Add(10 * time.Second))

	// Half-close each way: the host reads to EOF, then answers on the still open direction.
	payload := bytes.Repeat([]byte("0123456789"), 100_000)
	go func() {
		conn.Write(payload)
		conn.CloseWrite()
	}()
	got, err := io.ReadAll(hc)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("host read %d bytes, %v", len(got), err)
	}
	if _, err := hc.Write([]byte("done")); err != nil {
		t.Fatal(err)
	}
	check(t, hc.CloseWrite())
	back, err := io.ReadAll(conn)
	if err != nil || string(back) != "done" {
		t.Fatalf("dialer read %q %v", back, err)
	}
}

// A router that refuses a dial (FAILED) or has gone makes Dial try the next one; a refusal
// as INVALID does not.
func TestDialFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.router("a"), e.router("b")
	b.pingDelay.Store(int64(400 * time.Millisecond)) // a is the faster, however loaded the machine
	e.service("echo", false)
	waitAll := func(o *Options) { o.RouterGrace = time.Minute } // each Client waits for b too
	host, client := e.sdkWith("host", waitAll), e.sdkWith("client", waitAll)
	serveEcho(t, listen(t, host, "echo", ListenOptions{}))

	a.refuseDial.Store(edgeproto.CodeFailed)
	expectEcho(t, client, "echo", "one", "with a refusing")
	if a.dials.Load() != 1 || b.dials.Load() != 1 {
		t.Errorf("dials a %d, b %d", a.dials.Load(), b.dials.Load())
	}
	a.refuseDial.Store(edgeproto.CodeInvalid)
	if _, err := client.Dial(testCtx(t), "echo"); err == nil || !strings.Contains(err.Error(), edgeproto.CodeInvalid) {
		t.Errorf("refused as invalid: %v", err)
	}
	if b.dials.Load() != 1 {
		t.Errorf("a dial refused as INVALID was tried on b")
	}
	a.refuseDial.Store("")

	// a dies: its connections end, Dial goes through b, then a new Dial finds a again once
	// it is back (the host binds there again).
	a.stop()
	expectEcho(t, client, "echo", "two", "with a down")
	if b.dials.Load() != 2 {
		t.Errorf("b dials %d", b.dials.Load())
	}
	a.start()
	testutil.Eventually(t, "the host binds on a again", func() bool { return a.terminators() == 1 })
	testutil.Eventually(t, "the client dials through a again", func() bool {
		got, err := roundTrip(t, client, "echo", "three")
		return err == nil && got == "THREE" && a.dials.Load() > 2
	})
}

// A listener keeps hosting through a restart of its only router.
func TestListenerRebinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	e.service("echo", false)
	host, client := e.sdk("host"), e.sdk("client")
	l := listen(t, host, "echo", ListenOptions{})
	serveEcho(t, l)
	expectEcho(t, client, "echo", "before", "before the router restarts")
	r.stop()
	testutil.Eventually(t, "the bind ends", func() bool { return l.count() == 0 })
	time.Sleep(300 * time.Millisecond) // a rebind attempt or two fail
	r.start()
	testutil.Eventually(t, "the host binds again", func() bool { return r.terminators() == 1 && l.count() == 1 })
	expectEcho(t, client, "echo", "after", "after the host bound again")
}

// A session the router does not know any more is replaced once; an API session that ended
// is replaced too (401 from the controller), and the router connection with it.
func TestSessionRefresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	svc := e.service("echo", false)
	host, client := e.sdk("host"), e.sdk("client")
	serveEcho(t, listen(t, host, "echo", ListenOptions{}))
	expectEcho(t, client, "echo", "a", "first dial")
	sessionOf := func() *edgeSession {
		client.mu.Lock()
		defer client.mu.Unlock()
		if e := client.sessions[sessionKey{svc.ID, sessionDial}]; e != nil {
			return e.s
		}
		return nil
	}
	first := sessionOf()
	check(t, e.m.DeleteSession(first.id))
	expectEcho(t, client, "echo", "b", "after the session ended")
	if s := sessionOf(); s == nil || s.id == first.id {
		t.Error("the session was not replaced")
	}
	if r.dials.Load() != 3 {
		t.Errorf("%d dials, want 3 (ok, refused, ok)", r.dials.Load())
	}

	// The API session ends: the router refuses the session, the controller answers 401,
	// the Client authenticates again and reconnects to the router with the new API session.
	apiSessions, err := e.m.APISessions()
	check(t, err)
	for _, s := range apiSessions {
		if s.IdentityID == client.IdentityID() {
			check(t, e.m.DeleteAPISession(s.ID))
		}
	}
	expectEcho(t, client, "echo", "c", "after the API session ended")
	if r.hellos.Load() != 3 {
		t.Errorf("%d hellos, want 3 (host, client, client again)", r.hellos.Load())
	}
}

// Streams the router opened stay alive while they wait in the Accept queue and while they
// carry data, however often the garbage collector runs (smux issue 116: a finalizer on
// accepted streams closed them once unreachable).
func TestAcceptedStreamsSurviveGC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.router("r")
	e.service("echo", false)
	host, client := e.sdk("host"), e.sdk("client")
	l := listen(t, host, "echo", ListenOptions{})
	payload := bytes.Repeat([]byte("abcdefgh"), 64<<10) // 512 KiB, within a stream's window
	conn, err := client.Dial(testCtx(t), "echo")
	check(t, err)
	defer conn.Close()
	if _, err := conn.Write(payload); err != nil {
		t.Fatal(err)
	}
	check(t, conn.CloseWrite())
	testutil.Eventually(t, "the connection waits for Accept", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending) == 1
	})
	for range 5 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	hc, err := l.AcceptConn()
	check(t, err)
	defer hc.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	got, err := readAll(hc, runtime.GC)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("host read %d bytes of %d, %v", len(got), len(payload), err)
	}
	// And the other way, through the dialer's stream.
	written := make(chan error, 1)
	go func() {
		_, err := hc.Write(payload)
		if err == nil {
			err = hc.CloseWrite()
		}
		written <- err
	}()
	back, err := readAll(conn, nil)
	if err != nil || !bytes.Equal(back, payload) {
		select {
		case werr := <-written:
			t.Fatalf("dialer read %d bytes of %d, %v (the host's write: %v)", len(back), len(payload), err, werr)
		default:
			t.Fatalf("dialer read %d bytes of %d, %v (the host still writing)", len(back), len(payload), err)
		}
	}
	if err := <-written; err != nil {
		t.Fatalf("host write: %v", err)
	}
}

// readAll reads c to EOF, calling between (if set) after every read. Nothing bounds the
// transfer as a whole: under -race on a loaded machine, a collection after each of a
// transfer's reads adds up to more than any fixed budget. Each read must make progress
// within testutil.Patience instead, so that a stream that stalls fails the test.
func readAll(c *Conn, between func()) ([]byte, error) {
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		if err := c.SetReadDeadline(time.Now().Add(testutil.Patience)); err != nil {
			return got.Bytes(), err
		}
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			return got.Bytes(), nil
		}
		if err != nil {
			return got.Bytes(), err
		}
		if between != nil {
			between()
		}
	}
}

// Closing a listener removes its terminators and refuses connects to them; Accept returns
// net.ErrClosed. Closing the Client closes its listeners.
func TestListenerClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	e.service("echo", false)
	host := e.sdk("host")
	l := listen(t, host, "echo", ListenOptions{Cost: 7, Precedence: "required"})
	testutil.Eventually(t, "a terminator", func() bool { return r.terminators() == 1 })
	e.mu.Lock()
	var term fakeTerm
	for _, t := range e.terms {
		term = *t
	}
	e.mu.Unlock()
	check(t, l.Close())
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	testutil.Eventually(t, "the terminator is removed", func() bool { return r.terminators() == 0 })
	st, resp, err := e.connect(&term, edgeproto.Request{Op: edgeproto.OpConnect, TerminatorID: term.id, CircuitID: 9, InitiatorID: "x"})
	check(t, err)
	st.Close()
	if resp.OK || resp.Code != edgeproto.CodeUnavailable {
		t.Errorf("connect to a closed listener: %+v", resp)
	}

	listen(t, host, "echo", ListenOptions{})
	testutil.Eventually(t, "a terminator", func() bool { return r.terminators() == 1 })
	check(t, host.Close())
	testutil.Eventually(t, "the terminator is removed", func() bool { return r.terminators() == 0 })
	if _, err := host.Listen(testCtx(t), "echo"); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after Close: %v", err)
	}
}

// A service that requires encryption is encrypted end to end: the router sees no plaintext,
// whether the hellos of the key exchange travel in the dial and its answer or in-band (the
// host got no ClientHello).
func TestEncrypted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	e.service("secret", true)
	e.service("plain", false)
	host, client := e.sdk("host"), e.sdk("client")
	ls, lp := listen(t, host, "secret", ListenOptions{}), listen(t, host, "plain", ListenOptions{})
	serveEcho(t, lp)
	for _, inBand := range []bool{false, true} {
		r.inBand.Store(inBand)
		encrypted := make(chan bool, 1)
		go func() {
			conn, err := ls.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			encrypted <- conn.(*Conn).Encrypted() && conn.(*Conn).Scheme() == SchemeZmesh
			data, _ := io.ReadAll(conn)
			conn.Write(bytes.ToUpper(data))
		}()
		secret := fmt.Sprintf("attack at dawn (in-band %v), in plain sight of the routers", inBand)
		hellos := r.hostHellos.Load()
		conn, err := client.Dial(testCtx(t), "secret")
		check(t, err)
		if folded := r.hostHellos.Load() > hellos; folded == inBand {
			t.Fatalf("in-band %v: the dial's answer carried the host's ServerHello: %v", inBand, folded)
		}
		// Two zmesh ends choose zmesh's scheme.
		if !conn.Encrypted() || conn.Scheme() != SchemeZmesh || !<-encrypted {
			t.Fatalf("in-band %v: not encrypted with zmesh's scheme: %q", inBand, conn.Scheme())
		}
		conn.Write([]byte(secret))
		conn.CloseWrite()
		got, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || string(got) != strings.ToUpper(secret) {
			t.Fatalf("in-band %v: %q %v", inBand, got, err)
		}
		if r.sawPlaintext([]byte(secret)) {
			t.Errorf("in-band %v: the router saw the plaintext of an encrypted service", inBand)
		}
		expectEcho(t, client, "plain", secret, "plain")
		if !r.sawPlaintext([]byte(secret)) {
			t.Error("the router did not see the plaintext of a plain service: the check above proves nothing")
		}
	}
	// A folded dial gives the dialer a ticket (the in-band one spent the first's), and the
	// next dial resumes its session: neither end signs, and it carries data as well.
	r.inBand.Store(false)
	go func() {
		for {
			conn, err := ls.Accept()
			if err != nil {
				return
			}
			data, _ := io.ReadAll(conn)
			conn.Write(bytes.ToUpper(data))
			conn.Close()
		}
	}()
	expectEcho(t, client, "secret", "full", "a full handshake")
	conn, err := client.Dial(testCtx(t), "secret")
	check(t, err)
	defer conn.Close()
	if ec, ok := conn.inner.(*e2ee.Conn); !ok || !ec.Resumed() {
		t.Fatalf("the second folded dial did not resume the first one's session (%T)", conn.inner)
	}
	conn.Write([]byte("resumed"))
	conn.CloseWrite()
	if got, err := io.ReadAll(conn); err != nil || string(got) != "RESUMED" {
		t.Fatalf("resumed circuit: %q %v", got, err)
	}
}

// A ServerHello in the answer to a dial of a service without end-to-end encryption, which
// only a router could have put there, fails the dial before anything is written.
func TestServerHelloOnPlainServiceRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	e.service("plain", false)
	host, client := e.sdk("host"), e.sdk("client")
	serveEcho(t, listen(t, host, "plain", ListenOptions{}))
	r.forgeHello.Store(true)
	_, err := client.Dial(testCtx(t), "plain")
	if err == nil || !strings.Contains(err.Error(), "zmesh's end-to-end key exchange, which the service does not allow (encryptionRequired is false)") {
		t.Fatalf("dial: %v; want the forged ServerHello refused", err)
	}
	r.forgeHello.Store(false)
	expectEcho(t, client, "plain", "after", "plain")
}

// The key exchange fails when the host is not the identity the router named (Dial fails), or
// the dialer not the initiator the router named (the dialer's first Read fails).
func TestEncryptedPeerMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	e.service("secret", true)
	host, client := e.sdk("host"), e.sdk("client")
	l := listen(t, host, "secret", ListenOptions{})
	serveEcho(t, l)

	r.wrongHost.Store(true)
	_, err := client.Dial(testCtx(t), "secret")
	if !errors.Is(err, e2ee.ErrAuthentication) || !strings.Contains(err.Error(), "someone-else") {
		t.Errorf("host mismatch: %v", err)
	}
	if r.dials.Load() != 1 {
		t.Errorf("%d dials: a failed key exchange was retried", r.dials.Load())
	}
	r.wrongHost.Store(false)

	// The host refuses the dialer after Dial returned (which does not wait for the host's
	// ServerFinished): the first Read fails, and nothing written reaches the host's service.
	r.wrongInit.Store(true)
	if conn, err := client.Dial(testCtx(t), "secret"); err == nil {
		conn.Write([]byte("not for you"))
		if n, err := conn.Read(make([]byte, 100)); err == nil || !strings.Contains(err.Error(), "rejected this identity") {
			t.Errorf("initiator mismatch: read %d bytes, %v; want the host's refusal", n, err)
		}
		conn.Close()
	}
	testutil.Eventually(t, "the host drops the connection", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending) == 0
	})
	if !strings.Contains(e.logs.String(), `initiator=someone-else`) {
		t.Error("the host did not log the refused connection")
	}
	r.wrongInit.Store(false)

	expectEcho(t, client, "secret", "ok", "with the right initiator")
}

// Dial of an unknown service fails without a session; a canceled context stops Dial.
func TestDialErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.router("r")
	e.service("echo", false)
	client := e.sdk("client")
	if _, err := client.Dial(testCtx(t), "nope"); !errors.Is(err, ErrNoService) {
		t.Errorf("unknown service: %v", err)
	}
	// No terminator: the router fails the dial.
	if _, err := client.Dial(testCtx(t), "echo"); err == nil || !strings.Contains(err.Error(), "no terminator") {
		t.Errorf("no host: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.Dial(ctx, "echo"); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	// The only router is down: nothing to dial through.
	r.stop()
	if _, err := client.Dial(testCtx(t), "echo"); err == nil || !strings.Contains(err.Error(), "no edge router") {
		t.Errorf("router down: %v", err)
	}
}
