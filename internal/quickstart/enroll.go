package quickstart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/atomicfile"
	"github.com/zmesh/zmesh/internal/certid"
)

// renewBefore is how long before their expiry certificates are replaced by a new run.
const renewBefore = 7 * 24 * time.Hour

// ensureRouter makes router i: a tunneler-enabled edge router (its tunnel dials and hosts as
// its identity), enrolled, with its key, certificates, CA and configuration in its directory.
// An enrolled router whose files still match the controller's record is kept as it is.
func ensureRouter(m *model.Model, ca *pki.CA, n *Network, i int) (Router, error) {
	name := RouterName(i)
	r := Router{Index: i, Name: name, Dir: filepath.Join(n.Dir, name)}
	r.Config, r.CAFile = filepath.Join(r.Dir, RouterConfigFile), filepath.Join(r.Dir, RouterCAFile)
	er, err := findByName(m.EdgeRouters, func(er *model.EdgeRouter) string { return er.Name }, name)
	if err != nil {
		return r, err
	}
	switch {
	case er == nil:
		er = &model.EdgeRouter{Name: name, IsTunnelerEnabled: true, RoleAttributes: []string{routerRole}}
		if err := m.CreateEdgeRouter(er); err != nil {
			return r, fmt.Errorf("create the edge router: %w", err)
		}
	case !er.IsTunnelerEnabled:
		if er, err = m.UpdateEdgeRouter(er.ID, func(e *model.EdgeRouter) error { e.IsTunnelerEnabled = true; return nil }); err != nil {
			return r, fmt.Errorf("enable the edge router's tunneler: %w", err)
		}
	}
	r.ID = er.ID
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return r, fmt.Errorf("router directory: %w", err)
	}
	if !er.IsVerified || routerFilesMatch(r.Dir, er.Fingerprint, ca) != nil {
		if err := EnrollRouter(m, er.ID, r.Dir); err != nil {
			return r, err
		}
	}
	if err := atomicfile.Write(r.Config, []byte(routerYAML(n.Ports, i)), 0o600); err != nil {
		return r, fmt.Errorf("write %s: %w", r.Config, err)
	}
	return r, nil
}

// routerFilesMatch checks that dir holds a router identity that is the edge router's current
// one (its client certificate has the recorded fingerprint), that the key opens both
// certificates, that neither expires soon, and that the CA file holds the network's CA.
func routerFilesMatch(dir, fingerprint string, ca *pki.CA) error {
	key := filepath.Join(dir, RouterKeyFile)
	for _, f := range []string{RouterCertFile, RouterServerCertFile} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, f), key)
		if err != nil {
			return err
		}
		if time.Until(pair.Leaf.NotAfter) < renewBefore {
			return fmt.Errorf("%s expires on %s", f, pair.Leaf.NotAfter)
		}
		if f == RouterCertFile && certid.Fingerprint(pair.Leaf) != fingerprint {
			return fmt.Errorf("%s is not the router's current certificate", f)
		}
	}
	return holdsCA(filepath.Join(dir, RouterCAFile), ca)
}

// holdsCA checks that file holds the network's CA certificate.
func holdsCA(file string, ca *pki.CA) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	certs, err := pki.ParseCertificatesPEM(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if !slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return c.Equal(ca.Certificate()) }) {
		return fmt.Errorf("%s does not hold the network's CA", file)
	}
	return nil
}

// EnrollRouter enrolls the edge router routerID through the model, as `zmesh router enroll`
// does over the API: with its pending enrollment, or a new one when it was enrolled before
// (which revokes its previous certificates). It writes a new key (key.pem), the client
// certificate (client.cert), the server certificate for localhost and 127.0.0.1
// (server.cert) and the network's CA (ca.cert) into dir, each with mode 0600.
func EnrollRouter(m *model.Model, routerID, dir string) error {
	e, err := m.RouterEnrollment(routerID)
	if err != nil {
		return fmt.Errorf("enrollment of edge router %s: %w", routerID, err)
	}
	// No pending enrollment: the router enrolled before. An expired one: a run stopped
	// between creating the router and enrolling it, hours ago.
	if e == nil || !e.ExpiresAt.After(m.Now()) {
		if e, err = m.ReEnrollEdgeRouter(routerID); err != nil {
			return fmt.Errorf("re-enroll edge router %s: %w", routerID, err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("router key: %w", err)
	}
	clientCSR, err := certificateRequest(key, "router", false)
	if err != nil {
		return err
	}
	serverCSR, err := certificateRequest(key, "router", true)
	if err != nil {
		return err
	}
	certs, err := m.EnrollErOtt(e.Token, clientCSR, serverCSR)
	if err != nil {
		return fmt.Errorf("enroll edge router %s: %w", routerID, err)
	}
	keyPEM, err := pki.MarshalPrivateKeyPEM(key)
	if err != nil {
		return fmt.Errorf("router key: %w", err)
	}
	// The key goes last: until then a half-written identity fails routerFilesMatch and the
	// next run enrolls again.
	for _, f := range []struct {
		name string
		data []byte
	}{{RouterCertFile, certs.Cert}, {RouterServerCertFile, certs.ServerCert}, {RouterCAFile, certs.CA}, {RouterKeyFile, keyPEM}} {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return nil
}

// certificateRequest is a CSR for key; a server request names localhost and 127.0.0.1, where
// the router's listeners are. The controller replaces the common name with the id.
func certificateRequest(key *ecdsa.PrivateKey, cn string, server bool) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}
	if server {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP(Host)}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ensureClient makes the client identity (role echo-clients) and its identity file. A file
// that still authenticates as the identity is kept; otherwise the identity is made again,
// since an enrolled identity cannot be enrolled a second time.
func ensureClient(m *model.Model, ca *pki.CA, n *Network) error {
	id, err := findByName(m.Identities, func(i *model.Identity) string { return i.Name }, ClientName)
	if err != nil {
		return err
	}
	if id != nil {
		if clientFileMatches(m, ca, n, id) == nil {
			if slices.Contains(id.RoleAttributes, clientRole) {
				return nil
			}
			if _, err := m.UpdateIdentity(id.ID, func(i *model.Identity) error {
				i.RoleAttributes = append(i.RoleAttributes, clientRole)
				return nil
			}); err != nil {
				return fmt.Errorf("give identity %s its role %s: %w", ClientName, clientRole, err)
			}
			return nil
		}
		if err := m.DeleteIdentity(id.ID); err != nil {
			return fmt.Errorf("delete identity %s to make it again: %w", ClientName, err)
		}
	}
	id, err = m.CreateIdentity(model.IdentityCreate{Name: ClientName, Type: model.IdentityTypeDevice,
		RoleAttributes: []string{clientRole}, Enrollment: &model.EnrollmentRequest{OTT: true}})
	if err != nil {
		return fmt.Errorf("create identity %s: %w", ClientName, err)
	}
	ens, err := m.EnrollmentsOf(id.ID)
	if err != nil || len(ens) != 1 {
		return fmt.Errorf("the enrollment of identity %s: %d enrollments (%v)", ClientName, len(ens), err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("client key: %w", err)
	}
	csr, err := certificateRequest(key, ClientName, false)
	if err != nil {
		return err
	}
	certPEM, err := m.EnrollOTT(ens[0].Token, csr)
	if err != nil {
		return fmt.Errorf("enroll identity %s: %w", ClientName, err)
	}
	keyPEM, err := pki.MarshalPrivateKeyPEM(key)
	if err != nil {
		return fmt.Errorf("client key: %w", err)
	}
	// The same file `zmesh enroll` writes for an ott enrollment.
	f := apiclient.NewIdentityFile(n.APIURL())
	f.ID.Cert = "pem:" + string(certPEM)
	f.ID.Key = "pem:" + string(keyPEM)
	f.ID.CA = "pem:" + string(ca.PEM())
	return f.Save(n.ClientIdentity)
}

// clientFileMatches checks that the client identity file names this controller, trusts the
// network's CA, and holds a key and a current certificate of the identity.
func clientFileMatches(m *model.Model, ca *pki.CA, n *Network, id *model.Identity) error {
	f, err := apiclient.LoadIdentity(n.ClientIdentity)
	if err != nil {
		return err
	}
	if ctrl, err := f.Controller(); err != nil || ctrl != n.APIURL() {
		return fmt.Errorf("%s names controller %s", n.ClientIdentity, f.ZtAPI)
	}
	roots, err := f.Roots()
	if err != nil {
		return err
	}
	cert, err := f.Certificate()
	if err != nil {
		return err
	}
	if cert == nil {
		return errors.New("the client identity file holds no certificate")
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return err
	}
	if time.Until(cert.Leaf.NotAfter) < renewBefore || !roots.Equal(ca.Pool()) {
		return errors.New("the client identity's certificate expires soon or its CA is not the network's")
	}
	auths, err := m.AuthenticatorsOf(id.ID)
	if err != nil {
		return err
	}
	fp := certid.Fingerprint(cert.Leaf)
	if !slices.ContainsFunc(auths, func(a *model.Authenticator) bool { return a.Method == model.MethodCert && a.Fingerprint == fp }) {
		return errors.New("the client identity file's certificate is not the identity's")
	}
	return nil
}
