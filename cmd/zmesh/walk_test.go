package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

// walkController is a test controller with its administrator's client and its CA.
type walkController struct {
	*ctrltest.Controller
	caCert []byte // DER of the network's CA
	admin  *apiclient.Client
}

func walk(t *testing.T, c *ctrltest.Controller) *walkController {
	t.Helper()
	return &walkController{Controller: c, caCert: c.Ctrl.CA().Certificate().Raw, admin: c.Admin(t)}
}

// restart stops the controller and starts a new one on the same directory and address.
func (c *walkController) restart(t *testing.T) *walkController {
	t.Helper()
	return walk(t, c.Restart(t))
}

// createWithJWT creates an identity over the management API and writes its enrollment token
// (of method ott or updb) to a file; it returns the identity's id and the file.
func (c *walkController) createWithJWT(t *testing.T, dir string, body map[string]any, method string) (string, string) {
	t.Helper()
	ctx := context.Background()
	var created struct {
		ID string `json:"id"`
	}
	if _, err := c.admin.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", body, &created); err != nil {
		t.Fatal(err)
	}
	var detail struct {
		Enrollment map[string]struct {
			JWT string `json:"jwt"`
		} `json:"enrollment"`
	}
	if _, err := c.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+created.ID, nil, &detail); err != nil {
		t.Fatal(err)
	}
	jwt := detail.Enrollment[method].JWT
	if jwt == "" {
		t.Fatalf("identity %v has no %s enrollment token: %+v", body["name"], method, detail)
	}
	file := filepath.Join(dir, body["name"].(string)+".jwt")
	if err := os.WriteFile(file, []byte(jwt), 0o600); err != nil {
		t.Fatal(err)
	}
	return created.ID, file
}

// identityNames lists every identity's name, sorted, checking the list's total count.
func (c *walkController) identityNames(t *testing.T) []string {
	t.Helper()
	var list []struct {
		Name string `json:"name"`
	}
	page, err := c.admin.Do(context.Background(), "GET", apiclient.ManagementAPI+"/identities?limit=500", nil, &list)
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

// wantAPIError checks that err is an API error with status and code.
func wantAPIError(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var e *apiclient.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Errorf("%s: error %v, want %d %s", what, err, status, code)
	}
}

// TestCLIEnrollmentsAuthenticateAndPersist, over real HTTPS with the zmesh CLI enrolling: an
// ott identity enrolls with `zmesh enroll` and authenticates with its certificate; an updb
// identity enrolls with `zmesh enroll --password`, authenticates and changes its password;
// a deleted identity's session answers 401; after a restart on the same data directory the
// CA, the certificate, the new password, the deletion and the identity list all persist.
func TestCLIEnrollmentsAuthenticateAndPersist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	c := walk(t, ctrltest.Start(t))
	enroll := func(args ...string) (string, error) {
		out, _, err := run(t, nil, append([]string{"enroll"}, args...)...)
		return out, err
	}

	// ott: zmesh enroll writes an identity file whose certificate authenticates.
	laptopID, laptopJWT := c.createWithJWT(t, dir, map[string]any{"name": "laptop", "type": "Device", "isAdmin": false, "enrollment": map[string]any{"ott": true}}, "ott")
	laptopFile := filepath.Join(dir, "laptop.json")
	if out, err := enroll("--jwt", laptopJWT, "--out", laptopFile); err != nil || !strings.Contains(out, "enrolled (ott)") {
		t.Fatalf("zmesh enroll (ott): %v %q", err, out)
	}
	if _, err := enroll("--jwt", laptopJWT, "--out", filepath.Join(dir, "again.json")); apiclient.CodeOf(err) != "INVALID_ENROLLMENT_TOKEN" {
		t.Errorf("zmesh enroll with a used token: %v, want INVALID_ENROLLMENT_TOKEN", err)
	}
	laptopIdentity, err := apiclient.LoadIdentity(laptopFile)
	if err != nil {
		t.Fatal(err)
	}
	if laptopIdentity.ZtAPI != c.URL+apiclient.ClientAPI {
		t.Errorf("identity file ztAPI %q, want %q", laptopIdentity.ZtAPI, c.URL+apiclient.ClientAPI)
	}
	if !identityTrusts(t, laptopIdentity, c.caCert) {
		t.Error("the identity file does not hold the network's CA")
	}
	laptop, err := laptopIdentity.Client()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := laptop.AuthenticateCert(ctx); err != nil || s.IdentityID != laptopID {
		t.Fatalf("certificate authentication: %+v %v", s, err)
	}

	// updb: zmesh enroll --password, authenticate, change the password; the old one fails.
	bobID, bobJWT := c.createWithJWT(t, dir, map[string]any{"name": "bob", "type": "User", "isAdmin": false, "enrollment": map[string]any{"updb": "bob1"}}, "updb")
	if out, err := enroll("--jwt", bobJWT, "--out", filepath.Join(dir, "bob.json"), "--password", "first-pass"); err != nil || !strings.Contains(out, "enrolled (updb)") {
		t.Fatalf("zmesh enroll (updb): %v %q", err, out)
	}
	bobIdentity, err := apiclient.LoadIdentity(filepath.Join(dir, "bob.json"))
	if err != nil || bobIdentity.Username != "bob1" {
		t.Fatalf("bob's identity file: %+v %v", bobIdentity, err)
	}
	roots, err := bobIdentity.Roots()
	if err != nil {
		t.Fatal(err)
	}
	login := func(url, username, password string) (*apiclient.Client, *apiclient.Session, error) {
		cl := apiclient.New(url, roots, nil)
		s, err := cl.AuthenticatePassword(ctx, username, password)
		return cl, s, err
	}
	bob, s, err := login(c.URL, "bob1", "first-pass")
	if err != nil || s.IdentityID != bobID {
		t.Fatalf("password authentication: %+v %v", s, err)
	}
	var auths []struct {
		ID     string `json:"id"`
		Method string `json:"method"`
	}
	if _, err := bob.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity/authenticators", nil, &auths); err != nil || len(auths) != 1 || auths[0].Method != "updb" {
		t.Fatalf("bob's authenticators: %+v %v", auths, err)
	}
	change := map[string]any{"password": "second-pass", "currentPassword": "first-pass"}
	if _, err := bob.Do(ctx, "PATCH", apiclient.ClientAPI+"/current-identity/authenticators/"+auths[0].ID, change, nil); err != nil {
		t.Fatal(err)
	}
	_, _, err = login(c.URL, "bob1", "first-pass")
	wantAPIError(t, "the old password", err, 401, "INVALID_AUTH")
	if _, _, err := login(c.URL, "bob1", "second-pass"); err != nil {
		t.Fatalf("the new password: %v", err)
	}

	// Delete an enrolled identity: its session answers 401 on its next call.
	carolID, carolJWT := c.createWithJWT(t, dir, map[string]any{"name": "carol", "type": "User", "isAdmin": false, "enrollment": map[string]any{"updb": "carol1"}}, "updb")
	if _, err := enroll("--jwt", carolJWT, "--out", filepath.Join(dir, "carol.json"), "--password", "carol-pass"); err != nil {
		t.Fatal(err)
	}
	carol, _, err := login(c.URL, "carol1", "carol-pass")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.Do(ctx, "DELETE", apiclient.ManagementAPI+"/identities/"+carolID, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = carol.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity", nil, nil)
	wantAPIError(t, "the deleted identity's session", err, 401, "UNAUTHORIZED")

	namesBefore := c.identityNames(t)
	if want := []string{"Default Admin", "bob", "laptop"}; !slices.Equal(namesBefore, want) {
		t.Fatalf("identities before the restart: %v, want %v", namesBefore, want)
	}

	// Restart on the same data directory and address: everything persisted.
	caBefore := c.caCert
	c = c.restart(t)
	if !bytes.Equal(c.caCert, caBefore) {
		t.Error("the CA changed across the restart")
	}
	if s, err := laptop.AuthenticateCert(ctx); err != nil || s.IdentityID != laptopID {
		t.Errorf("certificate authentication after the restart: %+v %v", s, err)
	}
	if _, s, err := login(c.URL, "bob1", "second-pass"); err != nil || s.IdentityID != bobID {
		t.Errorf("the new password after the restart: %+v %v", s, err)
	}
	_, _, err = login(c.URL, "bob1", "first-pass")
	wantAPIError(t, "the old password after the restart", err, 401, "INVALID_AUTH")
	if _, err := bob.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity", nil, nil); err != nil {
		t.Errorf("bob's API session after the restart: %v", err)
	}
	_, err = c.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/identities/"+carolID, nil, nil)
	wantAPIError(t, "the deleted identity after the restart", err, 404, "NOT_FOUND")
	_, err = carol.Do(ctx, "GET", apiclient.ClientAPI+"/current-identity", nil, nil)
	wantAPIError(t, "the deleted identity's session after the restart", err, 401, "UNAUTHORIZED")
	_, _, err = login(c.URL, "carol1", "carol-pass")
	wantAPIError(t, "the deleted identity's password after the restart", err, 401, "INVALID_AUTH")
	if namesAfter := c.identityNames(t); !slices.Equal(namesAfter, namesBefore) {
		t.Errorf("identities after the restart: %v, want %v", namesAfter, namesBefore)
	}
}

// identityTrusts reports whether the identity file trusts the CA certificate der.
func identityTrusts(t *testing.T, id *apiclient.IdentityFile, der []byte) bool {
	t.Helper()
	certs, err := pki.ParseCertificatesPEM([]byte(strings.TrimPrefix(id.ID.CA, "pem:")))
	if err != nil {
		t.Fatalf("identity file CA: %v", err)
	}
	return slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return bytes.Equal(c.Raw, der) })
}
