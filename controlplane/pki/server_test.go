package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/certid"
)

func TestServerCertIssue(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	dir := filepath.Join(t.TempDir(), "api")
	hosts := []string{"ctrl.zmesh.test", "10.0.0.1", "::1", "[fe80::1]", "CTRL.zmesh.test", "", " localhost "}
	tc, err := ca.ServerCert(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	leaf := tc.Leaf
	if want := []string{"localhost", "ctrl.zmesh.test"}; !slices.Equal(leaf.DNSNames, want) {
		t.Errorf("DNS SANs %v, want %v", leaf.DNSNames, want)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"10.0.0.1", "::1", "fe80::1"}; !slices.Equal(ips, want) {
		t.Errorf("IP SANs %v, want %v", ips, want)
	}
	if leaf.Subject.CommonName != "ctrl.zmesh.test" {
		t.Errorf("CN %q", leaf.Subject.CommonName)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || leaf.IsCA {
		t.Errorf("ExtKeyUsage %v IsCA %v", leaf.ExtKeyUsage, leaf.IsCA)
	}
	if !certid.IsController(leaf) {
		t.Errorf("policies %v lack the controller's %v", leaf.Policies, certid.ControllerPolicy())
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if !leaf.NotBefore.Equal(t0.Add(-time.Minute)) || !leaf.NotAfter.Equal(t0.Add(ServerCertValidity)) {
		t.Errorf("validity %s .. %s", leaf.NotBefore, leaf.NotAfter)
	}
	if len(tc.Certificate) != 2 || !slices.Equal(tc.Certificate[1], ca.Certificate().Raw) {
		t.Error("chain does not end with the CA")
	}
	if got := fileMode(t, dir); got != 0o700 {
		t.Errorf("dir mode %v", got)
	}
	if got := fileMode(t, filepath.Join(dir, ServerKeyFile)); got != 0o600 {
		t.Errorf("%s mode %v", ServerKeyFile, got)
	}
	if got := fileMode(t, filepath.Join(dir, ServerCertFile)); got != 0o644 {
		t.Errorf("%s mode %v", ServerCertFile, got)
	}
	certs, err := ParseCertificatesPEM(readFile(t, filepath.Join(dir, ServerCertFile)))
	if err != nil || len(certs) != 2 || !certs[0].Equal(leaf) || !certs[1].Equal(ca.Certificate()) {
		t.Errorf("%s does not hold leaf and CA: %v", ServerCertFile, err)
	}

	// A TLS client trusting only the CA accepts the certificate by name and by IP.
	for _, name := range []string{"ctrl.zmesh.test", "localhost", "10.0.0.1"} {
		if err := handshake(ca, tc, name); err != nil {
			t.Errorf("handshake as %s: %v", name, err)
		}
	}
	if err := handshake(ca, tc, "other.zmesh.test"); err == nil {
		t.Error("handshake for a name not in the certificate succeeded")
	}
}

func handshake(ca *CA, server tls.Certificate, name string) error {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	now := func() time.Time { return t0 }
	srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{server}, Time: now})
	go func() { _ = srv.Handshake(); srv.Close() }()
	cli := tls.Client(c, &tls.Config{RootCAs: ca.Pool(), ServerName: name, Time: now})
	return cli.Handshake()
}

func TestServerCertReuse(t *testing.T) {
	t.Parallel()
	initial := []string{"ctrl.zmesh.test", "10.0.0.1"}
	tests := []struct {
		name    string
		hosts   []string
		later   time.Duration                         // clock advance before the second call
		foreign bool                                  // first certificate issued by another CA
		mangle  func(t *testing.T, dir, other string) // edits server files before the second call
		reuse   bool
	}{
		{name: "same hosts", hosts: initial, reuse: true},
		{name: "subset", hosts: []string{"10.0.0.1"}, reuse: true},
		{name: "none", hosts: nil, reuse: true},
		{name: "reordered and cased", hosts: []string{"10.0.0.1", "CTRL.zmesh.test", "localhost"}, reuse: true},
		{name: "name added", hosts: append(slices.Clone(initial), "api.zmesh.test"), reuse: false},
		{name: "ip added", hosts: append(slices.Clone(initial), "10.0.0.2"), reuse: false},
		{name: "ip turned name", hosts: []string{"ctrl.zmesh.test", "10-0-0-1.zmesh.test"}, reuse: false},
		{name: "31 days left", hosts: initial, later: ServerCertValidity - 31*24*time.Hour, reuse: true},
		{name: "29 days left", hosts: initial, later: ServerCertValidity - 29*24*time.Hour, reuse: false},
		{name: "expired", hosts: initial, later: ServerCertValidity + time.Hour, reuse: false},
		{name: "signed by another CA", hosts: initial, foreign: true, reuse: false},
		{
			name: "key missing", hosts: initial, reuse: false,
			mangle: func(t *testing.T, dir, _ string) { os.Remove(filepath.Join(dir, ServerKeyFile)) },
		},
		{
			name: "cert missing", hosts: initial, reuse: false,
			mangle: func(t *testing.T, dir, _ string) { os.Remove(filepath.Join(dir, ServerCertFile)) },
		},
		{
			name: "key of another certificate", hosts: initial, reuse: false,
			mangle: func(t *testing.T, dir, other string) {
				writeFile(t, filepath.Join(dir, ServerKeyFile), readFile(t, filepath.Join(other, ServerKeyFile)))
			},
		},
		{
			name: "garbage cert", hosts: initial, reuse: false,
			mangle: func(t *testing.T, dir, _ string) { writeFile(t, filepath.Join(dir, ServerCertFile), []byte("junk")) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			caDir, dir, other := t.TempDir(), t.TempDir(), t.TempDir()
			ca := openCA(t, caDir, t0)
			issuer := ca
			if tt.foreign {
				issuer = openCA(t, t.TempDir(), t0)
			}
			first, err := issuer.ServerCert(dir, initial)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ca.ServerCert(other, initial); err != nil {
				t.Fatal(err)
			}
			if tt.mangle != nil {
				tt.mangle(t, dir, other)
			}

			ca2 := openCA(t, caDir, t0.Add(tt.later))
			second, err := ca2.ServerCert(dir, tt.hosts)
			if err != nil {
				t.Fatal(err)
			}
			if reused := second.Leaf.Equal(first.Leaf); reused != tt.reuse {
				t.Fatalf("reused = %v, want %v", reused, tt.reuse)
			}
			if err := VerifyChain(second.Leaf, nil, ca2.Pool(), t0.Add(tt.later), x509.ExtKeyUsageServerAuth); err != nil {
				t.Errorf("returned certificate does not verify: %v", err)
			}
			for _, h := range append([]string{"localhost"}, tt.hosts...) {
				if err := second.Leaf.VerifyHostname(h); err != nil {
					t.Errorf("host %s: %v", h, err)
				}
			}
			if !tt.reuse {
				// The new certificate is on disk and reused by the next call.
				third, err := ca2.ServerCert(dir, tt.hosts)
				if err != nil {
					t.Fatal(err)
				}
				if !third.Leaf.Equal(second.Leaf) {
					t.Error("reissued certificate not reused on the next call")
				}
			}
		})
	}
}

func TestServerCertReadError(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	dir := t.TempDir()
	// A directory in place of server.cert cannot be read and must not be replaced.
	if err := os.Mkdir(filepath.Join(dir, ServerCertFile), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := ca.ServerCert(dir, nil)
	if err == nil || !strings.Contains(err.Error(), ServerCertFile) {
		t.Fatalf("err = %v, want a read error naming %s", err, ServerCertFile)
	}
}

// TestServerCertMigratesUnmarked: a server certificate the CA issued before server
// certificates carried the controller's policy is reissued, with the policy, for the same key
// (enrollment tokens signed with it stay valid); the new one is reused afterwards.
func TestServerCertMigratesUnmarked(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	dir := t.TempDir()
	hosts := []string{"ctrl.zmesh.test", "10.0.0.1"}
	key := newKey(t, "p256")
	dnsNames, ips := splitHosts(hosts)
	old, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "ctrl.zmesh.test", Organization: []string{"zmesh"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	}, key.Public(), ServerCertValidity)
	if err != nil {
		t.Fatal(err)
	}
	if certid.IsController(old) {
		t.Fatal("the old-style certificate carries the controller's policy")
	}
	keyPEM, err := MarshalPrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ServerCertFile), append(encodeCertPEM(old.Raw), ca.PEM()...))
	writeFile(t, filepath.Join(dir, ServerKeyFile), keyPEM)

	got, err := ca.ServerCert(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if got.Leaf.Equal(old) || !certid.IsController(got.Leaf) {
		t.Fatalf("ServerCert kept the certificate without the controller's policy (policies %v)", got.Leaf.Policies)
	}
	if !PublicKeysEqual(got.Leaf.PublicKey, key.Public()) {
		t.Error("the reissued certificate is for a new key; want the stored one")
	}
	if err := certid.VerifyController(tls.ConnectionState{PeerCertificates: []*x509.Certificate{got.Leaf}}); err != nil {
		t.Error(err)
	}
	again, err := ca.ServerCert(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Leaf.Equal(got.Leaf) {
		t.Error("the reissued certificate is not reused on the next call")
	}
}

// TestSignCSRNeverGivesControllerPolicy: a router's or identity's CSR asking for the
// controller's certificate policy gets a certificate without it.
func TestSignCSRNeverGivesControllerPolicy(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	oid, err := certid.ControllerPolicy().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	type policyInfo struct{ ID asn1.RawValue }
	policies, err := asn1.Marshal([]policyInfo{{asn1.RawValue{Tag: asn1.TagOID, Bytes: oid}}})
	if err != nil {
		t.Fatal(err)
	}
	csr := makeCSR(t, newKey(t, "p256"), "router", func(r *x509.CertificateRequest) {
		r.IPAddresses = []net.IP{net.ParseIP("10.0.0.1")}
		r.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 32}, Value: policies}}
	})
	parsed, err := ParseCSR(csr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(parsed.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 32}) }) {
		t.Fatal("the CSR does not ask for certificate policies")
	}
	for _, u := range []Usage{Client, Server, ClientServer} {
		cert, _, err := ca.SignCSR(csr, SignRequest{Usage: u})
		if err != nil {
			t.Fatal(err)
		}
		if certid.IsController(cert) || len(cert.Policies) != 0 {
			t.Errorf("%v certificate has policies %v; want none", u, cert.Policies)
		}
		if err := certid.VerifyController(tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}); !errors.Is(err, certid.ErrNotController) {
			t.Errorf("%v certificate taken for the controller's: %v", u, err)
		}
	}
}
