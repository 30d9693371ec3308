package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
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
func (p *zitiPeer) start(t *testing.T, conn net.Conn, peerKey []byte, dialing bool) {
	t.Helper()
	if len(peerKey) != e2ee.ZitiKeySize {
		t.Fatalf("the other end's key is %d bytes", len(peerKey))
	}
	var tx []byte
	var err error
	if dialing {
		p.rx, tx, err = p.kp.ClientSessionKeys(peerKey)
	} else {
		p.rx, tx, err = p.kp.ServerSessionKeys(peerKey)
	}
	if err != nil {
		t.Fatal(err)
	}
	var header []byte
	if p.enc, header, err = secretstream.NewEncryptor(tx); err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	p.writeFrame(t, header)
}

func (p *zitiPeer) writeFrame(t *testing.T, b []byte) {
	t.Helper()
	if _, err := p.conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
}

func (p *zitiPeer) send(t *testing.T, msg []byte) {
	t.Helper()
	ct, err := p.enc.Push(msg, secretstream.TagMessage)
	if err != nil {
		t.Fatal(err)
	}
	p.writeFrame(t, ct)
}

// readFrame returns the next frame, or nil at the end of the stream.
func (p *zitiPeer) readFrame(t *testing.T) []byte {
	t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var n [4]byte
	if _, err := io.ReadFull(p.conn, n[:]); errors.Is(err, io.EOF) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(p.conn, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// receiveAll reads and opens messages until the stream ends.
func (p *zitiPeer) receiveAll(t *testing.T) []byte {
	t.Helper()
	var out []byte
	for {
		f := p.readFrame(t)
		if f == nil {
			return out
		}
		if p.dec == nil {
			var err error
			if p.dec, err = secretstream.NewDecryptor(p.rx, f); err != nil {
				t.Fatal(err)
			}
			continue
		}
		msg, _, err := p.dec.Pull(f)
		if err != nil {
			t.Fatalf("pull: %v", err)
		}
		out = append(out, msg...)
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

// An SDK Listen end reached by a dialer that offers only an OpenZiti key, as an OpenZiti
// client does, takes OpenZiti's scheme: the dial's answer carries the host's key through
// the controller and both routers, and data crosses encrypted both ways.
func TestSDKListenOpenZitiDialer(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, _ := buildEdgeNet(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ln, err := openSDK(t, n, hostCert).Listen(ctx, svc.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := echoHost(ln.Accept)

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
	peer.start(t, st, resp.HostZitiKey, true)
	msg := bytes.Repeat([]byte("an OpenZiti client speaks "), 5000)
	peer.send(t, msg[:10])
	peer.send(t, msg[10:])
	st.CloseWrite()
	if back := peer.receiveAll(t); !bytes.Equal(back, bytes.ToUpper(msg)) {
		t.Fatalf("the dialer got %d bytes back, want %d", len(back), len(msg))
	}
	h := <-got
	if h.err != nil || !bytes.Equal(h.data, msg) {
		t.Fatalf("the host read %d bytes (%v)", len(h.data), h.err)
	}
	if sc := h.conn.(*sdk.Conn); !sc.Encrypted() || sc.Scheme() != sdk.SchemeOpenZiti {
		t.Fatalf("the host's conn: encrypted %v, scheme %q", sc.Encrypted(), sc.Scheme())
	}

	// A dial that offers no scheme is refused by the controller.
	if _, _, err := dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID}); err == nil ||
		!bytes.Contains([]byte(err.Error()), []byte(ctrlproto.ErrCodeEncryptionRequired)) {
		t.Fatalf("a dial without an offer: %v", err)
	}
}

// An SDK Dial reaching a host that answers with an OpenZiti key, as an OpenZiti host does,
// runs OpenZiti's scheme as crypto_kx's client.
func TestSDKDialOpenZitiHost(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, _ := buildEdgeNet(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, err := n.connectSDK(n.routers["H"].r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	bindTok := n.sdkSession(host, svc.ID, "Bind")
	testutil.Eventually(t, "the router to know the bind session", func() bool {
		_, _, err = host.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: bindTok, ServiceID: svc.ID})
		return err == nil
	})
	peer := newZitiPeer(t)
	type result struct {
		offer *edgeproto.E2EEOffer
		data  []byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		st, err := host.sess.AcceptStream()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer st.Close()
		var req edgeproto.Request
		if err := edgeproto.Read(st, &req); err != nil {
			done <- result{err: err}
			return
		}
		if req.E2EE == nil || len(req.E2EE.ZitiKey) != e2ee.ZitiKeySize {
			edgeproto.Write(st, &edgeproto.Response{Code: edgeproto.CodeInvalid, Error: "no OpenZiti key"})
			done <- result{offer: req.E2EE, err: errors.New("no OpenZiti key offered")}
			return
		}
		if err := edgeproto.Write(st, &edgeproto.Response{OK: true, HostZitiKey: peer.kp.Public()}); err != nil {
			done <- result{err: err}
			return
		}
		peer.start(t, st, req.E2EE.ZitiKey, false)
		data := peer.receiveAll(t)
		peer.send(t, bytes.ToUpper(data))
		st.CloseWrite()
		done <- result{offer: req.E2EE, data: data}
	}()
	dialer := openSDK(t, n, dialerCert)
	var c *sdk.Conn
	testutil.Eventually(t, "the routers to know the sessions", func() bool {
		c, err = dialer.Dial(ctx, svc.Name)
		return err == nil
	})
	defer c.Close()
	if !c.Encrypted() || c.Scheme() != sdk.SchemeOpenZiti {
		t.Fatalf("the dial: encrypted %v, scheme %q", c.Encrypted(), c.Scheme())
	}
	c.Write([]byte("to an OpenZiti host"))
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	back, err := io.ReadAll(c)
	if err != nil || string(back) != "TO AN OPENZITI HOST" {
		t.Fatalf("the dialer read %q (%v)", back, err)
	}
	r := <-done
	if r.err != nil || string(r.data) != "to an OpenZiti host" || !r.offer.Zmesh {
		t.Fatalf("the host read %q with offer %+v (%v)", r.data, r.offer, r.err)
	}
}

// tunnelNet is hostAndProxy with service "encrypted", which router A's identity may dial
// and router H's bind; it returns H's listener of it.
func tunnelNet(t *testing.T, ctx context.Context) (*testNet, *model.Service, tunnel.Listener) {
	t.Helper()
	n := hostAndProxy(t, "encrypted")
	svc := &model.Service{Name: "encrypted", EncryptionRequired: true}
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
	return n, svc, ln
}

// The router tunnel's host end, reached by a circuit whose initiator offers only an OpenZiti
// key, takes OpenZiti's scheme; the tunnel's own dial, which offers both, gets zmesh's.
func TestTunnelHostOpenZitiDialer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, svc, ln := tunnelNet(t, ctx)
	got := echoHost(func() (net.Conn, error) { c, _, err := ln.Accept(); return c, err })
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
	peer.start(t, end, reply.HostZitiKey, true)
	peer.send(t, []byte("through the tunnel"))
	end.(interface{ CloseWrite() error }).CloseWrite()
	if back := peer.receiveAll(t); string(back) != "THROUGH THE TUNNEL" {
		t.Fatalf("the dialer got %q", back)
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
