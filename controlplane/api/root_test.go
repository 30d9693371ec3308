package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/zmesh/zmesh/controlplane/pki"
)

// The server root answers as the reference's: / and /version with the client API's version
// (whose apiVersions lead the CLI to the management API), /.well-known/est/cacerts with the
// CAs as ziti edge login reads them (the whole body base64, a PKCS#7 store).
func TestServerRoot(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, path := range []string{"/", "/version"} {
		rec := f.do("GET", path, "", "")
		var env struct {
			Data struct {
				APIVersions map[string]map[string]struct {
					Path string `json:"path"`
				} `json:"apiVersions"`
			} `json:"data"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || rec.Code != 200 {
			t.Fatalf("GET %s: %d %v %s", path, rec.Code, err, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: content type %q", path, ct)
		}
		if got := env.Data.APIVersions["edge-management"]["v1"].Path; got != ManagementBase {
			t.Errorf("GET %s: edge-management path %q, want %q", path, got, ManagementBase)
		}
	}
	rec := f.do("GET", "/.well-known/est/cacerts", "", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/pkcs7-mime" {
		t.Fatalf("cacerts: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	der, err := base64.StdEncoding.DecodeString(rec.Body.String())
	if err != nil {
		t.Fatal(err)
	}
	want, err := pki.PKCS7(f.m.CA().Certificate())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(der, want) {
		t.Error("cacerts at the root differ from the CA's PKCS#7 store")
	}
	for _, path := range []string{"/nothing", "/version/x", "/.well-known/est/other"} {
		if rec := f.do("GET", path, "", ""); rec.Code != 404 || errorCode(t, rec) != "NOT_FOUND" {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if rec := f.do("POST", "/version", "", ""); rec.Code != 405 {
		t.Errorf("POST /version: %d", rec.Code)
	}
}
