package sdk

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// Identity is an enrolled identity: what a Client needs to join the network as it.
type Identity struct {
	// Controller is the URL of the controller's API, https://host:port.
	Controller string
	// Controllers are the URLs of the API of other controllers of the network, the members of
	// a cluster, https://host:port, tried in this order after Controller (which may be empty
	// when they are not; one listed twice is tried once). LoadIdentity sets Controller to the
	// file's first and Controllers to all of them. A Client calls the one that answered last
	// and moves to the next when it cannot be reached or answers 503, keeping its API
	// session; it also learns the members the controllers list.
	Controllers []string
	// Certificate is the identity's certificate chain, leaf first, with its private key. The
	// leaf's common name is the identity's id.
	Certificate tls.Certificate
	// CAs are the network's certificate authorities: they verify the controller, the edge
	// routers and, for end-to-end encryption, the other identities.
	CAs *x509.CertPool
}

// LoadIdentity reads an identity file, as zmesh enroll or OpenZiti's ziti edge enroll writes it.
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

// ParseIdentity parses the JSON of an identity file, as zmesh enroll or OpenZiti's ziti edge
// enroll writes it (ztAPI with or without the client API's path, or ztAPIs: every entry,
// as Controllers). The
// "file://" paths it may name are read relative to the working directory.
func ParseIdentity(data []byte) (*Identity, error) {
	f, err := apiclient.ParseIdentityFile(data)
	if err != nil {
		return nil, fmt.Errorf("sdk: identity file: %w", err)
	}
	return identityOf(f)
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
	controllers, err := f.Controllers()
	if err != nil {
		return nil, fmt.Errorf("sdk: identity: %w", err)
	}
	return &Identity{Controller: controllers[0], Controllers: controllers, Certificate: *cert, CAs: roots}, nil
}
