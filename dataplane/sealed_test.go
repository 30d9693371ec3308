package dataplane

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
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
	go func() { // reads everything, then answers it upper-cased and closes
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := io.ReadAll(c)
				if err == nil {
					c.Write(bytes.ToUpper(b))
				}
			}()
		}
	}()
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
