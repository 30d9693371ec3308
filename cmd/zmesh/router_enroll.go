package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/atomicfile"
)

func newRouterEnrollCommand(lookupEnv env) *cobra.Command {
	var jwtFile string
	cmd := &cobra.Command{
		Use:   "enroll ROUTER.yml --jwt FILE",
		Short: "Enroll an edge router with its enrollment token",
		Long: "Enroll the edge router a configuration file describes, with the enrollment token (JWT)\n" +
			"of its edge router (zmesh edge create edge-router). The key named by identity.key is\n" +
			"generated when the file is absent and reused when present (likewise identity.server_key\n" +
			"when set). The client certificate is written to identity.cert, the server certificate,\n" +
			"with the SANs of edge.csr.sans, to identity.server_cert, and the network's CAs to\n" +
			"identity.ca.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, warnings, err := config.LoadRouter(args[0], lookupEnv)
			for _, w := range warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			if err != nil {
				return err
			}
			if cfg.Identity.ServerCert == "" {
				return fmt.Errorf("%s: identity.server_cert is not set: enrollment needs a file for the router's server certificate", args[0])
			}
			token, err := os.ReadFile(jwtFile)
			if err != nil {
				return fmt.Errorf("read the enrollment token: %w", err)
			}
			claims, _, err := apiclient.ParseEnrollmentToken(string(token))
			if err != nil {
				return err
			}
			return enrollRouter(cmd, cfg, string(token), claims.Subject)
		},
	}
	cmd.Flags().StringVar(&jwtFile, "jwt", "", "file holding the edge router's enrollment token")
	cmd.MarkFlagRequired("jwt")
	return cmd
}

func enrollRouter(cmd *cobra.Command, cfg *config.Router, token, routerID string) error {
	id := cfg.Identity
	key, err := loadOrCreateKey(id.Key)
	if err != nil {
		return fmt.Errorf("identity.key: %w", err)
	}
	serverKey := key
	if id.ServerKey != "" {
		if serverKey, err = loadOrCreateKey(id.ServerKey); err != nil {
			return fmt.Errorf("identity.server_key: %w", err)
		}
	}
	var subject pkix.Name
	var sans config.SANs
	if cfg.Edge != nil && cfg.Edge.CSR != nil {
		c := cfg.Edge.CSR
		subject = pkix.Name{Country: nonEmpty(c.Country), Province: nonEmpty(c.Province), Locality: nonEmpty(c.Locality),
			Organization: nonEmpty(c.Organization), OrganizationalUnit: nonEmpty(c.OrganizationalUnit)}
		sans = c.SANs
	}
	subject.CommonName = routerID
	clientCSR, err := routerCSR(key, subject, config.SANs{})
	if err != nil {
		return err
	}
	serverCSR, err := routerCSR(serverKey, subject, sans)
	if err != nil {
		return err
	}
	certs, err := apiclient.EnrollRouter(cmd.Context(), token, clientCSR, serverCSR, nil)
	if err != nil {
		return err
	}
	for _, f := range []struct{ key, path, data string }{
		{"identity.cert", id.Cert, certs.Cert},
		{"identity.server_cert", id.ServerCert, certs.ServerCert},
		{"identity.ca", id.CA, certs.CA},
	} {
		if err := writeFileInDir(f.path, []byte(f.data), 0o644); err != nil {
			return fmt.Errorf("%s: %w", f.key, err)
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "edge router %s enrolled; certificates written to %s, %s, %s\n", routerID, id.Cert, id.ServerCert, id.CA)
	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// loadOrCreateKey reads the PEM private key at path, or generates an ECDSA P-256 key and writes
// it there with mode 0600 when the file does not exist.
func loadOrCreateKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		pemKey, err := pki.MarshalPrivateKeyPEM(key)
		if err != nil {
			return nil, err
		}
		if err := writeFileInDir(path, pemKey, 0o600); err != nil {
			return nil, err
		}
		return key, nil
	}
	if err != nil {
		return nil, err
	}
	key, err := pki.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// writeFileInDir writes a file atomically, creating its directory (mode 0700) when missing.
func writeFileInDir(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, mode)
}

func routerCSR(key crypto.Signer, subject pkix.Name, sans config.SANs) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: subject, DNSNames: sans.DNS, EmailAddresses: sans.Email}
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
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("create CSR: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
