package api

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
)

// FuzzDecodeBodies feeds arbitrary bytes to the strict JSON decoding of every request body
// type: it never panics, every failure is a COULD_NOT_VALIDATE answer, and what it accepts
// is valid UTF-8.
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"name":"a","type":"User","isAdmin":false}`,
		`{"name":"a","type":"User","isAdmin":false,"enrollment":{"ott":true},"tags":{"a":null,"b":"x","c":true}}`,
		`{"username":"user","password":"secret","envInfo":{"os":"linux"},"sdkInfo":{"type":"go"},"configTypes":["x"]}`,
		`{"password":"p","currentPassword":"q","tags":{}}`, `{"name":1}`, `[1,2]`, `{"a":`, `{} {}`, `null`, ``,
		`{"certPem":"-----BEGIN CERTIFICATE-----","identityRoles":[],"externalIdClaim":{"index":1}}`,
		`{"defaultHostingCost":1e400}`, `{"serviceHostingCosts":{"s":-1}}`, "\xff\xfe",
		// extend, extend-verify, ephemeral session certificates, updb enrollment.
		`{"clientCertCsr":"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"}`,
		`{"clientCert":"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}`,
		`{"csr":"-----BEGIN CERTIFICATE REQUEST-----\n"}`, `{"csr":null}`, `{"clientCert":7}`, `{"clientCertCsr":["x"]}`,
		`{"password":"secret1","username":"u"}`, `{"token":"00000000-0000-4000-8000-000000000000","clientCsr":"x"}`,
		// Names in other case, duplicate names, invalid UTF-8 and lone surrogates, at any depth.
		`{"name":"x","type":"User","isAdmin":false,"ISADMIN":true}`, `{"name":"x","name":"y"}`,
		`{"tags":{"a":"1","a":"2"}}`, "{\"name\":\"a\xffb\"}", "{\"tags\":{\"\xc3\":1}}", `{"name":"\ud800"}`,
		`{"secondary":{"requireExtJwtSigner":null,"RequireTotp":true}}`, `{"kid":null,"tags":{"a":null}}`,
		`[{"id":"c","typeId":"MAC","macAddresses":["a"]},{"TypeId":"OS"}]`, `{"name":"p","edgeRouterRoles":["#a",{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		targets := []func() any{
			func() any { return new(identityBody) },
			func() any { return new(authenticateBody) },
			func() any { return new(authenticatorChange) },
			func() any { return new(caBody) },
			func() any { return new(genericEnroll) },
			func() any { return new(ottRequest) },
			// The handlers of these decode into anonymous structs of the same shape.
			func() any { return new(extendBody) },
			func() any { return new(extendVerifyBody) },
			func() any { return new(sessionCertBody) },
			func() any { return new(updbBody) },
			func() any { return new(authPolicyBody) },
			func() any { return new(signerBody) },
			func() any { return new(erpBody) },
			func() any { return new([]postureResponseBody) },
		}
		for _, newTarget := range targets {
			v := newTarget()
			err := decodeJSONBytes(data, v)
			if err == nil {
				if !utf8.Valid(data) {
					t.Fatalf("decode %T accepted invalid UTF-8 %q", v, data)
				}
				checkDecoded(t, v)
				continue
			}
			var ae *apiErr
			if !errors.As(err, &ae) || ae.code != codeCouldNotValidate {
				t.Fatalf("decode %T: error %v is not COULD_NOT_VALIDATE", v, err)
			}
		}
	})
}

// Shapes of the bodies that handlers decode into anonymous structs: extend (auth.go), extend-verify
// (auth.go), POST /current-api-session/certificates (auth.go), and updb enrollment (enroll.go).
type (
	extendBody struct {
		ClientCertCsr *string `json:"clientCertCsr"`
	}
	extendVerifyBody struct {
		ClientCert *string `json:"clientCert"`
	}
	sessionCertBody struct {
		CSR *string `json:"csr"`
	}
	updbBody struct {
		Password *string `json:"password"`
		Username *string `json:"username"`
	}
)

// checkDecoded runs the checks the handlers run after decoding; they must not panic.
func checkDecoded(t *testing.T, v any) {
	switch b := v.(type) {
	case *identityBody:
		if b.Tags != nil {
			checkTags("tags", *b.Tags)
		}
	case *authenticateBody:
		b.check("password")
		b.check("cert")
	case *authenticatorChange:
		b.check(true)
		b.check(false)
	case *caBody:
		b.check(true)
		b.check(false)
		b.apply(&model.CA{})
	case *extendBody:
		required(req("clientCertCsr", b.ClientCertCsr != nil))
	case *extendVerifyBody:
		required(req("clientCert", b.ClientCert != nil))
	case *sessionCertBody:
		if required(req("csr", b.CSR != nil)) == nil {
			pki.ParseCSR([]byte(*b.CSR))
		}
	case *updbBody:
		if required(req("password", b.Password != nil)) == nil {
			checkLen("password", *b.Password, model.MinPasswordLen, model.MaxPasswordLen)
		}
	}
}
