package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openziti/secretstream"
	"github.com/openziti/secretstream/kx"
	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/socketpair"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
)

// zitiPeer is an end of a circuit that does OpenZiti's end-to-end scheme with the
// secretstream and kx API, as OpenZiti's clients do, over the scheme's frames.
type zitiPeer struct {
	conn net.Conn
	kp   *kx.KeyPair
	enc  secretstream.Encryptor
	rx   []byte
	dec  secretstream.Decryptor
}

func newZitiPeer(t *testing.T) *zitiPeer {
	t.Helper()
	kp, err := kx.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	return &zitiPeer{kp: kp}
}

// start derives the session keys with the other end's public key (as crypto_kx's client
// when dialing) and sends this end's stream header on conn.
func (p *zitiPeer) start(conn net.Conn, peerKey []byte, dialing bool) error {
	if len(peerKey) != e2ee.ZitiKeySize {
		return fmt.Errorf("the other end's key is %d bytes", len(peerKey))
	}
	var tx []byte
	var err error
	if dialing {
		p.rx, tx, err = p.kp.ClientSessionKeys(peerKey)
	} else {
		p.rx, tx, err = p.kp.ServerSessionKeys(peerKey)
	}
	if err != nil {
		return err
	}
	var header []byte
	if p.enc, header, err = secretstream.NewEncryptor(tx); err != nil {
		return err
	}
	p.conn = conn
	return p.writeFrame(header)
}

func (p *zitiPeer) writeFrame(b []byte) error {
	_, err := p.conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func (p *zitiPeer) send(msg []byte) error {
	ct, err := p.enc.Push(msg, secretstream.TagMessage)
	if err != nil {
		return err
	}
	return p.writeFrame(ct)
}

// readFrame returns the next frame, or nil at the end of the stream.
func (p *zitiPeer) readFrame() ([]byte, error) {
	p.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var n [4]byte
	if _, err := io.ReadFull(p.conn, n[:]); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(p.conn, b)
	return b, err
}

// receiveAll reads and opens messages until the stream ends.
func (p *zitiPeer) receiveAll() ([]byte, error) {
	var out []byte
	for {
		f, err := p.readFrame()
		if err != nil || f == nil {
			return out, err
		}
		if p.dec == nil {
			if p.dec, err = secretstream.NewDecryptor(p.rx, f); err != nil {
				return out, err
			}
			continue
		}
		msg, _, err := p.dec.Pull(f)
		if err != nil {
			return out, fmt.Errorf("pull: %w", err)
		}
		out = append(out, msg...)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// echoHost serves a listener: each connection is read to its end and echoed upper-cased,
// and what the host saw is reported.
type hosted struct {
	conn net.Conn
	data []byte
	err  error
}

func echoHost(accept func() (net.Conn, error)) <-chan hosted {
	got := make(chan hosted, 4)
	go func() {
		for {
			c, err := accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := io.ReadAll(c)
				if err == nil {
					_, err = c.Write(bytes.ToUpper(b))
				}
				if err == nil {
					err = c.(interface{ CloseWrite() error }).CloseWrite()
				}
				got <- hosted{c, b, err}
			}()
		}
	}()
	return got
}

func openSDK(t *testing.T, n *testNet, cert tls.Certificate) *sdk.Client {
	t.Helper()
	c, err := sdk.New(sdkIdentity(t, n.identityFile(cert)), sdk.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// allowOpenZiti sets the service's openZitiEncryption.
func allowOpenZiti(t *testing.T, n *testNet, svc *model.Service, on bool) {
	t.Helper()
	if _, err := n.m.UpdateService(svc.ID, func(s *model.Service) error { s.OpenZitiEncryption = on; return nil }); err != nil {
		t.Fatal(err)
	}
	svc.OpenZitiEncryption = on
}

// tunnelKnows waits until router r's list of its identity's services has the service with
// openZitiEncryption on.
func tunnelKnows(t *testing.T, r *Router, svc *model.Service, on bool) {
	t.Helper()
	testutil.Eventually(t, "the router's service list", func() bool {
		if _, _, err := r.overlay.services(context.Background(), 0); err != nil {
			return false
		}
		s, ok := r.overlay.service(svc.ID, "")
		return ok && s.OpenZitiEncryption == on
	})
}

// openZitiEdgeNet is buildEdgeNet (pinned) with openZitiEncryption set if openZiti, and ctx
// bounding the test.
func openZitiEdgeNet(t *testing.T, openZiti bool) (n *testNet, svc *model.Service, dialerCert, hostCert tls.Certificate, ctx context.Context) {
	t.Helper()
	n, svc, dialerCert, hostCert, _ = buildEdgeNet(t, true)
	if openZiti {
		allowOpenZiti(t, n, svc, true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return n, svc, dialerCert, hostCert, ctx
}

// sdkEchoNet is buildEdgeNet with identity "host" listening on svc through the SDK and
// echoing (openZitiEncryption set first if openZiti), and ctx bounding the test.
func sdkEchoNet(t *testing.T, openZiti bool) (n *testNet, svc *model.Service, dialerCert tls.Certificate, ctx context.Context, got <-chan hosted) {
	t.Helper()
	n, svc, dialerCert, hostCert, ctx := openZitiEdgeNet(t, openZiti)
	ln, err := openSDK(t, n, hostCert).Listen(ctx, svc.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return n, svc, dialerCert, ctx, echoHost(ln.Accept)
}

// zitiHostNet is buildEdgeNet with an OpenZiti-like host of svc at router H
// (openZitiEncryption set first if openZiti), an SDK client of identity "dialer", and ctx
// bounding the test.
func zitiHostNet(t *testing.T, openZiti bool) (svc *model.Service, ctx context.Context, done <-chan zitiHosted, dialer *sdk.Client) {
	t.Helper()
	n, svc, dialerCert, hostCert, ctx := openZitiEdgeNet(t, openZiti)
	host, err := n.connectSDK(n.routers["H"].r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	done = zitiHost(t, n, host, svc)
	return svc, ctx, done, openSDK(t, n, dialerCert)
}

// An SDK Listen end reached by a dialer that offers only an OpenZiti key, as an OpenZiti
// client does, takes OpenZiti's scheme: the dial's answer carries the host's key through
// the controller and both routers, and data crosses encrypted both ways.
func TestSDKListenOpenZitiDialer(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, _, got := sdkEchoNet(t, true)

	dialer, err := n.connectSDK(n.routers["E"].r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	peer := newZitiPeer(t)
	var st *smux.Stream
	var resp *edgeproto.Response
	testutil.Eventually(t, "a circuit to the host", func() bool {
		st, resp, err = dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID,
			E2EE: &edgeproto.E2EEOffer{ZitiKey: peer.kp.Public()}})
		return err == nil
	})
	defer st.Close()
	must(t, peer.start(st, resp.HostZitiKey, true))
	msg := bytes.Repeat([]byte("an OpenZiti client speaks "), 5000)
	must(t, peer.send(msg[:10]))
	must(t, peer.send(msg[10:]))
	st.CloseWrite()
	if back, err := peer.receiveAll(); err != nil || !bytes.Equal(back, bytes.ToUpper(msg)) {
		t.Fatalf("the dialer got %d bytes back (%v), want %d", len(back), err, len(msg))
	}
	h := <-got
	if h.err != nil || !bytes.Equal(h.data, msg) {
		t.Fatalf("the host read %d bytes (%v)", len(h.data), h.err)
	}
	if sc := h.conn.(*sdk.Conn); !sc.Encrypted() || sc.Scheme() != sdk.SchemeOpenZiti {
		t.Fatalf("the host's conn: encrypted %v, scheme %q", sc.Encrypted(), sc.Scheme())
	}

	// A dial that offers no scheme is refused by the controller.
	if _, _, err := dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID,
		E2EE: &edgeproto.E2EEOffer{}}); err == nil || !strings.Contains(err.Error(), ctrlproto.ErrCodeEncryptionRequired) {
		t.Fatalf("a dial with an empty offer: %v", err)
	}
	// Without openZitiEncryption, the controller refuses an offer of only OpenZiti's scheme.
	allowOpenZiti(t, n, svc, false)
	if _, _, err := dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID,
		E2EE: &edgeproto.E2EEOffer{ZitiKey: newZitiPeer(t).kp.Public()}}); err == nil || !strings.Contains(err.Error(), "openZitiEncryption is false") {
		t.Fatalf("a dial offering only OpenZiti's scheme on a service without openZitiEncryption: %v", err)
	}
}

// The listener follows the policy it got from the controller, not the offer a router passes
// on: one that listens on a service without openZitiEncryption refuses an offer of only
// OpenZiti's scheme even when the controller let it through (its policy changed since).
func TestSDKListenRefusesOpenZitiDialer(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, _, got := sdkEchoNet(t, false)
	allowOpenZiti(t, n, svc, true)
	dialer, err := n.connectSDK(n.routers["E"].r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	testutil.Eventually(t, "the listener's refusal", func() bool {
		_, _, err = dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID,
			E2EE: &edgeproto.E2EEOffer{ZitiKey: newZitiPeer(t).kp.Public()}})
		return err != nil && strings.Contains(err.Error(), "openZitiEncryption is false")
	})
	select {
	case h := <-got:
		t.Fatalf("the listener accepted a conn (%v)", h.err)
	default:
	}
}

// zitiHosted is what an OpenZiti-like host read, and the offer it got.
type zitiHosted struct {
	offer *edgeproto.E2EEOffer
	data  []byte
	err   error
}

// zitiHost binds svc with the raw edge client host and answers the next connect as an
// OpenZiti host does: with its own key, then OpenZiti's scheme as crypto_kx's server; it
// reads to the end and answers upper-cased.
func zitiHost(t *testing.T, n *testNet, host *sdkClient, svc *model.Service) <-chan zitiHosted {
	t.Helper()
	bindTok := n.sdkSession(host, svc.ID, "Bind")
	var err error
	testutil.Eventually(t, "the router to know the bind session", func() bool {
		_, _, err = host.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: bindTok, ServiceID: svc.ID})
		return err == nil
	})
	peer := newZitiPeer(t)
	done := make(chan zitiHosted, 1)
	go func() {
		st, err := host.sess.AcceptStream()
		if err != nil {
			done <- zitiHosted{err: err}
			return
		}
		defer st.Close()
		var req edgeproto.Request
		if err := edgeproto.Read(st, &req); err != nil {
			done <- zitiHosted{err: err}
			return
		}
		if req.E2EE == nil || len(req.E2EE.ZitiKey) != e2ee.ZitiKeySize {
			edgeproto.Write(st, &edgeproto.Response{Code: edgeproto.CodeInvalid, Error: "no OpenZiti key"})
			done <- zitiHosted{offer: req.E2EE, err: errors.New("no OpenZiti key offered")}
			return
		}
		if err := edgeproto.Write(st, &edgeproto.Response{OK: true, HostZitiKey: peer.kp.Public()}); err != nil {
			done <- zitiHosted{err: err}
			return
		}
		err = peer.start(st, req.E2EE.ZitiKey, false)
		var data []byte
		if err == nil {
			data, err = peer.receiveAll()
		}
		if err == nil {
			err = peer.send(bytes.ToUpper(data))
		}
		st.CloseWrite()
		done <- zitiHosted{offer: req.E2EE, data: data, err: err}
	}()
	return done
}

// exchange writes msg on c, half-closes and checks that the upper-cased answer comes back
// and that the host read msg after an offer of both schemes.
func exchange(t *testing.T, c net.Conn, msg string, done <-chan zitiHosted) {
	t.Helper()
	c.Write([]byte(msg))
	c.(interface{ CloseWrite() error }).CloseWrite()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	back, err := io.ReadAll(c)
	if err != nil || string(back) != strings.ToUpper(msg) {
		t.Fatalf("the dialer read %q (%v)", back, err)
	}
	r := <-done
	if r.err != nil || string(r.data) != msg || !r.offer.Zmesh {
		t.Fatalf("the host read %q with offer %+v (%v)", r.data, r.offer, r.err)
	}
}

// An SDK Dial reaching a host that answers with an OpenZiti key, as an OpenZiti host does,
// runs OpenZiti's scheme as crypto_kx's client.
func TestSDKDialOpenZitiHost(t *testing.T) {
	t.Parallel()
	svc, ctx, done, dialer := zitiHostNet(t, true)
	var err error
	var c *sdk.Conn
	testutil.Eventually(t, "the routers to know the sessions", func() bool {
		c, err = dialer.Dial(ctx, svc.Name)
		return err == nil
	})
	defer c.Close()
	if !c.Encrypted() || c.Scheme() != sdk.SchemeOpenZiti {
		t.Fatalf("the dial: encrypted %v, scheme %q", c.Encrypted(), c.Scheme())
	}
	exchange(t, c, "to an OpenZiti host", done)
}

// Without openZitiEncryption an SDK Dial offers no OpenZiti key: an OpenZiti host cannot
// take the circuit.
func TestSDKDialOpenZitiHostNotAllowed(t *testing.T) {
	t.Parallel()
	svc, ctx, done, dialer := zitiHostNet(t, false)
	var err error
	testutil.Eventually(t, "the host's refusal", func() bool {
		_, err = dialer.Dial(ctx, svc.Name)
		return err != nil && strings.Contains(err.Error(), "no OpenZiti key")
	})
	if r := <-done; r.offer == nil || !r.offer.Zmesh || r.offer.ZitiKey != nil {
		t.Fatalf("the host got offer %+v", r.offer)
	}
}

// The router tunnel's dial reaching a host that answers with an OpenZiti key runs OpenZiti's
// scheme as crypto_kx's client.
func TestTunnelDialOpenZitiHost(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	n.addRouter("H", false, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
listeners:
  - binding: edge
    bind: tls:127.0.0.1:{{port}}
    advertise: tls:127.0.0.1:{{same}}
`)
	n.addRouter("A", true, `link:
  dialers:
    - binding: transport
`)
	testutil.Eventually(t, "link A–H", func() bool { return n.linked("A", "H") })
	svc := &model.Service{Name: "svc", EncryptionRequired: true, OpenZitiEncryption: true}
	if err := n.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	plain := &model.Service{Name: "zmesh-only", EncryptionRequired: true}
	if err := n.m.CreateService(plain); err != nil {
		t.Fatal(err)
	}
	hostCert, _ := n.enrolled("host", "hosts")
	for _, err := range []error{
		n.m.CreateServicePolicy(&model.ServicePolicy{Name: "dial", Type: model.PolicyDial, Semantic: model.SemanticAny,
			IdentityRoles: []string{"@" + n.routers["A"].id}, ServiceRoles: []string{"@" + svc.ID, "@" + plain.ID}}),
		n.m.CreateServicePolicy(&model.ServicePolicy{Name: "bind", Type: model.PolicyBind, Semantic: model.SemanticAny,
			IdentityRoles: []string{"#hosts"}, ServiceRoles: []string{"@" + svc.ID, "@" + plain.ID}}),
		n.m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny, IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}),
		n.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "H", "ca.cert"))
	os.WriteFile(filepath.Join(n.dir, "ca.pem"), caPEM, 0o600)
	host, err := n.connectSDK(n.routers["H"].r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	a := n.routers["A"].r
	tunnelKnows(t, a, svc, true)
	tunnelKnows(t, a, plain, false)
	done := zitiHost(t, n, host, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var c net.Conn
	testutil.Eventually(t, "the terminator", func() bool {
		c, err = a.overlay.Dial(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, EncryptionRequired: true, Dial: true}, tunnel.AppData{})
		return err == nil
	})
	defer c.Close()
	if _, ok := c.(*e2ee.ZitiConn); !ok {
		t.Fatalf("the tunnel's dial is a %T, not OpenZiti's scheme", c)
	}
	exchange(t, c, "from the tunnel to an OpenZiti host", done)

	// Without openZitiEncryption the tunnel offers no OpenZiti key: the OpenZiti host
	// cannot take the circuit.
	done = zitiHost(t, n, host, plain)
	testutil.Eventually(t, "the host's refusal", func() bool {
		_, err = a.overlay.Dial(ctx, tunnel.Service{ID: plain.ID, Name: plain.Name, EncryptionRequired: true, Dial: true}, tunnel.AppData{})
		return err != nil && strings.Contains(err.Error(), "no OpenZiti key")
	})
	if r := <-done; r.offer == nil || !r.offer.Zmesh || r.offer.ZitiKey != nil {
		t.Fatalf("the host got offer %+v", r.offer)
	}
}

// tunnelNet is hostAndProxy with service "encrypted", which router A's identity may dial
// and router H's bind, with openZitiEncryption as given; once both routers' service lists
// have it, H's tunnel echoes it (see echoHost). ctx bounds the test.
func tunnelNet(t *testing.T, openZiti bool) (ctx context.Context, n *testNet, svc *model.Service, got <-chan hosted) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	n = hostAndProxy(t, "encrypted")
	svc = &model.Service{Name: "encrypted", EncryptionRequired: true, OpenZitiEncryption: openZiti}
	if err := n.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*model.ServicePolicy{
		{Name: "dial", Type: model.PolicyDial, Semantic: model.SemanticAny, IdentityRoles: []string{"@" + n.routers["A"].id}, ServiceRoles: []string{"@" + svc.ID}},
		{Name: "bind", Type: model.PolicyBind, Semantic: model.SemanticAny, IdentityRoles: []string{"@" + n.routers["H"].id}, ServiceRoles: []string{"@" + svc.ID}},
	} {
		if err := n.m.CreateServicePolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := n.routers["H"].r.overlay.Bind(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, EncryptionRequired: true, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tunnelKnows(t, n.routers["A"].r, svc, openZiti)
	tunnelKnows(t, n.routers["H"].r, svc, openZiti)
	return ctx, n, svc, echoHost(func() (net.Conn, error) { c, _, err := ln.Accept(); return c, err })
}

// The router tunnel's host end, reached by a circuit whose initiator offers only an OpenZiti
// key, takes OpenZiti's scheme; the tunnel's own dial, which offers both, gets zmesh's.
func TestTunnelHostOpenZitiDialer(t *testing.T) {
	t.Parallel()
	ctx, n, svc, got := tunnelNet(t, true)
	a := n.routers["A"].r

	peer := newZitiPeer(t)
	var reply *ctrlproto.CircuitReply
	var err error
	testutil.Eventually(t, "the terminator", func() bool {
		reply, err = a.requestCircuit(ctx, &ctrlproto.CircuitRequest{ServiceID: svc.ID, IngressIdentityID: a.id,
			E2EE: &ctrlproto.E2EEOffer{ZitiKey: peer.kp.Public()}})
		return err == nil
	})
	circuitEnd, end, err := socketpair.New()
	if err != nil {
		t.Fatal(err)
	}
	defer end.Close()
	if err := a.attachIngress(reply, circuitEnd); err != nil {
		t.Fatal(err)
	}
	must(t, peer.start(end, reply.HostZitiKey, true))
	must(t, peer.send([]byte("through the tunnel")))
	end.(interface{ CloseWrite() error }).CloseWrite()
	if back, err := peer.receiveAll(); err != nil || string(back) != "THROUGH THE TUNNEL" {
		t.Fatalf("the dialer got %q (%v)", back, err)
	}
	h := <-got
	if _, ok := h.conn.(*e2ee.ZitiConn); h.err != nil || string(h.data) != "through the tunnel" || !ok {
		t.Fatalf("the host read %q over a %T (%v)", h.data, h.conn, h.err)
	}

	// zmesh's tunnel dialing zmesh's tunnel: zmesh's scheme.
	c, err := a.overlay.Dial(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, EncryptionRequired: true, Dial: true}, tunnel.AppData{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*e2ee.Conn); !ok {
		t.Fatalf("the tunnel's dial is a %T, not zmesh's scheme", c)
	}
	c.Write([]byte("zmesh to zmesh"))
	c.(interface{ CloseWrite() error }).CloseWrite()
	if back, err := io.ReadAll(c); err != nil || string(back) != "ZMESH TO ZMESH" {
		t.Fatalf("the tunnel's dial read %q (%v)", back, err)
	}
	h = <-got
	if _, ok := h.conn.(*e2ee.Conn); !ok || h.err != nil || string(h.data) != "zmesh to zmesh" {
		t.Fatalf("the host's end is a %T and read %q (%v), not zmesh's scheme", h.conn, h.data, h.err)
	}
}

// A tunnel host of a service without openZitiEncryption refuses an offer of only OpenZiti's
// scheme, even one a router rewrote after the controller checked it.
func TestTunnelHostRefusesOpenZitiDialer(t *testing.T) {
	t.Parallel()
	ctx, n, svc, got := tunnelNet(t, false)
	a, h := n.routers["A"].r, n.routers["H"].r
	peer := newZitiPeer(t)
	h.overlay.tamper.Store(&e2eeTamper{offer: func(*ctrlproto.E2EEOffer) *ctrlproto.E2EEOffer {
		return &ctrlproto.E2EEOffer{ZitiKey: peer.kp.Public()}
	}})
	var err error
	testutil.Eventually(t, "the host's refusal", func() bool {
		_, err = a.overlay.Dial(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, EncryptionRequired: true, Dial: true}, tunnel.AppData{})
		return err != nil && strings.Contains(err.Error(), "openZitiEncryption is false")
	})
	select {
	case h := <-got:
		t.Fatalf("the tunnel host accepted a conn (%v)", h.err)
	default:
	}
}

// Two zmesh SDK ends of a service without openZitiEncryption, through real routers, one of
// which tampers: the egress rewriting the offer to only OpenZiti's scheme (with its own
// key), or the ingress answering the dial with its own OpenZiti key. Either way the dial
// fails and no end runs OpenZiti's scheme, whose keys the router would hold.
func TestE2EEDowngradeRefused(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, ctx, got := sdkEchoNet(t, false)
	dialer := openSDK(t, n, dialerCert)
	mitm := newZitiPeer(t) // the tampering router's key
	e, h := n.routers["E"].r, n.routers["H"].r
	noneAccepted := func() {
		t.Helper()
		select {
		case a := <-got:
			t.Fatalf("the listener accepted a conn with scheme %q (%v)", a.conn.(*sdk.Conn).Scheme(), a.err)
		default:
		}
	}
	for _, c := range []struct {
		name string
		r    *Router
		how  *e2eeTamper
	}{
		{"the egress offers only OpenZiti's scheme", h, &e2eeTamper{offer: func(*ctrlproto.E2EEOffer) *ctrlproto.E2EEOffer {
			return &ctrlproto.E2EEOffer{ZitiKey: mitm.kp.Public()}
		}}},
		{"the ingress answers with its OpenZiti key", e, &e2eeTamper{hostKey: func([]byte) []byte { return mitm.kp.Public() }}},
	} {
		c.r.overlay.tamper.Store(c.how)
		testutil.Eventually(t, c.name+": the dial's failure", func() bool {
			conn, err := dialer.Dial(ctx, svc.Name)
			if err == nil {
				defer conn.Close()
				if conn.Scheme() != sdk.SchemeZmesh {
					t.Fatalf("%s: the dial runs scheme %q", c.name, conn.Scheme())
				}
				return false
			}
			return strings.Contains(err.Error(), "openZitiEncryption is false")
		})
		noneAccepted()
		c.r.overlay.tamper.Store(nil)
	}

	// Untampered, the two ends run zmesh's scheme.
	conn, err := dialer.Dial(ctx, svc.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.Scheme() != sdk.SchemeZmesh {
		t.Fatalf("untampered: scheme %q", conn.Scheme())
	}
	conn.Write([]byte("zmesh to zmesh"))
	conn.CloseWrite()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if back, err := io.ReadAll(conn); err != nil || string(back) != "ZMESH TO ZMESH" {
		t.Fatalf("untampered: read %q (%v)", back, err)
	}
	if a := <-got; a.conn.(*sdk.Conn).Scheme() != sdk.SchemeZmesh {
		t.Fatalf("untampered: the host's scheme %q", a.conn.(*sdk.Conn).Scheme())
	}
}

// The proxy mode, which knows its services by name, offers what the router identity's
// service list allows: zmesh's scheme, plus an OpenZiti key only with openZitiEncryption.
// Either way two zmesh tunnels settle on zmesh's scheme.
func TestProxyOffersFollowThePolicy(t *testing.T) {
	t.Parallel()
	_, n, svc, got := tunnelNet(t, false)
	a, h := n.routers["A"].r, n.routers["H"].r
	offers := make(chan *ctrlproto.E2EEOffer, 4)
	h.overlay.tamper.Store(&e2eeTamper{offer: func(o *ctrlproto.E2EEOffer) *ctrlproto.E2EEOffer { offers <- o; return o }})
	for _, openZiti := range []bool{false, true} {
		allowOpenZiti(t, n, svc, openZiti)
		tunnelKnows(t, a, svc, openZiti)
		tunnelKnows(t, h, svc, openZiti)
		c, err := net.DialTimeout("tcp", a.ProxyAddress(svc.Name), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("through the proxy"))
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		back, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(back) != "THROUGH THE PROXY" {
			t.Fatalf("openZitiEncryption %v: the proxy's client read %q (%v)", openZiti, back, err)
		}
		if o := <-offers; o == nil || !o.Zmesh || (len(o.ZitiKey) == e2ee.ZitiKeySize) != openZiti {
			t.Errorf("openZitiEncryption %v: the host got offer %+v", openZiti, o)
		}
		if r := <-got; r.err != nil {
			t.Fatal(r.err)
		} else if _, ok := r.conn.(*e2ee.Conn); !ok {
			t.Errorf("openZitiEncryption %v: the host's end is a %T, not zmesh's scheme", openZiti, r.conn)
		}
	}
}
