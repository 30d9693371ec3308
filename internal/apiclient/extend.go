package apiclient

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"

	"github.com/zmesh/zmesh/config"
)

// ExtendRouter asks the controller's client API at host (<host>:<port>) for new certificates
// of the edge router whose current client certificate is cert, for the keys of clientCSR
// and serverCSR. The controller puts them in force at once; cert stops being the router's.
func ExtendRouter(ctx context.Context, host string, roots *x509.CertPool, cert tls.Certificate, clientCSR, serverCSR []byte) (*RouterCerts, error) {
	c := New("https://"+host, roots, &cert)
	defer c.HTTP.CloseIdleConnections()
	var out RouterCerts
	body := map[string]string{"certCsr": string(clientCSR), "serverCertCsr": string(serverCSR)}
	if _, err := c.Do(ctx, "POST", ClientAPI+"/enroll/extend/router", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RouterCSR returns the PEM certificate request of an edge router's key: CommonName the
// router's id, the rest of the subject from csr (edge.csr, nil when absent), and, for the
// server certificate, csr's SANs.
func RouterCSR(key crypto.Signer, routerID string, csr *config.CSR, server bool) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: routerID}}
	if csr != nil {
		tmpl.Subject = pkix.Name{CommonName: routerID, Country: nonEmpty(csr.Country), Province: nonEmpty(csr.Province),
			Locality: nonEmpty(csr.Locality), Organization: nonEmpty(csr.Organization), OrganizationalUnit: nonEmpty(csr.OrganizationalUnit)}
		if server {
			sans := csr.SANs
			tmpl.DNSNames, tmpl.EmailAddresses = sans.DNS, sans.Email
			for _, ip := range sans.IP {
				tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
			}
			for _, u := range sans.URI {
				parsed, err := url.Parse(u)
				if err != nil {
					return nil, fmt.Errorf("edge.csr.sans.uri %q: %w", u, err)
				}
				tmpl.URIs = append(tmpl.URIs, parsed)
			}
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("create CSR: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
