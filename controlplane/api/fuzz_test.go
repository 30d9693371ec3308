package api

import (
	"errors"
	"testing"
)

// FuzzDecodeBodies feeds arbitrary bytes to the strict JSON decoding of every request body
// type: it never panics, and every failure is a COULD_NOT_VALIDATE answer.
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"name":"a","type":"User","isAdmin":false}`,
		`{"name":"a","type":"User","isAdmin":false,"enrollment":{"ott":true},"tags":{"a":null,"b":"x","c":true}}`,
		`{"username":"user","password":"secret","envInfo":{"os":"linux"},"sdkInfo":{"type":"go"},"configTypes":["x"]}`,
		`{"password":"p","currentPassword":"q","tags":{}}`, `{"name":1}`, `[1,2]`, `{"a":`, `{} {}`, `null`, ``,
		`{"certPem":"-----BEGIN CERTIFICATE-----","identityRoles":[],"externalIdClaim":{"index":1}}`,
		`{"defaultHostingCost":1e400}`, `{"serviceHostingCosts":{"s":-1}}`, "\xff\xfe",
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
		}
		for _, newTarget := range targets {
			v := newTarget()
			err := decodeJSONBytes(data, v)
			if err == nil {
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
		b.check()
	}
}
