package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestExtJWTCABundle runs an identity provider whose https key-set endpoint has a server
// certificate from a private CA: a JWT of it logs in only on a controller whose
// controller.yml names that CA in extJwt.caBundle (a path relative to the file), and a
// bundle that cannot be read stops the controller at start, naming the key.
func TestExtJWTCABundle(t *testing.T) {
	t.Parallel()
	privateCA := testutil.NewCA(t)
	key := testutil.NewKey(t)
	raw, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	idp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]any{
			{"kty": "EC", "kid": "corp-1", "use": "sig", "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])},
		}})
	}))
	idp.TLS = &tls.Config{Certificates: []tls.Certificate{privateCA.Cert(t, "idp.corp", pki.Server, "127.0.0.1")}}
	idp.StartTLS()
	t.Cleanup(idp.Close)
	const iss, aud = "https://idp.corp.example.com", "zmesh"

	start := func(t *testing.T, bundle string) *ctrltest.Controller {
		dir := t.TempDir()
		yml := "v: 1\ndataDir: " + filepath.Join(dir, "data") + "\nadmin:\n  username: " + ctrltest.AdminUsername +
			"\n  password: " + ctrltest.AdminPassword + "\n"
		if bundle != "" {
			if err := os.WriteFile(filepath.Join(dir, "idp-ca.pem"), []byte(bundle), 0o600); err != nil {
				t.Fatal(err)
			}
			yml += "extJwt:\n  caBundle: idp-ca.pem\n"
		}
		path := filepath.Join(dir, "controller.yml")
		if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := config.LoadController(path, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		if bundle != "" && cfg.ExtJWT.CABundle != filepath.Join(dir, "idp-ca.pem") {
			t.Fatalf("extJwt.caBundle read as %q", cfg.ExtJWT.CABundle)
		}
		return ctrltest.StartWith(t, ctrltest.Options{Config: cfg})
	}
	login := func(t *testing.T, c *ctrltest.Controller) error {
		admin := c.Admin(t)
		var signer, ident struct {
			ID string `json:"id"`
		}
		if _, err := admin.Do(t.Context(), "POST", apiclient.ManagementAPI+"/external-jwt-signers", map[string]any{
			"name": "corp", "enabled": true, "issuer": iss, "audience": aud, "jwksEndpoint": idp.URL + "/jwks",
		}, &signer); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Do(t.Context(), "POST", apiclient.ManagementAPI+"/identities",
			map[string]any{"name": "ursula", "type": "User", "isAdmin": false}, &ident); err != nil {
			t.Fatal(err)
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "aud": aud, "sub": ident.ID,
			"iat": time.Now().Unix(), "exp": time.Now().Add(5 * time.Minute).Unix()})
		tok.Header["kid"] = "corp-1"
		signed, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		cl := apiclient.New(c.URL, c.Ctrl.CA().Pool(), nil)
		_, err = cl.DoHeader(t.Context(), "POST", apiclient.ClientAPI+"/authenticate?method=ext-jwt",
			http.Header{"Authorization": {"Bearer " + signed}}, map[string]any{}, nil)
		return err
	}

	t.Run("without the bundle", func(t *testing.T) {
		t.Parallel()
		c := start(t, "")
		wantAPIError(t, "a JWT whose key set is served under a private CA", login(t, c), 401, "INVALID_AUTH")
		if logs := c.Logs.String(); !strings.Contains(logs, "certificate signed by unknown authority") {
			t.Errorf("the rejection's reason is not logged:\n%s", logs)
		}
	})
	t.Run("with the bundle", func(t *testing.T) {
		t.Parallel()
		c := start(t, string(privateCA.PEM()))
		if err := login(t, c); err != nil {
			t.Fatalf("a JWT whose key set is served under the bundle's CA: %v", err)
		}
	})
	t.Run("an unreadable bundle", func(t *testing.T) {
		t.Parallel()
		for name, bundle := range map[string]string{"missing": "", "not PEM": "not a certificate\n"} {
			cfg := ctrltest.Config(t)
			cfg.API = config.ControllerAPI{Listen: "127.0.0.1:0", Advertise: "127.0.0.1:0"}
			cfg.ExtJWT.CABundle = filepath.Join(t.TempDir(), "ca.pem")
			if bundle != "" {
				if err := os.WriteFile(cfg.ExtJWT.CABundle, []byte(bundle), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctrl, err := controlplane.Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), controlplane.Build{})
			if err == nil {
				ctrl.Close()
				t.Fatalf("%s bundle: the controller opened", name)
			}
			if !strings.Contains(err.Error(), "extJwt.caBundle") {
				t.Errorf("%s bundle: %v does not name extJwt.caBundle", name, err)
			}
		}
	})
}
