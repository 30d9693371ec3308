package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/zmesh/zmesh/internal/atomicfile"
	"github.com/zmesh/zmesh/internal/certid"
)

// File names of the API server certificate and key inside the directory given to ServerCert.
const (
	ServerCertFile = "server.cert"
	ServerKeyFile  = "server.key"
)

const (
	// ServerCertValidity is the lifetime of a newly issued API server certificate.
	ServerCertValidity = 365 * 24 * time.Hour
	// ServerCertRenewBefore is the remaining lifetime below which ServerCert reissues.
	ServerCertRenewBefore = 30 * 24 * time.Hour
)

// ServerCert returns the controller API's TLS certificate, with the CA in its chain. The
// certificate carries the controller's certificate policy (certid.ControllerPolicy), which no
// certificate signed from a CSR gets, so that clients can tell the controller from a router
// or an identity whose certificate the same CA issued.
// It reuses dir/server.cert and dir/server.key when the certificate was issued by this CA
// for server authentication, has at least ServerCertRenewBefore left, carries the
// controller's policy, and its SANs include every host (IP literals as IP SANs, other names
// as DNS SANs, plus "localhost"); extra SANs from an earlier host list are tolerated.
// Otherwise it issues a new certificate and writes both files atomically: for the same key
// when the stored certificate lacks only the policy (enrollment tokens signed with that key
// stay valid), else for a new ECDSA P-256 key.
func (ca *CA) ServerCert(dir string, hosts []string) (tls.Certificate, error) {
	return ca.ServerCertAt(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile), hosts)
}

// ServerCertAt is ServerCert with the certificate and key at the given paths, for the
// controller's other TLS servers (the control channel's listener).
func (ca *CA) ServerCertAt(certPath, keyPath string, hosts []string) (tls.Certificate, error) {
	dnsNames, ips := splitHosts(hosts)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	for _, err := range []error{certErr, keyErr} {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return tls.Certificate{}, fmt.Errorf("pki: read server certificate: %w", err)
		}
	}
	var key crypto.Signer
	if certErr == nil && keyErr == nil {
		c, err := ca.checkServerCert(certPEM, keyPEM, dnsNames, ips)
		if err == nil {
			return c, nil
		}
		if k, ok := c.PrivateKey.(crypto.Signer); ok && errors.Is(err, errNotController) {
			key = k
		}
	}
	return ca.issueServerCert(filepath.Dir(certPath), certPath, keyPath, key, dnsNames, ips)
}

// ReadServerCert reads dir/server.cert and dir/server.key as ServerCert would reuse them,
// but never issues: a certificate it would not reuse (unreadable, not this CA's, not the
// controller's, without one of the hosts, or expiring within ServerCertRenewBefore) is an
// error saying why. A running controller reloads the certificate its web listeners present
// with it.
func (ca *CA) ReadServerCert(dir string, hosts []string) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: read server certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: read server key: %w", err)
	}
	dnsNames, ips := splitHosts(hosts)
	c, err := ca.checkServerCert(certPEM, keyPEM, dnsNames, ips)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: server certificate %s: %w", certPath, err)
	}
	return c, nil
}

// errNotController is checkServerCert's answer for a certificate fit for reuse but for the
// controller's certificate policy; ServerCertAt reissues it for the same key.
var errNotController = errors.New("certificate lacks the controller's certificate policy")

// checkServerCert returns the stored certificate if it can be reused, or the reason it cannot;
// with errNotController, also the certificate and its key.
func (ca *CA) checkServerCert(certPEM, keyPEM []byte, dnsNames []string, ips []net.IP) (tls.Certificate, error) {
	certs, err := ParseCertificatesPEM(certPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf := certs[0]
	key, err := ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	if !PublicKeysEqual(key.Public(), leaf.PublicKey) {
		return tls.Certificate{}, errors.New("key does not match certificate")
	}
	now := ca.now()
	if err := VerifyChain(leaf, nil, ca.pool, now, x509.ExtKeyUsageServerAuth); err != nil {
		return tls.Certificate{}, err
	}
	if left := leaf.NotAfter.Sub(now); left < ServerCertRenewBefore {
		return tls.Certificate{}, fmt.Errorf("certificate expires in %s", left.Round(time.Minute))
	}
	for _, name := range dnsNames {
		if !slices.ContainsFunc(leaf.DNSNames, func(s string) bool { return strings.EqualFold(s, name) }) {
			return tls.Certificate{}, fmt.Errorf("DNS SAN %q missing", name)
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return tls.Certificate{}, fmt.Errorf("IP SAN %s missing", ip)
		}
	}
	c := tls.Certificate{
		Certificate: [][]byte{leaf.Raw, ca.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}
	if !certid.IsController(leaf) {
		return c, errNotController
	}
	return c, nil
}

// issueServerCert issues a server certificate for key, or for a new key when key is nil.
func (ca *CA) issueServerCert(dir, certPath, keyPath string, key crypto.Signer, dnsNames []string, ips []net.IP) (tls.Certificate, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: create server certificate directory: %w", err)
	}
	if key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("pki: generate server key: %w", err)
		}
		key = k
	}
	cn := "localhost"
	if len(dnsNames) > 1 {
		cn = dnsNames[1] // dnsNames[0] is always localhost
	} else if len(ips) > 0 {
		cn = ips[0].String()
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{"zmesh"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		Policies:    []x509.OID{certid.ControllerPolicy()},
	}
	leaf, err := ca.issue(tmpl, key.Public(), ServerCertValidity)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: issue server certificate: %w", err)
	}
	keyPEM, err := MarshalPrivateKeyPEM(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	// Key first: after a crash between the renames the old certificate no longer
	// matches the key, so the next call reissues.
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	chainPEM := append(encodeCertPEM(leaf.Raw), ca.pem...)
	if err := atomicfile.Write(certPath, chainPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{
		Certificate: [][]byte{leaf.Raw, ca.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// splitHosts sorts hosts into DNS names and IP addresses, always starting the names with
// "localhost". Names are lower-cased; duplicates and empty entries are dropped; IPv6
// literals may be bracketed.
func splitHosts(hosts []string) ([]string, []net.IP) {
	dnsNames := []string{"localhost"}
	var ips []net.IP
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		h = strings.ToLower(h)
		if !slices.Contains(dnsNames, h) {
			dnsNames = append(dnsNames, h)
		}
	}
	return dnsNames, ips
}

// issue signs tmpl for pub with a fresh serial, NotBefore backdated by clockSkew and
// NotAfter validity later, capped at the CA's own expiry.
func (ca *CA) issue(tmpl *x509.Certificate, pub any, validity time.Duration) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := ca.now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = false
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}
