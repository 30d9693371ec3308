package sdk

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// Identity is an enrolled identity: what a Client needs to join the network as it.
type Identity struct {
	// Controller is the URL of the controller's API, https://host:port.
	Controller string
	// Certificate is the identity's certificate chain, leaf first, with its private key. The
	// leaf's common name is the identity's id.
	Certificate tls.Certificate
	// CAs are the network's certificate authorities: they verify the controller, the edge
	// routers and, for end-to-end encryption, the other identities.
	CAs *x509.CertPool
}

// LoadIdentity reads an identity file, as zmesh enroll writes it.
func LoadIdentity(path string) (*Identity, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sdk: read identity file: %w", err)
	}
	id, err := ParseIdentity(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return id, nil
}

// ParseIdentity parses the JSON of an identity file, as zmesh enroll writes it. The
// "file://" paths it may name are read relative to the working directory.
func ParseIdentity(data []byte) (*Identity, error) {
	var f apiclient.IdentityFile
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("sdk: identity file: %w", err)
	}
	if f.ZtAPI == "" || f.ID.CA == "" {
		return nil, errors.New("sdk: identity file: ztAPI and id.ca are required")
	}
	return identityOf(&f)
}

// identityOf reads the certificates and key an identity file holds or names.
func identityOf(f *apiclient.IdentityFile) (*Identity, error) {
	roots, err := f.Roots()
	if err != nil {
		return nil, fmt.Errorf("sdk: identity: %w", err)
	}
	cert, err := f.Certificate()
	if err != nil {
		return nil, fmt.Errorf("sdk: identity: %w", err)
	}
	if cert == nil {
		return nil, errors.New("sdk: the identity has no certificate; the SDK authenticates with the identity's certificate")
	}
	return &Identity{Controller: f.ZtAPI, Certificate: *cert, CAs: roots}, nil
}
