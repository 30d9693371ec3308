package api

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerCAs() {
	s.handle(management, "GET", "/cas", adminOnly, "Lists third-party certificate authorities", s.listCAs)
	s.handleCreate(management, "/cas", adminOnly, "Adds a third-party certificate authority", s.createCA)
	s.handle(management, "GET", "/cas/{id}", adminOnly, "Returns a certificate authority", s.getCA)
	s.handle(management, "PUT", "/cas/{id}", adminOnly, "Replaces a certificate authority's settings", s.updateCA)
	s.handle(management, "PATCH", "/cas/{id}", adminOnly, "Changes some of a certificate authority's settings", s.patchCA)
	s.handle(management, "DELETE", "/cas/{id}", adminOnly, "Deletes a certificate authority", s.deleteCA)
	s.handle(management, "GET", "/cas/{id}/jwt", adminOnly, "Returns the enrollment JWT of a certificate authority's auto-enrollment", s.caJWT)
	s.handle(management, "POST", "/cas/{id}/verify", adminOnly, "Verifies a certificate authority with a certificate signed by its key whose common name is the verification token", s.verifyCA)
}

func encodeCert(cert *x509.Certificate) []byte {
	if cert == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

func caFields() []field[*model.CA] {
	type a = *model.CA
	return []field[a]{
		str("id", func(x a) string { return x.ID }),
		str("name", func(x a) string { return x.Name }),
		str("fingerprint", func(x a) string { return x.Fingerprint }),
		boolean("isVerified", func(x a) bool { return x.IsVerified }),
		boolean("isAutoCaEnrollmentEnabled", func(x a) bool { return x.IsAutoCaEnrollmentEnabled }),
		boolean("isOttCaEnrollmentEnabled", func(x a) bool { return x.IsOttCaEnrollmentEnabled }),
		boolean("isAuthEnabled", func(x a) bool { return x.IsAuthEnabled }),
		strs("identityRoles", func(x a) []string { return x.IdentityRoles }),
		timeField("createdAt", func(x a) time.Time { return x.CreatedAt }),
	}
}

func renderCA(ca *model.CA) map[string]any {
	out := map[string]any{
		"id": ca.ID, "_links": links("cas", ca.ID),
		"createdAt": ca.CreatedAt, "updatedAt": ca.UpdatedAt, "tags": tagsOf(ca.Tags),
		"name": ca.Name, "certPem": ca.CertPEM, "fingerprint": ca.Fingerprint,
		"isVerified":                ca.IsVerified,
		"isAutoCaEnrollmentEnabled": ca.IsAutoCaEnrollmentEnabled,
		"isOttCaEnrollmentEnabled":  ca.IsOttCaEnrollmentEnabled,
		"isAuthEnabled":             ca.IsAuthEnabled,
		"identityRoles":             nonNil(ca.IdentityRoles),
		"identityNameFormat":        ca.IdentityNameFormat,
		"externalIdClaim":           nil,
	}
	if x := ca.ExternalIDClaim; x != nil {
		out["externalIdClaim"] = map[string]any{
			"location": x.Location, "matcher": x.Matcher, "matcherCriteria": x.MatcherCriteria,
			"parser": x.Parser, "parserCriteria": x.ParserCriteria, "index": x.Index,
		}
	}
	if !ca.IsVerified {
		out["verificationToken"] = ca.VerificationToken
	}
	return out
}

func (s *Server) listCAs(c *call) error {
	list, err := s.m.CAs()
	if err != nil {
		return err
	}
	return listOf(c, list, caFields(), func(ca *model.CA) any { return renderCA(ca) })
}

func (s *Server) getCA(c *call) error {
	ca, err := s.m.GetCA(c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, renderCA(ca))
}

// caBody is the create, update and patch body of a certificate authority.
type caBody struct {
	Name                      *string     `json:"name"`
	CertPEM                   *string     `json:"certPem"`
	IsAutoCaEnrollmentEnabled *bool       `json:"isAutoCaEnrollmentEnabled"`
	IsOttCaEnrollmentEnabled  *bool       `json:"isOttCaEnrollmentEnabled"`
	IsAuthEnabled             *bool       `json:"isAuthEnabled"`
	IdentityRoles             *[]string   `json:"identityRoles"`
	IdentityNameFormat        *string     `json:"identityNameFormat"`
	Tags                      *model.Tags `json:"tags"`
	// ExternalIDClaim: null removes the claim.
	ExternalIDClaim nullField[claimBody] `json:"externalIdClaim"`
}

// claimBody is an externalIdClaim: every field is required on create and replace; a patch
// changes the fields it names.
type claimBody struct {
	Location        *string `json:"location"`
	Matcher         *string `json:"matcher"`
	MatcherCriteria *string `json:"matcherCriteria"`
	Parser          *string `json:"parser"`
	ParserCriteria  *string `json:"parserCriteria"`
	Index           *int64  `json:"index"`
}

func (c *claimBody) required() error {
	return required(req("externalIdClaim.location", c.Location != nil), req("externalIdClaim.matcher", c.Matcher != nil),
		req("externalIdClaim.matcherCriteria", c.MatcherCriteria != nil), req("externalIdClaim.parser", c.Parser != nil),
		req("externalIdClaim.parserCriteria", c.ParserCriteria != nil), req("externalIdClaim.index", c.Index != nil))
}

// empty reports whether the body names no field: the ziti CLI's CA update sends one always.
func (c *claimBody) empty() bool {
	return c.Location == nil && c.Matcher == nil && c.MatcherCriteria == nil && c.Parser == nil &&
		c.ParserCriteria == nil && c.Index == nil
}

func (c *claimBody) apply(x *model.ExternalIDClaim) {
	set(&x.Location, c.Location)
	set(&x.Matcher, c.Matcher)
	set(&x.MatcherCriteria, c.MatcherCriteria)
	set(&x.Parser, c.Parser)
	set(&x.ParserCriteria, c.ParserCriteria)
	set(&x.Index, c.Index)
}

// check validates the body; whole: the claim, when given, must name every field.
func (b *caBody) check(whole bool) error {
	if whole && b.ExternalIDClaim.present() {
		if err := b.ExternalIDClaim.v.required(); err != nil {
			return err
		}
	}
	if b.Tags != nil {
		return checkTags("tags", *b.Tags)
	}
	return nil
}

func (b *caBody) apply(ca *model.CA) {
	switch {
	case b.ExternalIDClaim.present() && ca.ExternalIDClaim == nil && b.ExternalIDClaim.v.empty():
		// A patch of no field leaves a CA without a claim without one.
	case b.ExternalIDClaim.present():
		if ca.ExternalIDClaim == nil {
			ca.ExternalIDClaim = &model.ExternalIDClaim{}
		}
		b.ExternalIDClaim.v.apply(ca.ExternalIDClaim)
	case b.ExternalIDClaim.set:
		ca.ExternalIDClaim = nil
	}
	set(&ca.Name, b.Name)
	set(&ca.IsAutoCaEnrollmentEnabled, b.IsAutoCaEnrollmentEnabled)
	set(&ca.IsOttCaEnrollmentEnabled, b.IsOttCaEnrollmentEnabled)
	set(&ca.IsAuthEnabled, b.IsAuthEnabled)
	set(&ca.IdentityRoles, b.IdentityRoles)
	set(&ca.IdentityNameFormat, b.IdentityNameFormat)
	set(&ca.Tags, b.Tags)
}

func (s *Server) createCA(c *call) error {
	var b caBody
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if err := required(req("name", b.Name != nil), req("certPem", b.CertPEM != nil),
		req("isAuthEnabled", b.IsAuthEnabled != nil), req("isAutoCaEnrollmentEnabled", b.IsAutoCaEnrollmentEnabled != nil),
		req("isOttCaEnrollmentEnabled", b.IsOttCaEnrollmentEnabled != nil), req("identityRoles", b.IdentityRoles != nil)); err != nil {
		return err
	}
	if err := b.check(true); err != nil {
		return err
	}
	var proto model.CA
	b.apply(&proto)
	ca, err := s.m.CreateCA(model.CACreate{
		Name: proto.Name, CertPEM: *b.CertPEM, IsAutoCaEnrollmentEnabled: proto.IsAutoCaEnrollmentEnabled,
		IsOttCaEnrollmentEnabled: proto.IsOttCaEnrollmentEnabled, IsAuthEnabled: proto.IsAuthEnabled,
		IdentityRoles: proto.IdentityRoles, IdentityNameFormat: proto.IdentityNameFormat,
		ExternalIDClaim: proto.ExternalIDClaim, Tags: proto.Tags,
	})
	if err != nil {
		return err
	}
	return c.created("cas", ca.ID)
}

func (s *Server) changeCA(c *call, replace bool) error {
	var b caBody
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if b.CertPEM != nil {
		return fieldErr("certPem", nil, "cannot change; add a new certificate authority instead")
	}
	if replace {
		if err := required(req("name", b.Name != nil), req("isAuthEnabled", b.IsAuthEnabled != nil),
			req("isAutoCaEnrollmentEnabled", b.IsAutoCaEnrollmentEnabled != nil), req("isOttCaEnrollmentEnabled", b.IsOttCaEnrollmentEnabled != nil),
			req("identityRoles", b.IdentityRoles != nil), req("identityNameFormat", b.IdentityNameFormat != nil)); err != nil {
			return err
		}
	}
	if err := b.check(replace); err != nil {
		return err
	}
	_, err := s.m.UpdateCA(c.path("id"), func(ca *model.CA) error {
		if replace {
			ca.Tags, ca.ExternalIDClaim, ca.IdentityNameFormat = nil, nil, ""
		}
		b.apply(ca)
		return nil
	})
	if err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) updateCA(c *call) error { return s.changeCA(c, true) }
func (s *Server) patchCA(c *call) error  { return s.changeCA(c, false) }

func (s *Server) deleteCA(c *call) error {
	if err := s.m.DeleteCA(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) verifyCA(c *call) error {
	body, err := readBody(c.w, c.r)
	if err != nil {
		return err
	}
	if err := s.m.VerifyCA(c.path("id"), string(body)); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) caJWT(c *call) error {
	token, err := s.m.CAJWT(c.path("id"))
	if err != nil {
		return err
	}
	c.w.Header().Set("Content-Type", "application/jwt")
	c.w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(c.w, token) // the client is gone when this fails
	return nil
}
