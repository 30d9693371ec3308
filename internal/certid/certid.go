// Package certid names certificates as the control channel, the APIs and the routers' peer
// checks do: by the fingerprint of their DER encoding. It also says whose a certificate is:
// the controller's (VerifyController), or the one a renewal asked for (Issued).
package certid

import (
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
)

// Fingerprint returns the lowercase hex SHA-1 of cert's DER encoding, the form the zmesh
// API uses for certificate fingerprints.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha1.Sum(cert.Raw)
	return hex.EncodeToString(sum[:])
}
