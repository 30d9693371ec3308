package model

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// ExtJWTSigner is an external identity provider whose JWTs authenticate identities and may
// enroll new ones. It is defined by a key-set endpoint (JWKSEndpoint) or by a static
// certificate (CertPEM) with the key id (Kid) tokens name.
type ExtJWTSigner struct {
	Base
	Name     string `json:"name"`
	Enabled  bool   `json:"enabled"`
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`

	JWKSEndpoint string `json:"jwksEndpoint,omitempty"`
	CertPEM      string `json:"certPem,omitempty"`
	Kid          string `json:"kid,omitempty"`

	ClaimsProperty string `json:"claimsProperty,omitempty"`
	UseExternalID  bool   `json:"useExternalId"`

	EnrollToCertEnabled           bool   `json:"enrollToCertEnabled"`
	EnrollToTokenEnabled          bool   `json:"enrollToTokenEnabled"`
	EnrollAuthPolicyID            string `json:"enrollAuthPolicyId,omitempty"`
	EnrollAttributeClaimsSelector string `json:"enrollAttributeClaimsSelector,omitempty"`
	EnrollNameClaimsSelector      string `json:"enrollNameClaimsSelector,omitempty"`

	// What clients need to start a flow with the provider (the client-facing view).
	ExternalAuthURL        string   `json:"externalAuthUrl,omitempty"`
	OpenIDConfigurationURL string   `json:"openIdConfigurationUrl,omitempty"`
	ClientID               string   `json:"clientId,omitempty"`
	Scopes                 []string `json:"scopes,omitempty"`
	TargetToken            string   `json:"targetToken,omitempty"`

	// Of the static certificate, filled in when it is stored.
	Fingerprint string    `json:"fingerprint,omitempty"`
	CommonName  string    `json:"commonName,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
}

// Defaults of the signers' claim selectors.
const (
	DefaultClaimsProperty     = "sub"
	DefaultEnrollNameSelector = "/sub"
)

// Target tokens a client submits from an OIDC flow.
const (
	TargetTokenAccess = "ACCESS"
	TargetTokenID     = "ID"
)

// ClaimsPropertyOrDefault returns the claim that names the identity.
func (s *ExtJWTSigner) ClaimsPropertyOrDefault() string {
	if s.ClaimsProperty == "" {
		return DefaultClaimsProperty
	}
	return s.ClaimsProperty
}

func checkURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return invalid(field, raw, "must be an http:// or https:// URL")
	}
	return nil
}

// checkJWKSEndpoint accepts https:// key-set endpoints, and http:// ones whose host is a
// loopback IP literal (an identity provider on the controller's host, in development).
func checkJWKSEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return invalid("jwksEndpoint", raw, "must be an https:// URL, or http:// on a loopback address (127.0.0.1, [::1])")
	}
	switch {
	case u.Scheme == "https", loopbackHTTP(u):
		return nil
	case u.Scheme == "http":
		return invalid("jwksEndpoint", raw, "http:// is allowed only on a loopback IP address (127.0.0.0/8, [::1]), not on %q: use https://", u.Hostname())
	}
	return invalid("jwksEndpoint", raw, "must be an https:// URL, or http:// on a loopback address (127.0.0.1, [::1])")
}

// checkSigner validates a signer about to be stored and fills in its certificate's details.
func (m *Model) checkSigner(tx *store.Tx, s *ExtJWTSigner) error {
	if err := checkName("name", s.Name); err != nil {
		return err
	}
	if strings.TrimSpace(s.Issuer) == "" {
		return invalid("issuer", s.Issuer, "must not be empty")
	}
	if strings.TrimSpace(s.Audience) == "" {
		return invalid("audience", s.Audience, "must not be empty")
	}
	switch {
	case s.JWKSEndpoint != "" && s.CertPEM != "":
		return invalid("certPem", nil, "a signer has either jwksEndpoint or certPem with kid, not both")
	case s.JWKSEndpoint == "" && s.CertPEM == "":
		return invalid("jwksEndpoint", nil, "a signer needs jwksEndpoint, or certPem with kid")
	case s.JWKSEndpoint != "":
		if err := checkJWKSEndpoint(s.JWKSEndpoint); err != nil {
			return err
		}
		s.Fingerprint, s.CommonName, s.NotBefore, s.NotAfter = "", "", time.Time{}, time.Time{}
	default:
		if s.Kid == "" {
			return invalid("kid", nil, "is required with certPem: tokens must name it in their kid header")
		}
		cert, err := pki.ParsePEMCert([]byte(s.CertPEM))
		if err != nil {
			return invalid("certPem", nil, "is not a PEM certificate: %v", err)
		}
		if _, err := algorithmsFor(cert.PublicKey, ""); err != nil {
			return invalid("certPem", nil, "%v", err)
		}
		s.Fingerprint, s.CommonName = certid.Fingerprint(cert), cert.Subject.CommonName
		s.NotBefore, s.NotAfter = cert.NotBefore.UTC(), cert.NotAfter.UTC()
	}
	for _, u := range []struct{ field, v string }{{"externalAuthUrl", s.ExternalAuthURL}, {"openIdConfigurationUrl", s.OpenIDConfigurationURL}} {
		if u.v != "" {
			if err := checkURL(u.field, u.v); err != nil {
				return err
			}
		}
	}
	switch s.TargetToken {
	case "", TargetTokenAccess, TargetTokenID:
	default:
		return invalid("targetToken", s.TargetToken, "is not a target token; allowed: ACCESS, ID")
	}
	if s.ClaimsProperty != "" && strings.TrimSpace(s.ClaimsProperty) == "" {
		return invalid("claimsProperty", s.ClaimsProperty, "must not be blank")
	}
	for _, sel := range []struct{ field, v string }{{"enrollNameClaimsSelector", s.EnrollNameClaimsSelector}, {"enrollAttributeClaimsSelector", s.EnrollAttributeClaimsSelector}} {
		if sel.v != "" {
			if _, err := parseSelector(sel.v); err != nil {
				return invalid(sel.field, sel.v, "%v", err)
			}
		}
	}
	if s.EnrollAuthPolicyID != "" {
		p, err := m.authPolicyTx(tx, s.EnrollAuthPolicyID)
		if err != nil {
			return invalid("enrollAuthPolicyId", s.EnrollAuthPolicyID, "no authentication policy with this id")
		}
		if s.EnrollToCertEnabled && !p.Primary.Cert.Allowed {
			return invalid("enrollAuthPolicyId", s.EnrollAuthPolicyID, "authentication policy %q does not allow certificates, which enrollToCertEnabled gives", p.Name)
		}
	}
	return nil
}

// CreateExtJWTSigner stores a new external JWT signer.
func (m *Model) CreateExtJWTSigner(s *ExtJWTSigner) error {
	now := m.now()
	s.ID, s.CreatedAt, s.UpdatedAt = newID(), now, now
	return m.st.Update(func(tx *store.Tx) error {
		if err := m.checkSigner(tx, s); err != nil {
			return err
		}
		return conflict(m.auth.signers.Create(tx, s))
	})
}

// ExtJWTSigner returns the signer with id.
func (m *Model) ExtJWTSigner(id string) (*ExtJWTSigner, error) {
	var out *ExtJWTSigner
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.auth.signers.Get(tx, id)
		return missing(err, "external JWT signer", id)
	})
	return out, err
}

// ExtJWTSigners returns every signer in id order.
func (m *Model) ExtJWTSigners() ([]*ExtJWTSigner, error) {
	var out []*ExtJWTSigner
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.auth.signers.All(tx)
		return err
	})
	return out, err
}

// UpdateExtJWTSigner applies change to the signer with id and stores it after checking it.
// Its cached keys are dropped.
func (m *Model) UpdateExtJWTSigner(id string, change func(*ExtJWTSigner) error) (*ExtJWTSigner, error) {
	var out *ExtJWTSigner
	err := m.st.Update(func(tx *store.Tx) error {
		cur, err := m.auth.signers.Get(tx, id)
		if err != nil {
			return missing(err, "external JWT signer", id)
		}
		created := cur.CreatedAt
		if err := change(cur); err != nil {
			return err
		}
		cur.ID, cur.CreatedAt, cur.UpdatedAt = id, created, m.now()
		if err := m.checkSigner(tx, cur); err != nil {
			return err
		}
		if err := m.auth.signers.Put(tx, cur); err != nil {
			return conflict(err)
		}
		out = cur
		return nil
	})
	return out, err
}

// DeleteExtJWTSigner removes a signer no authentication policy names.
func (m *Model) DeleteExtJWTSigner(id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		if ok, err := m.auth.signers.Has(tx, id); err != nil {
			return err
		} else if !ok {
			return notFound("external JWT signer", id)
		}
		if err := m.auth.policies.Each(tx, func(p *AuthPolicy) error {
			if slices.Contains(p.Primary.ExtJWT.AllowedSigners, id) || p.Secondary.RequireExtJWTSigner == id {
				return errorf(CodeCanNotDeleteReferenced, "external JWT signer %q is named by authentication policy %q", id, p.Name)
			}
			return nil
		}); err != nil {
			return err
		}
		return m.auth.signers.Delete(tx, id)
	})
}

// jwtLeeway is the clock skew allowed on exp, nbf and iat.
const jwtLeeway = 30 * time.Second

// ExtJWT is a JWT that passed every check of its signer.
type ExtJWT struct {
	Signer *ExtJWTSigner
	Claims jwt.MapClaims
	// Subject is the value of the signer's claims property: the identity's id or externalId.
	Subject string
}

// errBadJWT is what a client learns of a rejected JWT; the reason is logged.
var errBadJWT = &Error{Code: CodeInvalidAuth, Message: "the JWT is not valid for any enabled external JWT signer"}

// BearerToken returns the token of an Authorization header value "Bearer <token>", or "".
func BearerToken(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// verifyExtJWT checks raw against a signer: signerID when not empty, otherwise the enabled
// signer whose issuer is the token's iss. Every rule must hold: the signer is enabled, iss
// and aud are the signer's, the signature verifies with the signer's certificate or the
// key-set entry named by kid, with an algorithm of that key (never the one the token claims
// unless the key allows it), exp is present and not passed, nbf and iat are not in the
// future, and the claims property holds a non-empty string.
func (m *Model) verifyExtJWT(ctx context.Context, raw, signerID string) (*ExtJWT, error) {
	if raw == "" {
		return nil, &Error{Code: CodeInvalidAuth, Message: "no JWT: send it as Authorization: Bearer <jwt>"}
	}
	var unverified jwt.MapClaims
	tok, _, err := jwt.NewParser().ParseUnverified(raw, &unverified)
	if err != nil {
		return nil, m.rejectJWT("", "not a JWT", err)
	}
	var signer *ExtJWTSigner
	err = m.st.View(func(tx *store.Tx) (err error) {
		if signerID != "" {
			signer, err = m.auth.signers.Get(tx, signerID)
			return err
		}
		iss, _ := unverified["iss"].(string)
		if iss == "" {
			return store.ErrNotFound
		}
		signer, err = m.auth.signers.Lookup(tx, "issuer", iss)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, m.rejectJWT(signerID, "no signer for the token's issuer", nil)
	}
	if err != nil {
		return nil, err
	}
	if !signer.Enabled {
		return nil, m.rejectJWT(signer.ID, "the signer is disabled", nil)
	}
	kid, _ := tok.Header["kid"].(string)
	if kid == "" {
		return nil, m.rejectJWT(signer.ID, "the token has no kid header", nil)
	}
	var key crypto.PublicKey
	var alg string
	if signer.JWKSEndpoint != "" {
		k, err := m.auth.jwks.key(ctx, signer, kid, m.opts.Now())
		if err != nil {
			return nil, m.rejectJWT(signer.ID, "key "+kid+" of the key set", err)
		}
		key, alg = k.key, k.alg
	} else {
		if kid != signer.Kid {
			return nil, m.rejectJWT(signer.ID, fmt.Sprintf("kid %q is not the signer's %q", kid, signer.Kid), nil)
		}
		cert, err := pki.ParsePEMCert([]byte(signer.CertPEM))
		if err != nil {
			return nil, m.rejectJWT(signer.ID, "the signer's certificate", err)
		}
		if now := m.opts.Now(); now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
			return nil, m.rejectJWT(signer.ID, "the signer's certificate is not valid now", nil)
		}
		key = cert.PublicKey
	}
	algs, err := algorithmsFor(key, alg)
	if err != nil {
		return nil, m.rejectJWT(signer.ID, "key "+kid, err)
	}
	claims := jwt.MapClaims{}
	_, err = jwt.NewParser(
		jwt.WithValidMethods(algs),
		jwt.WithIssuer(signer.Issuer),
		jwt.WithAudience(signer.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(jwtLeeway),
		jwt.WithTimeFunc(m.opts.Now),
	).ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return key, nil })
	if err != nil {
		return nil, m.rejectJWT(signer.ID, "verification", err)
	}
	prop := signer.ClaimsPropertyOrDefault()
	subject, _ := claims[prop].(string)
	if subject == "" {
		return nil, m.rejectJWT(signer.ID, "claim "+prop+" is missing or not a string", nil)
	}
	return &ExtJWT{Signer: signer, Claims: claims, Subject: subject}, nil
}

func (m *Model) rejectJWT(signerID, what string, err error) error {
	m.log.Info("external JWT rejected", "signer", signerID, "reason", what, "err", err)
	return errBadJWT
}

// algorithmsFor returns the JWS algorithms a public key verifies: the key decides, never the
// token. alg, a key-set entry's "alg", narrows them to that one.
func algorithmsFor(key crypto.PublicKey, alg string) ([]string, error) {
	var algs []string
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA keys must have at least 2048 bits, this one has %d", k.N.BitLen())
		}
		algs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		switch k.Curve.Params().Name {
		case "P-256":
			algs = []string{"ES256"}
		case "P-384":
			algs = []string{"ES384"}
		case "P-521":
			algs = []string{"ES512"}
		default:
			return nil, fmt.Errorf("ECDSA curve %s is not supported", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		algs = []string{"EdDSA"}
	default:
		return nil, fmt.Errorf("keys of type %T are not supported; use RSA, ECDSA or Ed25519", key)
	}
	if alg == "" {
		return algs, nil
	}
	if !slices.Contains(algs, alg) {
		return nil, fmt.Errorf("the key's alg %q does not suit its type (%s)", alg, strings.Join(algs, ", "))
	}
	return []string{alg}, nil
}

// identityForJWT returns, in tx, the identity a verified JWT names: by externalId when the
// signer says so, by id otherwise.
func (m *Model) identityForJWT(tx *store.Tx, v *ExtJWT) (*Identity, error) {
	if v.Signer.UseExternalID {
		return m.c.identities.Lookup(tx, "externalId", v.Subject)
	}
	return m.c.identities.Get(tx, v.Subject)
}

// AuthenticateExtJWT checks a JWT of an external signer and opens an API session for the
// identity it names, when that identity's policy allows the signer.
func (m *Model) AuthenticateExtJWT(ctx context.Context, raw string, login Login) (*APISession, *Identity, error) {
	v, err := m.verifyExtJWT(ctx, raw, "")
	if err != nil {
		return nil, nil, err
	}
	var ident *Identity
	err = m.st.View(func(tx *store.Tx) (err error) {
		ident, err = m.identityForJWT(tx, v)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, m.rejectJWT(v.Signer.ID, "no identity with "+m.subjectField(v.Signer)+" "+v.Subject, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	return m.openSessionFor(ident.ID, "", MethodExtJWT, "", login, v.Signer.ID)
}

func (m *Model) subjectField(s *ExtJWTSigner) string {
	if s.UseExternalID {
		return "externalId"
	}
	return "id"
}

// CheckSecondaryJWT enforces a policy's requireExtJwtSigner: when the identity's policy names
// a signer, raw must be a valid JWT of that signer naming the identity. Any failure is
// UNAUTHORIZED.
func (m *Model) CheckSecondaryJWT(ctx context.Context, ident *Identity, raw string) error {
	p, err := m.AuthPolicy(ident.AuthPolicyID)
	if err != nil {
		return err
	}
	signerID := p.Secondary.RequireExtJWTSigner
	if signerID == "" {
		return nil
	}
	v, err := m.verifyExtJWT(ctx, raw, signerID)
	if err == nil && !m.jwtNames(v, ident) {
		err = m.rejectJWT(signerID, "the token names another identity than the API session's", nil)
	}
	if CodeOf(err) == CodeInvalidAuth {
		return &Error{Code: CodeUnauthorized, Message: "the authentication policy requires a valid JWT of external signer " + signerID +
			" on every request (Authorization: Bearer <jwt>)", Cause: err}
	}
	return err
}

// RequiredSigner returns the signer the identity's policy requires on every request, or nil.
func (m *Model) RequiredSigner(ident *Identity) (*ExtJWTSigner, error) {
	p, err := m.AuthPolicy(ident.AuthPolicyID)
	if err != nil || p.Secondary.RequireExtJWTSigner == "" {
		return nil, err
	}
	return m.ExtJWTSigner(p.Secondary.RequireExtJWTSigner)
}

func (m *Model) jwtNames(v *ExtJWT, ident *Identity) bool {
	if v.Signer.UseExternalID {
		return ident.ExternalID != "" && ident.ExternalID == v.Subject
	}
	return ident.ID == v.Subject
}

// parseX5C returns the public key of the first certificate of a JWK's x5c.
func parseX5C(x5c []string) (crypto.PublicKey, error) {
	if len(x5c) == 0 {
		return nil, errors.New("empty x5c")
	}
	der, err := decodeB64(x5c[0], false)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return cert.PublicKey, nil
}
