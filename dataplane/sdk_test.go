package dataplane

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
	"github.com/zmesh/zmesh/tunnel/sdkoverlay"
	"github.com/zmesh/zmesh/xgress"
)

// identityFile writes what zmesh enroll would for an enrolled identity.
func (n *testNet) identityFile(cert tls.Certificate) *apiclient.IdentityFile {
	caPEM, err := os.ReadFile(filepath.Join(n.dir, "ca.pem"))
	if err != nil {
		n.t.Fatal(err)
	}
	id := apiclient.NewIdentityFile("https://" + n.apiAddr)
	id.ID.Cert = "pem:" + string(testutil.CertPEM(cert.Leaf))
	id.ID.Key = "pem:" + string(testutil.KeyPEM(n.t, cert.PrivateKey.(crypto.Signer)))
	id.ID.CA = "pem:" + string(caPEM)
	return id
}

// The Go SDK dials a service another SDK client hosts, through two routers, with
// end-to-end encryption: the payloads router H forwards hold none of the plaintext, a bit
// flipped on the way is rejected by the far end, and deleting the dialing identity ends its
// live circuit within a second.
func TestSDKEndToEndEncrypted(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, dialerID := buildEdgeNet(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(cert tls.Certificate) *sdk.Client {
		c, err := sdk.New(sdkIdentity(t, n.identityFile(cert)), sdk.Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	host, dialer := open(hostCert), open(dialerCert)
	ln, err := host.Listen(ctx, svc.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The host answers every circuit: it reports what it read and echoes it back.
	type served struct {
		data []byte
		err  error
	}
	got := make(chan served, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if s := c.(*sdk.Conn).Scheme(); s != sdk.SchemeZmesh {
					got <- served{nil, errors.New("the host's conn has scheme " + string(s))}
					return
				}
				b, err := io.ReadAll(c)
				if err == nil {
					_, err = c.Write(b)
				}
				got <- served{b, err}
			}()
		}
	}()

	// Router H sees the frames coming from the link to E: record them, and flip a bit when
	// asked.
	var (
		mu      sync.Mutex
		seen    bytes.Buffer
		corrupt atomic.Bool
	)
	tap := func(f *xgress.Frame) {
		if f.Type != xgress.Payload || len(f.Data) == 0 {
			return
		}
		// Only a record of the message is flipped (16 KiB), not the dialer's ClientAuth,
		// which may still be on its way when Dial returns.
		if len(f.Data) > 8<<10 && corrupt.CompareAndSwap(true, false) {
			f.Data[len(f.Data)/2] ^= 0x10
		}
		mu.Lock()
		seen.Write(f.Data)
		mu.Unlock()
	}
	n.routers["H"].r.fw.tap.Store(&tap)

	marker := []byte("plaintext the routers must never see ")
	msg := bytes.Repeat(marker, 4096)
	var c net.Conn
	testutil.Eventually(t, "the routers to know the sessions", func() bool {
		c, err = dialer.Dial(ctx, svc.Name)
		return err == nil
	})
	if sc, ok := c.(*sdk.Conn); !ok || !sc.Encrypted() || sc.Scheme() != sdk.SchemeZmesh {
		t.Fatalf("the dial is not end-to-end encrypted with zmesh's scheme: %T", c)
	}
	c.Write(msg)
	c.(interface{ CloseWrite() error }).CloseWrite()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	back, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("echo: %d bytes (%v), sent %d", len(back), err, len(msg))
	}
	if s := <-got; !bytes.Equal(s.data, msg) {
		t.Fatalf("the host read %d bytes (%v)", len(s.data), s.err)
	}
	mu.Lock()
	if seen.Len() < len(msg) || bytes.Contains(seen.Bytes(), marker) {
		t.Fatalf("router H forwarded %d bytes, the plaintext among them: %v", seen.Len(), bytes.Contains(seen.Bytes(), marker))
	}
	mu.Unlock()

	// A bit flipped on the way: the host's end refuses the record.
	c2, err := dialer.Dial(ctx, svc.Name)
	if err != nil {
		t.Fatal(err)
	}
	corrupt.Store(true)
	c2.Write(msg)
	c2.CloseWrite()
	if s := <-got; !errors.Is(s.err, e2ee.ErrAuthentication) {
		t.Fatalf("the host read a corrupted record: %d bytes, err %v", len(s.data), s.err)
	}
	c2.Close()

	// The dialing identity goes: its live circuit ends within a second.
	c3, err := dialer.Dial(ctx, svc.Name)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	rand.Read(payload)
	if _, err := c3.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := n.m.DeleteIdentity(dialerID.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c3.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c3)
	if d := time.Since(start); d > 3*time.Second { // moments, even on a loaded machine
		t.Fatalf("the deleted identity's circuit ended after %v (%v)", d, err)
	}
}

// The standalone tunneler: one identity's proxy mode dials a service that another identity's
// host mode hosts, both through the SDK, and the host dials the host.v1 config's address.
func TestStandaloneTunneler(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, _ := buildEdgeNet(t, true)
	types, err := n.m.ConfigTypes()
	if err != nil {
		t.Fatal(err)
	}
	var hostV1 string
	for _, ct := range types {
		if ct.Name == "host.v1" {
			hostV1 = ct.ID
		}
	}
	echo := echoServer(t)
	host, port, _ := strings.Cut(echo, ":")
	portNum, _ := strconv.Atoi(port)
	cfg := &model.Config{Name: "echo-host", ConfigTypeID: hostV1, Data: map[string]any{"protocol": "tcp", "address": host, "port": portNum}}
	if err := n.m.CreateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := n.m.UpdateService(svc.ID, func(s *model.Service) error { s.Configs = []string{cfg.ID}; return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(cert tls.Certificate) tunnel.Overlay {
		c, err := sdk.New(sdkIdentity(t, n.identityFile(cert)), sdk.Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return sdkoverlay.Overlay{C: c}
	}
	hostDone := make(chan error, 1)
	go func() {
		hostDone <- (&tunnel.Host{}).Run(ctx, open(hostCert), tunnel.HostOptions{Logger: testLogger(t)})
	}()
	p, err := tunnel.ListenProxy("127.0.0.1", []config.TunnelService{{Service: svc.Name, Port: 0}})
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeOverlay(ctx, open(dialerCert), testLogger(t))
	var got string
	testutil.Eventually(t, "the hosted service to answer through the proxy", func() bool {
		got, err = echoOnce(p.Addr(svc.Name), "through two standalone tunnelers")
		return err == nil && got == "through two standalone tunnelers"
	})
	cancel()
	if err := <-hostDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("host mode: %v", err)
	}
}

// sdkIdentity saves an identity file and loads it as the SDK does.
func sdkIdentity(t testing.TB, f *apiclient.IdentityFile) *sdk.Identity {
	t.Helper()
	path := filepath.Join(t.TempDir(), "identity.json")
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	id, err := sdk.LoadIdentity(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
