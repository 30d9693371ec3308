package api

import (
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerExtJWT() {
	// The reference's path, and the spec's name for it.
	registerCRUD(s, management, adminOnly, s.extJWTSignerResource("/external-jwt-signers"))
	registerCRUD(s, management, adminOnly, s.extJWTSignerResource("/ext-jwt-signers"))
	s.handle(client, "GET", "/external-jwt-signers", public, "Lists the enabled external JWT signers clients may authenticate with", s.clientSigners)
}

// signerBody is the create, replace and patch body of an external JWT signer.
type signerBody struct {
	Name                          nullField[string]     `json:"name"`
	Enabled                       nullField[bool]       `json:"enabled"`
	Issuer                        nullField[string]     `json:"issuer"`
	Audience                      nullField[string]     `json:"audience"`
	JWKSEndpoint                  nullField[string]     `json:"jwksEndpoint"`
	CertPEM                       nullField[string]     `json:"certPem"`
	Kid                           nullField[string]     `json:"kid"`
	ClaimsProperty                nullField[string]     `json:"claimsProperty"`
	UseExternalID                 nullField[bool]       `json:"useExternalId"`
	EnrollToCertEnabled           nullField[bool]       `json:"enrollToCertEnabled"`
	EnrollToTokenEnabled          nullField[bool]       `json:"enrollToTokenEnabled"`
	EnrollAuthPolicyID            nullField[string]     `json:"enrollAuthPolicyId"`
	EnrollAttributeClaimsSelector nullField[string]     `json:"enrollAttributeClaimsSelector"`
	EnrollNameClaimsSelector      nullField[string]     `json:"enrollNameClaimsSelector"`
	ExternalAuthURL               nullField[string]     `json:"externalAuthUrl"`
	OpenIDConfigurationURL        nullField[string]     `json:"openIdConfigurationUrl"`
	ClientID                      nullField[string]     `json:"clientId"`
	Scopes                        nullField[[]string]   `json:"scopes"`
	TargetToken                   nullField[string]     `json:"targetToken"`
	Tags                          nullField[model.Tags] `json:"tags"`
}

func (b *signerBody) required() error {
	return required(req("name", b.Name.present()), req("enabled", b.Enabled.present()),
		req("issuer", b.Issuer.present()), req("audience", b.Audience.present()))
}

func (b *signerBody) apply(x *model.ExtJWTSigner) error {
	if b.Tags.present() {
		if err := checkTags("tags", b.Tags.v); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"name", b.Name.set && b.Name.null}, {"enabled", b.Enabled.set && b.Enabled.null},
		{"issuer", b.Issuer.set && b.Issuer.null}, {"audience", b.Audience.set && b.Audience.null}} {
		if f.set {
			return fieldErr(f.name, nil, "must not be null")
		}
	}
	b.Name.apply(&x.Name)
	b.Enabled.apply(&x.Enabled)
	b.Issuer.apply(&x.Issuer)
	b.Audience.apply(&x.Audience)
	b.JWKSEndpoint.apply(&x.JWKSEndpoint)
	b.CertPEM.apply(&x.CertPEM)
	b.Kid.apply(&x.Kid)
	b.ClaimsProperty.apply(&x.ClaimsProperty)
	b.UseExternalID.apply(&x.UseExternalID)
	b.EnrollToCertEnabled.apply(&x.EnrollToCertEnabled)
	b.EnrollToTokenEnabled.apply(&x.EnrollToTokenEnabled)
	b.EnrollAuthPolicyID.apply(&x.EnrollAuthPolicyID)
	b.EnrollAttributeClaimsSelector.apply(&x.EnrollAttributeClaimsSelector)
	b.EnrollNameClaimsSelector.apply(&x.EnrollNameClaimsSelector)
	b.ExternalAuthURL.apply(&x.ExternalAuthURL)
	b.OpenIDConfigurationURL.apply(&x.OpenIDConfigurationURL)
	b.ClientID.apply(&x.ClientID)
	b.Scopes.apply(&x.Scopes)
	b.TargetToken.apply(&x.TargetToken)
	b.Tags.apply(&x.Tags)
	return nil
}

func signerFields() []field[*model.ExtJWTSigner] {
	type v = *model.ExtJWTSigner
	return []field[v]{
		str("id", func(x v) string { return x.ID }),
		str("name", func(x v) string { return x.Name }),
		boolean("enabled", func(x v) bool { return x.Enabled }),
		str("issuer", func(x v) string { return x.Issuer }),
		str("audience", func(x v) string { return x.Audience }),
		str("kid", func(x v) string { return x.Kid }),
		str("fingerprint", func(x v) string { return x.Fingerprint }),
		str("jwksEndpoint", func(x v) string { return x.JWKSEndpoint }),
		boolean("useExternalId", func(x v) bool { return x.UseExternalID }),
		boolean("enrollToCertEnabled", func(x v) bool { return x.EnrollToCertEnabled }),
		boolean("enrollToTokenEnabled", func(x v) bool { return x.EnrollToTokenEnabled }),
		timeField("createdAt", func(x v) time.Time { return x.CreatedAt }),
		timeField("updatedAt", func(x v) time.Time { return x.UpdatedAt }),
	}
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func renderSigner(x *model.ExtJWTSigner) map[string]any {
	return map[string]any{
		"id": x.ID, "_links": links("external-jwt-signers", x.ID), "createdAt": x.CreatedAt, "updatedAt": x.UpdatedAt, "tags": tagsOf(x.Tags),
		"name":                          x.Name,
		"enabled":                       x.Enabled,
		"issuer":                        x.Issuer,
		"audience":                      x.Audience,
		"jwksEndpoint":                  nullable(x.JWKSEndpoint),
		"certPem":                       nullable(x.CertPEM),
		"kid":                           x.Kid,
		"fingerprint":                   nullable(x.Fingerprint),
		"commonName":                    x.CommonName,
		"notBefore":                     timeOrNil(x.NotBefore),
		"notAfter":                      timeOrNil(x.NotAfter),
		"claimsProperty":                x.ClaimsPropertyOrDefault(),
		"useExternalId":                 x.UseExternalID,
		"enrollToCertEnabled":           x.EnrollToCertEnabled,
		"enrollToTokenEnabled":          x.EnrollToTokenEnabled,
		"enrollAuthPolicyId":            x.EnrollAuthPolicyID,
		"enrollAttributeClaimsSelector": x.EnrollAttributeClaimsSelector,
		"enrollNameClaimsSelector":      orDefault(x.EnrollNameClaimsSelector, model.DefaultEnrollNameSelector),
		"externalAuthUrl":               x.ExternalAuthURL,
		"openIdConfigurationUrl":        x.OpenIDConfigurationURL,
		"clientId":                      x.ClientID,
		"scopes":                        nonNil(x.Scopes),
		"targetToken":                   orDefault(x.TargetToken, model.TargetTokenAccess),
	}
}

func (s *Server) extJWTSignerResource(path string) resource[*model.ExtJWTSigner] {
	type v = *model.ExtJWTSigner
	return resource[v]{
		path: path, entity: "external-jwt-signers", what: "external JWT signer", fields: signerFields(),
		render:  func(_ *call, x v) any { return renderSigner(x) },
		newBody: func() body[v] { return new(signerBody) },
		newRec:  func() v { return new(model.ExtJWTSigner) },
		reset:   func(x v) { *x = model.ExtJWTSigner{Base: model.Base{ID: x.ID, CreatedAt: x.CreatedAt}} },
		id:      func(x v) string { return x.ID },
		create:  s.m.CreateExtJWTSigner, get: s.m.ExtJWTSigner, all: s.m.ExtJWTSigners,
		update: s.m.UpdateExtJWTSigner, remove: func(id string) error { return inUse(s.m.DeleteExtJWTSigner(id)) },
	}
}

// renderClientSigner is the view of a signer unauthenticated clients get (spec 2.4, with
// the reference's clientExternalJwtSignerDetail types: the base entity fields, scopes as an
// array): what they need to start a flow with the provider, nothing of how tokens are
// checked.
func renderClientSigner(x *model.ExtJWTSigner) map[string]any {
	return map[string]any{
		"id": x.ID, "_links": links("external-jwt-signers", x.ID), "createdAt": x.CreatedAt, "updatedAt": x.UpdatedAt, "tags": tagsOf(x.Tags),
		"name":                   x.Name,
		"externalAuthUrl":        nullable(x.ExternalAuthURL),
		"openIdConfigurationUrl": nullable(x.OpenIDConfigurationURL),
		"clientId":               nullable(x.ClientID),
		"scopes":                 nonNil(x.Scopes),
		"audience":               x.Audience,
		"targetToken":            orDefault(x.TargetToken, model.TargetTokenAccess),
		"enrollToCertEnabled":    x.EnrollToCertEnabled,
		"enrollToTokenEnabled":   x.EnrollToTokenEnabled,
	}
}

func (s *Server) clientSigners(c *call) error {
	all, err := s.m.ExtJWTSigners()
	if err != nil {
		return err
	}
	enabled := all[:0]
	for _, x := range all {
		if x.Enabled {
			enabled = append(enabled, x)
		}
	}
	type v = *model.ExtJWTSigner
	fields := []field[v]{
		str("id", func(x v) string { return x.ID }),
		str("name", func(x v) string { return x.Name }),
	}
	return listOf(c, enabled, fields, func(x v) any { return renderClientSigner(x) })
}
