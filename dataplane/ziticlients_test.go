package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openziti/secretstream"
	"github.com/openziti/secretstream/kx"
	dto "github.com/prometheus/client_model/go"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
	"github.com/zmesh/zmesh/tunnel"
	"github.com/zmesh/zmesh/xgress"
)

// zitiClient is the client side of OpenZiti's edge protocol, written out plainly on
// zitiproto, as sdk-golang speaks it: the router's side is tested against the protocol.
type zitiClient struct {
	t   testing.TB
	c   *tls.Conn
	api *model.APISession

	wmu sync.Mutex
	w   *zitiproto.Writer
	seq int32

	mu      sync.Mutex
	replies map[int32]chan *zitiproto.Message
	conns   map[uint32]chan *zitiproto.Message // Data and StateClosed by connection id
	dials   chan *zitiproto.Message            // Dial from the router
	binds   chan *zitiproto.Message            // BindSuccess and StateClosed of binds
	beats   chan uint64                        // heartbeat responses
	hello   *zitiproto.Message
	done    chan struct{}
	nextID  uint32
	stall   sync.Mutex // held: the client reads nothing more
}

// connectZiti authenticates cert's identity and says hello at an edge listener with the API
// session.
func (n *testNet) connectZiti(addr string, cert tls.Certificate) (*zitiClient, error) {
	t := n.t
	t.Helper()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	api, _, err := n.m.AuthenticateCert([]*x509.Certificate{leaf}, model.Login{Source: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	var cl *zitiClient
	testutil.Eventually(t, "the router knows the API session", func() bool {
		cl, err = n.connectZitiWith(addr, cert, api)
		return err == nil || !strings.Contains(err.Error(), "unknown or ended API session")
	})
	return cl, err
}

func (n *testNet) connectZitiWith(addr string, cert tls.Certificate, api *model.APISession) (*zitiClient, error) {
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "ca.pem"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err != nil {
		return nil, err
	}
	cl := &zitiClient{t: n.t, c: c, api: api, w: zitiproto.NewWriter(c), replies: map[int32]chan *zitiproto.Message{},
		conns: map[uint32]chan *zitiproto.Message{}, dials: make(chan *zitiproto.Message, 16), binds: make(chan *zitiproto.Message, 16),
		beats: make(chan uint64, 16),
		done:  make(chan struct{})}
	n.t.Cleanup(func() { c.Close() })
	var h zitiproto.Message
	h.Reset(zitiproto.ContentHello)
	h.Sequence = -1
	h.Body = []byte(api.IdentityID)
	h.PutString(zitiproto.HeaderSessionToken, api.Token)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := cl.w.Write(&h); err != nil {
		c.Close()
		return nil, err
	}
	rd := zitiproto.NewReader(c, nil)
	res := &zitiproto.Message{}
	if err := rd.Read(res); err != nil {
		c.Close()
		return nil, fmt.Errorf("read the hello's result: %w", err)
	}
	c.SetDeadline(time.Time{})
	if rf, _ := res.ReplyFor(); res.ContentType != zitiproto.ContentResult || rf != -1 {
		c.Close()
		return nil, fmt.Errorf("hello answered by content type %d for %d", res.ContentType, rf)
	}
	if !res.Bool(zitiproto.HeaderResultSuccess) {
		c.Close()
		return nil, fmt.Errorf("hello refused: %s", res.Body)
	}
	cl.hello = res
	go cl.readLoop(rd)
	return cl, nil
}

func (cl *zitiClient) readLoop(rd *zitiproto.Reader) {
	defer close(cl.done)
	for {
		cl.stall.Lock()
		//lint:ignore SA2001 waits while the test stalls the client
		cl.stall.Unlock()
		m := &zitiproto.Message{}
		if err := rd.Read(m); err != nil {
			return
		}
		if rf, ok := m.ReplyFor(); ok {
			cl.mu.Lock()
			ch := cl.replies[rf]
			delete(cl.replies, rf)
			cl.mu.Unlock()
			if ch != nil {
				ch <- m
				continue
			}
		}
		if v, ok := m.Uint64(zitiproto.HeaderHeartbeatResponse); ok {
			cl.beats <- v
		}
		id, _ := m.Uint32(zitiproto.HeaderConnID)
		switch m.ContentType {
		case zitiproto.ContentDial:
			cl.dials <- m
		case zitiproto.ContentBindSuccess:
			cl.binds <- m
		case zitiproto.ContentData, zitiproto.ContentStateClosed:
			cl.mu.Lock()
			ch := cl.conns[id]
			cl.mu.Unlock()
			if ch != nil {
				ch <- m
			} else if m.ContentType == zitiproto.ContentStateClosed {
				cl.binds <- m
			}
		}
	}
}

func (cl *zitiClient) send(m *zitiproto.Message) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	cl.seq++
	m.Sequence = cl.seq
	return cl.w.Write(m)
}

// request sends m and waits for its reply.
func (cl *zitiClient) request(m *zitiproto.Message) (*zitiproto.Message, error) {
	ch := make(chan *zitiproto.Message, 1)
	cl.wmu.Lock()
	cl.seq++
	m.Sequence = cl.seq
	cl.mu.Lock()
	cl.replies[m.Sequence] = ch
	cl.mu.Unlock()
	err := cl.w.Write(m)
	cl.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-cl.done:
		return nil, errors.New("the channel ended")
	case <-time.After(testutil.Patience):
		return nil, errors.New("no reply")
	}
}

// zconn is one connection of the channel, as a client sees it.
type zconn struct {
	cl   *zitiClient
	id   uint32
	in   chan *zitiproto.Message
	fin  bool
	dseq uint32
}

func (cl *zitiClient) newConn(id uint32) *zconn {
	if id == 0 {
		cl.mu.Lock()
		cl.nextID++
		id = cl.nextID
		cl.mu.Unlock()
	}
	zc := &zconn{cl: cl, id: id, in: make(chan *zitiproto.Message, 1024)}
	cl.mu.Lock()
	cl.conns[id] = zc.in
	cl.mu.Unlock()
	return zc
}

// connect dials a service with a Dial session; key, when set, is the PublicKey offered.
func (cl *zitiClient) connect(token string, key []byte, headers map[int32][]byte) (*zconn, *zitiproto.Message, error) {
	zc := cl.newConn(0)
	var m zitiproto.Message
	m.SetState(zitiproto.ContentConnect, zc.id, token)
	if key != nil {
		m.Put(zitiproto.HeaderPublicKey, key)
		m.PutByte(zitiproto.HeaderCryptoMethod, zitiproto.CryptoLibsodium)
	}
	for k, v := range headers {
		m.Put(k, v)
	}
	reply, err := cl.request(&m)
	if err != nil {
		return nil, nil, err
	}
	if reply.ContentType != zitiproto.ContentStateConnected {
		return nil, reply, fmt.Errorf("connect refused (content type %d): %s", reply.ContentType, reply.Body)
	}
	return zc, reply, nil
}

// write sends one Data message.
func (zc *zconn) write(b []byte, flags uint32) error {
	var m zitiproto.Message
	m.SetState(zitiproto.ContentData, zc.id, "")
	zc.dseq++
	m.PutUint32(zitiproto.HeaderSeq, zc.dseq)
	if flags != 0 {
		m.PutUint32(zitiproto.HeaderFlags, flags)
	}
	m.Body = b
	return zc.cl.send(&m)
}

// next returns the body of the next Data message; io.EOF after FIN, an error after
// StateClosed.
func (zc *zconn) next() ([]byte, error) {
	for {
		if zc.fin {
			return nil, io.EOF
		}
		select {
		case m := <-zc.in:
			if m.ContentType == zitiproto.ContentStateClosed {
				return nil, fmt.Errorf("state closed: %q", m.Body)
			}
			if f, _ := m.Uint32(zitiproto.HeaderFlags); f&zitiproto.FlagFIN != 0 {
				zc.fin = true
			}
			if len(m.Body) > 0 {
				return m.Body, nil
			}
		case <-zc.cl.done:
			return nil, errors.New("the channel ended")
		case <-time.After(testutil.Patience):
			return nil, errors.New("nothing came")
		}
	}
}

// readAll reads Data bodies until FIN.
func (zc *zconn) readAll() ([]byte, error) {
	var out []byte
	for {
		b, err := zc.next()
		out = append(out, b...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// closed waits for the router's StateClosed of the connection.
func (zc *zconn) closed() error {
	for {
		select {
		case m := <-zc.in:
			if m.ContentType == zitiproto.ContentStateClosed {
				return nil
			}
		case <-zc.cl.done:
			return nil
		case <-time.After(testutil.Patience):
			return errors.New("the connection was not closed")
		}
	}
}

// bind hosts a service with a Bind session; key, when set, is the host's PublicKey.
func (cl *zitiClient) bind(token string, key []byte) (uint32, error) {
	cl.mu.Lock()
	cl.nextID++
	id := cl.nextID
	cl.mu.Unlock()
	var m zitiproto.Message
	m.SetState(zitiproto.ContentBind, id, token)
	m.PutBool(zitiproto.HeaderSupportsBindSuccess, true)
	m.PutBool(zitiproto.HeaderRouterProvidedConnID, true)
	m.PutUint16(zitiproto.HeaderCost, 7)
	if key != nil {
		m.Put(zitiproto.HeaderPublicKey, key)
		m.PutByte(zitiproto.HeaderCryptoMethod, zitiproto.CryptoLibsodium)
	}
	reply, err := cl.request(&m)
	if err != nil {
		return 0, err
	}
	if reply.ContentType != zitiproto.ContentStateConnected {
		return 0, fmt.Errorf("bind refused: %s", reply.Body)
	}
	select {
	case ev := <-cl.binds:
		if ev.ContentType != zitiproto.ContentBindSuccess {
			return 0, fmt.Errorf("bind failed: %s", ev.Body)
		}
	case <-time.After(testutil.Patience):
		return 0, errors.New("no BindSuccess")
	}
	return id, nil
}

// accept takes the router's next Dial and answers DialSuccess.
func (cl *zitiClient) accept() (*zconn, *zitiproto.Message, error) {
	var d *zitiproto.Message
	select {
	case d = <-cl.dials:
	case <-time.After(testutil.Patience):
		return nil, nil, errors.New("no dial came")
	}
	id, ok := d.Uint32(zitiproto.HeaderRouterProvidedConnID)
	if !ok {
		return nil, d, errors.New("the dial has no router-provided connection id")
	}
	zc := cl.newConn(id)
	return zc, d, cl.dialSuccess(d, id)
}

// dialSuccess answers the router's Dial d, taking the connection id id it assigned.
func (cl *zitiClient) dialSuccess(d *zitiproto.Message, id uint32) error {
	bindID, _ := d.Uint32(zitiproto.HeaderConnID)
	var m zitiproto.Message
	m.SetState(zitiproto.ContentDialSuccess, bindID, "")
	m.Body = binary.LittleEndian.AppendUint32(nil, id)
	m.ReplyTo(d)
	return cl.send(&m)
}

// zitiNet is routers E and H linked, each with an edge listener; H is a tunneler. Service
// "svc" (requiring end-to-end encryption if encrypted, and then allowing OpenZiti's scheme,
// which OpenZiti clients need) may be dialed by identity "dialer"
// and hosted by identity "host" and by router H's identity.
func zitiNet(t *testing.T, encrypted bool) (n *testNet, svc *model.Service, dialer, host tls.Certificate) {
	n, svc, dialer, host, _ = linkedEdgeNet(t, edgeNetOptions{tunneler: true,
		svc: model.Service{Name: "svc", EncryptionRequired: encrypted, OpenZitiEncryption: encrypted}})
	return n, svc, dialer, host
}

// zitiSession makes a Dial or Bind session and waits until router r knows it; it returns
// the session's token.
func (n *testNet) zitiSession(cl *zitiClient, r *Router, serviceID, typ string) string {
	n.t.Helper()
	return n.knownSession(cl, r, serviceID, typ).Token
}

// knownSession makes a Dial or Bind session and waits until router r knows it.
func (n *testNet) knownSession(cl *zitiClient, r *Router, serviceID, typ string) *model.Session {
	n.t.Helper()
	se, _, err := n.m.CreateSession(cl.api, serviceID, typ, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	testutil.Eventually(n.t, "the router to know the session", func() bool {
		_, ok := r.sessionCache.session(se.Token)
		return ok
	})
	return se
}

// An OpenZiti client's hello is answered with what sdk-golang reads (the router's id, the
// channel's id, BindSuccess support), and its latency probes and heartbeats are answered;
// hellos with another identity's API session, or an ended one, are refused. Stopping the
// router closes its channels.
func TestZitiHello(t *testing.T) {
	t.Parallel()
	n, _, dialerCert, hostCert := zitiNet(t, false)
	e := n.routers["E"]
	addr := e.r.SDKAddresses()[0]
	cl, err := n.connectZiti(addr, dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := cl.hello.String(zitiproto.HeaderID)
	connID, _ := cl.hello.String(zitiproto.HeaderConnectionID)
	if id != e.id || connID == "" || !cl.hello.Bool(zitiproto.HeaderSupportsBindSuccess) {
		t.Fatalf("hello result: router %q, channel %q, bind success %v", id, connID, cl.hello.Bool(zitiproto.HeaderSupportsBindSuccess))
	}
	var probe zitiproto.Message
	probe.Reset(zitiproto.ContentLatency)
	probe.PutUint64(zitiproto.HeaderProbeTime, 987654321)
	reply, err := cl.request(&probe)
	if err != nil {
		t.Fatal(err)
	}
	if pt, _ := reply.Uint64(zitiproto.HeaderProbeTime); reply.ContentType != zitiproto.ContentResult || pt != 987654321 {
		t.Fatalf("latency reply: content type %d, probe time %d", reply.ContentType, pt)
	}
	var beat zitiproto.Message
	beat.Reset(zitiproto.ContentHeartbeat)
	beat.PutUint64(zitiproto.HeaderHeartbeat, 424242)
	if err := cl.send(&beat); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-cl.beats:
		if v != 424242 {
			t.Fatalf("heartbeat response %d, want 424242", v)
		}
	case <-time.After(testutil.Patience):
		t.Fatal("no heartbeat response")
	}
	if _, err := n.connectZitiWith(addr, hostCert, cl.api); err == nil || !strings.Contains(err.Error(), "not of the identity") {
		t.Fatalf("hello with another identity's API session: %v", err)
	}
	n.endAPISession(cl)
	testutil.Eventually(t, "the router to forget the API session", func() bool {
		_, ok := e.r.sessionCache.apiSession(cl.api.Token)
		return !ok
	})
	if _, err := n.connectZitiWith(addr, dialerCert, cl.api); err == nil || !strings.Contains(err.Error(), "unknown or ended API session") {
		t.Fatalf("hello with a deleted API session: %v", err)
	}

	// Stopping the router closes its clients' channels.
	cl2, err := n.connectZiti(addr, dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	e.stop()
	select {
	case <-cl2.done:
	case <-time.After(testutil.Patience):
		t.Fatal("a stopped router's OpenZiti channel stays open")
	}
}

// An OpenZiti client at router E dials a service router H's tunnel hosts: the app data
// reaches the host, a megabyte crosses each way with half-close, and the client learns the
// circuit's id. Deleting a circuit's session ends it at both ends, the client told; deleting
// the client's API session ends its channel and circuits.
func TestZitiConnect(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 2*testutil.Patience)
	n, svc, ln, e, cl := s.n, s.svc, s.ln, s.e, s.cl
	down := bytes.Repeat([]byte("from the tunnel host "), 50_000)
	type accepted struct {
		c   net.Conn
		app tunnel.AppData
	}
	conns := make(chan accepted, 2)
	go func() {
		for {
			c, app, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- accepted{c, app}
		}
	}()
	type served struct {
		data []byte
		err  error
	}
	got := make(chan served, 1)
	tok := n.zitiSession(cl, e.r, svc.ID, "Dial")
	app, _ := json.Marshal(tunnel.AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: "443"})
	zc, reply, err := cl.connect(tok, nil, map[int32][]byte{zitiproto.HeaderAppData: app})
	if err != nil {
		t.Fatal(err)
	}
	if cid, _ := reply.String(zitiproto.HeaderCircuitID); cid == "" || cid == "0" {
		t.Fatalf("StateConnected without the circuit id: %q", cid)
	}
	a := <-conns
	defer a.c.Close()
	go func() {
		b, err := io.ReadAll(a.c)
		if err == nil {
			_, err = a.c.Write(down)
			a.c.(interface{ CloseWrite() error }).CloseWrite()
		}
		got <- served{b, err}
	}()
	up := bytes.Repeat([]byte("from the OpenZiti client "), 40_000)
	for off := 0; off < len(up); off += 32 << 10 {
		if err := zc.write(up[off:min(off+32<<10, len(up))], 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := zc.write(nil, zitiproto.FlagFIN); err != nil {
		t.Fatal(err)
	}
	back, err := zc.readAll()
	if err != nil || !bytes.Equal(back, down) {
		t.Fatalf("the client got %d bytes, want %d (%v)", len(back), len(down), err)
	}
	sv := <-got
	if sv.err != nil || !bytes.Equal(sv.data, up) || a.app.DstIP != "10.1.2.3" || a.app.DstPort != "443" {
		t.Fatalf("the host got %d bytes of %d with %+v (%v)", len(sv.data), len(up), a.app, sv.err)
	}
	a.c.Close()
	if err := zc.closed(); err != nil {
		t.Fatal(err)
	}

	// A circuit of its own session, then the session goes: both ends close, the client told.
	se := n.knownSession(cl, e.r, svc.ID, "Dial")
	zc3, _, err := cl.connect(se.Token, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	zc3.write([]byte("x"), 0)
	a3 := <-conns
	defer a3.c.Close()
	one := make([]byte, 1)
	a3.c.SetReadDeadline(time.Now().Add(testutil.Patience))
	if _, err := io.ReadFull(a3.c, one); err != nil {
		t.Fatal(err)
	}
	if err := n.m.DeleteSession(se.ID); err != nil {
		t.Fatal(err)
	}
	if err := zc3.closed(); err != nil {
		t.Fatal(err)
	}
	if _, err := a3.c.Read(one); err == nil {
		t.Fatal("the host's end of a circuit whose session ended still reads")
	}

	// A circuit carrying data, then the API session goes: both ends close.
	zc2, _, err := cl.connect(tok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	zc2.write([]byte("before the revocation"), 0)
	a2 := <-conns
	defer a2.c.Close()
	buf := make([]byte, len("before the revocation"))
	a2.c.SetReadDeadline(time.Now().Add(testutil.Patience))
	if _, err := io.ReadFull(a2.c, buf); err != nil {
		t.Fatal(err)
	}
	n.endAPISession(cl)
	if n, err := a2.c.Read(buf); err == nil {
		t.Fatalf("the host's end of the revoked client's circuit still reads: %q", buf[:n])
	}
}

// An OpenZiti client hosts the service at router H (terminator of binding edge at a ziti/
// address, with its cost) and a zmesh SDK client dials it at router E: the Dial names the
// caller, bytes cross both ways with half-close, and a host's StateClosed comes after all it
// wrote. The router's gauges count the client and its bind. UpdateBind changes the terminator's cost
// and precedence; unbinding removes it.
func TestZitiBind(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert := zitiNet(t, false)
	h, e := n.routers["H"], n.routers["E"]
	host, err := n.connectZiti(h.r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	bindTok := n.zitiSession(host, h.r, svc.ID, "Bind")
	bindID, err := host.bind(bindTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := n.m.TerminatorsOf(svc.ID)
	if err != nil || len(terms) != 1 {
		t.Fatalf("terminators %+v (%v)", terms, err)
	}
	term := terms[0]
	if term.Binding != "edge" || !strings.HasPrefix(term.Address, "ziti/") || term.Cost != 7 || term.HostID != host.api.IdentityID || term.RouterID != h.id {
		t.Fatalf("the bind's terminator: %+v", term)
	}

	fams, err := h.r.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, name := range []string{"zmesh_edge_clients", "zmesh_edge_binds"} {
		if v, ok := value(byName, name, "protocol", "openziti"); !ok || v != 1 {
			t.Errorf("%s{protocol=openziti} = %v (present %v), want 1", name, v, ok)
		}
		if v, ok := value(byName, name, "protocol", "zmesh"); !ok || v != 0 {
			t.Errorf("%s{protocol=zmesh} = %v (present %v), want 0", name, v, ok)
		}
	}

	dialer, err := n.connectSDK(e.r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	accepts := host.acceptAsync()
	var st io.ReadWriteCloser
	testutil.Eventually(t, "the router to know the dial session", func() bool {
		st, _, err = dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID})
		return err == nil
	})
	a := <-accepts
	if a.err != nil {
		t.Fatal(a.err)
	}
	caller, _ := a.d.String(zitiproto.HeaderCallerID)
	if caller != dialer.api.IdentityID || string(a.d.Body) != bindTok {
		t.Fatalf("dial from %q with token %q", caller, a.d.Body)
	}
	if id, _ := a.d.Uint32(zitiproto.HeaderConnID); id != bindID {
		t.Fatalf("dial on connection %d, want the bind's %d", id, bindID)
	}
	up := bytes.Repeat([]byte("zmesh to OpenZiti "), 30_000)
	go func() {
		st.Write(up)
		st.(interface{ CloseWrite() error }).CloseWrite()
	}()
	hosted := a.zc
	b, err := hosted.readAll()
	if err != nil || !bytes.Equal(b, up) {
		t.Fatalf("the host got %d bytes of %d (%v)", len(b), len(up), err)
	}
	if err := hosted.write([]byte("OpenZiti to zmesh"), 0); err != nil {
		t.Fatal(err)
	}
	hosted.write(nil, zitiproto.FlagFIN)
	if b, err := io.ReadAll(st); err != nil || string(b) != "OpenZiti to zmesh" {
		t.Fatalf("the dialer got %q (%v)", b, err)
	}
	if err := hosted.closed(); err != nil {
		t.Fatal(err)
	}

	// The host writes, then closes without a FIN: the dialer still gets every byte, then EOF.
	accepts = host.acceptAsync()
	st2, _, err := dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID})
	if err != nil {
		t.Fatal(err)
	}
	a = <-accepts
	if a.err != nil {
		t.Fatal(a.err)
	}
	last := bytes.Repeat([]byte("last words "), 200_000)
	for off := 0; off < len(last); off += 32 << 10 {
		a.zc.write(last[off:min(off+32<<10, len(last))], 0)
	}
	var closeMsg zitiproto.Message
	closeMsg.SetState(zitiproto.ContentStateClosed, a.zc.id, "")
	if err := host.send(&closeMsg); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(st2); err != nil || !bytes.Equal(b, last) {
		t.Fatalf("after the host closed, the dialer got %d bytes of %d (%v)", len(b), len(last), err)
	}

	// The host changes its cost and precedence.
	var update zitiproto.Message
	update.SetState(zitiproto.ContentUpdateBind, bindID, bindTok)
	update.PutUint16(zitiproto.HeaderCost, 42)
	update.PutByte(zitiproto.HeaderPrecedence, zitiproto.PrecedenceRequired)
	if err := host.send(&update); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the terminator to take the bind's update", func() bool {
		got, err := n.m.Terminator(term.ID)
		return err == nil && got.Cost == 42 && got.Precedence == "required"
	})

	var unbind zitiproto.Message
	unbind.SetState(zitiproto.ContentUnbind, bindID, bindTok)
	if err := host.send(&unbind); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the terminator to go with its bind", func() bool {
		_, err := n.m.Terminator(term.ID)
		return model.CodeOf(err) == model.CodeNotFound
	})
}

// On a service that requires encryption, an OpenZiti client at router E reaches an OpenZiti
// client hosting at router H with OpenZiti's scheme: the keys cross in the Connect's and the
// Dial's headers, and each Data body arrives as one Data body (the routers carry them as
// frames), a body larger than the unframed limit included. A zmesh client that offers no
// zitiKey cannot reach the OpenZiti host, and is told why.
func TestZitiE2EEFrames(t *testing.T) {
	t.Parallel()
	hostKey, dialerKey := bytes.Repeat([]byte{'h'}, 32), bytes.Repeat([]byte{'d'}, 32)
	s := newZitiBound(t, true, hostKey)
	n, svc, e, host, dialer, dialerCert := s.n, s.svc, s.e, s.host, s.dialer, s.dialerCert
	accepts := host.acceptAsync()
	zc, reply, err := dialer.connect(n.zitiSession(dialer, e.r, svc.ID, "Dial"), dialerKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := reply.Header(zitiproto.HeaderPublicKey); !bytes.Equal(k, hostKey) {
		t.Fatalf("StateConnected carries key %q, want the host's", k)
	}
	a := <-accepts
	if a.err != nil {
		t.Fatal(a.err)
	}
	if k, _ := a.d.Header(zitiproto.HeaderPublicKey); !bytes.Equal(k, dialerKey) {
		t.Fatalf("the Dial carries key %q, want the dialer's", k)
	}
	hosted := a.zc
	bodies := [][]byte{bytes.Repeat([]byte{'x'}, 24), []byte("one message"), bytes.Repeat([]byte("a large message "), 20_000)}
	for _, b := range bodies {
		if err := zc.write(b, 0); err != nil {
			t.Fatal(err)
		}
		if err := hosted.write(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range bodies {
		for _, end := range []*zconn{hosted, zc} {
			got, err := end.next()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("connection %d got a body of %d bytes, want %d (%v)", end.id, len(got), len(want), err)
			}
		}
	}
	zc.write(nil, zitiproto.FlagFIN)
	hosted.write(nil, zitiproto.FlagFIN)
	for _, end := range []*zconn{hosted, zc} {
		if b, err := end.readAll(); err != nil || len(b) != 0 {
			t.Fatalf("connection %d after FIN: %d bytes (%v)", end.id, len(b), err)
		}
	}

	// A zmesh client offers zmesh's scheme only.
	zm, err := n.connectSDK(e.r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	tok := n.sdkSession(zm, svc.ID, "Dial")
	testutil.Eventually(t, "the router to know the session", func() bool {
		_, ok := e.r.sessionCache.session(tok)
		return ok
	})
	_, _, err = zm.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: tok, ServiceID: svc.ID, E2EE: &edgeproto.E2EEOffer{Zmesh: true}})
	if err == nil || !strings.Contains(err.Error(), "offered no zitiKey") {
		t.Fatalf("a zmesh-only offer to an OpenZiti host: %v", err)
	}
}

// An OpenZiti client whose API session (a password login) outlives a change of its
// identity's certificates loses its channel when the certificate it presented is no longer
// current, and that certificate is refused from then on.
func TestZitiCertChangeClosesChannel(t *testing.T) {
	t.Parallel()
	n, _, dialerCert, _ := zitiNet(t, false)
	addr := n.routers["E"].r.SDKAddresses()[0]
	leaf, _ := x509.ParseCertificate(dialerCert.Certificate[0])
	dialerID := leaf.Subject.CommonName
	e, err := n.m.CreateEnrollment(dialerID, model.EnrollmentRequest{Updb: "dialer-user"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.m.EnrollUpdb(context.Background(), e.Token, "a long enough password"); err != nil {
		t.Fatal(err)
	}
	apiSess, _, err := n.m.AuthenticatePassword(context.Background(), "dialer-user", "a long enough password", model.Login{Source: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	var cl *zitiClient
	testutil.Eventually(t, "the router to admit the certificate with the password session", func() bool {
		cl, err = n.connectZitiWith(addr, dialerCert, apiSess)
		return err == nil
	})
	if err := n.m.DeleteAuthenticator(n.certAuthenticator(dialerID).ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cl.done:
	case <-time.After(testutil.Patience):
		t.Fatal("the channel of a certificate no longer current stays open")
	}
	if _, err := n.connectZitiWith(addr, dialerCert, apiSess); err == nil || !strings.Contains(err.Error(), "not a current certificate") {
		t.Fatalf("the revoked certificate with the password session: %v", err)
	}
}

// An OpenZiti client dialing a service that requires end-to-end encryption, hosted by router
// H's tunnel, does OpenZiti's key exchange with H's tunnel through router E: the keys ride
// the Connect and StateConnected, each side's first Data is its stream header, and every
// payload both routers forward between them is ciphertext; the tunnel's host end reads the
// plaintext and its echo comes back decrypted.
func TestZitiClientEncryptedToTunnelHost(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, _ := zitiNet(t, true)
	h, e := n.routers["H"], n.routers["E"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.Patience)
	defer cancel()
	tunnelKnows(t, h.r, svc, true)
	ln, err := h.r.overlay.Bind(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, Bind: true, EncryptionRequired: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type served struct {
		data []byte
		err  error
	}
	got := make(chan served, 1)
	go func() {
		c, _, err := ln.Accept()
		if err != nil {
			got <- served{nil, err}
			return
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		if err == nil {
			_, err = c.Write(b)
			c.(interface{ CloseWrite() error }).CloseWrite()
		}
		got <- served{b, err}
	}()

	// Both routers record the payloads they take from their link.
	var (
		mu   sync.Mutex
		seen bytes.Buffer
	)
	tap := func(f *xgress.Frame) {
		if f.Type == xgress.Payload && len(f.Data) > 0 {
			mu.Lock()
			seen.Write(f.Data)
			mu.Unlock()
		}
	}
	h.r.fw.tap.Store(&tap)
	e.r.fw.tap.Store(&tap)

	cl, err := n.connectZiti(e.r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := kx.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	zc, reply, err := cl.connect(n.zitiSession(cl, e.r, svc.ID, "Dial"), kp.Public(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _ := reply.Header(zitiproto.HeaderPublicKey)
	rx, tx, err := kp.ClientSessionKeys(hostKey)
	if err != nil {
		t.Fatalf("the host's key %x: %v", hostKey, err)
	}
	enc, header, err := secretstream.NewEncryptor(tx)
	if err != nil {
		t.Fatal(err)
	}
	must(t, zc.write(header, 0))
	marker := []byte("plaintext the routers must never see ")
	msg := bytes.Repeat(marker, 2048)
	for off := 0; off < len(msg); off += 16 << 10 {
		ct, err := enc.Push(msg[off:min(off+16<<10, len(msg))], secretstream.TagMessage)
		if err != nil {
			t.Fatal(err)
		}
		must(t, zc.write(ct, 0))
	}
	must(t, zc.write(nil, zitiproto.FlagFIN))

	first, err := zc.next()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := secretstream.NewDecryptor(rx, first)
	if err != nil {
		t.Fatalf("the host's stream header (%d bytes): %v", len(first), err)
	}
	var back []byte
	for {
		ct, err := zc.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pt, _, err := dec.Pull(ct)
		if err != nil {
			t.Fatalf("decrypt the echo: %v", err)
		}
		back = append(back, pt...)
	}
	if !bytes.Equal(back, msg) {
		t.Fatalf("the client decrypted %d bytes of echo, sent %d", len(back), len(msg))
	}
	if s := <-got; s.err != nil || !bytes.Equal(s.data, msg) {
		t.Fatalf("the tunnel host read %d bytes of %d (%v)", len(s.data), len(msg), s.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen.Len() < 2*len(msg) || bytes.Contains(seen.Bytes(), marker) {
		t.Fatalf("the routers forwarded %d bytes, the plaintext among them: %v", seen.Len(), bytes.Contains(seen.Bytes(), marker))
	}
}
