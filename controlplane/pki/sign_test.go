package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSignCSRKeyTypes(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	usages := []struct {
		usage Usage
		ekus  []x509.ExtKeyUsage
	}{
		{Client, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{Server, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{ClientServer, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}},
	}
	for _, kind := range []string{"p256", "p384", "ed25519", "rsa2048"} {
		for _, u := range usages {
			t.Run(kind+"/"+u.usage.String(), func(t *testing.T) {
				t.Parallel()
				key := newKey(t, kind)
				csr := makeCSR(t, key, "requested-name", func(r *x509.CertificateRequest) {
					r.DNSNames = []string{"router1.zmesh.test"}
				})
				cert, certPEM, err := ca.SignCSR(csr, SignRequest{CommonName: "ident-42", Usage: u.usage, Validity: 90 * 24 * time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if cert.Subject.CommonName != "ident-42" {
					t.Errorf("CN %q", cert.Subject.CommonName)
				}
				if !slices.Equal(cert.ExtKeyUsage, u.ekus) {
					t.Errorf("ExtKeyUsage %v, want %v", cert.ExtKeyUsage, u.ekus)
				}
				if cert.IsCA || cert.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
					t.Errorf("IsCA %v KeyUsage %v", cert.IsCA, cert.KeyUsage)
				}
				if !PublicKeysEqual(key.Public(), cert.PublicKey) {
					t.Error("certificate key differs from CSR key")
				}
				if !cert.NotBefore.Equal(t0.Add(-time.Minute)) || !cert.NotAfter.Equal(t0.Add(90*24*time.Hour)) {
					t.Errorf("validity %s .. %s", cert.NotBefore, cert.NotAfter)
				}
				if cert.SerialNumber.Sign() <= 0 || cert.SerialNumber.BitLen() > 128 {
					t.Errorf("serial %x", cert.SerialNumber)
				}
				if !bytes.Equal(cert.AuthorityKeyId, ca.Certificate().SubjectKeyId) {
					t.Error("AuthorityKeyId does not name the CA")
				}
				if got, err := ParsePEMCert(certPEM); err != nil || !got.Equal(cert) {
					t.Errorf("returned PEM: %v", err)
				}
				err = ca.VerifyClient(cert, nil)
				if wantOK := u.usage&Client != 0; (err == nil) != wantOK {
					t.Errorf("VerifyClient = %v, want ok=%v", err, wantOK)
				}
				if u.usage&Server != 0 {
					if err := VerifyChain(cert, nil, ca.Pool(), t0, x509.ExtKeyUsageServerAuth); err != nil {
						t.Errorf("server usage: %v", err)
					}
				}
			})
		}
	}
}

func TestSignCSRFields(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	uri, _ := url.Parse("spiffe://zmesh/router/r1")
	withSANs := func(r *x509.CertificateRequest) {
		r.DNSNames = []string{"csr.zmesh.test"}
		r.IPAddresses = []net.IP{net.ParseIP("192.0.2.7")}
		r.EmailAddresses = []string{"ops@zmesh.test"}
	}
	tests := []struct {
		name     string
		csrCN    string
		edit     func(*x509.CertificateRequest)
		blockTyp string
		req      SignRequest
		check    func(t *testing.T, c *x509.Certificate)
	}{
		{
			name: "server takes CSR SANs", csrCN: "r1", edit: withSANs,
			req: SignRequest{Usage: Server},
			check: func(t *testing.T, c *x509.Certificate) {
				if c.Subject.CommonName != "r1" || !slices.Equal(c.DNSNames, []string{"csr.zmesh.test"}) ||
					len(c.IPAddresses) != 1 || !slices.Equal(c.EmailAddresses, []string{"ops@zmesh.test"}) {
					t.Errorf("CN %q SANs %v %v %v", c.Subject.CommonName, c.DNSNames, c.IPAddresses, c.EmailAddresses)
				}
			},
		},
		{
			name: "request SANs override", csrCN: "r1", edit: withSANs,
			req: SignRequest{Usage: ClientServer, DNSNames: []string{"r1.zmesh.test"}, URIs: []*url.URL{uri}},
			check: func(t *testing.T, c *x509.Certificate) {
				if !slices.Equal(c.DNSNames, []string{"r1.zmesh.test"}) || len(c.IPAddresses) != 0 ||
					len(c.EmailAddresses) != 0 || len(c.URIs) != 1 || c.URIs[0].String() != uri.String() {
					t.Errorf("SANs %v %v %v %v", c.DNSNames, c.IPAddresses, c.EmailAddresses, c.URIs)
				}
			},
		},
		{
			name: "client ignores CSR SANs", csrCN: "r1", edit: withSANs,
			req: SignRequest{CommonName: "ident-1", Usage: Client},
			check: func(t *testing.T, c *x509.Certificate) {
				if len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses)+len(c.URIs) != 0 {
					t.Errorf("client certificate has SANs %v %v %v %v", c.DNSNames, c.IPAddresses, c.EmailAddresses, c.URIs)
				}
			},
		},
		{
			name: "NEW CERTIFICATE REQUEST block", csrCN: "legacy", blockTyp: "NEW CERTIFICATE REQUEST",
			req: SignRequest{Usage: Client},
			check: func(t *testing.T, c *x509.Certificate) {
				if c.Subject.CommonName != "legacy" {
					t.Errorf("CN %q", c.Subject.CommonName)
				}
			},
		},
		{
			name: "subject reduced to CN", csrCN: "x", edit: func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"evil"} },
			req: SignRequest{CommonName: "ident-2", Usage: Client},
			check: func(t *testing.T, c *x509.Certificate) {
				if len(c.Subject.Organization) != 0 || c.Subject.CommonName != "ident-2" {
					t.Errorf("subject %v", c.Subject)
				}
			},
		},
		{
			name: "default validity", csrCN: "x",
			req: SignRequest{Usage: Client},
			check: func(t *testing.T, c *x509.Certificate) {
				if !c.NotAfter.Equal(t0.Add(DefaultValidity)) {
					t.Errorf("NotAfter %s", c.NotAfter)
				}
			},
		},
		{
			name: "validity capped at CA expiry", csrCN: "x",
			req: SignRequest{Usage: Client, Validity: 20 * 365 * 24 * time.Hour},
			check: func(t *testing.T, c *x509.Certificate) {
				if !c.NotAfter.Equal(ca.Certificate().NotAfter) {
					t.Errorf("NotAfter %s, CA NotAfter %s", c.NotAfter, ca.Certificate().NotAfter)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			csr := makeCSR(t, newKey(t, "p256"), tt.csrCN, tt.edit)
			if tt.blockTyp != "" {
				b, _ := pem.Decode(csr)
				b.Type = tt.blockTyp
				csr = pem.EncodeToMemory(b)
			}
			cert, _, err := ca.SignCSR(csr, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cert)
		})
	}
}

func TestSignCSRRejects(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	csrDER := func(t *testing.T, kind, cn string) []byte {
		b, _ := pem.Decode(makeCSR(t, newKey(t, kind), cn, nil))
		return b.Bytes
	}
	reencode := func(der []byte) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	tests := []struct {
		name string
		csr  func(t *testing.T) []byte
		req  SignRequest
		want string
	}{
		{
			name: "empty",
			csr:  func(t *testing.T) []byte { return nil },
			want: "no PEM block of type CERTIFICATE REQUEST",
		},
		{
			name: "not PEM",
			csr:  func(t *testing.T) []byte { return []byte("MIIBCsomething") },
			want: "no PEM block of type CERTIFICATE REQUEST",
		},
		{
			name: "wrong block type",
			csr:  func(t *testing.T) []byte { return ca.PEM() },
			want: `PEM block of type "CERTIFICATE"; want CERTIFICATE REQUEST`,
		},
		{
			name: "bad DER",
			csr:  func(t *testing.T) []byte { return reencode([]byte{0x30, 0x03, 0x02, 0x01, 0x01}) },
			want: "parse CSR: ",
		},
		{
			name: "tampered signature",
			csr: func(t *testing.T) []byte {
				der := csrDER(t, "p256", "x")
				der[len(der)-1] ^= 0x01
				return reencode(der)
			},
			want: "CSR signature does not verify",
		},
		{
			name: "tampered subject",
			csr: func(t *testing.T) []byte {
				der := csrDER(t, "ed25519", "tamper-me")
				i := bytes.Index(der, []byte("tamper-me"))
				der[i] = 'T'
				return reencode(der)
			},
			want: "CSR signature does not verify",
		},
		{
			name: "small RSA",
			csr:  func(t *testing.T) []byte { return reencode(csrDER(t, "rsa1024", "x")) },
			want: "RSA key of 1024 bits; at least 2048 required",
		},
		{
			name: "P-224",
			csr:  func(t *testing.T) []byte { return reencode(csrDER(t, "p224", "x")) },
			want: "ECDSA key on curve P-224; want P-256 or P-384",
		},
		{
			name: "P-521",
			csr:  func(t *testing.T) []byte { return reencode(csrDER(t, "p521", "x")) },
			want: "ECDSA key on curve P-521; want P-256 or P-384",
		},
		{
			name: "no common name",
			csr:  func(t *testing.T) []byte { return reencode(csrDER(t, "p256", "")) },
			want: "CSR has no common name",
		},
		{
			name: "server without SANs",
			csr:  func(t *testing.T) []byte { return reencode(csrDER(t, "p256", "r1")) },
			req:  SignRequest{Usage: Server},
			want: "needs a DNS or IP SAN",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.req
			if req.Usage == 0 {
				req.Usage = Client
			}
			cert, certPEM, err := ca.SignCSR(tt.csr(t), req)
			if err == nil {
				t.Fatalf("signed %q", cert.Subject.CommonName)
			}
			if !errors.Is(err, ErrBadCSR) {
				t.Errorf("error %q does not wrap ErrBadCSR", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if cert != nil || certPEM != nil {
				t.Error("certificate returned with an error")
			}
		})
	}
}

func TestSignCSRBadRequest(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	csr := makeCSR(t, newKey(t, "p256"), "x", nil)
	for _, req := range []SignRequest{
		{Usage: 0},
		{Usage: 4},
		{Usage: Client, Validity: -time.Hour},
	} {
		_, _, err := ca.SignCSR(csr, req)
		if err == nil || errors.Is(err, ErrBadCSR) {
			t.Errorf("%+v: err = %v, want a request error not wrapping ErrBadCSR", req, err)
		}
	}
}
