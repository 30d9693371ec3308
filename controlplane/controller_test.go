package controlplane

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/apiclient"
)

// running is a controller serving on loopback for a test.
type running struct {
	cfg  *config.Controller
	ctrl *Controller
	url  string
	// ctrlAddr is the control channel's host:port, "" when it is not served.
	ctrlAddr string
	stop     context.CancelFunc
	done     chan error
	roots    *x509.CertPool
	admin    *apiclient.Client
}

func testConfig(dir, addr string) *config.Controller {
	return &config.Controller{
		V: 1, DataDir: dir,
		API:            config.ControllerAPI{Listen: addr, Advertise: addr},
		Ctrl:           config.ControllerCtrl{Listen: config.Address{Transport: "tls", Host: "127.0.0.1", Port: 6262}},
		Admin:          config.Admin{Username: "admin", Password: "admin-pass"},
		SessionTimeout: 30 * time.Minute,
	}
}

// start runs a controller on dir, without the control channel; addr "" picks a free
// loopback port.
func start(t *testing.T, dir, addr string) *running {
	t.Helper()
	return serve(t, dir, addr, false)
}

// startWithCtrl runs a controller on dir that serves the routers' control channel too, both
// on free loopback ports.
func startWithCtrl(t *testing.T, dir string) *running {
	t.Helper()
	return serve(t, dir, "", true)
}

func serve(t *testing.T, dir, addr string, withCtrl bool) *running {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir, ln.Addr().String())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctrl, err := Open(cfg, log, Build{Version: "test"})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	var ctrlLn net.Listener
	if withCtrl {
		if ctrlLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			ln.Close()
			ctrl.Close()
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cfg: cfg, ctrl: ctrl, url: "https://" + cfg.API.Advertise, stop: cancel, done: make(chan error, 1), roots: ctrl.CA().Pool()}
	if ctrlLn != nil {
		r.ctrlAddr = ctrlLn.Addr().String()
	}
	ready := make(chan struct{})
	go func() { r.done <- ctrl.ServeWithCtrl(ctx, ln, ctrlLn, func(net.Addr) { close(ready) }) }()
	<-ready
	r.admin = apiclient.New(r.url, r.roots, nil)
	if _, err := r.admin.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

func (r *running) shutdown(t *testing.T) {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	if err := <-r.done; err != nil {
		t.Errorf("controller stopped with: %v", err)
	}
}

type identityDetail struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Enrollment struct {
		OTT *struct {
			JWT string `json:"jwt"`
		} `json:"ott"`
		Updb *struct {
			JWT string `json:"jwt"`
		} `json:"updb"`
	} `json:"enrollment"`
	Authenticators map[string]struct {
		ID string `json:"id"`
	} `json:"authenticators"`
}

func createIdentity(t *testing.T, c *apiclient.Client, body map[string]any) identityDetail {
	t.Helper()
	ctx := context.Background()
	var created struct {
		ID string `json:"id"`
	}
	if _, err := c.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", body, &created); err != nil {
		t.Fatal(err)
	}
	var d identityDetail
	if _, err := c.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+created.ID, nil, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := apiclient.CodeOf(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

// TestEnrollmentsAndDeletionsPersistAcrossRestart: enroll with a one-time token and
// authenticate with the certificate; enroll with a password, change it; delete an
// identity and see its session refused; restart and find everything persisted: the CA, the
// certificate, the identities, a changed password (the old one still refused) and the deletion
// (404, its old session 401, its password refused).
func TestEnrollmentsAndDeletionsPersistAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ctrl")
	r := start(t, dir, "")

	// ott: create, enroll (as zmesh enroll does), authenticate with the certificate.
	ott := createIdentity(t, r.admin, map[string]any{"name": "laptop", "type": "Device", "isAdmin": false, "enrollment": map[string]any{"ott": true}})
	if ott.Enrollment.OTT == nil || ott.Enrollment.OTT.JWT == "" {
		t.Fatalf("identity has no ott enrollment JWT: %+v", ott)
	}
	idFile, err := apiclient.Enroll(ctx, ott.Enrollment.OTT.JWT, apiclient.EnrollOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certClient, err := idFile.Client()
	if err != nil {
		t.Fatal(err)
	}
	sess, err := certClient.AuthenticateCert(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sess.IdentityID != ott.ID {
		t.Fatalf("cert session is for %s, want %s", sess.IdentityID, ott.ID)
	}
	_, err = apiclient.Enroll(ctx, ott.Enrollment.OTT.JWT, apiclient.EnrollOptions{})
	wantCode(t, err, "INVALID_ENROLLMENT_TOKEN")

	// updb: enroll with a password, authenticate, change the password.
	updb := createIdentity(t, r.admin, map[string]any{"name": "bob", "type": "User", "isAdmin": false, "enrollment": map[string]any{"updb": "bob1"}})
	if _, err := apiclient.Enroll(ctx, updb.Enrollment.Updb.JWT, apiclient.EnrollOptions{Password: "first-pass"}); err != nil {
		t.Fatal(err)
	}
	bob := apiclient.New(r.url, r.roots, nil)
	if _, err := bob.AuthenticatePassword(ctx, "bob1", "first-pass"); err != nil {
		t.Fatal(err)
	}
	var auths []struct {
		ID     string `json:"id"`
		Method string `json:"method"`
	}
	if _, err := bob.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity/authenticators", nil, &auths); err != nil || len(auths) != 1 {
		t.Fatalf("own authenticators: %v %v", auths, err)
	}
	change := map[string]any{"password": "second-pass", "currentPassword": "first-pass"}
	if _, err := bob.Do(ctx, "PATCH", apiclient.ClientAPI+"/current-identity/authenticators/"+auths[0].ID, change, nil); err != nil {
		t.Fatal(err)
	}
	_, err = apiclient.New(r.url, r.roots, nil).AuthenticatePassword(ctx, "bob1", "first-pass")
	wantCode(t, err, "INVALID_AUTH")
	if _, err := apiclient.New(r.url, r.roots, nil).AuthenticatePassword(ctx, "bob1", "second-pass"); err != nil {
		t.Fatal(err)
	}

	// carol changes her password too, and keeps her identity across the restart.
	carolID := createIdentity(t, r.admin, map[string]any{"name": "carol", "type": "User", "isAdmin": false, "enrollment": map[string]any{"updb": "carol1"}})
	if _, err := apiclient.Enroll(ctx, carolID.Enrollment.Updb.JWT, apiclient.EnrollOptions{Password: "carol-first"}); err != nil {
		t.Fatal(err)
	}
	carol := apiclient.New(r.url, r.roots, nil)
	if _, err := carol.AuthenticatePassword(ctx, "carol1", "carol-first"); err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity/authenticators", nil, &auths); err != nil || len(auths) != 1 {
		t.Fatalf("carol's authenticators: %v %v", auths, err)
	}
	change = map[string]any{"password": "carol-second", "currentPassword": "carol-first"}
	if _, err := carol.Do(ctx, "PATCH", apiclient.ClientAPI+"/current-identity/authenticators/"+auths[0].ID, change, nil); err != nil {
		t.Fatal(err)
	}

	// Delete bob: his session answers 401 on its next call.
	if _, err := r.admin.Do(ctx, "DELETE", apiclient.ManagementAPI+"/identities/"+updb.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = bob.Do(ctx, "GET", apiclient.ClientAPI+"/current-api-session", nil, nil)
	wantStatus(t, err, 401, "UNAUTHORIZED")
	namesBefore := identityNames(t, r.admin)
	if want := []string{"Default Admin", "carol", "laptop"}; !slices.Equal(namesBefore, want) {
		t.Fatalf("identities before the restart: %v, want %v", namesBefore, want)
	}

	// Restart on the same directory and port: the CA, the admin, the laptop and carol's new
	// password persist; bob stays deleted.
	addr := r.cfg.API.Advertise
	caBefore := r.roots
	r.shutdown(t)
	r2 := start(t, dir, addr)
	if !r2.roots.Equal(caBefore) {
		t.Error("the CA changed across a restart")
	}
	if _, err := certClient.AuthenticateCert(ctx); err != nil {
		t.Fatalf("cert auth after restart: %v", err)
	}
	var list []struct {
		Name string `json:"name"`
	}
	page, err := r2.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/identities?filter="+urlQuery(`name = "laptop"`), nil, &list)
	if err != nil || len(list) != 1 || page.TotalCount != 1 {
		t.Fatalf("identities after restart: %v %+v %v", list, page, err)
	}
	if namesAfter := identityNames(t, r2.admin); !slices.Equal(namesAfter, namesBefore) {
		t.Errorf("identities after the restart: %v, want %v", namesAfter, namesBefore)
	}
	_, err = r2.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+updb.ID, nil, nil)
	wantStatus(t, err, 404, "NOT_FOUND")
	_, err = bob.Do(ctx, "GET", apiclient.ClientAPI+"/current-api-session", nil, nil)
	wantStatus(t, err, 401, "UNAUTHORIZED")
	_, err = apiclient.New(r2.url, r2.roots, nil).AuthenticatePassword(ctx, "bob1", "second-pass")
	wantStatus(t, err, 401, "INVALID_AUTH")
	_, err = apiclient.New(r2.url, r2.roots, nil).AuthenticatePassword(ctx, "carol1", "carol-first")
	wantStatus(t, err, 401, "INVALID_AUTH")
	if s, err := apiclient.New(r2.url, r2.roots, nil).AuthenticatePassword(ctx, "carol1", "carol-second"); err != nil || s.IdentityID != carolID.ID {
		t.Fatalf("carol's new password after restart: %+v %v", s, err)
	}
}

// identityNames lists the names of all identities, sorted, and checks the list's total count.
func identityNames(t *testing.T, admin *apiclient.Client) []string {
	t.Helper()
	var list []struct {
		Name string `json:"name"`
	}
	page, err := admin.Do(context.Background(), "GET", apiclient.ManagementAPI+"/identities?limit=500", nil, &list)
	if err != nil || page == nil || page.TotalCount != len(list) {
		t.Fatalf("list identities: %+v %v %v", page, list, err)
	}
	var names []string
	for _, i := range list {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

// wantStatus checks that err is an API error with status and code.
func wantStatus(t *testing.T, err error, status int, code string) {
	t.Helper()
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Status != status || apiErr.Code != code {
		t.Fatalf("error %v, want %d %s", err, status, code)
	}
}

func urlQuery(s string) string {
	return strings.NewReplacer(" ", "%20", `"`, "%22", "=", "%3D").Replace(s)
}

// TestSecondControllerOnSameDir checks that a data directory serves one controller only.
func TestSecondControllerOnSameDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start(t, dir, "")
	cfg := testConfig(dir, "127.0.0.1:1")
	_, err := Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Build{})
	if err == nil || !strings.Contains(err.Error(), "in use by another zmesh controller") {
		t.Fatalf("second open: %v", err)
	}
}
