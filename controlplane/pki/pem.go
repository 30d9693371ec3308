package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/smallstep/pkcs7"
)

// ParseCertificatesPEM parses every CERTIFICATE block in data, in order. Text between
// blocks is ignored; any other block type (a private key pasted by mistake, say) is an
// error, as is data without certificates. Errors wrap ErrBadCertificate.
func ParseCertificatesPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: PEM block %d is of type %q; want CERTIFICATE", ErrBadCertificate, n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: PEM block %d: %w", ErrBadCertificate, n, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no PEM block of type CERTIFICATE", ErrBadCertificate)
	}
	return certs, nil
}

// ParsePEMCert parses data holding exactly one PEM certificate. Errors wrap ErrBadCertificate.
func ParsePEMCert(data []byte) (*x509.Certificate, error) {
	certs, err := ParseCertificatesPEM(data)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%w: %d certificates; want exactly one", ErrBadCertificate, len(certs))
	}
	return certs[0], nil
}

// PKCS7 returns a certs-only ("degenerate") PKCS#7 SignedData holding certs, DER-encoded,
// as the EST cacerts and simpleenroll responses carry it (base64 on the wire).
func PKCS7(certs ...*x509.Certificate) ([]byte, error) {
	if len(certs) == 0 {
		return nil, errors.New("pki: PKCS#7: no certificates")
	}
	var der bytes.Buffer
	for i, c := range certs {
		if c == nil || len(c.Raw) == 0 {
			return nil, fmt.Errorf("pki: PKCS#7: certificate %d is empty", i)
		}
		der.Write(c.Raw)
	}
	out, err := pkcs7.DegenerateCertificate(der.Bytes())
	if err != nil {
		return nil, fmt.Errorf("pki: PKCS#7: %w", err)
	}
	return out, nil
}
