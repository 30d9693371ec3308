package dataplane

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
)

// An SDK client dials an end-to-end encrypted service that router H's tunnel hosts (host.v1):
// router H joins the circuit straight to the target's connection (sealedTarget). A MiB
// crosses each way with half-close each way, circuit after circuit (the later ones resumed);
// the host's count of active circuits comes back to zero; and a target that does not answer
// fails the dial itself, as the route's dial does for a router's terminators.
func TestTunnelHostJoinsEncryptedCircuitToTarget(t *testing.T) {
	t.Parallel()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	got := echoHost(target.Accept) // reads everything, then answers it upper-cased
	n, svc, dialerCert, _, _ := linkedEdgeNet(t, edgeNetOptions{svc: model.Service{Name: "svc", EncryptionRequired: true}, tunneler: true, hostMode: true})
	host, port, _ := net.SplitHostPort(target.Addr().String())
	portNum, _ := strconv.Atoi(port)
	types, err := n.m.ConfigTypes()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &model.Config{Name: "svc-host", Data: map[string]any{"protocol": "tcp", "address": host, "port": portNum}}
	for _, ct := range types {
		if ct.Name == "host.v1" {
			cfg.ConfigTypeID = ct.ID
		}
	}
	if err := n.m.CreateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := n.m.UpdateService(svc.ID, func(s *model.Service) error { s.Configs = []string{cfg.ID}; return nil }); err != nil {
		t.Fatal(err)
	}
	h := n.routers["H"].r
	dialer := openSDK(t, n, dialerCert)
	ctx := t.Context()

	msg := make([]byte, 1<<20)
	rand.Read(msg)
	for i := range 3 {
		var c *sdk.Conn
		testutil.Eventually(t, "a circuit to the tunnel's host", func() bool {
			c, err = dialer.Dial(ctx, svc.Name)
			return err == nil
		})
		if c.Scheme() != sdk.SchemeZmesh {
			t.Fatalf("circuit %d: scheme %q", i, c.Scheme())
		}
		go func() {
			c.Write(msg)
			c.CloseWrite()
		}()
		c.SetReadDeadline(time.Now().Add(time.Minute))
		back, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(back, bytes.ToUpper(msg)) {
			t.Fatalf("circuit %d: read %d bytes (%v), want the %d sent, upper-cased", i, len(back), err, len(msg))
		}
		if h := <-got; h.err != nil || !bytes.Equal(h.data, msg) {
			t.Fatalf("circuit %d: the target read %d bytes (%v), want the %d sent", i, len(h.data), h.err, len(msg))
		}
	}
	testutil.Eventually(t, "no active circuit at the host", func() bool {
		s := h.tunnelHost.Stats()
		return s.Active == 0 && s.Circuits == 3
	})

	target.Close()
	if c, err := dialer.Dial(ctx, svc.Name); err == nil {
		c.Close()
		t.Fatal("a dial to a target that does not answer succeeded")
	}
	if s := h.tunnelHost.Stats(); s.DialFailures == 0 || s.Circuits != 3+s.DialFailures || s.Active != 0 {
		t.Fatalf("host stats %+v, want dial failures (the SDK may retry), each a circuit, and no active circuit", s)
	}
}

// A sealedTarget whose key exchange does not finish ends: at the initiator's EOF before its
// ClientAuth, and when no ClientAuth came within the key exchange's timeout; the host is told
// once either way.
func TestSealedTargetUnfinishedKeyExchange(t *testing.T) {
	t.Parallel()
	ca := testutil.NewAuthority(t, "test CA")
	key := testutil.NewKey(t)
	cfg := e2ee.Config{Certificates: []*x509.Certificate{ca.Issue(t, "host", key)}, PrivateKey: key, Context: "circuit 1",
		VerifyPeer: func([]*x509.Certificate) error { return nil }}
	for _, c := range []struct {
		name    string
		timeout time.Duration
		act     func(s *sealedTarget)
		want    string
	}{
		{"the initiator's EOF", time.Hour, func(s *sealedTarget) {
			s.Write([]byte{3, 0}) // two bytes of ClientAuth's header
			s.CloseWrite()
		}, "before its ClientAuth"},
		{"no ClientAuth in time", time.Millisecond, func(*sealedTarget) {}, "did not come in time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tcp, _ := tcpPair(t)
			var bufs sync.Pool
			s := newSealedTarget(&bufs, testLogger(t))
			client, err := e2ee.StartClient(e2ee.CipherAuto)
			if err != nil {
				t.Fatal(err)
			}
			start, _, err := e2ee.AcceptHello(s.cipher(), cfg, client.Hello())
			if err != nil {
				t.Fatal(err)
			}
			var done atomic.Int32
			if err := s.join(tcp.(*net.TCPConn), func() { done.Add(1) }, start, c.timeout); err != nil {
				t.Fatal(err)
			}
			c.act(s)
			if err := s.WaitReadable(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("WaitReadable: %v, want an error saying %q", err, c.want)
			}
			s.Close()
			s.Close()
			if n := done.Load(); n != 1 {
				t.Fatalf("the host was told %d times, want once", n)
			}
		})
	}
}

// tcpPair returns the two ends of a TCP connection on loopback.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
