package routers_test

import (
	"crypto/tls"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

func TestRouterOnlineWhileConnected(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, cert := e.enroll(t, "er1")
	if v := e.view(t, id); v.IsOnline {
		t.Fatalf("online before connecting: %+v", v)
	}
	ch := e.dial(t, cert)
	reply, err := hello(ch, id)
	if err != nil {
		t.Fatal(err)
	}
	if !reply.Accepted || reply.ControllerID != "ctrl1" || len(reply.Endpoints) != 1 || reply.Endpoints[0] != "tls:"+e.ctrlAddr {
		t.Fatalf("HelloReply = %+v", reply)
	}
	v := e.view(t, id)
	if !v.IsOnline || v.Hostname != "er.example" || !maps.Equal(v.SupportedProtocols, map[string]string{"tls": "tls://er.example:3022"}) {
		t.Fatalf("connected router shows as %+v", v)
	}
	ch.Close()
	testutil.Eventually(t, "offline after disconnecting", func() bool { return !e.view(t, id).IsOnline })
}

func TestRefusedConnections(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, _ := e.enroll(t, "er1")
	other := testutil.NewCA(t)
	tests := []struct {
		name string
		cert tls.Certificate
		log  string // the reason the controller logs
	}{
		// Signed by the controller's CA, with the router's id, but not its certificate.
		{"unenrolled certificate", testutil.CA{CA: e.ctrl.CA()}.Cert(t, id, pki.Client), "not the current certificate of an enrolled edge router"},
		// The right router id, from a CA the controller does not trust.
		{"certificate of another CA", other.Cert(t, id, pki.Client), "TLS handshake failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := e.dial(t, tt.cert)
			if reply, err := hello(ch, id); err == nil {
				t.Fatalf("Hello answered: %+v", reply)
			}
			waitClosed(t, ch)
			if e.view(t, id).IsOnline {
				t.Fatal("the refused router shows as online")
			}
			testutil.Eventually(t, "the refusal logged with "+tt.log, func() bool { return strings.Contains(e.logs.String(), tt.log) })
		})
	}
}

func TestHelloRefused(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, cert := e.enroll(t, "er1")
	other, _ := e.enroll(t, "er2")
	ch := e.dial(t, cert)
	reply, err := hello(ch, other)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Accepted || reply.Reason == "" {
		t.Fatalf("a Hello naming another router: %+v", reply)
	}
	if err := waitClosed(t, ch); !errors.Is(err, ctrlproto.ErrPeerClosed) {
		t.Fatalf("Err = %v", err)
	}
	if e.view(t, id).IsOnline || e.view(t, other).IsOnline {
		t.Fatal("a refused router shows as online")
	}
}

func TestSecondConnectionReplacesFirst(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, cert := e.enroll(t, "er1")
	first := e.dial(t, cert)
	if _, err := hello(first, id); err != nil {
		t.Fatal(err)
	}
	second := e.dial(t, cert)
	if r, err := hello(second, id); err != nil || !r.Accepted {
		t.Fatalf("second Hello: %+v, %v", r, err)
	}
	if err := waitClosed(t, first); !errors.Is(err, ctrlproto.ErrPeerClosed) {
		t.Fatalf("first connection: Err = %v", err)
	}
	if !e.view(t, id).IsOnline {
		t.Fatal("offline after the older connection closed")
	}
	if _, err := second.Ping(t.Context()); err != nil {
		t.Fatalf("the newer connection: %v", err)
	}
	second.Close()
	testutil.Eventually(t, "offline after the newer connection closed", func() bool { return !e.view(t, id).IsOnline })
}

func TestCredentialChangesDisconnect(t *testing.T) {
	t.Parallel()
	e := start(t)
	tests := []struct {
		name   string
		change func(id string) error
	}{
		{"deleted", e.m.DeleteEdgeRouter},
		{"re-enrolled", func(id string) error { _, err := e.m.ReEnrollEdgeRouter(id); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, cert := e.enroll(t, "er-"+tt.name)
			ch := e.dial(t, cert)
			if _, err := hello(ch, id); err != nil {
				t.Fatal(err)
			}
			if err := tt.change(id); err != nil {
				t.Fatal(err)
			}
			if tt.name != "deleted" && e.view(t, id).IsOnline {
				t.Fatal("still online once the change is made")
			}
			if err := waitClosed(t, ch); !errors.Is(err, ctrlproto.ErrPeerClosed) {
				t.Fatalf("Err = %v", err)
			}
			// Reconnecting with the old certificate is refused.
			again := e.dial(t, cert)
			if _, err := hello(again, id); err == nil {
				t.Fatal("the old certificate was accepted again")
			}
			if tt.name == "deleted" {
				return
			}
			// Once the router enrolls again with a new key, its new certificate is
			// accepted and the old one still refused.
			enr, err := e.m.RouterEnrollment(id)
			if err != nil || enr == nil {
				t.Fatalf("the re-enrollment: %v", err)
			}
			key := testutil.NewKey(t)
			certs, err := e.m.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, key, "er.example"))
			if err != nil {
				t.Fatal(err)
			}
			if r, err := hello(e.dial(t, testutil.TLSCert(t, certs.Cert, key)), id); err != nil || !r.Accepted {
				t.Fatalf("Hello with the new certificate: %+v, %v", r, err)
			}
			if _, err := hello(e.dial(t, cert), id); err == nil {
				t.Fatal("the certificate replaced by re-enrollment was accepted")
			}
		})
	}
}

func TestStopClosesChannels(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, cert := e.enroll(t, "er1")
	ch := e.dial(t, cert)
	if _, err := hello(ch, id); err != nil {
		t.Fatal(err)
	}
	e.stop()
	if err := waitClosed(t, ch); !errors.Is(err, ctrlproto.ErrPeerClosed) {
		t.Fatalf("Err = %v", err)
	}
}
