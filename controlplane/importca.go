package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/atomicfile"
)

// ImportCA installs the network's CA (certificate certFile, private key keyFile, as found in
// the first member's <dataDir>/pki) into pkiDir, the PKI directory of a controller that is
// to join the cluster, before its first start: the members must share the CA, whose
// certificates they present to each other. It refuses a pkiDir that has a CA already (a
// controller started once has issued its certificates from its own), and a CA the
// controller would refuse to open (pki.LoadCA: not a CA certificate, expired, a key that
// is not the certificate's). The key is written 0600 in a 0700 directory.
func ImportCA(pkiDir, certFile, keyFile string) error {
	for _, f := range []string{pki.CACertFile, pki.CAKeyFile} {
		if _, err := os.Stat(filepath.Join(pkiDir, f)); err == nil {
			return fmt.Errorf("%s has a CA already; a controller that has started once cannot join another network's cluster: start it on an empty data directory", pkiDir)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// The members' checks of a CA: Open refuses what LoadCA refuses.
	if _, err := pki.LoadCA(certFile, keyFile, nil); err != nil {
		return err
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("the CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("the CA key: %w", err)
	}
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	// The key first: a directory with a certificate alone refuses to open, and says so.
	if err := atomicfile.Write(filepath.Join(pkiDir, pki.CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(pkiDir, pki.CACertFile), certPEM, 0o644)
}
