package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/atomicfile"
)

func newRouterEnrollCommand(lookupEnv env) *cobra.Command {
	return routerEnrollCommand(lookupEnv, "enroll", "Enroll an edge router with its enrollment token",
		"Enroll the edge router a configuration file describes, with the enrollment token (JWT)\n"+
			"of its edge router (zmesh edge create edge-router). The key named by identity.key is\n"+
			"generated when the file is absent and reused when present (likewise identity.server_key\n"+
			"when set). The client certificate is written to identity.cert, the server certificate,\n"+
			"with the SANs of edge.csr.sans, to identity.server_cert, and the network's CAs to\n"+
			"identity.ca.", false)
}

func newRouterReEnrollCommand(lookupEnv env) *cobra.Command {
	return routerEnrollCommand(lookupEnv, "re-enroll", "Enroll an edge router again, with new keys, after `zmesh edge re-enroll edge-router`",
		"Enroll an edge router again with the new enrollment token (JWT) that `zmesh edge re-enroll\n"+
			"edge-router` gave it, when its key was lost or exposed or its certificates expired: new\n"+
			"keys replace identity.key (and identity.server_key when set), then the certificates and\n"+
			"CAs are written as `zmesh router enroll` writes them. Stop the router first; start it\n"+
			"again afterwards. A running router renews its certificates by itself (identity.renew_at)\n"+
			"and needs none of this.", true)
}

// routerEnrollCommand is `router enroll` and `router re-enroll`: the second makes new keys.
func routerEnrollCommand(lookupEnv env, use, short, long string, newKeys bool) *cobra.Command {
	var jwtFile string
	cmd := &cobra.Command{
		Use:   use + " ROUTER.yml --jwt FILE",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
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
			return enrollRouter(cmd, cfg, string(token), claims.Subject, newKeys)
		},
	}
	cmd.Flags().StringVar(&jwtFile, "jwt", "", "file holding the edge router's enrollment token")
	cmd.MarkFlagRequired("jwt")
	return cmd
}

// enrollRouter enrolls the router with token; with newKeys, it makes new keys and writes
// them over identity.key and identity.server_key once the enrollment succeeded.
func enrollRouter(cmd *cobra.Command, cfg *config.Router, token, routerID string, newKeys bool) error {
	id := cfg.Identity
	keyOf := loadOrCreateKey
	var made []keyFile
	if newKeys {
		keyOf = func(path string) (crypto.Signer, error) {
			k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			made = append(made, keyFile{path, k})
			return k, err
		}
	}
	key, err := keyOf(id.Key)
	if err != nil {
		return fmt.Errorf("identity.key: %w", err)
	}
	serverKey := key
	if id.ServerKey != "" {
		if serverKey, err = keyOf(id.ServerKey); err != nil {
			return fmt.Errorf("identity.server_key: %w", err)
		}
	}
	var csr *config.CSR
	if cfg.Edge != nil {
		csr = cfg.Edge.CSR
	}
	clientCSR, err := apiclient.RouterCSR(key, routerID, csr, false)
	if err != nil {
		return err
	}
	serverCSR, err := apiclient.RouterCSR(serverKey, routerID, csr, true)
	if err != nil {
		return err
	}
	certs, err := apiclient.EnrollRouter(cmd.Context(), token, clientCSR, serverCSR, nil)
	if err != nil {
		return err
	}
	// The enrollment is done: the keys go first, so that the certificates are never written
	// beside keys they are not for.
	for _, k := range made {
		pemKey, err := pki.MarshalPrivateKeyPEM(k.key)
		if err != nil {
			return err
		}
		if err := writeFileInDir(k.path, pemKey, 0o600); err != nil {
			return fmt.Errorf("write the new key %s: %w", k.path, err)
		}
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

// keyFile is a key made for a file.
type keyFile struct {
	path string
	key  *ecdsa.PrivateKey
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
