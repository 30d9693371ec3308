package testutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
)

// NewKey returns a new ECDSA P-256 key, the kind the project's PKI issues for.
func NewKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// CSR returns a PEM certificate request signed by key for sans, each an IP address or else
// a DNS name. Its subject is left to the CA, which names the certificate itself.
func CSR(t testing.TB, key crypto.Signer, sans ...string) []byte {
	t.Helper()
	req := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "zmesh-test"}}
	req.DNSNames, req.IPAddresses = splitSANs(sans)
	der, err := x509.CreateCertificateRequest(rand.Reader, req, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func splitSANs(sans []string) (dns []string, ips []net.IP) {
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, san)
		}
	}
	return dns, ips
}

// KeyPEM returns key as a PEM PKCS #8 private key, as identity files hold it.
func KeyPEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// CertPEM returns cert as a PEM certificate.
func CertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// TLSCert returns the PEM certificate certPEM (the first of a chain) with its key as a
// tls.Certificate, its leaf parsed.
func TLSCert(t testing.TB, certPEM []byte, key crypto.Signer) tls.Certificate {
	t.Helper()
	cert, err := pki.ParsePEMCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// CA is a network CA of the project's own PKI, as a controller creates it, in t.TempDir().
type CA struct{ *pki.CA }

// NewCA creates a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := pki.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatalf("open CA: %v", err)
	}
	return &CA{ca}
}

// Cert issues a certificate for a new key with common name cn and usage, signed as the
// controller signs enrollment CSRs. A certificate with server usage names sans (IP addresses
// or DNS names), 127.0.0.1 when there are none.
func (ca CA) Cert(t testing.TB, cn string, usage pki.Usage, sans ...string) tls.Certificate {
	t.Helper()
	key := NewKey(t)
	req := pki.SignRequest{CommonName: cn, Usage: usage}
	if usage&pki.Server != 0 {
		if len(sans) == 0 {
			sans = []string{"127.0.0.1"}
		}
		req.DNSNames, req.IPs = splitSANs(sans)
	}
	cert, _, err := ca.SignCSR(CSR(t, key), req)
	if err != nil {
		t.Fatalf("sign %s certificate for %q: %v", usage, cn, err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// Authority is a certificate authority outside the project's PKI, for what that PKI never
// issues: a third party's CA whose certificates identities bring, a self-signed signer's
// certificate, intermediates. Its certificates are valid from an hour ago for a day.
type Authority struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewAuthority returns a self-signed CA named cn with a new P-256 key.
func NewAuthority(t testing.TB, cn string) *Authority {
	t.Helper()
	key := NewKey(t)
	return &Authority{Cert: issue(t, caTemplate(cn), key, nil, key), Key: key}
}

// Intermediate returns a CA named cn that a issued.
func (a *Authority) Intermediate(t testing.TB, cn string) *Authority {
	t.Helper()
	key := NewKey(t)
	return &Authority{Cert: issue(t, caTemplate(cn), key, a.Cert, a.Key), Key: key}
}

// Issue returns a certificate for client and server authentication with common name cn for
// key, a new P-256 key when key is nil.
func (a *Authority) Issue(t testing.TB, cn string, key crypto.Signer) *x509.Certificate {
	t.Helper()
	if key == nil {
		key = NewKey(t)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	return issue(t, tmpl, key, a.Cert, a.Key)
}

// PEM returns the authority's certificate as PEM.
func (a *Authority) PEM() []byte { return CertPEM(a.Cert) }

func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
}

// issue signs tmpl for key with parentKey as parent, tmpl itself when parent is nil.
func issue(t testing.TB, tmpl *x509.Certificate, key crypto.Signer, parent *x509.Certificate, parentKey crypto.Signer) *x509.Certificate {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial.Add(serial, big.NewInt(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
