// Package pki is the controller's certificate authority: it creates or loads the zmesh CA
// key and certificate, issues the API server certificate, signs enrollment CSRs for
// identities and routers, verifies client certificate chains, and encodes certificates
// as PEM and as certs-only PKCS#7 for the EST endpoint.
//
// A CA is immutable once opened and safe for concurrent use.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/zmesh/zmesh/internal/atomicfile"
)

// File names inside the CA directory.
const (
	CAKeyFile  = "ca.key"
	CACertFile = "ca.cert"
)

// CAValidity is the lifetime of a newly created zmesh CA certificate.
const CAValidity = 10 * 365 * 24 * time.Hour

// clockSkew backdates NotBefore so that peers with slightly slow clocks accept new certificates.
const clockSkew = time.Minute

// Sentinel errors. Match them with errors.Is.
var (
	// ErrBadCSR marks a certificate signing request that zmesh refuses to sign.
	ErrBadCSR = errors.New("bad certificate signing request")
	// ErrBadCertificate marks PEM or DER input that is not an acceptable certificate.
	ErrBadCertificate = errors.New("bad certificate")
)

// CA is the zmesh controller's certificate authority.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pool *x509.CertPool
	pem  []byte
	now  func() time.Time
}

// Open loads the CA from dir/ca.key and dir/ca.cert, or creates a new one when neither
// file exists. now is the clock used for issuing and verifying; nil means time.Now.
// If exactly one of the two files exists Open fails rather than replace it.
func Open(dir string, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	keyPath := filepath.Join(dir, CAKeyFile)
	certPath := filepath.Join(dir, CACertFile)

	keyExists, err := exists(keyPath)
	if err != nil {
		return nil, err
	}
	certExists, err := exists(certPath)
	if err != nil {
		return nil, err
	}
	switch {
	case keyExists && certExists:
		return LoadCA(certPath, keyPath, now)
	case keyExists:
		return nil, fmt.Errorf("pki: %s exists but %s is missing; restore it, or remove both files to create a new CA", keyPath, certPath)
	case certExists:
		return nil, fmt.Errorf("pki: %s exists but %s is missing; restore it, or remove both files to create a new CA", certPath, keyPath)
	}
	return create(dir, keyPath, certPath, now)
}

// Certificate returns the CA certificate. Callers must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Pool returns a new pool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool { return ca.pool.Clone() }

// PEM returns the CA certificate in PEM form.
func (ca *CA) PEM() []byte { return append([]byte(nil), ca.pem...) }

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("pki: %w", err)
	}
}

// LoadCA loads the CA of the certificate file certPath and the key file keyPath, refusing
// a file that is not one CA certificate, one that has expired, and a key that is not the
// certificate's. now is the clock used for issuing and verifying; nil means time.Now.
func LoadCA(certPath, keyPath string, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA certificate: %w", err)
	}
	certs, err := ParseCertificatesPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", certPath, err)
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("pki: %s holds %d certificates; want exactly one", certPath, len(certs))
	}
	cert := certs[0]
	if !cert.IsCA || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("pki: %s: certificate %q is not a CA certificate", certPath, cert.Subject.CommonName)
	}
	if t := now(); t.After(cert.NotAfter) {
		return nil, fmt.Errorf("pki: %s: CA certificate expired at %s", certPath, cert.NotAfter.UTC().Format(time.RFC3339))
	}

	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA key: %w", err)
	}
	key, err := ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", keyPath, err)
	}
	if !PublicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("pki: %s does not match the certificate in %s", keyPath, certPath)
	}
	return newCA(cert, key, now), nil
}

func create(dir, keyPath, certPath string, now func() time.Time) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create CA directory: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("pki: CA name suffix: %w", err)
	}
	notBefore := now().Add(-clockSkew)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "zmesh CA " + hex.EncodeToString(suffix),
			Organization: []string{"zmesh"},
		},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Path length 0: the zmesh CA signs only leaf certificates (API server,
		// identities, routers). Third-party CAs with their own intermediates are
		// verified against their own roots with VerifyChain, so this CA never needs
		// to certify a sub-CA, and a mis-issued CA certificate under it is rejected.
		MaxPathLen:     0,
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse new CA certificate: %w", err)
	}
	keyPEM, err := MarshalPrivateKeyPEM(key)
	if err != nil {
		return nil, err
	}
	// The key goes first: a crash between the two renames leaves only ca.key, which
	// Open reports instead of silently creating a second CA.
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(certPath, encodeCertPEM(der), 0o644); err != nil {
		return nil, err
	}
	return newCA(cert, key, now), nil
}

func newCA(cert *x509.Certificate, key crypto.Signer, now func() time.Time) *CA {
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{
		cert: cert,
		key:  key,
		pool: pool,
		pem:  encodeCertPEM(cert.Raw),
		now:  now,
	}
}

// randomSerial returns a positive, non-zero 128-bit random serial number.
func randomSerial() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("pki: random serial: %w", err)
		}
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n, nil
		}
	}
}

func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
