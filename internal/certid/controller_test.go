package certid

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
)

func TestControllerPolicy(t *testing.T) {
	t.Parallel()
	p := ControllerPolicy()
	if p.String() != controllerPolicy {
		t.Fatalf("ControllerPolicy() = %q, want %q", p.String(), controllerPolicy)
	}
	if !IsController(&x509.Certificate{Policies: []x509.OID{p}}) {
		t.Error("a certificate with the policy is not the controller's")
	}
	other, err := x509.ParseOID("2.25.1")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*x509.Certificate{
		"nil": nil, "no policies": {}, "another policy": {Policies: []x509.OID{other}},
	} {
		if IsController(c) {
			t.Errorf("%s: taken for the controller's certificate", name)
		}
	}
	if err := VerifyController(tls.ConnectionState{}); !errors.Is(err, ErrNotController) {
		t.Errorf("no certificate: %v, want ErrNotController", err)
	}
}
