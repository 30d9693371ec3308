package apiclient_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// openZitiConfig is the shape OpenZiti's SDK (sdk-golang's ziti.Config with identity.Config
// as id) decodes an identity file into, and `ziti edge enroll` encodes.
type openZitiConfig struct {
	ZtAPI       string   `json:"ztAPI"`
	ZtAPIs      []string `json:"ztAPIs"`
	ConfigTypes []string `json:"configTypes"`
	ID          struct {
		Key        string `json:"key"`
		Cert       string `json:"cert"`
		ServerCert string `json:"server_cert,omitempty"`
		CA         string `json:"ca,omitempty"`
	} `json:"id"`
	EnableHa bool `json:"enableHa"`
}

// openZitiFile writes an identity file of an enrolled identity as `ziti edge enroll` does
// (json.Encoder over ziti.Config: null ztAPIs and configTypes, enableHa, "pem:" values), with
// the given ztAPI and ztAPIs, and returns its path.
func openZitiFile(t *testing.T, c *ctrltest.Controller, name, ztAPI string, ztAPIs []string) string {
	t.Helper()
	id := ctrltest.EnrollIdentity(t, c.Model, name)
	var cfg openZitiConfig
	cfg.ZtAPI, cfg.ZtAPIs = ztAPI, ztAPIs
	cfg.ID.Key = "pem:" + string(testutil.KeyPEM(t, id.Key))
	cfg.ID.Cert = "pem:" + string(id.CertPEM)
	cfg.ID.CA = "pem:" + string(c.Ctrl.CA().PEM())
	path := filepath.Join(t.TempDir(), name+".json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := json.NewEncoder(f).Encode(&cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

// An identity file in OpenZiti's form, ztAPI carrying the client API's path (or ztAPIs doing
// so), and zmesh's older form without the path, all load and authenticate.
func TestOpenZitiIdentityFileAuthenticates(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	clientURL := c.URL + "/edge/client/v1"
	cases := []struct {
		name   string
		ztAPI  string
		ztAPIs []string
	}{
		{"ztapi-with-path", clientURL, nil},
		{"ztapis", "", []string{clientURL}},
		{"ztapis-over-ztapi", "https://127.0.0.1:1/edge/client/v1", []string{clientURL + "/"}},
		{"zmesh-old-form", c.URL, nil},
	}
	for _, tc := range cases {
		path := openZitiFile(t, c, tc.name, tc.ztAPI, tc.ztAPIs)
		f, err := apiclient.LoadIdentity(path)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if ctrl, err := f.Controller(); err != nil || ctrl != c.URL {
			t.Errorf("%s: controller %q, %v; want %q", tc.name, ctrl, err, c.URL)
		}
		client, err := f.Client()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := client.AuthenticateCert(t.Context()); err != nil {
			t.Errorf("%s: authenticate: %v", tc.name, err)
		}
	}
}

// Key, certificate and CAs may also be file paths, with or without file://, as OpenZiti's
// identity loader reads them.
func TestIdentityFileMaterialPaths(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	id := ctrltest.EnrollIdentity(t, c.Model, "paths")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyPath, certPath, caPath := write("key.pem", testutil.KeyPEM(t, id.Key)), write("cert.pem", id.CertPEM), write("ca.pem", c.Ctrl.CA().PEM())
	for _, tc := range []struct{ name, key, cert, ca string }{
		{"path, file:// URL", keyPath, "file://" + certPath, caPath},
		{"file: URLs", "file:" + keyPath, "file:" + certPath, "file:" + caPath},
		{"PEM after a newline", "\n" + string(testutil.KeyPEM(t, id.Key)), "pem:" + string(id.CertPEM), caPath},
	} {
		f := apiclient.NewIdentityFile(c.URL)
		f.ID.Key, f.ID.Cert, f.ID.CA = tc.key, tc.cert, tc.ca
		client, err := f.Client()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := client.AuthenticateCert(t.Context()); err != nil {
			t.Fatalf("%s: authenticate: %v", tc.name, err)
		}
	}
	// A key that is neither PEM nor a readable path is not quoted whole in the error.
	f := apiclient.NewIdentityFile(c.URL)
	secret := strings.Repeat("MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg", 3)
	f.ID.Key, f.ID.Cert, f.ID.CA = secret, certPath, caPath
	if _, err := f.Client(); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("a key that is no file: %v, want an error that does not quote it whole", err)
	}
}

// A ztAPI naming another API, or not https, is refused with the field named.
func TestIdentityFileRefusesOtherURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, field string }{
		{`{"ztAPI":"https://ctrl:1280/edge/management/v1","id":{"ca":"pem:x"}}`, "ztAPI"},
		{`{"ztAPI":"http://ctrl:1280/edge/client/v1","id":{"ca":"pem:x"}}`, "ztAPI"},
		{`{"ztAPI":"https://ctrl:1280","ztAPIs":["https://ctrl:1280/other"],"id":{"ca":"pem:x"}}`, "ztAPIs[0]"},
		{`{"id":{"ca":"pem:x"}}`, "ztAPI"},
		{`{"ztAPI":"https://ctrl:1280/edge/client/v1","id":{}}`, "id.ca"},
	} {
		_, err := apiclient.ParseIdentityFile([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.file, err, tc.field)
		}
	}
}

// A file zmesh's enrollment writes has the fields OpenZiti's SDK reads, "pem:" values, and a
// ztAPI relative to which /authenticate?method=cert works, as OpenZiti's SDK calls it.
func TestEnrolledIdentityFileOpenZitiShape(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	admin := c.Admin(t)
	var created struct {
		ID string `json:"id"`
	}
	body := map[string]any{"name": "shape", "type": "User", "isAdmin": false, "enrollment": map[string]any{"ott": true}}
	if _, err := admin.Do(t.Context(), "POST", apiclient.ManagementAPI+"/identities", body, &created); err != nil {
		t.Fatal(err)
	}
	var detail struct {
		Enrollment struct {
			OTT struct {
				JWT string `json:"jwt"`
			} `json:"ott"`
		} `json:"enrollment"`
	}
	if _, err := admin.Do(t.Context(), "GET", apiclient.ManagementAPI+"/identities/"+created.ID, nil, &detail); err != nil {
		t.Fatal(err)
	}
	f, err := apiclient.Enroll(t.Context(), detail.Enrollment.OTT.JWT, apiclient.EnrollOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shape.json")
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg openZitiConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ZtAPI != c.URL+"/edge/client/v1" {
		t.Errorf("ztAPI %q, want %q", cfg.ZtAPI, c.URL+"/edge/client/v1")
	}
	for field, v := range map[string]string{"id.key": cfg.ID.Key, "id.cert": cfg.ID.Cert, "id.ca": cfg.ID.CA} {
		if !strings.HasPrefix(v, "pem:-----BEGIN ") {
			t.Errorf("%s %.30q, want pem:<PEM>", field, v)
		}
	}
	cert, err := tls.X509KeyPair([]byte(strings.TrimPrefix(cfg.ID.Cert, "pem:")), []byte(strings.TrimPrefix(cfg.ID.Key, "pem:")))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(strings.TrimPrefix(cfg.ID.CA, "pem:"))) {
		t.Fatal("id.ca holds no certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
	req, err := http.NewRequestWithContext(t.Context(), "POST", cfg.ZtAPI+"/authenticate?method=cert", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Data.Token == "" {
		t.Fatalf("POST ztAPI/authenticate?method=cert: %d, %v, token %q", resp.StatusCode, err, out.Data.Token)
	}
}
