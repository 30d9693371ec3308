package controlplane

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zmesh/zmesh/controlplane/pki"
)

// ImportCA installs the network's CA (certificate certFile, private key keyFile, as found in
// the first member's <dataDir>/pki) into pkiDir, the PKI directory of a controller that is
// to join the cluster, before its first start: the members must share the CA, whose
// certificates they present to each other. It refuses a pkiDir that has a CA already (a
// controller started once has issued its certificates from its own) and a key that is not
// the certificate's. The key is written 0600 in a 0700 directory.
func ImportCA(pkiDir, certFile, keyFile string) error {
	for _, f := range []string{pki.CACertFile, pki.CAKeyFile} {
		if _, err := os.Stat(filepath.Join(pkiDir, f)); err == nil {
			return fmt.Errorf("%s has a CA already; a controller that has started once cannot join another network's cluster: start it on an empty data directory", pkiDir)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("the CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("the CA key: %w", err)
	}
	certs, err := pki.ParseCertificatesPEM(certPEM)
	if err != nil || len(certs) != 1 {
		return fmt.Errorf("%s is not one PEM certificate (%v)", certFile, err)
	}
	if !certs[0].IsCA || certs[0].KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("%s is not a CA certificate", certFile)
	}
	key, err := pki.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", keyFile, err)
	}
	if !pki.PublicKeysEqual(key.Public(), certs[0].PublicKey) {
		return fmt.Errorf("the key %s is not the key of the certificate %s", keyFile, certFile)
	}
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	// The key first: a directory with a certificate alone refuses to open, and says so.
	if err := writeNew(filepath.Join(pkiDir, pki.CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeNew(filepath.Join(pkiDir, pki.CACertFile), certPEM, 0o644)
}

// writeNew writes data into a new file path, synced.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
