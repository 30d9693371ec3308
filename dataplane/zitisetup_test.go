package dataplane

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
	"github.com/zmesh/zmesh/tunnel"
)

// zitiTunnelHosted is zitiNet (without encryption) with router H's tunnel binding svc and
// an OpenZiti client connected to router E as "dialer".
type zitiTunnelHosted struct {
	n   *testNet
	svc *model.Service
	ctx context.Context // ends after timeout, or with the test
	ln  tunnel.Listener // H's tunnel end, closed with the test
	e   *testRouter
	cl  *zitiClient // the dialer at E
}

func newZitiTunnelHosted(t *testing.T, timeout time.Duration) *zitiTunnelHosted {
	t.Helper()
	n, svc, dialerCert, _ := zitiNet(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	ln, err := n.routers["H"].r.overlay.Bind(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, Bind: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e := n.routers["E"]
	cl, err := n.connectZiti(e.r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	return &zitiTunnelHosted{n: n, svc: svc, ctx: ctx, ln: ln, e: e, cl: cl}
}

// zitiBound is zitiNet with an OpenZiti host at router H, bound to svc with hostKey (none
// if nil), and an OpenZiti dialer connected to router E.
type zitiBound struct {
	n            *testNet
	svc          *model.Service
	h, e         *testRouter
	host, dialer *zitiClient
	dialerCert   tls.Certificate // the dialer's, for other clients
}

func newZitiBound(t *testing.T, encrypted bool, hostKey []byte) *zitiBound {
	t.Helper()
	n, svc, dialerCert, hostCert := zitiNet(t, encrypted)
	h, e := n.routers["H"], n.routers["E"]
	host, err := n.connectZiti(h.r.SDKAddresses()[0], hostCert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.bind(n.zitiSession(host, h.r, svc.ID, "Bind"), hostKey); err != nil {
		t.Fatal(err)
	}
	dialer, err := n.connectZiti(e.r.SDKAddresses()[0], dialerCert)
	if err != nil {
		t.Fatal(err)
	}
	return &zitiBound{n: n, svc: svc, h: h, e: e, host: host, dialer: dialer, dialerCert: dialerCert}
}

// zitiAccepted is what an OpenZiti host's accept returned.
type zitiAccepted struct {
	zc  *zconn
	d   *zitiproto.Message
	err error
}

// acceptAsync accepts the host's next Dial on a goroutine of its own.
func (cl *zitiClient) acceptAsync() <-chan zitiAccepted {
	accepted := make(chan zitiAccepted, 1)
	go func() {
		zc, d, err := cl.accept()
		accepted <- zitiAccepted{zc, d, err}
	}()
	return accepted
}

// endAPISession deletes cl's API session and waits for the router to close its channel.
func (n *testNet) endAPISession(cl *zitiClient) {
	n.t.Helper()
	if err := n.m.DeleteAPISession(cl.api.ID); err != nil {
		n.t.Fatal(err)
	}
	select {
	case <-cl.done:
	case <-time.After(testutil.Patience):
		n.t.Fatal("the channel of a deleted API session stays open")
	}
}
