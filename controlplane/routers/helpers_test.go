package routers_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/channel"
	"github.com/zmesh/zmesh/controlplane/edgeclient"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
)

// env is a controller serving its API and control channel on loopback.
type env struct {
	ctrl     *controlplane.Controller
	m        *model.Model
	admin    *edgeclient.Client
	url      string // of the API
	ctrlAddr string
	logs     *logBuffer
	stop     func()
}

// logBuffer collects the controller's log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T) *env {
	t.Helper()
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := apiLn.Addr().String()
	cfg := &config.Controller{
		V: 1, DataDir: t.TempDir(),
		API:            config.ControllerAPI{Listen: addr, Advertise: addr},
		Ctrl:           config.ControllerCtrl{Listen: config.Address{Transport: "tls", Host: "127.0.0.1", Port: ctrlLn.Addr().(*net.TCPAddr).Port}},
		Admin:          config.Admin{Username: "admin", Password: "admin-pass"},
		SessionTimeout: config.Duration(30 * time.Minute),
	}
	logs := &logBuffer{}
	ctrl, err := controlplane.Open(cfg, slog.New(slog.NewTextHandler(logs, nil)), controlplane.Build{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- ctrl.ServeWithCtrl(ctx, apiLn, ctrlLn, func(net.Addr) { close(ready) }) }()
	<-ready
	e := &env{ctrl: ctrl, m: ctrl.Model(), url: "https://" + addr, ctrlAddr: ctrlLn.Addr().String(), logs: logs,
		admin: edgeclient.New("https://"+addr, ctrl.CA().Pool(), nil)}
	stopped := false
	e.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller stopped with: %v", err)
			}
		}
	}
	t.Cleanup(e.stop)
	if _, err := e.admin.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	return e
}

// enroll creates an edge router and enrolls it, returning its id and client certificate.
func (e *env) enroll(t *testing.T, name string) (string, tls.Certificate) {
	t.Helper()
	r := &model.EdgeRouter{Name: name}
	if err := e.m.CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	enr, err := e.m.RouterEnrollment(r.ID)
	if err != nil || enr == nil {
		t.Fatalf("enrollment of %s: %v", name, err)
	}
	key := newKey(t)
	certs, err := e.m.EnrollErOtt(enr.Token, csr(t, key, nil), csr(t, newKey(t), []string{name + ".example"}))
	if err != nil {
		t.Fatal(err)
	}
	return r.ID, certFromPEM(t, certs.Cert, key)
}

// foreignCert is a client certificate signed by the given CA for the given name.
func foreignCert(t *testing.T, ca *pki.CA, name string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	_, pemCert, err := ca.SignCSR(csr(t, key, nil), pki.SignRequest{CommonName: name, Usage: pki.Client})
	if err != nil {
		t.Fatal(err)
	}
	return certFromPEM(t, pemCert, key)
}

// dial connects a router's channel with cert and starts it.
func (e *env) dial(t *testing.T, cert tls.Certificate) *channel.Channel {
	t.Helper()
	conn, err := tls.Dial("tcp", e.ctrlAddr, &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      e.ctrl.CA().Pool(),
		ServerName:   "127.0.0.1",
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatalf("dial the control channel: %v", err)
	}
	ch := channel.New(context.Background(), conn, quietLog(), channel.Options{RequestTimeout: 5 * time.Second})
	ch.Start()
	t.Cleanup(func() { ch.Close() })
	return ch
}

func hello(ch *channel.Channel, id string) (*channel.HelloReply, error) {
	return channel.Call[*channel.HelloReply](context.Background(), ch, &channel.Hello{
		RouterID: id, Version: "test", Protocol: channel.ProtocolVersion, Hostname: "er.example",
		Listeners:     []channel.Listener{{Binding: "edge", Address: "tls:er.example:3022"}, {Binding: "tunnel"}},
		LinkListeners: []channel.LinkListener{{Address: "tls:er.example:4022", Transport: "tls", Groups: []string{"default"}}},
	})
}

// routerView is what the management API shows of an edge router.
type routerView struct {
	IsOnline           bool              `json:"isOnline"`
	Hostname           string            `json:"hostname"`
	SupportedProtocols map[string]string `json:"supportedProtocols"`
}

func (e *env) view(t *testing.T, id string) routerView {
	t.Helper()
	var v routerView
	if _, err := e.admin.Do(context.Background(), "GET", "/edge/management/v1/edge-routers/"+id, nil, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not the case after 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitClosed(t *testing.T, ch *channel.Channel) error {
	t.Helper()
	select {
	case <-ch.Done():
		return ch.Err()
	case <-time.After(5 * time.Second):
		t.Fatal("the router's channel is still open after 5s")
		return nil
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func csr(t *testing.T, key *ecdsa.PrivateKey, dnsNames []string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "router"}, DNSNames: dnsNames}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func certFromPEM(t *testing.T, certPEM []byte, key *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	cert, err := pki.ParsePEMCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}
