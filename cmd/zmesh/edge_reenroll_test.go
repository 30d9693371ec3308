package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

// TestEdgeReEnroll: `edge re-enroll edge-router` gives the router a new enrollment token,
// printed alone on stdout; `edge re-enroll authenticator` replaces a certificate
// authenticator with a one-time enrollment whose token goes to --jwt-output-file.
func TestEdgeReEnroll(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	edge := loggedInTo(t, c)

	first := strings.TrimSpace(edge.must(t, "create", "edge-router", "r1"))
	out, stderr, err := edge("re-enroll", "edge-router", "r1")
	token := strings.TrimSpace(out)
	if err != nil || strings.Count(token, ".") != 2 || token == first || !strings.Contains(stderr, "re-enrolled edge router r1") {
		t.Fatalf("re-enroll edge-router: %v, stdout %q, stderr %q", err, out, stderr)
	}
	if detail := edge.object(t, "get", "edge-router", "r1"); detail["enrollmentJwt"] != token {
		t.Errorf("the printed token is not the router's new one: %v", detail["enrollmentJwt"])
	}
	if _, _, err := edge("re-enroll", "edge-router", "nosuch"); err == nil {
		t.Error("re-enroll of an unknown edge router succeeded")
	}

	c.IdentityFile(t, "bob")
	admin := c.Admin(t)
	var auths []struct {
		ID     string `json:"id"`
		Method string `json:"method"`
	}
	if _, err := admin.Do(t.Context(), "GET", apiclient.ManagementAPI+`/authenticators?filter=method="cert"`, nil, &auths); err != nil || len(auths) != 1 {
		t.Fatalf("bob's cert authenticator: %v %v", auths, err)
	}
	file := filepath.Join(t.TempDir(), "bob.jwt")
	out = edge.must(t, "re-enroll", "authenticator", auths[0].ID, "--duration", "2h", "--jwt-output-file", file)
	if !strings.Contains(out, "replaced authenticator "+auths[0].ID) || !strings.Contains(out, "written to "+file) {
		t.Errorf("re-enroll authenticator: %q", out)
	}
	jwt, err := os.ReadFile(file)
	if err != nil || strings.Count(string(jwt), ".") != 2 {
		t.Fatalf("the enrollment token file: %q %v", jwt, err)
	}
	if _, err := admin.Do(t.Context(), "GET", apiclient.ManagementAPI+"/authenticators/"+auths[0].ID, nil, nil); apiclient.CodeOf(err) != "NOT_FOUND" {
		t.Errorf("the replaced authenticator is still there: %v", err)
	}
	if _, stderr, err := edge("re-enroll", "authenticator", auths[0].ID, "--duration", "-1h"); exitCode(err) != 2 {
		t.Errorf("a negative --duration: exit %d, %v %q", exitCode(err), err, stderr)
	}
}
