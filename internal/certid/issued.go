package certid

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Issued parses a PEM certificate chain the controller issued for key (a renewal's answer)
// and checks that it is name's, for usage, from roots: a router's or an identity's new
// certificate, ready to present.
func Issued(chainPEM []byte, key crypto.Signer, name string, roots *x509.CertPool, usage x509.ExtKeyUsage) (tls.Certificate, error) {
	var cert tls.Certificate
	for rest := chainPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			cert.Certificate = append(cert.Certificate, b.Bytes)
		}
	}
	if len(cert.Certificate) == 0 {
		return cert, errors.New("no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return cert, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return cert, errors.New("it is not for the key it was asked for")
	}
	if leaf.Subject.CommonName != name {
		return cert, fmt.Errorf("it names %q, not %q", leaf.Subject.CommonName, name)
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return cert, err
	}
	cert.PrivateKey, cert.Leaf = key, leaf
	return cert, nil
}
