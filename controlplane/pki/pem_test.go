package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"
)

func TestParseCertificatesPEM(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	tc, err := ca.ServerCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := encodeCertPEM(tc.Leaf.Raw)
	keyPEM, err := MarshalPrivateKeyPEM(newKey(t, "p256"))
	if err != nil {
		t.Fatal(err)
	}
	badDER := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x00}})
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	tests := []struct {
		name  string
		data  []byte
		n     int    // certificates expected; 0 means an error
		want  string // error substring
		isOne bool   // ParsePEMCert succeeds
	}{
		{name: "one", data: ca.PEM(), n: 1, isOne: true},
		{name: "chain with text", data: join([]byte("subject=leaf\n"), leafPEM, []byte("issuer\n"), ca.PEM(), []byte("\n")), n: 2},
		{name: "empty", data: nil, want: "no PEM block of type CERTIFICATE"},
		{name: "text only", data: []byte("hello"), want: "no PEM block of type CERTIFICATE"},
		{name: "private key", data: keyPEM, want: `PEM block 1 is of type "PRIVATE KEY"`},
		{name: "cert then key", data: join(ca.PEM(), keyPEM), want: `PEM block 2 is of type "PRIVATE KEY"`},
		{name: "bad DER", data: join(ca.PEM(), badDER), want: "PEM block 2: x509:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			certs, err := ParseCertificatesPEM(tt.data)
			if tt.n > 0 {
				if err != nil || len(certs) != tt.n {
					t.Fatalf("got %d certs, err %v; want %d", len(certs), err, tt.n)
				}
			} else {
				if err == nil || !errors.Is(err, ErrBadCertificate) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want ErrBadCertificate containing %q", err, tt.want)
				}
			}
			one, err := ParsePEMCert(tt.data)
			if tt.isOne != (err == nil) {
				t.Fatalf("ParsePEMCert err = %v, want ok=%v", err, tt.isOne)
			}
			if err != nil && !errors.Is(err, ErrBadCertificate) {
				t.Errorf("ParsePEMCert error %q does not wrap ErrBadCertificate", err)
			}
			if err == nil && !one.Equal(ca.Certificate()) {
				t.Error("ParsePEMCert returned another certificate")
			}
		})
	}
}

func TestPKCS7(t *testing.T) {
	t.Parallel()
	ca := openCA(t, t.TempDir(), t0)
	leaf, _, err := ca.SignCSR(makeCSR(t, newKey(t, "p384"), "x", nil), SignRequest{CommonName: "ident-7", Usage: Client, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		certs []*x509.Certificate
	}{
		{name: "CA", certs: []*x509.Certificate{ca.Certificate()}},
		{name: "leaf and CA", certs: []*x509.Certificate{leaf, ca.Certificate()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			der, err := PKCS7(tt.certs...)
			if err != nil {
				t.Fatal(err)
			}
			p7, err := pkcs7.Parse(der)
			if err != nil {
				t.Fatalf("pkcs7.Parse: %v", err)
			}
			if len(p7.Certificates) != len(tt.certs) {
				t.Fatalf("%d certificates read back, want %d", len(p7.Certificates), len(tt.certs))
			}
			for i, c := range p7.Certificates {
				if !c.Equal(tt.certs[i]) {
					t.Errorf("certificate %d differs", i)
				}
			}

			cmd := exec.Command("/usr/bin/openssl", "pkcs7", "-inform", "DER", "-print_certs", "-noout")
			cmd.Stdin = bytes.NewReader(der)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("openssl pkcs7: %v\n%s", err, out)
			}
			for _, c := range tt.certs {
				if !strings.Contains(string(out), "CN = "+c.Subject.CommonName) {
					t.Errorf("openssl output lacks CN %q:\n%s", c.Subject.CommonName, out)
				}
			}
			if !strings.Contains(string(out), "subject=O = zmesh, CN = "+ca.Certificate().Subject.CommonName) {
				t.Errorf("openssl output lacks the CA subject:\n%s", out)
			}
		})
	}
}

func TestPKCS7Errors(t *testing.T) {
	t.Parallel()
	if _, err := PKCS7(); err == nil {
		t.Error("PKCS7 with no certificates succeeded")
	}
	if _, err := PKCS7(nil); err == nil {
		t.Error("PKCS7 with a nil certificate succeeded")
	}
	if _, err := PKCS7(&x509.Certificate{}); err == nil {
		t.Error("PKCS7 with an empty certificate succeeded")
	}
}
