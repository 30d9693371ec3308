package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/zmesh/zmesh/internal/certid"
)

// VerifyClient checks that cert chains to this CA, through intermediates if given, and
// allows client authentication at the CA's current time.
func (ca *CA) VerifyClient(cert *x509.Certificate, intermediates []*x509.Certificate) error {
	return VerifyChain(cert, intermediates, ca.pool, ca.now(), x509.ExtKeyUsageClientAuth)
}

// VerifyChain checks that cert chains to one of roots through intermediates and is valid
// at now for all of usages; no usages means ExtKeyUsageClientAuth. cert must be an
// end-entity certificate, not a CA. It serves both the zmesh CA and third-party CAs.
// roots must be non-nil: the system pool is never used.
func VerifyChain(cert *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, now time.Time, usages ...x509.ExtKeyUsage) error {
	if cert == nil {
		return errors.New("pki: verify: no certificate")
	}
	if roots == nil {
		return fmt.Errorf("pki: verify certificate %q: no root pool", cert.Subject.CommonName)
	}
	if cert.IsCA {
		return fmt.Errorf("pki: verify certificate %q (fingerprint %s): a CA certificate, not an end-entity certificate", cert.Subject.CommonName, certid.Fingerprint(cert))
	}
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	inter := x509.NewCertPool()
	for _, c := range intermediates {
		if c != nil {
			inter.AddCert(c)
		}
	}
	for _, u := range usages {
		// x509 accepts a chain valid for any one of KeyUsages; checking one at a
		// time requires all of them.
		opts := x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			CurrentTime:   now,
			KeyUsages:     []x509.ExtKeyUsage{u},
		}
		if _, err := cert.Verify(opts); err != nil {
			return fmt.Errorf("pki: verify certificate %q (fingerprint %s): %w", cert.Subject.CommonName, certid.Fingerprint(cert), err)
		}
	}
	return nil
}
