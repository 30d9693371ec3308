// Package ctrltest is for tests that need a controller or what it issues: a controller
// serving its API and control channel on loopback with Badger in t.TempDir(), stopped at the
// end of the test; edge routers and identities created and enrolled with their one-time
// tokens, as zmesh enroll would (keys, CSRs and certificates come from internal/testutil);
// and a log buffer that a test reads while the code under test writes it. Only tests import
// it; its helpers fail the test (t.Fatal) rather than return errors.
package ctrltest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/testutil"
)

// The administrator a test controller is configured with.
const (
	AdminUsername = "admin"
	AdminPassword = "admin-pass"
)

// LogBuffer collects a log or a process's output; it may be read while it is written.
type LogBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	shown bool // by a failed test's cleanup
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Controller is a controller serving its API and its control channel on loopback.
type Controller struct {
	Ctrl     *controlplane.Controller
	Model    *model.Model // Ctrl's
	APIAddr  string       // host:port of the API
	URL      string       // https://APIAddr
	CtrlAddr string       // host:port of the control channel (TLS)
	Logs     *LogBuffer   // the controller's log, shown when the test failed

	t      testing.TB
	cfg    *config.Controller // as opened, kept for Restart
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Options says what StartWith starts.
type Options struct {
	// Config is the configuration to open: Config(t) changed as the test needs, or one the
	// code under test prepared; nil is Config(t). Its API address and its control channel's
	// address are replaced by those of the loopback listeners the controller is served on.
	// Admin needs the administrator AdminUsername/AdminPassword.
	Config *config.Controller
}

// Config returns the configuration Start opens: a data directory in t.TempDir(), the
// administrator AdminUsername/AdminPassword and API sessions of 30 idle minutes, a day at
// most.
func Config(t testing.TB) *config.Controller {
	return &config.Controller{
		V: 1, DataDir: t.TempDir(),
		Admin:              config.Admin{Username: AdminUsername, Password: AdminPassword},
		SessionTimeout:     30 * time.Minute,
		SessionMaxLifetime: config.DefaultSessionMaxLifetime,
	}
}

// Start opens a controller with Config(t) and serves it (ServeWithCtrl) on two new loopback
// listeners until Stop or the end of the test. A controller that stops with an error fails
// the test.
func Start(t testing.TB) *Controller {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options) *Controller {
	t.Helper()
	var cfg *config.Controller
	if opts.Config != nil {
		c := *opts.Config
		cfg = &c
	} else {
		cfg = Config(t)
	}
	return start(t, cfg, "127.0.0.1:0", "127.0.0.1:0", &LogBuffer{})
}

// Restart stops the controller, unless it stopped already, and starts it again as a
// restarted process would be: on the same configuration and data directory, at the same
// API and control channel addresses (waiting while they are still held), writing on to the
// same log. It returns the controller now serving; c stays stopped.
func (c *Controller) Restart(t testing.TB) *Controller {
	t.Helper()
	c.Stop()
	// A copy: the stopped controller's goroutines may still read the one it was opened on.
	cfg := *c.cfg
	return start(t, &cfg, c.APIAddr, c.CtrlAddr, c.Logs)
}

func start(t testing.TB, cfg *config.Controller, apiAddr, ctrlAddr string, logs *LogBuffer) *Controller {
	t.Helper()
	var apiLn, ctrlLn net.Listener
	testutil.EventuallyNil(t, "listening on "+apiAddr+" and "+ctrlAddr, func() (err error) {
		if apiLn == nil {
			if apiLn, err = net.Listen("tcp", apiAddr); err != nil {
				return err
			}
		}
		ctrlLn, err = net.Listen("tcp", ctrlAddr)
		return err
	})
	addr := apiLn.Addr().String()
	cfg.API = config.ControllerAPI{Listen: addr, Advertise: addr}
	cfg.Ctrl.Listen = config.Address{Transport: "tls", Host: "127.0.0.1", Port: ctrlLn.Addr().(*net.TCPAddr).Port}
	// A controller stopped a moment ago (Restart) has released the data directory's lock, but
	// a child process that a parallel test forked may still share the lock's file, until it
	// execs: that passes.
	var ctrl *controlplane.Controller
	var err error
	testutil.EventuallyNil(t, "the data directory's lock", func() error {
		ctrl, err = controlplane.Open(cfg, slog.New(slog.NewTextHandler(logs, nil)), controlplane.Build{Version: "test"})
		if inUse, ok := errors.AsType[*controlplane.DataDirInUseError](err); ok && inUse.PID == os.Getpid() {
			return err
		}
		return nil
	})
	if err != nil {
		apiLn.Close()
		ctrlLn.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{Ctrl: ctrl, Model: ctrl.Model(), APIAddr: addr, URL: "https://" + addr,
		CtrlAddr: ctrlLn.Addr().String(), Logs: logs, t: t, cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { c.done <- ctrl.ServeWithCtrl(ctx, apiLn, ctrlLn, func(net.Addr) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-c.done:
		cancel()
		t.Fatalf("the controller stopped at start: %v\n%s", err, logs)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			logs.mu.Lock()
			show := !logs.shown
			logs.shown = true
			logs.mu.Unlock()
			if show {
				t.Logf("controller log:\n%s", logs)
			}
		}
	})
	return c
}

// Stop stops the controller and waits for it, failing the test when it stopped with an
// error. Calling it again does nothing.
func (c *Controller) Stop() {
	c.once.Do(func() {
		c.cancel()
		if err := <-c.done; err != nil {
			c.t.Errorf("controller stopped with: %v", err)
		}
	})
}

// Admin returns a client of the controller's API logged in as its administrator.
func (c *Controller) Admin(t testing.TB) *apiclient.Client {
	t.Helper()
	admin := apiclient.New(c.URL, c.Ctrl.CA().Pool(), nil)
	if _, err := admin.AuthenticatePassword(t.Context(), AdminUsername, AdminPassword); err != nil {
		t.Fatalf("administrator login: %v", err)
	}
	return admin
}

// IdentityFile creates an identity named name, enrolls it with its one-time token and
// returns its identity file, as zmesh enroll writes it.
func (c *Controller) IdentityFile(t testing.TB, name string) *apiclient.IdentityFile {
	t.Helper()
	id := EnrollIdentity(t, c.Model, name)
	f := apiclient.NewIdentityFile(c.URL)
	f.ID.Cert = "pem:" + string(id.CertPEM)
	f.ID.Key = "pem:" + string(testutil.KeyPEM(t, id.Key))
	f.ID.CA = "pem:" + string(c.Ctrl.CA().PEM())
	return f
}

// Identity is an identity enrolled with its one-time token.
type Identity struct {
	*model.Identity
	Key     *ecdsa.PrivateKey
	Cert    *x509.Certificate // issued by the enrollment
	CertPEM []byte
}

// EnrollIdentity creates an identity named name with roles in m, with a one-time-token
// enrollment, and enrolls it with a new key.
func EnrollIdentity(t testing.TB, m *model.Model, name string, roles ...string) Identity {
	t.Helper()
	id, err := m.CreateIdentity(model.IdentityCreate{Name: name, RoleAttributes: roles, Enrollment: &model.EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatalf("create identity %s: %v", name, err)
	}
	ens, err := m.EnrollmentsOf(id.ID)
	if err != nil || len(ens) == 0 {
		t.Fatalf("enrollments of identity %s: %d, %v", name, len(ens), err)
	}
	key := testutil.NewKey(t)
	certPEM, err := m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	if err != nil {
		t.Fatalf("enroll identity %s: %v", name, err)
	}
	cert, err := pki.ParsePEMCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return Identity{Identity: id, Key: key, Cert: cert, CertPEM: certPEM}
}

// Router is an edge router enrolled with its one-time token.
type Router struct {
	ID     string
	Client tls.Certificate // for the control channel
	Server tls.Certificate // for its listeners
}

// EnrollRouter creates an edge router named name in m and enrolls it with its one-time
// token: a client certificate and a server certificate for serverSANs (DNS names or IP
// addresses), both on one new key.
func EnrollRouter(t testing.TB, m *model.Model, name string, serverSANs ...string) Router {
	t.Helper()
	r := &model.EdgeRouter{Name: name}
	if err := m.CreateEdgeRouter(r); err != nil {
		t.Fatalf("create edge router %s: %v", name, err)
	}
	enr, err := m.RouterEnrollment(r.ID)
	if err != nil || enr == nil {
		t.Fatalf("enrollment of %s: %v", name, err)
	}
	key := testutil.NewKey(t)
	certs, err := m.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, key, serverSANs...))
	if err != nil {
		t.Fatalf("enroll edge router %s: %v", name, err)
	}
	return Router{ID: r.ID, Client: testutil.TLSCert(t, certs.Cert, key), Server: testutil.TLSCert(t, certs.ServerCert, key)}
}

// Imposter serves TLS on a new loopback listener, until the end of the test, with the server
// certificate of an edge router enrolled in c as any router enrolls, naming the controller's
// hosts (127.0.0.1 and localhost) and sent with the network's CA: a router posing as the
// controller. It completes handshakes, then closes the connection. It returns the listener's
// host:port.
func (c *Controller) Imposter(t testing.TB) string {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		tcp.Close()
		wg.Wait()
	})
	r := EnrollRouter(t, c.Model, "imposter-"+tcp.Addr().String(), "127.0.0.1", "localhost")
	server := r.Server
	server.Certificate = append(server.Certificate, c.Ctrl.CA().Certificate().Raw)
	ln := tls.NewListener(tcp, &tls.Config{Certificates: []tls.Certificate{server}, MinVersion: tls.VersionTLS12})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_ = conn.(*tls.Conn).Handshake() // a refusing client fails it
				conn.Close()
			})
		}
	})
	return ln.Addr().String()
}
