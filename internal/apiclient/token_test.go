package apiclient

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/internal/testutil"
)

// TestTokenOfAReissuedCertificate checks that a token verifies with the key of the
// controller's certificate whatever certificate its kid names (a controller reissues its
// certificate for the same key), and that a token signed with another key does not.
func TestTokenOfAReissuedCertificate(t *testing.T) {
	t.Parallel()
	key := testutil.NewKey(t)
	leaf := &x509.Certificate{PublicKey: &key.PublicKey}
	now := time.Now()
	sign := func(signer any) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, EnrollmentClaims{
			RegisteredClaims: jwt.RegisteredClaims{Issuer: "https://ctrl:1280", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))},
			Method:           "ott",
		})
		tok.Header["kid"] = "fingerprint-of-the-certificate-before-reissue"
		s, err := tok.SignedString(signer)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	clock := func() time.Time { return now }
	if err := verifyToken(sign(key), leaf, clock); err != nil {
		t.Errorf("a token signed with the certificate's key, naming an earlier certificate: %v", err)
	}
	if err := verifyToken(sign(testutil.NewKey(t)), leaf, clock); err == nil {
		t.Error("a token signed with another key verified")
	}
}
