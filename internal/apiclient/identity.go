package apiclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/zmesh/zmesh/internal/atomicfile"
)

// IdentityFile is an enrolled identity as stored on disk, in the format of OpenZiti's
// identity files (ziti.Config of its SDKs): the client API's URL and the identity's
// certificate, key and trusted CAs, each as "pem:<PEM>", "file://<path>" or a plain path.
// ztAPI carries the client API's path (https://host:port/edge/client/v1), as OpenZiti's SDKs
// call /authenticate relative to it; a URL without a path (zmesh's older files) names the
// same controller. ztAPIs, when set, supersedes ztAPI, as in OpenZiti's SDKs.
type IdentityFile struct {
	ZtAPI  string   `json:"ztAPI"`
	ZtAPIs []string `json:"ztAPIs,omitempty"`
	// ConfigTypes are the config types OpenZiti's SDKs request with services; kept so that a
	// file written by OpenZiti's tools keeps them when zmesh rewrites it.
	ConfigTypes []string `json:"configTypes,omitempty"`
	ID          struct {
		Cert string `json:"cert,omitempty"`
		Key  string `json:"key,omitempty"`
		CA   string `json:"ca"`
	} `json:"id"`
	// Username is set for identities that authenticate with a password (zmesh's own field;
	// OpenZiti's SDKs ignore it).
	Username string `json:"username,omitempty"`
}

// NewIdentityFile returns an identity file for the controller at controller (https://host:port),
// its ztAPI the client API's URL.
func NewIdentityFile(controller string) *IdentityFile {
	return &IdentityFile{ZtAPI: strings.TrimSuffix(controller, "/") + ClientAPI}
}

// Controller is the first controller's base URL, https://host:port (see Controllers).
func (id *IdentityFile) Controller() (string, error) {
	urls, err := id.Controllers()
	if err != nil {
		return "", err
	}
	return urls[0], nil
}

// Controllers are the controllers' base URLs, https://host:port, from every entry of the
// file's ztAPIs or else from its ztAPI: each either the client API's URL or the bare
// controller URL. A client tries them in this order.
func (id *IdentityFile) Controllers() ([]string, error) {
	if len(id.ZtAPIs) == 0 {
		if id.ZtAPI == "" {
			return nil, errors.New("ztAPI (or ztAPIs) is required")
		}
		u, err := controllerURL("ztAPI", id.ZtAPI)
		if err != nil {
			return nil, err
		}
		return []string{u}, nil
	}
	urls := make([]string, 0, len(id.ZtAPIs))
	for i, raw := range id.ZtAPIs {
		u, err := controllerURL(fmt.Sprintf("ztAPIs[%d]", i), raw)
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
	}
	return urls, nil
}

// controllerURL checks the value of an identity file's field naming a controller and returns
// the controller's base URL.
func controllerURL(field, raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("%s is empty", field)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", field, raw, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%s %q: must be an https URL, https://host:port%s", field, raw, ClientAPI)
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != ClientAPI {
		return "", fmt.Errorf("%s %q: the path must be %s or empty", field, raw, ClientAPI)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%s %q: must be https://host:port%s, without user, query or fragment", field, raw, ClientAPI)
	}
	return "https://" + u.Host, nil
}

// LoadIdentity reads an identity file.
func LoadIdentity(path string) (*IdentityFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read identity file: %w", err)
	}
	id, err := ParseIdentityFile(data)
	if err != nil {
		return nil, fmt.Errorf("identity file %s: %w", path, err)
	}
	return id, nil
}

// ParseIdentityFile decodes an identity file and checks that it names a controller and CAs.
// Fields of OpenZiti's format zmesh does not use (enableHa, id.server_cert, ...) are ignored.
func ParseIdentityFile(data []byte) (*IdentityFile, error) {
	var id IdentityFile
	if err := json.Unmarshal(data, &id); err != nil {
		return nil, err
	}
	if _, err := id.Controller(); err != nil {
		return nil, err
	}
	if id.ID.CA == "" {
		return nil, errors.New("id.ca is required")
	}
	return &id, nil
}

// Save writes the identity file atomically with mode 0600: it holds a private key.
func (id *IdentityFile) Save(path string) error {
	data, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write identity file: %w", err)
	}
	return nil
}

// material returns the PEM of a "pem:" value (or of a bare PEM), or the contents of the
// file a "file:" URL or a plain path names, as OpenZiti's identity loader reads them. A
// relative path is relative to the working directory. Errors never quote a value that may
// hold a key.
func material(v string) ([]byte, error) {
	const want = `want "pem:<PEM>", "file:<path>" or a path`
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return nil, errors.New("value is empty; " + want)
	case inlinePEM(v):
		return []byte(strings.TrimPrefix(v, "pem:")), nil
	case strings.HasPrefix(v, "file:"):
		u, err := url.Parse(v)
		if err != nil {
			return nil, fmt.Errorf(`a "file:" value that is not a URL: %w`, err)
		}
		path := u.Path
		if path == "" {
			path = u.Opaque // file:relative/path
		}
		return readMaterial(path)
	case strings.Contains(v, "://"):
		return nil, fmt.Errorf("value %.20q...: %s", v, want)
	}
	return readMaterial(v)
}

// readMaterial reads the file at path, naming at most the start of the path when it fails.
func readMaterial(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("read %.60q: %w", pe.Path, pe.Err)
	}
	return data, err
}

// Roots returns the CAs the identity trusts.
func (id *IdentityFile) Roots() (*x509.CertPool, error) {
	data, err := material(id.ID.CA)
	if err != nil {
		return nil, fmt.Errorf("id.ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("id.ca holds no PEM certificate")
	}
	return pool, nil
}

// Certificate returns the identity's client certificate and key, nil for a password identity.
func (id *IdentityFile) Certificate() (*tls.Certificate, error) {
	if id.ID.Cert == "" {
		return nil, nil
	}
	certPEM, err := material(id.ID.Cert)
	if err != nil {
		return nil, fmt.Errorf("id.cert: %w", err)
	}
	keyPEM, err := material(id.ID.Key)
	if err != nil {
		return nil, fmt.Errorf("id.key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("identity certificate and key: %w", err)
	}
	return &cert, nil
}

// Client returns a client of the identity's controllers (all of them, in the file's order)
// presenting its certificate.
func (id *IdentityFile) Client() (*Client, error) {
	roots, err := id.Roots()
	if err != nil {
		return nil, err
	}
	cert, err := id.Certificate()
	if err != nil {
		return nil, err
	}
	controllers, err := id.Controllers()
	if err != nil {
		return nil, err
	}
	return NewMulti(controllers, roots, cert), nil
}

// HoldsCredentials reports whether the file holds its certificate and key itself, as PEM
// ("pem:<PEM>" or bare PEM) rather than naming other files: only then can ReplaceCredentials
// replace both in one atomic write.
func (id *IdentityFile) HoldsCredentials() bool {
	return inlinePEM(strings.TrimSpace(id.ID.Cert)) && inlinePEM(strings.TrimSpace(id.ID.Key))
}

// inlinePEM reports whether an identity file's value (trimmed) is the PEM itself, "pem:<PEM>"
// or bare, rather than the name of a file.
func inlinePEM(v string) bool {
	return strings.HasPrefix(v, "pem:") || strings.Contains(v, "-----BEGIN")
}

// ReplaceCredentials rewrites the identity file at path with certPEM as its id.cert and, when
// keyPEM is not nil, keyPEM as its id.key, both as "pem:<PEM>". The write is atomic, keeps the
// file's mode and every other field as it was, those zmesh does not know included. It
// refuses to write when the file's certificate is not the one whose leaf's DER is current:
// the file changed since it was read (another program renewed it, or an administrator
// replaced it), and writing would undo that.
func ReplaceCredentials(path string, current, certPEM, keyPEM []byte) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read identity file: %w", err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("identity file: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("identity file %s: %w", path, err)
	}
	var ids map[string]json.RawMessage
	if err := json.Unmarshal(doc["id"], &ids); err != nil || ids == nil {
		return fmt.Errorf("identity file %s: id is not an object", path)
	}
	var certValue string
	if err := json.Unmarshal(ids["cert"], &certValue); err != nil {
		return fmt.Errorf("identity file %s: id.cert is not a string", path)
	}
	onDisk, err := material(certValue)
	if err != nil {
		return fmt.Errorf("identity file %s: id.cert: %w", path, err)
	}
	if b, _ := pem.Decode(onDisk); b == nil || !bytes.Equal(b.Bytes, current) {
		return fmt.Errorf("identity file %s: its certificate changed since it was read; not overwriting it", path)
	}
	set := func(field string, v []byte) {
		ids[field], _ = json.Marshal("pem:" + string(v))
	}
	set("cert", certPEM)
	if keyPEM != nil {
		set("key", keyPEM)
	}
	if doc["id"], err = json.Marshal(ids); err != nil {
		return err
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(out, '\n'), info.Mode().Perm()); err != nil {
		return fmt.Errorf("write identity file: %w", err)
	}
	return nil
}
