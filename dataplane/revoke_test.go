package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// currentIdentityStatus is the status the controller's client API answers GET
// /current-identity with for an API session token.
func (n *testNet) currentIdentityStatus(token string) int {
	req := httptest.NewRequest("GET", api.ClientBase+"/current-identity", nil)
	req.Header.Set("zt-session", token)
	rec := httptest.NewRecorder()
	n.ctrl.Handler().ServeHTTP(rec, req)
	return rec.Code
}

// certAuthenticator returns the identity's cert authenticator.
func (n *testNet) certAuthenticator(identityID string) *model.Authenticator {
	n.t.Helper()
	auths, err := n.m.AuthenticatorsOf(identityID)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, a := range auths {
		if a.Method == model.MethodCert {
			return a
		}
	}
	n.t.Fatalf("identity %s has no cert authenticator", identityID)
	return nil
}

// reEnroll gives the identity a new one-time-token enrollment and enrolls it with a new key.
func (n *testNet) reEnroll(identityID string) tls.Certificate {
	t := n.t
	t.Helper()
	e, err := n.m.CreateEnrollment(identityID, model.EnrollmentRequest{OTT: true}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	key := testutil.NewKey(t)
	certPEM, err := n.m.EnrollOTT(e.Token, testutil.CSR(t, key))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.TLSCert(t, certPEM, key)
}

// ended is closed once r's read fails: the stream or connection it reads ended.
func ended(r io.Reader) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, r)
	}()
	return done
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The identity's cert authenticator is deleted and the identity re-enrolls with a new key:
// the API session opened with the old certificate answers 401, its edge connection and the
// circuit on it end as the change reaches the router, and the router's edge listener refuses
// the old certificate even with an API session of the new one.
func TestRevokedCertEndsAPISessionAndEdgeConnection(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, dialerID := edgeNet(t)
	addr := n.routers["E"].r.SDKAddresses()[0]
	host, err := n.connectSDK(n.routers["H"].r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	bindTok := n.sdkSession(host, svc.ID, "Bind")
	testutil.Eventually(t, "the router to know the bind session", func() bool {
		_, _, err = host.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: bindTok, ServiceID: svc.ID})
		return err == nil
	})
	dialer, err := n.connectSDK(addr, dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	if code := n.currentIdentityStatus(dialer.api.Token); code != http.StatusOK {
		t.Fatalf("GET /current-identity with the certificate's API session: %d", code)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	accepted := make(chan *smux.Stream, 1)
	go func() {
		if st, _, err := host.accept(); err == nil {
			accepted <- st
		}
	}()
	var circuit *smux.Stream
	testutil.Eventually(t, "the router to know the dial session", func() bool {
		circuit, _, err = dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID, E2EE: zmeshOffer})
		return err == nil
	})
	hosted := <-accepted
	circuit.Write([]byte("ping"))
	buf := make([]byte, 4)
	hosted.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(hosted, buf); err != nil {
		t.Fatal(err)
	}
	hosted.SetReadDeadline(time.Time{})
	circuitDone, connDone := ended(circuit), ended(dialer.control)

	if err := n.m.DeleteAuthenticator(n.certAuthenticator(dialerID.ID).ID); err != nil {
		t.Fatal(err)
	}
	if code := n.currentIdentityStatus(dialer.api.Token); code != http.StatusUnauthorized {
		t.Fatalf("GET /current-identity with the revoked certificate's API session: %d, want 401", code)
	}
	// Pushed to the router, not polled: the circuit and connection end as the change arrives.
	testutil.Eventually(t, "the revoked certificate's circuit to end", func() bool { return isClosed(circuitDone) })
	testutil.Eventually(t, "the revoked certificate's edge connection to close", func() bool { return isClosed(connDone) })

	newCert := n.reEnroll(dialerID.ID)
	oldLeaf, _ := x509.ParseCertificate(dialerCert.Certificate[0])
	if _, _, err := n.m.AuthenticateCert([]*x509.Certificate{oldLeaf}, model.Login{Source: "127.0.0.1"}); model.CodeOf(err) != model.CodeInvalidAuth {
		t.Fatalf("authenticating with the old certificate: %v", err)
	}
	fresh, err := n.connectSDK(addr, newCert)
	if err != nil {
		t.Fatalf("the new certificate at the edge listener: %v", err)
	}
	var ee *edgeproto.Error
	if _, err := n.connectSDKWith(addr, dialerCert, fresh.api); !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
		t.Fatalf("the old certificate with an API session of the new one: %v", err)
	}
	if code := n.currentIdentityStatus(fresh.api.Token); code != http.StatusOK {
		t.Fatalf("GET /current-identity with the new certificate's API session: %d", code)
	}
}

// An API session opened with a password outlives a change of the identity's certificates,
// but its edge connection made with a certificate that is no longer current closes, and the
// listener refuses that certificate from then on.
func TestCertChangeClosesConnectionsOfPasswordSession(t *testing.T) {
	t.Parallel()
	n, _, dialerCert, _, dialerID := edgeNet(t)
	addr := n.routers["E"].r.SDKAddresses()[0]
	e, err := n.m.CreateEnrollment(dialerID.ID, model.EnrollmentRequest{Updb: "dialer-user"}, time.Now().Add(time.Hour))
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
	var cl *sdkClient
	testutil.Eventually(t, "the router to admit the certificate with the password session", func() bool {
		cl, err = n.connectSDKWith(addr, dialerCert, apiSess)
		return err == nil
	})
	connDone := ended(cl.control)

	if err := n.m.DeleteAuthenticator(n.certAuthenticator(dialerID.ID).ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the connection with the revoked certificate to close", func() bool { return isClosed(connDone) })
	if code := n.currentIdentityStatus(apiSess.Token); code != http.StatusOK {
		t.Fatalf("GET /current-identity with the password session after the certificate went: %d", code)
	}
	var ee *edgeproto.Error
	if _, err := n.connectSDKWith(addr, dialerCert, apiSess); !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
		t.Fatalf("the revoked certificate with the password session: %v", err)
	}
	// A certificate enrolled afterwards is admitted with the same API session.
	newCert := n.reEnroll(dialerID.ID)
	testutil.Eventually(t, "the router to admit the new certificate", func() bool {
		_, err = n.connectSDKWith(addr, newCert, apiSess)
		return err == nil
	})
}

// openCircuit connects host and dialer to their routers, binds svc with host and dials it
// with dialer, and checks that bytes cross. It returns the host's and the dialer's clients
// and the circuit. The host accepts that one circuit only: close it before binding svc again.
func (n *testNet) openCircuit(svc *model.Service, dialerCert, hostCert tls.Certificate) (*sdkClient, *sdkClient, *smux.Stream) {
	t := n.t
	t.Helper()
	host, err := n.connectSDK(n.routers["H"].r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	bindTok := n.sdkSession(host, svc.ID, "Bind")
	testutil.Eventually(t, "the router to know the bind session", func() bool {
		_, _, err = host.open(&edgeproto.Request{Op: edgeproto.OpBind, SessionToken: bindTok, ServiceID: svc.ID})
		return err == nil
	})
	dialer, err := n.connectSDK(n.routers["E"].r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	dialTok := n.sdkSession(dialer, svc.ID, "Dial")
	accepted := make(chan *smux.Stream, 1)
	go func() {
		if st, _, err := host.accept(); err == nil {
			accepted <- st
		}
	}()
	var circuit *smux.Stream
	testutil.Eventually(t, "the router to know the dial session", func() bool {
		circuit, _, err = dialer.open(&edgeproto.Request{Op: edgeproto.OpDial, SessionToken: dialTok, ServiceID: svc.ID, E2EE: zmeshOffer})
		return err == nil
	})
	hosted := <-accepted
	circuit.Write([]byte("ping"))
	buf := make([]byte, 4)
	hosted.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(hosted, buf); err != nil {
		t.Fatal(err)
	}
	return host, dialer, circuit
}

// Disabling an identity ends its certificate and password API sessions at once (401), closes
// its edge connections and the circuit on them as the change reaches the router, and refuses
// its logins until it is enabled again.
func TestDisabledIdentityEndsConnections(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, dialerID := edgeNet(t)
	addr := n.routers["E"].r.SDKAddresses()[0]
	e, err := n.m.CreateEnrollment(dialerID.ID, model.EnrollmentRequest{Updb: "dialer-user"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.m.EnrollUpdb(context.Background(), e.Token, "a long enough password"); err != nil {
		t.Fatal(err)
	}
	password := func() (*model.APISession, error) {
		s, _, err := n.m.AuthenticatePassword(context.Background(), "dialer-user", "a long enough password", model.Login{Source: "127.0.0.1"})
		return s, err
	}
	pwSess, err := password()
	if err != nil {
		t.Fatal(err)
	}
	var pwConn *sdkClient
	testutil.Eventually(t, "the router to admit the password session", func() bool {
		pwConn, err = n.connectSDKWith(addr, dialerCert, pwSess)
		return err == nil
	})
	host, dialer, circuit := n.openCircuit(svc, dialerCert, hostCert)
	circuitDone, certConnDone, pwConnDone := ended(circuit), ended(dialer.control), ended(pwConn.control)

	if err := n.m.DisableIdentity(dialerID.ID, 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*model.APISession{dialer.api, pwSess} {
		if code := n.currentIdentityStatus(s.Token); code != http.StatusUnauthorized {
			t.Fatalf("GET /current-identity with a disabled identity's %s API session: %d, want 401", s.AuthMethod, code)
		}
	}
	testutil.Eventually(t, "the disabled identity's circuit to end", func() bool { return isClosed(circuitDone) })
	testutil.Eventually(t, "the disabled identity's certificate connection to close", func() bool { return isClosed(certConnDone) })
	testutil.Eventually(t, "the disabled identity's password connection to close", func() bool { return isClosed(pwConnDone) })
	var ee *edgeproto.Error
	if _, err := n.connectSDKWith(addr, dialerCert, pwSess); !errors.As(err, &ee) || ee.Code != edgeproto.CodeInvalidSession {
		t.Fatalf("the ended password session at the edge listener: %v", err)
	}
	leaf, _ := x509.ParseCertificate(dialerCert.Certificate[0])
	if _, _, err := n.m.AuthenticateCert([]*x509.Certificate{leaf}, model.Login{Source: "127.0.0.1"}); model.CodeOf(err) != model.CodeInvalidAuth {
		t.Fatalf("certificate login of the disabled identity: %v", err)
	}
	if _, err := password(); model.CodeOf(err) != model.CodeInvalidAuth {
		t.Fatalf("password login of the disabled identity: %v", err)
	}

	if err := n.m.EnableIdentity(dialerID.ID); err != nil {
		t.Fatal(err)
	}
	host.sess.Close() // a dial must reach the new bind, not this host's
	if _, _, circuit := n.openCircuit(svc, dialerCert, hostCert); circuit == nil {
		t.Fatal("no circuit once enabled")
	}
}

// BenchmarkRevokedCertDisconnects measures how long an edge connection made with a
// certificate outlives the deletion of its authenticator: the commit, the push of the
// change to the router and the router closing the connection.
func BenchmarkRevokedCertDisconnects(b *testing.B) {
	benchDisconnect(b, "the revoked certificate",
		func(n *testNet, id string) error { return n.m.DeleteAuthenticator(n.certAuthenticator(id).ID) },
		func(n *testNet, id string, _ tls.Certificate) tls.Certificate { return n.reEnroll(id) })
}

// BenchmarkDisableDisconnects measures how long an identity's edge connection outlives its
// disabling: the commit, the push of the ended API session to the router and the router
// closing the connection.
func BenchmarkDisableDisconnects(b *testing.B) {
	benchDisconnect(b, "the disabled identity",
		func(n *testNet, id string) error { return n.m.DisableIdentity(id, 0) },
		func(n *testNet, id string, cert tls.Certificate) tls.Certificate {
			if err := n.m.EnableIdentity(id); err != nil {
				b.Fatal(err)
			}
			return cert
		})
}

// benchDisconnect times, per iteration, cut of an identity's credentials until the router
// closes the identity's edge connection; restore, untimed, gives the certificate to connect
// with next.
func benchDisconnect(b *testing.B, what string, cut func(n *testNet, identityID string) error,
	restore func(n *testNet, identityID string, cert tls.Certificate) tls.Certificate) {
	n := newTestNet(b)
	n.addRouter("E", false, `listeners:
  - binding: edge
    bind: tls:127.0.0.1:{{port}}
    advertise: tls:127.0.0.1:{{same}}
`)
	caPEM, err := os.ReadFile(filepath.Join(n.dir, "E", "ca.cert"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "ca.pem"), caPEM, 0o600); err != nil { // connectSDK's roots
		b.Fatal(err)
	}
	addr := n.routers["E"].r.SDKAddresses()[0]
	cert, id := n.enrolled("client")
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cl, err := n.connectSDK(addr, cert)
		if err != nil {
			b.Fatal(err)
		}
		done := ended(cl.control)
		b.StartTimer()
		if err := cut(n, id.ID); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatalf("%s's connection is still open after 30s", what)
		}
		b.StopTimer()
		cert = restore(n, id.ID, cert)
	}
}
