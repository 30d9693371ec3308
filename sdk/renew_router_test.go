package sdk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/dataplane"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
)

// routerNet is a controller whose identity certificates last 2 minutes and one real edge
// router, on loopback; every identity may dial and bind every service over it.
type routerNet struct {
	ctl *ctrltest.Controller
	dir string
}

func newRouterNet(t *testing.T) *routerNet {
	t.Helper()
	cfg := ctrltest.Config(t)
	cfg.Certificates.Identities = 2 * time.Minute
	n := &routerNet{ctl: ctrltest.StartWith(t, ctrltest.Options{Config: cfg}), dir: t.TempDir()}
	m := n.ctl.Model
	all := []string{"#all"}
	must(t, m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny, IdentityRoles: all, EdgeRouterRoles: all}))
	must(t, m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all", Semantic: model.SemanticAny, ServiceRoles: all, EdgeRouterRoles: all}))
	for _, typ := range []string{model.PolicyDial, model.PolicyBind} {
		must(t, m.CreateServicePolicy(&model.ServicePolicy{Name: typ, Type: typ, Semantic: model.SemanticAny, IdentityRoles: all, ServiceRoles: all}))
	}
	n.startRouter(t)
	return n
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startRouter enrolls an edge router, writes its files and runs it until the test ends.
func (n *routerNet) startRouter(t *testing.T) {
	t.Helper()
	m := n.ctl.Model
	er := &model.EdgeRouter{Name: "edge"}
	must(t, m.CreateEdgeRouter(er))
	e, err := m.RouterEnrollment(er.ID)
	must(t, err)
	key := testutil.NewKey(t)
	certs, err := m.EnrollErOtt(e.Token, testutil.CSR(t, key), testutil.CSR(t, key, "localhost", "127.0.0.1"))
	must(t, err)
	dir := filepath.Join(n.dir, "router")
	must(t, os.MkdirAll(dir, 0o700))
	for f, data := range map[string][]byte{"key.pem": testutil.KeyPEM(t, key), "client.cert": certs.Cert, "server.cert": certs.ServerCert, "ca.cert": certs.CA} {
		must(t, os.WriteFile(filepath.Join(dir, f), data, 0o600))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	file := filepath.Join(dir, "router.yml")
	must(t, os.WriteFile(file, fmt.Appendf(nil, `v: 3
identity:
  cert: client.cert
  server_cert: server.cert
  key: key.pem
  ca: ca.cert
ctrl:
  endpoint: tls:%s
edge:
  csr:
    sans:
      dns: [localhost]
listeners:
  - binding: edge
    bind: tls:127.0.0.1:%d
    advertise: tls:127.0.0.1:%d
`, n.ctl.CtrlAddr, port, port), 0o600))
	cfg, _, err := config.LoadRouter(file, func(string) (string, bool) { return "", false })
	must(t, err)
	r, err := dataplane.New(cfg, "test", testLog(t, "router"))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("router: %v", err)
	}
}

func testLog(t testing.TB, who string) *slog.Logger {
	if os.Getenv("ZMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", who)
	}
	return slog.New(slog.DiscardHandler)
}

// identityFile enrolls identity name and writes its identity file, as zmesh enroll does,
// with fields zmesh does not use besides (which a rewrite must keep), mode 0640.
func (n *routerNet) identityFile(t *testing.T, name string) string {
	t.Helper()
	f := n.ctl.IdentityFile(t, name)
	f.ConfigTypes = []string{"all"}
	f.ZtAPIs = []string{f.ZtAPI}
	data, err := json.Marshal(f)
	must(t, err)
	var doc map[string]any
	must(t, json.Unmarshal(data, &doc))
	doc["enableHa"] = true
	doc["id"].(map[string]any)["server_cert"] = "kept"
	data, err = json.MarshalIndent(doc, "", "  ")
	must(t, err)
	path := filepath.Join(n.dir, name+".json")
	must(t, os.WriteFile(path, data, 0o640))
	return path
}

// fileCert returns the leaf of the certificate the identity file at path holds.
func fileCert(t *testing.T, path string) []byte {
	t.Helper()
	f, err := apiclient.LoadIdentity(path)
	must(t, err)
	cert, err := f.Certificate()
	must(t, err)
	return cert.Certificate[0]
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	must(t, err)
	return c
}

// identityID returns the id of identity name.
func (n *routerNet) identityID(t *testing.T, name string) string {
	t.Helper()
	ids, err := n.ctl.Model.Identities()
	must(t, err)
	for _, id := range ids {
		if id.Name == name {
			return id.ID
		}
	}
	t.Fatalf("no identity %q", name)
	return ""
}

// apiSessionCerts returns the fingerprints of the certificates identity name's API sessions
// were opened with.
func (n *routerNet) apiSessionCerts(t *testing.T, name string) []string {
	t.Helper()
	id := n.identityID(t, name)
	list, err := n.ctl.Model.APISessions()
	must(t, err)
	var fps []string
	for _, a := range list {
		if a.IdentityID == id {
			fps = append(fps, a.CertFingerprint)
		}
	}
	return fps
}

// inForce tells whether the certificate of DER leaf is the one identity name's cert
// authenticator holds, verified.
func (n *routerNet) inForce(t *testing.T, name string, leaf []byte) bool {
	t.Helper()
	auths, err := n.ctl.Model.AuthenticatorsOf(n.identityID(t, name))
	must(t, err)
	fp := certid.Fingerprint(mustParse(t, leaf))
	for _, a := range auths {
		if a.Method == model.MethodCert && a.Fingerprint == fp && a.UnverifiedFingerprint == "" {
			return true
		}
	}
	return false
}

// An identity loaded from its file, with 2-minute certificates, renews its certificate at
// RenewAt of its lifetime while a circuit carries data both ways: the controller then holds
// the new certificate as the identity's, the file holds it too, still parses and keeps its
// other fields and mode; a new Dial of the Client works after it, reaching a host that
// renewed too (its Listener bound again), and a new Load of the rewritten file
// authenticates. (The circuit itself ends at the verification: the
// controller ends the API session opened with the previous certificate, and the router the
// connections made in it.)
func TestRenewWithRouter(t *testing.T) {
	t.Parallel()
	n := newRouterNet(t)
	svc := &model.Service{Name: "echo"}
	must(t, n.ctl.Model.CreateService(svc))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The host renews as well: its Listener binds again with the new certificate.
	hostPath := n.identityFile(t, "host")
	hostLeaf := fileCert(t, hostPath)
	host, err := sdk.Load(hostPath, sdk.Options{Logger: testLog(t, "host"), RenewAt: 0.4, RenewCheck: time.Second})
	must(t, err)
	defer host.Close()
	// A router just started may refuse the first bind (INVALID_SESSION) while it has not
	// received the new API session yet.
	var ln net.Listener
	testutil.EventuallyNil(t, "listen echo", func() (err error) {
		ln, err = host.Listen(ctx, svc.Name)
		return err
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()

	path := n.identityFile(t, "dialer")
	before, err := os.ReadFile(path)
	must(t, err)
	oldLeaf := fileCert(t, path)
	// Renewal at 0.4 of 3 minutes (2, and the minute the CA backdates): 12 s after enrollment.
	dialer, err := sdk.Load(path, sdk.Options{Logger: testLog(t, "dialer"), RenewAt: 0.4, RenewCheck: time.Second})
	must(t, err)
	defer dialer.Close()
	var conn net.Conn
	testutil.EventuallyNil(t, "dial echo", func() (err error) {
		conn, err = dialer.DialContext(ctx, "tcp", svc.Name)
		return err
	})
	defer conn.Close()
	exchange := func(c net.Conn) error {
		msg := make([]byte, 4096)
		rand.Read(msg)
		c.SetDeadline(time.Now().Add(testutil.Patience))
		if _, err := c.Write(msg); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("the echo differs from what was sent")
		}
		return nil
	}
	must(t, exchange(conn))

	// The circuit carries data across both renewals: the file is rewritten, the controller
	// puts the new certificate in force, and the connections and API sessions made with the
	// previous one (the same key) go on.
	renewedBy := time.Now().Add(20*time.Second + testutil.Patience)
	exchanges, since := 0, 0
	renewed := func(name, path string, old []byte) bool {
		leaf := fileCert(t, path)
		return !bytes.Equal(leaf, old) && n.inForce(t, name, leaf)
	}
	for since < 3 {
		if time.Now().After(renewedBy) {
			t.Fatalf("not renewed: the dialer %v, the host %v", renewed("dialer", path, oldLeaf), renewed("host", hostPath, hostLeaf))
		}
		if err := exchange(conn); err != nil {
			t.Fatalf("the circuit made before the renewal, exchange %d: %v", exchanges, err)
		}
		exchanges++
		if renewed("dialer", path, oldLeaf) && renewed("host", hostPath, hostLeaf) {
			since++
		}
	}
	t.Logf("%d exchanges over the circuit made before the renewals", exchanges)
	// The Client authenticates again with the new certificate; then a new Dial works.
	newFP := certid.Fingerprint(mustParse(t, fileCert(t, path)))
	testutil.Eventually(t, "an API session of the dialer's new certificate", func() bool {
		return slices.Contains(n.apiSessionCerts(t, "dialer"), newFP)
	})
	testutil.EventuallyNil(t, "dial echo after the renewal", func() error {
		c, err := dialer.DialContext(ctx, "tcp", svc.Name)
		if err != nil {
			return err
		}
		defer c.Close()
		return exchange(c)
	})
	// The file: the new certificate, parses, other fields and mode unchanged.
	after, err := os.ReadFile(path)
	must(t, err)
	if _, err := apiclient.ParseIdentityFile(after); err != nil {
		t.Fatalf("the rewritten identity file does not parse: %v", err)
	}
	var was, now map[string]any
	must(t, json.Unmarshal(before, &was))
	must(t, json.Unmarshal(after, &now))
	wasID, nowID := was["id"].(map[string]any), now["id"].(map[string]any)
	if b, _ := pem.Decode([]byte(strings.TrimPrefix(nowID["cert"].(string), "pem:"))); b == nil || !strings.HasPrefix(nowID["cert"].(string), "pem:") {
		t.Error("id.cert is not pem:<PEM>")
	}
	delete(wasID, "cert")
	delete(nowID, "cert")
	if w, g := fmt.Sprint(was), fmt.Sprint(now); w != g {
		t.Errorf("the identity file's other fields changed:\nwas %s\nnow %s", w, g)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("the identity file's mode: %v, %v; want 0640", st.Mode().Perm(), err)
	}

	// A new Client of the rewritten file authenticates.
	again, err := sdk.Load(path, sdk.Options{Logger: testLog(t, "again"), RenewAt: -1})
	must(t, err)
	defer again.Close()
	if _, err := again.Services(ctx); err != nil {
		t.Fatalf("a Client of the rewritten file: %v", err)
	}
}
