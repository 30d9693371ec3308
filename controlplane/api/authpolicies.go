package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerAuthPolicies() {
	registerCRUD(s, management, adminOnly, s.authPolicyResource())
}

// authPolicyBody is the create, replace and patch body of an authentication policy. Create
// and replace need every field, as in the reference; patch any.
type authPolicyBody struct {
	Name    *string `json:"name"`
	Primary *struct {
		Cert *struct {
			Allowed           *bool `json:"allowed"`
			AllowExpiredCerts *bool `json:"allowExpiredCerts"`
		} `json:"cert"`
		Updb *struct {
			Allowed                *bool `json:"allowed"`
			MinPasswordLength      *int  `json:"minPasswordLength"`
			RequireSpecialChar     *bool `json:"requireSpecialChar"`
			RequireNumberChar      *bool `json:"requireNumberChar"`
			RequireMixedCase       *bool `json:"requireMixedCase"`
			MaxAttempts            *int  `json:"maxAttempts"`
			LockoutDurationMinutes *int  `json:"lockoutDurationMinutes"`
		} `json:"updb"`
		ExtJWT *struct {
			Allowed        *bool     `json:"allowed"`
			AllowedSigners *[]string `json:"allowedSigners"`
		} `json:"extJwt"`
	} `json:"primary"`
	Secondary *struct {
		RequireTotp         *bool             `json:"requireTotp"`
		RequireExtJWTSigner nullField[string] `json:"requireExtJwtSigner"`
	} `json:"secondary"`
	Tags *model.Tags `json:"tags"`
}

func (b *authPolicyBody) required() error {
	if err := required(req("name", b.Name != nil), req("primary", b.Primary != nil), req("secondary", b.Secondary != nil)); err != nil {
		return err
	}
	p := b.Primary
	if err := required(req("primary.cert", p.Cert != nil), req("primary.updb", p.Updb != nil), req("primary.extJwt", p.ExtJWT != nil)); err != nil {
		return err
	}
	u := p.Updb
	return required(
		req("primary.cert.allowed", p.Cert.Allowed != nil), req("primary.cert.allowExpiredCerts", p.Cert.AllowExpiredCerts != nil),
		req("primary.updb.allowed", u.Allowed != nil), req("primary.updb.minPasswordLength", u.MinPasswordLength != nil),
		req("primary.updb.requireSpecialChar", u.RequireSpecialChar != nil), req("primary.updb.requireNumberChar", u.RequireNumberChar != nil),
		req("primary.updb.requireMixedCase", u.RequireMixedCase != nil), req("primary.updb.maxAttempts", u.MaxAttempts != nil),
		req("primary.updb.lockoutDurationMinutes", u.LockoutDurationMinutes != nil),
		req("primary.extJwt.allowed", p.ExtJWT.Allowed != nil), req("primary.extJwt.allowedSigners", p.ExtJWT.AllowedSigners != nil),
		req("secondary.requireTotp", b.Secondary.RequireTotp != nil),
	)
}

func (b *authPolicyBody) apply(p *model.AuthPolicy) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&p.Name, b.Name)
	set(&p.Tags, b.Tags)
	if pr := b.Primary; pr != nil {
		if c := pr.Cert; c != nil {
			set(&p.Primary.Cert.Allowed, c.Allowed)
			set(&p.Primary.Cert.AllowExpiredCerts, c.AllowExpiredCerts)
		}
		if u := pr.Updb; u != nil {
			d := &p.Primary.Updb
			set(&d.Allowed, u.Allowed)
			set(&d.MinPasswordLength, u.MinPasswordLength)
			set(&d.RequireSpecialChar, u.RequireSpecialChar)
			set(&d.RequireNumberChar, u.RequireNumberChar)
			set(&d.RequireMixedCase, u.RequireMixedCase)
			set(&d.MaxAttempts, u.MaxAttempts)
			set(&d.LockoutDurationMinutes, u.LockoutDurationMinutes)
		}
		if e := pr.ExtJWT; e != nil {
			set(&p.Primary.ExtJWT.Allowed, e.Allowed)
			set(&p.Primary.ExtJWT.AllowedSigners, e.AllowedSigners)
		}
	}
	if sec := b.Secondary; sec != nil {
		set(&p.Secondary.RequireTotp, sec.RequireTotp)
		sec.RequireExtJWTSigner.apply(&p.Secondary.RequireExtJWTSigner)
	}
	return nil
}

func renderAuthPolicy(p *model.AuthPolicy) map[string]any {
	u := p.Primary.Updb
	return map[string]any{
		"id": p.ID, "_links": links("auth-policies", p.ID), "createdAt": p.CreatedAt, "updatedAt": p.UpdatedAt, "tags": tagsOf(p.Tags),
		"name": p.Name,
		"primary": map[string]any{
			"cert": map[string]any{"allowed": p.Primary.Cert.Allowed, "allowExpiredCerts": p.Primary.Cert.AllowExpiredCerts},
			"updb": map[string]any{"allowed": u.Allowed, "minPasswordLength": u.MinPasswordLength,
				"requireSpecialChar": u.RequireSpecialChar, "requireNumberChar": u.RequireNumberChar, "requireMixedCase": u.RequireMixedCase,
				"maxAttempts": u.MaxAttempts, "lockoutDurationMinutes": u.LockoutDurationMinutes},
			"extJwt": map[string]any{"allowed": p.Primary.ExtJWT.Allowed, "allowedSigners": nonNil(p.Primary.ExtJWT.AllowedSigners)},
		},
		"secondary": map[string]any{"requireTotp": p.Secondary.RequireTotp, "requireExtJwtSigner": nullable(p.Secondary.RequireExtJWTSigner)},
	}
}

func (s *Server) authPolicyResource() resource[*model.AuthPolicy] {
	type v = *model.AuthPolicy
	fields := []field[v]{
		str("id", func(p v) string { return p.ID }),
		str("name", func(p v) string { return p.Name }),
		timeField("createdAt", func(p v) time.Time { return p.CreatedAt }),
		timeField("updatedAt", func(p v) time.Time { return p.UpdatedAt }),
	}
	return resource[v]{
		path: "/auth-policies", entity: "auth-policies", what: "authentication policy", fields: fields,
		render:  func(_ *call, p v) any { return renderAuthPolicy(p) },
		newBody: func() body[v] { return new(authPolicyBody) },
		newRec:  func() v { return new(model.AuthPolicy) },
		reset:   func(p v) { *p = model.AuthPolicy{Base: model.Base{ID: p.ID, CreatedAt: p.CreatedAt}} },
		id:      func(p v) string { return p.ID },
		create:  s.m.CreateAuthPolicy, get: s.m.AuthPolicy, all: s.m.AuthPolicies,
		update: s.m.UpdateAuthPolicy, remove: func(id string) error { return inUse(s.m.DeleteAuthPolicy(id)) },
	}
}

// inUse answers a delete refused because the entity is referenced with 400, the status the
// reference lists for the deletes of authentication policies and external JWT signers
// (others answer 409).
func inUse(err error) error {
	var me *model.Error
	if errors.As(err, &me) && me.Code == model.CodeCanNotDeleteReferenced {
		return &apiErr{code: me.Code, message: me.Message, status: http.StatusBadRequest}
	}
	return err
}
