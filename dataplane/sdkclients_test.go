package dataplane

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// enrolled creates an identity, enrolls it with its one-time token and returns its
// certificate and the identity.
func (n *testNet) enrolled(name string, attrs ...string) (tls.Certificate, *model.Identity) {
	t := n.t
	t.Helper()
	id, err := n.m.CreateIdentity(model.IdentityCreate{Name: name, RoleAttributes: attrs, Enrollment: &model.EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := n.m.EnrollmentsOf(id.ID)
	key := testutil.NewKey(t)
	certPEM, err := n.m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.TLSCert(t, certPEM, key), id
}

// sdkClient is the client side of the edge protocol, written out plainly here so that the
// router's side is tested against the protocol itself.
type sdkClient struct {
	t       testing.TB
	sess    *smux.Session
	control *smux.Stream
	api     *model.APISession
}

// connectSDK authenticates cert's identity with the controller and connects to an edge
// listener with the API session.
func (n *testNet) connectSDK(addr string, cert tls.Certificate) (*sdkClient, error) {
	t := n.t
	t.Helper()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	api, _, err := n.m.AuthenticateCert([]*x509.Certificate{leaf}, model.Login{Source: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The router learns of the API session moments after the controller made it.
	var cl *sdkClient
	testutil.Eventually(t, "the router knows the API session", func() bool {
		cl, err = n.connectSDKWith(addr, cert, api)
		var ee *edgeproto.Error
		return err == nil || !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession
	})
	return cl, err
}

func (n *testNet) connectSDKWith(addr string, cert tls.Certificate, api *model.APISession) (*sdkClient, error) {
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "ca.pem"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err != nil {
		return nil, err
	}
	sess, err := smux.Client(c, edgeproto.Smux())
	if err != nil {
		return nil, err
	}
	control, err := sess.OpenStream()
	if err != nil {
		return nil, err
	}
	cl := &sdkClient{t: n.t, sess: sess, control: control, api: api}
	n.t.Cleanup(func() { sess.Close() })
	resp, err := cl.request(control, &edgeproto.Request{Op: edgeproto.OpHello, Version: edgeproto.ProtocolVersion, APISessionToken: api.Token})
	if err != nil {
		sess.Close()
		return nil, err
	}
	if resp.RouterID == "" {
		return nil, errors.New("hello answered without the router's id")
	}
	return cl, nil
}

func (cl *sdkClient) request(st *smux.Stream, req *edgeproto.Request) (*edgeproto.Response, error) {
	st.SetDeadline(time.Now().Add(20 * time.Second))
	defer st.SetDeadline(time.Time{})
	if err := edgeproto.Write(st, req); err != nil {
		return nil, err
	}
	var resp edgeproto.Response
	if err := edgeproto.Read(st, &resp); err != nil {
		return nil, err
	}
	return &resp, resp.Err()
}

// open opens a stream with a dial or bind request.
func (cl *sdkClient) open(req *edgeproto.Request) (*smux.Stream, *edgeproto.Response, error) {
	st, err := cl.sess.OpenStream()
	if err != nil {
		return nil, nil, err
	}
	resp, err := cl.request(st, req)
	if err != nil {
		st.Close()
		return nil, resp, err
	}
	return st, resp, nil
}

// session makes a Dial or Bind session of the service in the client's API session.
func (n *testNet) sdkSession(cl *sdkClient, serviceID, typ string) string {
	n.t.Helper()
	se, _, err := n.m.CreateSession(cl.api, serviceID, typ, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	return se.Token
}

// accept takes the next connect stream the router opens to a hosting client and answers it.
func (cl *sdkClient) accept() (*smux.Stream, *edgeproto.Request, error) {
	st, err := cl.sess.AcceptStream()
	if err != nil {
		return nil, nil, err
	}
	var req edgeproto.Request
	st.SetDeadline(time.Now().Add(20 * time.Second))
	if err := edgeproto.Read(st, &req); err != nil {
		return nil, nil, err
	}
	if err := edgeproto.Write(st, &edgeproto.Response{OK: true}); err != nil {
		return nil, nil, err
	}
	st.SetDeadline(time.Time{})
	return st, &req, nil
}

// zmeshOffer is the offer of a zmesh SDK dialing a service that requires end-to-end
// encryption (the tests' clients carry raw bytes: the routers do not look inside).
var zmeshOffer = &edgeproto.E2EEOffer{Zmesh: true}

// edgeNet is routers E and H linked, each with an SDK listener, and service "svc" that
// identity "dialer" may dial and identity "host" may bind, over every router.
func edgeNet(t *testing.T) (n *testNet, svc *model.Service, dialer, host tls.Certificate, dialerID *model.Identity) {
	return buildEdgeNet(t, false)
}

// buildEdgeNet builds edgeNet; pinned lets the dialer use router E only and the host router
// H only, so that their circuits cross the link.
func buildEdgeNet(t *testing.T, pinned bool) (n *testNet, svc *model.Service, dialer, host tls.Certificate, dialerID *model.Identity) {
	return linkedEdgeNet(t, edgeNetOptions{pinned: pinned, svc: model.Service{Name: "svc", EncryptionRequired: true}})
}

// edgeNetOptions says how linkedEdgeNet's network differs between the tests that use it.
type edgeNetOptions struct {
	svc      model.Service // the service to create
	pinned   bool          // the dialer may use router E only, the host router H only
	tunneler bool          // router H is a tunneler, and may host svc too
	hostMode bool          // router H runs a tunnel in host mode (with tunneler)
}

// linkedEdgeNet is routers E and H linked, each with an edge listener, and o.svc that
// identity "dialer" may dial and identity "host" may bind; ca.pem in the net's directory is
// the network's CA.
func linkedEdgeNet(t *testing.T, o edgeNetOptions) (n *testNet, svc *model.Service, dialer, host tls.Certificate, dialerID *model.Identity) {
	n = newTestNet(t)
	edgeListener := `listeners:
  - binding: edge
    bind: tls:127.0.0.1:{{port}}
    advertise: tls:127.0.0.1:{{same}}
`
	hListeners := edgeListener
	if o.hostMode {
		hListeners += `  - binding: tunnel
    options:
      mode: host
`
	}
	n.addRouter("H", o.tunneler, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
`+hListeners)
	n.addRouter("E", false, `link:
  dialers:
    - binding: transport
`+edgeListener)
	testutil.Eventually(t, "link E–H", func() bool { return n.linked("E", "H") })
	svc = &o.svc
	if err := n.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	dialer, dialerID = n.enrolled("dialer", "dialers")
	host, _ = n.enrolled("host", "hosts")
	hosts := []string{"#hosts"}
	if o.tunneler {
		hosts = append(hosts, "@"+n.routers["H"].id)
	}
	for _, p := range []*model.ServicePolicy{
		{Name: "dial", Type: model.PolicyDial, Semantic: model.SemanticAny, IdentityRoles: []string{"#dialers"}, ServiceRoles: []string{"@" + svc.ID}},
		{Name: "bind", Type: model.PolicyBind, Semantic: model.SemanticAny, IdentityRoles: hosts, ServiceRoles: []string{"@" + svc.ID}},
	} {
		if err := n.m.CreateServicePolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	erps := []*model.EdgeRouterPolicy{{Name: "all", Semantic: model.SemanticAny, IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}}
	if o.pinned {
		erps = []*model.EdgeRouterPolicy{
			{Name: "dialers-E", Semantic: model.SemanticAny, IdentityRoles: []string{"#dialers"}, EdgeRouterRoles: []string{"@" + n.routers["E"].id}},
			{Name: "hosts-H", Semantic: model.SemanticAny, IdentityRoles: []string{"#hosts"}, EdgeRouterRoles: []string{"@" + n.routers["H"].id}},
		}
	}
	for _, p := range erps {
		if err := n.m.CreateEdgeRouterPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "E", "ca.cert"))
	os.WriteFile(filepath.Join(n.dir, "ca.pem"), caPEM, 0o600)
	return n, svc, dialer, host, dialerID
}

// An SDK client hosting a service at router H is reached by an SDK client dialing at router
// E: the bytes cross both routers both ways, half-close included, and survive garbage
// collections mid-transfer (accepted streams stay referenced). Deleting the dialing identity
// ends its circuit within a second.
func TestEdgeDialAndBind(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, dialerID := edgeNet(t)
	host, err := n.connectSDK(n.routers["H"].r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	bindTok := n.sdkSession(host, svc.ID, "Bind")
	var bindResp *edgeproto.Response
	testutil.Eventually(t, "the router to know the bind session", func() bool {
		_, bindResp, err = host.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: bindTok, ServiceID: svc.ID})
		return err == nil
	})
	term, err := n.m.Terminator(bindResp.TerminatorID)
	if err != nil || term.Binding != "edge" || term.HostID != host.api.IdentityID || term.RouterID != n.routers["H"].id {
		t.Fatalf("the bind's terminator: %+v %v", term, err)
	}

	dialer, err := n.connectSDK(n.routers["E"].r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	// The host answers connect streams while the dial waits for its answer.
	type acceptResult struct {
		st  *smux.Stream
		req *edgeproto.Request
		err error
	}
	accepts := make(chan acceptResult, 2)
	go func() {
		for range 2 {
			st, req, err := host.accept()
			accepts <- acceptResult{st, req, err}
		}
	}()
	var st *smux.Stream
	var resp *edgeproto.Response
	testutil.Eventually(t, "the router to know the dial session", func() bool {
		st, resp, err = dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID, E2EE: zmeshOffer})
		return err == nil
	})
	if resp.HostID != host.api.IdentityID || resp.CircuitID == 0 {
		t.Fatalf("dial response %+v, want host %s", resp, host.api.IdentityID)
	}
	a := <-accepts
	hosted, connect, err := a.st, a.req, a.err
	if err != nil {
		t.Fatal(err)
	}
	if connect.CircuitID != resp.CircuitID || connect.InitiatorID != dialerID.ID || connect.TerminatorID != term.ID {
		t.Fatalf("connect request %+v, want circuit %d from %s", connect, resp.CircuitID, dialerID.ID)
	}

	// 16 MiB up while 16 MiB come down, with collections on the way.
	const size = 16 << 20
	up, down := make([]byte, size), make([]byte, size)
	rand.Read(up)
	rand.Read(down)
	errs := make(chan error, 4)
	sum := func(b []byte) [32]byte { return sha256.Sum256(b) }
	go func() {
		_, err := io.Copy(st, bytes.NewReader(up))
		if err == nil {
			err = st.CloseWrite()
		}
		errs <- err
	}()
	go func() {
		_, err := io.Copy(hosted, bytes.NewReader(down))
		if err == nil {
			err = hosted.CloseWrite()
		}
		errs <- err
	}()
	gotUp, gotDown := make(chan []byte, 1), make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(hosted); gotUp <- b }()
	go func() { b, _ := io.ReadAll(st); gotDown <- b }()
	stopGC := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopGC:
				return
			case <-time.After(10 * time.Millisecond):
				runtime.GC()
			}
		}
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if b := <-gotUp; sum(b) != sum(up) {
		t.Fatalf("the host got %d bytes, not the %d sent", len(b), size)
	}
	if b := <-gotDown; sum(b) != sum(down) {
		t.Fatalf("the dialer got %d bytes, not the %d sent", len(b), size)
	}
	close(stopGC)

	// A second circuit, then the dialing identity goes: its circuit ends within a second.
	st2, _, err := dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID, E2EE: zmeshOffer})
	if err != nil {
		t.Fatal(err)
	}
	a = <-accepts
	hosted2 := a.st
	if a.err != nil {
		t.Fatal(a.err)
	}
	st2.Write([]byte("ping"))
	buf := make([]byte, 4)
	hosted2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(hosted2, buf); err != nil {
		t.Fatal(err)
	}
	if err := n.m.DeleteIdentity(dialerID.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := st2.Read(buf); err == nil {
		t.Fatal("the deleted identity's circuit still carries data")
	}
	// The deletion reaches the router over its control channel: moments, even on a loaded machine.
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the deleted identity's circuit ended after %v", d)
	}
	hosted2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(hosted2); err != nil && !errors.Is(err, io.EOF) {
		t.Logf("the host's end: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the host's end of the deleted identity's circuit ended after %v", d)
	}

	// Closing the bind removes its terminator.
	host.sess.Close()
	testutil.Eventually(t, "the terminator to go with its client", func() bool {
		_, err := n.m.Terminator(term.ID)
		return model.CodeOf(err) == model.CodeNotFound
	})
}

// A client is refused with an API session of another identity, and a dial with another
// client's session is refused.
func TestEdgeRefusals(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, _ := edgeNet(t)
	addr := n.routers["E"].r.SDKAddresses()[0]
	dialer, err := n.connectSDK(addr, dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	var ee *edgeproto.Error
	if _, err := n.connectSDKWith(addr, hostCert, dialer.api); !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
		t.Fatalf("hello with another identity's API session: %v", err)
	}
	host, err := n.connectSDK(addr, hostCert)
	if err != nil {
		t.Fatal(err)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	testutil.Eventually(t, "the router to know the dial session", func() bool {
		_, ok := n.routers["E"].r.sessionCache.session(dialTok)
		return ok
	})
	if _, _, err := host.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID, E2EE: zmeshOffer}); !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
		t.Fatalf("a dial with another client's session: %v", err)
	}
	if _, _, err := dialer.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: dialTok, ServiceID: svc.ID}); !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
		t.Fatalf("a bind with a dial session: %v", err)
	}
}

// A router restarted while the controller is away still admits the clients of the API
// sessions it saved to edge.db.
func TestEdgeStateSurvivesRestartWithoutController(t *testing.T) {
	t.Parallel()
	n, _, dialerCert, _, _ := edgeNet(t)
	leaf, _ := x509.ParseCertificate(dialerCert.Certificate[0])
	api, _, err := n.m.AuthenticateCert([]*x509.Certificate{leaf}, model.Login{Source: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	e := n.routers["E"]
	testutil.Eventually(t, "the router to know the API session", func() bool {
		_, ok := e.r.sessionCache.apiSession(api.Token)
		return ok
	})
	n.stopController()
	e.stop()
	if _, err := os.Stat(e.r.cfg.Edge.DB); err != nil {
		t.Fatalf("edge.db after stop: %v", err)
	}
	e.start(t)
	if _, err := n.connectSDKWith(e.r.SDKAddresses()[0], dialerCert, api); err != nil {
		t.Fatalf("a client admitted before the restart: %v", err)
	}
}

// A router that restarts drops the terminators of the binds its SDK clients had: its Hello
// lists the terminators it still hosts, and the controller removes the others.
func TestEdgeTerminatorsPrunedAfterRestart(t *testing.T) {
	t.Parallel()
	n, svc, _, hostCert, _ := edgeNet(t)
	h := n.routers["H"]
	host, err := n.connectSDK(h.r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	bindTok := n.sdkSession(host, svc.ID, "Bind")
	_, resp, err := host.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: bindTok, ServiceID: svc.ID})
	if err != nil {
		t.Fatal(err)
	}
	n.stopController() // the router cannot remove the terminator as it stops
	h.stop()
	n.startController()
	if _, err := n.m.Terminator(resp.TerminatorID); err != nil {
		t.Fatalf("the bind's terminator before the router restarts: %v", err)
	}
	h.start(t)
	testutil.Eventually(t, "the restarted router's old terminator to go", func() bool {
		_, err := n.m.Terminator(resp.TerminatorID)
		return model.CodeOf(err) == model.CodeNotFound
	})
}
