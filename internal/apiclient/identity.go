package apiclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/zmesh/zmesh/internal/atomicfile"
)

// IdentityFile is an enrolled identity as stored on disk: the controller's URL and the
// identity's certificate, key and trusted CAs, each as "pem:<PEM>" (or "file://<path>").
type IdentityFile struct {
	ZtAPI string `json:"ztAPI"`
	ID    struct {
		Cert string `json:"cert,omitempty"`
		Key  string `json:"key,omitempty"`
		CA   string `json:"ca"`
	} `json:"id"`
	// Username is set for identities that authenticate with a password.
	Username string `json:"username,omitempty"`
}

// LoadIdentity reads an identity file.
func LoadIdentity(path string) (*IdentityFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read identity file: %w", err)
	}
	var id IdentityFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&id); err != nil {
		return nil, fmt.Errorf("identity file %s: %w", path, err)
	}
	if id.ZtAPI == "" || id.ID.CA == "" {
		return nil, fmt.Errorf("identity file %s: ztAPI and id.ca are required", path)
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

// material returns the PEM of a "pem:" value or the contents of a "file://" one.
func material(v string) ([]byte, error) {
	switch {
	case strings.HasPrefix(v, "pem:"):
		return []byte(strings.TrimPrefix(v, "pem:")), nil
	case strings.HasPrefix(v, "file://"):
		return os.ReadFile(strings.TrimPrefix(v, "file://"))
	}
	return nil, errors.New(`value must start with "pem:" or "file://"`)
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

// Client returns a client of the identity's controller presenting its certificate.
func (id *IdentityFile) Client() (*Client, error) {
	roots, err := id.Roots()
	if err != nil {
		return nil, err
	}
	cert, err := id.Certificate()
	if err != nil {
		return nil, err
	}
	return New(id.ZtAPI, roots, cert), nil
}
