package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"
)

// Usage selects the extended key usages of a certificate issued by SignCSR.
type Usage int

// Certificate usages. ClientServer is both, as routers need.
const (
	Client       Usage = 1 << iota // ExtKeyUsageClientAuth
	Server                         // ExtKeyUsageServerAuth
	ClientServer = Client | Server
)

// String returns "client", "server" or "client+server".
func (u Usage) String() string {
	switch u {
	case Client:
		return "client"
	case Server:
		return "server"
	case ClientServer:
		return "client+server"
	default:
		return fmt.Sprintf("Usage(%d)", int(u))
	}
}

// DefaultValidity is used by SignCSR when SignRequest.Validity is zero.
const DefaultValidity = 365 * 24 * time.Hour

// RSA key sizes accepted in CSRs. The upper bound keeps signature checks cheap.
const (
	minRSABits = 2048
	maxRSABits = 8192
)

// SignRequest says how SignCSR fills in the certificate; the CSR supplies only the key
// and, for server certificates, default SANs.
type SignRequest struct {
	// CommonName replaces the CSR's subject common name, e.g. with the identity id.
	// Empty keeps the CSR's common name, which must then be non-empty.
	CommonName string
	// Usage is Client, Server or ClientServer.
	Usage Usage
	// DNSNames, IPs, URIs and Emails set the SANs. When all are empty, certificates
	// with Server usage take the CSR's SANs and client-only certificates get none.
	DNSNames []string
	IPs      []net.IP
	URIs     []*url.URL
	Emails   []string
	// Validity is the certificate lifetime, capped at the CA's expiry; zero means
	// DefaultValidity.
	Validity time.Duration
}

// SignCSR validates a PEM-encoded CSR and issues a certificate for its key as req
// describes. It returns the certificate and its PEM encoding. Problems with the CSR
// itself wrap ErrBadCSR; a malformed req returns a plain error.
func (ca *CA) SignCSR(csrPEM []byte, req SignRequest) (*x509.Certificate, []byte, error) {
	if req.Usage&^ClientServer != 0 || req.Usage == 0 {
		return nil, nil, fmt.Errorf("pki: sign request: invalid usage %v", req.Usage)
	}
	if req.Validity < 0 {
		return nil, nil, fmt.Errorf("pki: sign request: negative validity %s", req.Validity)
	}
	validity := req.Validity
	if validity == 0 {
		validity = DefaultValidity
	}

	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, nil, err
	}
	cn := req.CommonName
	if cn == "" {
		cn = csr.Subject.CommonName
	}
	if cn == "" {
		return nil, nil, fmt.Errorf("%w: CSR has no common name and the request gives none", ErrBadCSR)
	}

	tmpl := &x509.Certificate{
		Subject:        pkix.Name{CommonName: cn},
		DNSNames:       req.DNSNames,
		IPAddresses:    req.IPs,
		URIs:           req.URIs,
		EmailAddresses: req.Emails,
		KeyUsage:       x509.KeyUsageDigitalSignature,
	}
	noSANs := len(req.DNSNames) == 0 && len(req.IPs) == 0 && len(req.URIs) == 0 && len(req.Emails) == 0
	if noSANs && req.Usage&Server != 0 {
		tmpl.DNSNames = csr.DNSNames
		tmpl.IPAddresses = csr.IPAddresses
		tmpl.URIs = csr.URIs
		tmpl.EmailAddresses = csr.EmailAddresses
	}
	if req.Usage&Server != 0 && len(tmpl.DNSNames) == 0 && len(tmpl.IPAddresses) == 0 {
		return nil, nil, fmt.Errorf("%w: server certificate for %q needs a DNS or IP SAN; neither the CSR nor the request has one", ErrBadCSR, cn)
	}
	if _, isRSA := csr.PublicKey.(*rsa.PublicKey); isRSA && req.Usage&Server != 0 {
		// TLS 1.2 RSA key exchange encrypts to the server key.
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	if req.Usage&Client != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if req.Usage&Server != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}

	cert, err := ca.issue(tmpl, csr.PublicKey, validity)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign CSR for %q: %w", cn, err)
	}
	return cert, encodeCertPEM(cert.Raw), nil
}

// ParseCSR decodes the first PEM block of csrPEM as a CSR ("CERTIFICATE REQUEST" or
// "NEW CERTIFICATE REQUEST"), checks its self-signature, and accepts only ECDSA P-256
// or P-384, Ed25519, or RSA keys of 2048 to 8192 bits. Errors wrap ErrBadCSR.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block of type CERTIFICATE REQUEST", ErrBadCSR)
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: PEM block of type %q; want CERTIFICATE REQUEST", ErrBadCSR, block.Type)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parse CSR: %w", ErrBadCSR, err)
	}
	if err := checkKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: CSR signature does not verify: %w", ErrBadCSR, err)
	}
	return csr, nil
}

// checkKey accepts the key types zmesh issues certificates for.
func checkKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384():
			return nil
		}
		return fmt.Errorf("ECDSA key on curve %s; want P-256 or P-384", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		bits := k.N.BitLen()
		if bits < minRSABits {
			return fmt.Errorf("RSA key of %d bits; at least %d required", bits, minRSABits)
		}
		if bits > maxRSABits {
			return fmt.Errorf("RSA key of %d bits; at most %d supported", bits, maxRSABits)
		}
		return nil
	case nil:
		return errors.New("unsupported public key algorithm")
	default:
		return fmt.Errorf("unsupported public key type %T", pub)
	}
}
