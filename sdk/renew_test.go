package sdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// identityPath enrolls identity name and writes its identity file; it returns the path and
// the id of its cert authenticator.
func (e *testEnv) identityPath(name string) (path, authID string) {
	t := e.t
	t.Helper()
	f := e.identity(name)
	path = filepath.Join(t.TempDir(), name+".json")
	check(t, f.Save(path))
	cert, err := f.Certificate()
	check(t, err)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	check(t, err)
	auths, err := e.m.AuthenticatorsOf(leaf.Subject.CommonName)
	check(t, err)
	for _, a := range auths {
		if a.Method == model.MethodCert {
			return path, a.ID
		}
	}
	t.Fatalf("identity %s has no cert authenticator", name)
	return "", ""
}

// fileCredentials returns the DER of the certificate and the PKCS #8 of the key the identity
// file at path holds.
func fileCredentials(t *testing.T, path string) (cert, key []byte) {
	t.Helper()
	f, err := apiclient.LoadIdentity(path)
	check(t, err)
	c, err := f.Certificate()
	check(t, err)
	key, err = x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	check(t, err)
	return c.Certificate[0], key
}

// inForce tells whether cert authenticator authID holds the certificate of DER leaf,
// verified.
func (e *testEnv) inForce(authID string, leaf []byte) bool {
	e.t.Helper()
	a, err := e.m.Authenticator(authID)
	check(e.t, err)
	c, err := x509.ParseCertificate(leaf)
	check(e.t, err)
	return a.Fingerprint == certid.Fingerprint(c) && a.UnverifiedFingerprint == ""
}

// An administrator's request for an early extension is followed within a renewal check by
// a Client that has an API session, with a new key when asked for one: the file then holds
// the new certificate (and key), which the controller holds as the identity's, and a new
// Client of the file authenticates with it.
func TestRenewOnRequest(t *testing.T) {
	t.Parallel()
	for _, roll := range []bool{false, true} {
		name := map[bool]string{false: "extend", true: "roll-keys"}[roll]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			path, authID := e.identityPath(name)
			oldCert, oldKey := fileCredentials(t, path)
			opts := e.options(name)
			opts.RenewCheck = 50 * time.Millisecond
			c, err := Load(path, opts)
			check(t, err)
			defer c.Close()
			ctx := context.Background()
			_, err = c.Services(ctx) // an API session: the renewal checks ask it
			check(t, err)
			check(t, e.m.RequestExtend(authID, roll))
			testutil.Eventually(t, "the renewal", func() bool {
				cert, _ := fileCredentials(t, path)
				return !bytes.Equal(cert, oldCert) && e.inForce(authID, cert)
			})
			newCert, newKey := fileCredentials(t, path)
			if rolled := !bytes.Equal(newKey, oldKey); rolled != roll {
				t.Errorf("the key in the file changed: %v; want %v", rolled, roll)
			}
			if !bytes.Equal(c.creds.Load().cert.Certificate[0], newCert) {
				t.Error("the Client does not present the renewed certificate")
			}
			a, err := e.m.Authenticator(authID)
			check(t, err)
			if a.ExtendRequested || a.KeyRollRequested {
				t.Errorf("the request is still pending: extend %v, roll keys %v", a.ExtendRequested, a.KeyRollRequested)
			}
			testutil.EventuallyNil(t, "list services after the renewal", func() error {
				_, err := c.Services(ctx)
				return err
			})
			again, err := Load(path, e.options(name+"-again"))
			check(t, err)
			defer again.Close()
			if _, err := again.Services(ctx); err != nil {
				t.Fatalf("a Client of the rewritten file: %v", err)
			}
		})
	}
}

// A renewal stopped after the identity file was written and before extend-verify leaves the
// file with an extension the controller admits but has not put in force: a Client of that
// file finishes the renewal at its first check.
func TestRenewFinishesAnInterruptedRenewal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path, authID := e.identityPath("interrupted")
	f, err := apiclient.LoadIdentity(path)
	check(t, err)
	cert, err := f.Certificate()
	check(t, err)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	check(t, err)
	// The interrupted renewal: extend with the current certificate, then write the file.
	api, err := f.Client()
	check(t, err)
	ctx := context.Background()
	_, err = api.AuthenticateCert(ctx)
	check(t, err)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: leaf.Subject.CommonName}}, cert.PrivateKey)
	check(t, err)
	var out struct {
		ClientCert string `json:"clientCert"`
	}
	_, err = api.Do(ctx, "POST", apiclient.ClientAPI+"/current-identity/authenticators/"+authID+"/extend",
		map[string]string{"clientCertCsr": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))}, &out)
	check(t, err)
	check(t, apiclient.ReplaceCredentials(path, cert.Certificate[0], []byte(out.ClientCert), nil))
	extension, _ := fileCredentials(t, path)
	if e.inForce(authID, extension) {
		t.Fatal("the extension is in force before its verification")
	}

	opts := e.options("interrupted")
	opts.RenewCheck = 50 * time.Millisecond
	c, err := Load(path, opts)
	check(t, err)
	defer c.Close()
	_, err = c.Services(ctx) // authenticates with the extension
	check(t, err)
	testutil.Eventually(t, "the extension in force", func() bool { return e.inForce(authID, extension) })
	testutil.EventuallyNil(t, "list services after the verification", func() error {
		_, err := c.Services(ctx)
		return err
	})
}

// Identity files are rewritten with their mode, their other fields, those zmesh does not
// know included, and never over a certificate another program put there.
func TestReplaceCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path, _ := e.identityPath("file")
	oldCert, _ := fileCredentials(t, path)
	data, err := os.ReadFile(path)
	check(t, err)
	data = bytes.Replace(data, []byte(`"ztAPI"`), []byte(`"enableHa": true, "ztAPI"`), 1)
	check(t, os.WriteFile(path, data, 0o600))
	check(t, os.Chmod(path, 0o640))

	other := e.identity("other")
	otherCert, err := other.Certificate()
	check(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherCert.Certificate[0]})
	keyDER, err := x509.MarshalPKCS8PrivateKey(otherCert.PrivateKey)
	check(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := apiclient.ReplaceCredentials(path, otherCert.Certificate[0], certPEM, keyPEM); err == nil {
		t.Fatal("a file whose certificate is not the current one was overwritten")
	}
	check(t, apiclient.ReplaceCredentials(path, oldCert, certPEM, keyPEM))
	gotCert, gotKey := fileCredentials(t, path)
	if !bytes.Equal(gotCert, otherCert.Certificate[0]) || !bytes.Equal(gotKey, keyDER) {
		t.Error("the file does not hold the new certificate and key")
	}
	after, err := os.ReadFile(path)
	check(t, err)
	if !bytes.Contains(after, []byte(`"enableHa": true`)) {
		t.Errorf("a field zmesh does not know was lost:\n%s", after)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, %v; want 0640", st.Mode().Perm(), err)
	}
	f, err := apiclient.ParseIdentityFile(after)
	check(t, err)
	if !f.HoldsCredentials() {
		t.Error("the rewritten file does not hold its certificate and key as PEM")
	}
}
