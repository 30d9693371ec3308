package model

import (
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// Enrollment by a token of an external signer (POST /enroll/token).
const (
	EnrollToken = "token"
	// EnrollNetwork is the em claim of network JWTs.
	EnrollNetwork = "network"
)

// parseSelector parses a claims selector: a JSON pointer (RFC 6901) when it starts with
// "/", otherwise the name of a root-level claim. It returns the reference tokens.
func parseSelector(sel string) ([]string, error) {
	if sel == "" {
		return nil, errors.New("must not be empty")
	}
	if !strings.HasPrefix(sel, "/") {
		return []string{sel}, nil
	}
	parts := strings.Split(sel[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 == len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return nil, fmt.Errorf("is not a JSON pointer: ~ must be followed by 0 or 1 in %q", p)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// selectClaim returns the value the selector names in claims; ok is false when it names
// nothing.
func selectClaim(claims map[string]any, sel string) (any, bool, error) {
	tokens, err := parseSelector(sel)
	if err != nil {
		return nil, false, err
	}
	var v any = claims
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[t]
			if !ok {
				return nil, false, nil
			}
			v = next
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) || (len(t) > 1 && t[0] == '0') {
				return nil, false, nil
			}
			v = x[i]
		default:
			return nil, false, nil
		}
	}
	return v, true, nil
}

// enrollName returns the name a token enrollment gives the identity.
func enrollName(s *ExtJWTSigner, claims map[string]any) (string, error) {
	sel := s.EnrollNameClaimsSelector
	if sel == "" {
		sel = DefaultEnrollNameSelector
	}
	v, ok, err := selectClaim(claims, sel)
	if err != nil {
		return "", err
	}
	name, _ := v.(string)
	if !ok || strings.TrimSpace(name) == "" {
		return "", &Error{Code: CodeCouldNotValidate, Field: "enrollNameClaimsSelector", Value: sel,
			Message: fmt.Sprintf("the token has no string claim at %s to name the identity", sel)}
	}
	return name, nil
}

// enrollAttributes returns the role attributes a token enrollment gives the identity: none
// when the signer has no selector or the token no such claim.
func enrollAttributes(s *ExtJWTSigner, claims map[string]any) ([]string, error) {
	sel := s.EnrollAttributeClaimsSelector
	if sel == "" {
		return nil, nil
	}
	v, ok, err := selectClaim(claims, sel)
	if err != nil || !ok || v == nil {
		return nil, err
	}
	bad := &Error{Code: CodeCouldNotValidate, Field: "enrollAttributeClaimsSelector", Value: sel,
		Message: fmt.Sprintf("the claim at %s must be a string or an array of strings", sel)}
	switch x := v.(type) {
	case string:
		if x == "" {
			return nil, nil
		}
		return []string{x}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, it := range x {
			s, ok := it.(string)
			if !ok {
				return nil, bad
			}
			if s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	}
	return nil, bad
}

// TokenEnrollment is the result of an enrollment with a token of an external signer.
type TokenEnrollment struct {
	Identity *Identity
	CertPEM  []byte // the client certificate, for an enrollment with a CSR
}

// EnrollWithToken creates an identity from a JWT of an external signer (signerID, or the
// signer of the token's issuer when empty). With a CSR the signer must allow enrollment to
// a certificate, and the identity gets a certificate of the network; without, the signer
// must allow enrollment to token authentication. The identity is named by the signer's name
// selector, gets the attributes of its attribute selector, is found later by the token's
// claims property (as its externalId, or its id), and has the signer's enrollment policy,
// which must allow the mechanism.
func (m *Model) EnrollWithToken(ctx context.Context, raw, signerID string, csrPEM []byte) (*TokenEnrollment, error) {
	v, err := m.verifyExtJWT(ctx, raw, signerID)
	if CodeOf(err) == CodeInvalidAuth {
		return nil, &Error{Code: CodeInvalidEnrollmentToken, Message: "the token is not a valid JWT of an enabled external JWT signer", Cause: err}
	}
	if err != nil {
		return nil, err
	}
	s := v.Signer
	withCert := len(csrPEM) > 0
	if withCert && !s.EnrollToCertEnabled {
		return nil, &Error{Code: CodeEnrollmentNotAllowed, Field: "clientCsr",
			Message: fmt.Sprintf("external JWT signer %q does not allow enrollment to a certificate (enrollToCertEnabled)", s.Name)}
	}
	if !withCert && !s.EnrollToTokenEnabled {
		return nil, &Error{Code: CodeEnrollmentNotAllowed,
			Message: fmt.Sprintf("external JWT signer %q does not allow enrollment to token authentication (enrollToTokenEnabled); send clientCsr", s.Name)}
	}
	name, err := enrollName(s, v.Claims)
	if err != nil {
		return nil, err
	}
	attrs, err := enrollAttributes(s, v.Claims)
	if err != nil {
		return nil, err
	}
	ident := &Identity{Base: m.newBase(nil), Name: name, Type: IdentityTypeDefault, RoleAttributes: attrs,
		AuthPolicyID: s.EnrollAuthPolicyID}
	if ident.AuthPolicyID == "" {
		ident.AuthPolicyID = DefaultAuthPolicyID
	}
	if s.UseExternalID {
		ident.ExternalID = v.Subject
	} else {
		if err := checkName("id", v.Subject); err != nil || strings.Contains(v.Subject, "/") {
			return nil, &Error{Code: CodeCouldNotValidate, Field: s.ClaimsPropertyOrDefault(), Value: v.Subject,
				Message: "the claim cannot be an identity id"}
		}
		ident.ID = v.Subject
	}
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	out := &TokenEnrollment{Identity: ident}
	err = m.st.Update(func(tx *store.Tx) error {
		p, err := m.authPolicyTx(tx, ident.AuthPolicyID)
		if err != nil {
			return err
		}
		if withCert && !p.Primary.Cert.Allowed {
			return &Error{Code: CodeEnrollmentNotAllowed, Message: fmt.Sprintf("the enrollment policy %q does not allow certificate authentication", p.Name)}
		}
		if !withCert && !p.allowsSigner(s.ID) {
			return &Error{Code: CodeEnrollmentNotAllowed, Message: fmt.Sprintf("the enrollment policy %q does not allow authentication with signer %q", p.Name, s.Name)}
		}
		if _, err := m.identityForJWT(tx, v); err == nil {
			return &Error{Code: CodeEnrollmentIdentityExists, Message: fmt.Sprintf("an identity with %s %q exists already", m.subjectField(s), v.Subject)}
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := m.c.identities.Create(tx, ident); err != nil {
			return conflict(err)
		}
		m.added(tx)
		if !withCert {
			return nil
		}
		cert, pemBytes, err := m.ca.SignCSR(csrPEM, pki.SignRequest{CommonName: ident.ID, Usage: pki.Client, Validity: m.opts.IdentityCertValidity})
		if err != nil {
			return csrError(err)
		}
		a := &Authenticator{Base: m.newBase(nil), IdentityID: ident.ID, Method: MethodCert,
			CertPEM: string(pemBytes), Fingerprint: certid.Fingerprint(cert), IssuedByNetwork: true}
		if err := m.c.authenticators.Create(tx, a); err != nil {
			return conflict(err)
		}
		out.CertPEM = pemBytes
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.log.Info("identity enrolled with an external token", "identity", ident.ID, "name", ident.Name, "signer", s.ID, "certificate", withCert)
	return out, nil
}

// SigningKeyID returns the key id of the key that signs enrollment tokens.
func (m *Model) SigningKeyID() string { return m.opts.SigningKID }

// SigningPublicKey returns the public key that verifies enrollment tokens.
func (m *Model) SigningPublicKey() *ecdsa.PublicKey {
	if m.opts.SigningKey == nil {
		return nil
	}
	return &m.opts.SigningKey.PublicKey
}

// SignChallenge signs a client's nonce (a UUID) with the enrollment key keyID, so that the
// client can check it talks to the controller that issued its token. The signature is in
// JWS form: ES256, base64url without padding.
func (m *Model) SignChallenge(keyID, nonce string) (alg, signature string, err error) {
	if _, err := uuid.Parse(nonce); err != nil {
		return "", "", invalid("nonce", nonce, "must be a UUID")
	}
	if keyID != m.opts.SigningKID || m.opts.SigningKey == nil {
		return "", "", invalid("keyId", keyID, "is not a key of this controller; see GET /enroll/jwks")
	}
	sig, err := jwt.SigningMethodES256.Sign(nonce, m.opts.SigningKey)
	if err != nil {
		return "", "", fmt.Errorf("sign the challenge: %w", err)
	}
	return jwt.SigningMethodES256.Alg(), base64.RawURLEncoding.EncodeToString(sig), nil
}

// NetworkClaims are the claims of a network JWT.
type NetworkClaims struct {
	jwt.RegisteredClaims
	Method      string   `json:"em"`
	Controllers []string `json:"ctrls"`
}

// NetworkJWT returns a token naming this controller, signed like enrollment tokens, that a
// client verifies against the controller's TLS certificate to bootstrap trust in the network.
func (m *Model) NetworkJWT() (string, error) {
	claims := NetworkClaims{
		RegisteredClaims: jwt.RegisteredClaims{Issuer: m.opts.Issuer, Subject: m.opts.Issuer, ID: newToken(),
			IssuedAt: jwt.NewNumericDate(m.now())},
		Method: EnrollNetwork, Controllers: []string{m.opts.Issuer},
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = m.opts.SigningKID
	s, err := t.SignedString(m.opts.SigningKey)
	if err != nil {
		return "", fmt.Errorf("sign the network JWT: %w", err)
	}
	return s, nil
}
