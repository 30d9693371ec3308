package sdk

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// An identity file as OpenZiti's `ziti edge enroll` writes it (ztAPI with the client API's
// path, null ztAPIs and configTypes, enableHa, "pem:" values) loads, and the Client
// authenticates with it and lists the identity's services: what zmesh tunnel does with it.
func TestLoadOpenZitiIdentityFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.service("openziti-file", false)
	id := ctrltest.EnrollIdentity(t, e.m, "openziti-file")
	file := map[string]any{
		"ztAPI":       e.ctl.URL + "/edge/client/v1",
		"ztAPIs":      nil,
		"configTypes": nil,
		"id": map[string]any{
			"key":  "pem:" + string(testutil.KeyPEM(t, id.Key)),
			"cert": "pem:" + string(id.CertPEM),
			"ca":   "pem:" + string(e.ctl.Ctrl.CA().PEM()),
		},
		"enableHa": false,
	}
	data, err := json.Marshal(file)
	check(t, err)
	path := filepath.Join(t.TempDir(), "openziti.json")
	check(t, os.WriteFile(path, data, 0o600))

	c, err := Load(path, e.options("openziti-file"))
	check(t, err)
	t.Cleanup(func() { c.Close() })
	services, err := c.Services(t.Context())
	if err != nil {
		t.Fatalf("services: %v", err)
	}
	if len(services) != 1 || services[0].Name != "openziti-file" {
		t.Errorf("services %+v, want openziti-file", services)
	}
}
