package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
)

// echoServer echoes every connection until EOF.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// The transport listener carries a client that presents an identity's certificate and names
// the service; a client without a certificate of the network, or whose identity no policy
// lets dial the service, is refused.
func TestTransportListener(t *testing.T) {
	t.Parallel()
	n, _, _ := buildLine(t, lineConfig{transport: "tls", split: true, a: `  - binding: transport
    bind: tls:127.0.0.1:{{port}}
    advertise: tls:127.0.0.1:{{same}}
`})
	n.service("echo", "C", echoServer(t))
	newIdentity := func(name string, attrs ...string) tls.Certificate {
		cert, _ := n.enrolled(name, attrs...)
		return cert
	}
	allowed := newIdentity("app", "apps")
	refused := newIdentity("other")
	// Clients use the routers the edge router policies give them, for the services the
	// service edge router policies let those routers carry.
	if err := n.m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "apps", Semantic: model.SemanticAny, IdentityRoles: []string{"#apps", "#gated"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "A", "ca.cert"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	addr := n.routers["A"].r.TransportAddresses()[0]

	try := func(cert *tls.Certificate, service string) (string, error) {
		cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		c.Write(append([]byte{byte(len(service))}, service...))
		c.Write([]byte("ping over the transport listener"))
		c.CloseWrite()
		got, err := io.ReadAll(c)
		return string(got), err
	}
	if got, err := try(&allowed, "echo"); err != nil || got != "ping over the transport listener" {
		t.Fatalf("allowed identity: %q %v", got, err)
	}
	if got, _ := try(&refused, "echo"); got != "" {
		t.Fatalf("an identity no edge router policy lets use the router got %q", got)
	}
	if got, _ := try(&allowed, "no-such-service"); got != "" {
		t.Fatalf("unknown service answered %q", got)
	}
	if got, _ := try(nil, "echo"); got != "" {
		t.Fatalf("a client without a certificate got %q", got)
	}
	// A policy that asks for posture does not open the service to a client with no posture.
	gated := newIdentity("gated", "gated")
	check := &model.PostureCheck{Name: "corp", TypeID: model.PostureDomain, Domains: []string{"corp.example"}}
	if err := n.m.CreatePostureCheck(check); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateService(&model.Service{Name: "private"}); err != nil {
		t.Fatal(err)
	}
	private, _ := n.m.ServiceByName("private")
	if err := n.m.CreateTerminator(&model.Terminator{ServiceID: private.ID, RouterID: n.routers["C"].id, Binding: "proxy", Address: echoServer(t)}); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServicePolicy(&model.ServicePolicy{Name: "gated-private", Type: model.PolicyDial, IdentityRoles: []string{"#gated"},
		ServiceRoles: []string{"@" + private.ID}, PostureCheckRoles: []string{"@" + check.ID}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := try(&gated, "private"); got != "" {
		t.Fatalf("a posture-gated policy let a client with no posture through: %q", got)
	}
}

// A circuit dialed at a transport listener ends when its client certificate stops
// authenticating the identity: here, its authenticator is deleted while the circuit is open.
func TestTransportCircuitEndsWithItsCertificate(t *testing.T) {
	t.Parallel()
	n, _, _ := buildLine(t, lineConfig{transport: "tls", split: true, a: `  - binding: transport
    bind: tls:127.0.0.1:{{port}}
    advertise: tls:127.0.0.1:{{same}}
`})
	n.service("echo", "C", echoServer(t))
	cert, ident := n.enrolled("app", "apps")
	if err := n.m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "apps", Semantic: model.SemanticAny, IdentityRoles: []string{"#apps"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		t.Fatal(err)
	}
	if err := n.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}); err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "A", "ca.cert"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", n.routers["A"].r.TransportAddresses()[0],
		&tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(append([]byte{byte(len("echo"))}, "echo"...))
	c.Write([]byte("ping"))
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo over the transport listener: %q %v", got, err)
	}
	c.SetReadDeadline(time.Time{})
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, c); ended <- err }()

	auths, err := n.m.AuthenticatorsOf(ident.ID)
	if err != nil || len(auths) != 1 {
		t.Fatalf("authenticators: %v %v", auths, err)
	}
	if err := n.m.DeleteAuthenticator(auths[0].ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the revoked certificate's circuit to end", func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	})
}
