package certid

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
)

// controllerPolicy is the certificate policy that marks the controller's own server
// certificates (API and control channel). It is a 2.25 OID (ITU-T X.667: a UUID as an
// integer), which needs no registration. The network's CA puts it on no other certificate:
// certificates signed from CSRs take nothing from the CSR but its key and SANs.
const controllerPolicy = "2.25.332142494283584958541166998412455339721"

// ControllerPolicy returns the certificate policy OID of the controller's own server
// certificates.
func ControllerPolicy() x509.OID {
	oid, err := x509.ParseOID(controllerPolicy)
	if err != nil {
		return x509.OID{} // unreachable for the constant above; an empty OID matches no certificate
	}
	return oid
}

// IsController reports whether cert carries the controller's certificate policy.
func IsController(cert *x509.Certificate) bool {
	if cert == nil {
		return false
	}
	p := ControllerPolicy()
	return slices.ContainsFunc(cert.Policies, p.Equal)
}

// ErrNotController marks a server certificate that chains to the network's CA but is not the
// controller's: a router's or an identity's certificate presented as the controller.
var ErrNotController = errors.New("not the controller's certificate")

// VerifyController is a tls.Config.VerifyConnection for clients of the controller (the CLI,
// the SDK, routers' control channels). It runs after the usual verification has chained the
// server's certificate to the network's CAs (RootCAs) and checked its name, and refuses it
// unless it carries the controller's certificate policy: the network's CA issues router and
// identity certificates too, so the chain and the names alone do not make a controller.
func VerifyController(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("the server presented no certificate: %w", ErrNotController)
	}
	leaf := cs.PeerCertificates[0]
	if !IsController(leaf) {
		return fmt.Errorf("the server's certificate %q (fingerprint %s) lacks the controller's certificate policy %s, which the network's CA gives no router or identity: %w",
			leaf.Subject.CommonName, Fingerprint(leaf), controllerPolicy, ErrNotController)
	}
	return nil
}
