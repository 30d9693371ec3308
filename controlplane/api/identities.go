package api

import (
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerIdentities() {
	s.handle(management, "GET", "/identities", adminOnly, "Lists identities", s.listIdentities)
	s.handleCreate(management, "/identities", adminOnly, "Creates an identity, with an enrollment when asked", s.createIdentity)
	s.handle(management, "GET", "/identities/{id}", adminOnly, "Returns an identity", s.getIdentity)
	s.handle(management, "PUT", "/identities/{id}", adminOnly, "Replaces an identity's fields", s.updateIdentity)
	s.handle(management, "PATCH", "/identities/{id}", adminOnly, "Changes some of an identity's fields", s.patchIdentity)
	s.handle(management, "DELETE", "/identities/{id}", adminOnly, "Deletes an identity and everything that belongs to it alone", s.deleteIdentity)
	s.handle(management, "GET", "/identities/{id}/enrollments", adminOnly, "Lists an identity's pending enrollments", s.identityEnrollments)
	s.handle(management, "GET", "/identities/{id}/authenticators", adminOnly, "Lists an identity's authenticators", s.identityAuthenticators)
	s.handle(management, "POST", "/identities/{id}/disable", adminOnly, "Disables an identity for durationMinutes (0: until enabled) and ends its API sessions", s.disableIdentity)
	s.handle(management, "POST", "/identities/{id}/enable", adminOnly, "Clears an identity's disabled state", s.enableIdentity)
	s.handle(management, "GET", "/identity-types", adminOnly, "Lists the identity types", s.identityTypes)
	s.handle(management, "GET", "/identity-types/{id}", adminOnly, "Returns an identity type", s.identityType)

	s.handle(management, "GET", "/enrollments", adminOnly, "Lists pending enrollments", s.listEnrollments)
	s.handleCreate(management, "/enrollments", adminOnly, "Creates an enrollment for an existing identity", s.createEnrollment)
	s.handle(management, "GET", "/enrollments/{id}", adminOnly, "Returns a pending enrollment", s.getEnrollment)
	s.handle(management, "DELETE", "/enrollments/{id}", adminOnly, "Cancels a pending enrollment", s.deleteEnrollment)
	s.handle(management, "POST", "/enrollments/{id}/refresh", adminOnly, "Gives a pending enrollment a new token and expiry", s.refreshEnrollment)

	s.handle(management, "GET", "/authenticators", adminOnly, "Lists authenticators", s.listAuthenticators)
	s.handle(management, "GET", "/authenticators/{id}", adminOnly, "Returns an authenticator", s.getAuthenticator)
	s.handle(management, "DELETE", "/authenticators/{id}", adminOnly, "Deletes an authenticator", s.deleteAuthenticator)
}

func identityFields() []field[*model.IdentityView] {
	type v = *model.IdentityView
	return []field[v]{
		str("id", func(i v) string { return i.ID }),
		str("name", func(i v) string { return i.Name }),
		str("type", func(i v) string { return i.Type }),
		str("typeId", func(i v) string { return i.Type }),
		str("externalId", func(i v) string { return i.ExternalID }),
		str("authPolicyId", func(i v) string { return i.AuthPolicyID }),
		boolean("isAdmin", func(i v) bool { return i.IsAdmin }),
		boolean("isDefaultAdmin", func(i v) bool { return i.IsDefaultAdmin }),
		boolean("hasApiSession", func(i v) bool { return i.HasAPISession }),
		boolean("disabled", func(i v) bool { return i.Disabled }),
		strs("roleAttributes", func(i v) []string { return i.RoleAttributes }),
		timeField("createdAt", func(i v) time.Time { return i.CreatedAt }),
		timeField("updatedAt", func(i v) time.Time { return i.UpdatedAt }),
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func orEmptyMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// renderIdentity is the identity detail of the API.
func renderIdentity(v *model.IdentityView) map[string]any {
	auths := map[string]any{}
	for _, a := range v.Authenticators {
		switch a.Method {
		case model.MethodCert:
			auths["cert"] = map[string]any{"id": a.ID, "fingerprint": a.Fingerprint}
		case model.MethodUpdb:
			auths["updb"] = map[string]any{"id": a.ID, "username": a.Username}
		}
	}
	enrollment := map[string]any{}
	for _, e := range v.Enrollments {
		d := map[string]any{"id": e.ID, "jwt": e.JWT, "token": e.Token, "expiresAt": e.ExpiresAt}
		if e.Method == model.EnrollOTTCA {
			d["caId"] = e.CAID
			if ca := v.CAs[e.CAID]; ca != nil {
				d["ca"] = ref("cas", ca.ID, ca.Name)
			}
		}
		enrollment[e.Method] = d
	}
	var externalID any
	if v.ExternalID != "" {
		externalID = v.ExternalID
	}
	status := "offline"
	return map[string]any{
		"id": v.ID, "_links": links("identities", v.ID),
		"createdAt": v.CreatedAt, "updatedAt": v.UpdatedAt, "tags": tagsOf(v.Tags),
		"name":                       v.Name,
		"type":                       ref("identity-types", v.Type, v.Type),
		"typeId":                     v.Type,
		"isAdmin":                    v.IsAdmin,
		"isDefaultAdmin":             v.IsDefaultAdmin,
		"externalId":                 externalID,
		"roleAttributes":             nonNil(v.RoleAttributes),
		"authPolicyId":               v.AuthPolicyID,
		"authPolicy":                 ref("auth-policies", v.AuthPolicyID, v.AuthPolicyName),
		"authenticators":             auths,
		"enrollment":                 enrollment,
		"appData":                    orEmptyMap(v.AppData),
		"defaultHostingCost":         v.DefaultHostingCost,
		"defaultHostingPrecedence":   orDefault(v.DefaultHostingPrecedence, "default"),
		"serviceHostingCosts":        orEmptyMap(v.ServiceHostingCosts),
		"serviceHostingPrecedences":  orEmptyMap(v.ServiceHostingPrecedences),
		"permissions":                nonNil(v.Permissions),
		"envInfo":                    v.EnvInfo,
		"sdkInfo":                    v.SDKInfo,
		"hasApiSession":              v.HasAPISession,
		"hasEdgeRouterConnection":    false,
		"edgeRouterConnectionStatus": status,
		"isMfaEnabled":               v.MFAEnabled,
		"disabled":                   v.Disabled,
		"disabledAt":                 timePtrOrNil(v.DisabledAt),
		"disabledUntil":              timePtrOrNil(v.DisabledUntil),
	}
}

// timePtrOrNil renders an optional time: null when absent.
func timePtrOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (s *Server) listIdentities(c *call) error {
	if err := refuseAsIdentity(c); err != nil {
		return err
	}
	list, err := s.m.IdentityViews()
	if err != nil {
		return err
	}
	list, err = byRoles(c, list, func(v *model.IdentityView) string { return v.ID }, func(v *model.IdentityView) []string { return v.RoleAttributes })
	if err != nil {
		return err
	}
	return listOf(c, list, identityFields(), func(v *model.IdentityView) any { return renderIdentity(v) })
}

func (s *Server) getIdentity(c *call) error {
	v, err := s.m.IdentityView(c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, renderIdentity(v))
}

// identityBody is the create, update and patch body of an identity. Pointers tell absent
// fields from zero values.
type identityBody struct {
	Name                      *string            `json:"name"`
	Type                      *string            `json:"type"`
	IsAdmin                   *bool              `json:"isAdmin"`
	ExternalID                *string            `json:"externalId"`
	RoleAttributes            *[]string          `json:"roleAttributes"`
	AuthPolicyID              *string            `json:"authPolicyId"`
	Tags                      *model.Tags        `json:"tags"`
	AppData                   *map[string]any    `json:"appData"`
	DefaultHostingCost        *int               `json:"defaultHostingCost"`
	DefaultHostingPrecedence  *string            `json:"defaultHostingPrecedence"`
	ServiceHostingCosts       *map[string]int    `json:"serviceHostingCosts"`
	ServiceHostingPrecedences *map[string]string `json:"serviceHostingPrecedences"`
	Permissions               *[]string          `json:"permissions"`
	Enrollment                *struct {
		OTT   *bool   `json:"ott"`
		OTTCA *string `json:"ottca"`
		Updb  *string `json:"updb"`
	} `json:"enrollment"`
}

// apply copies the fields present in the body onto the identity.
func (b *identityBody) apply(i *model.Identity) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
		i.Tags = *b.Tags
	}
	set(&i.Name, b.Name)
	set(&i.Type, b.Type)
	set(&i.IsAdmin, b.IsAdmin)
	set(&i.ExternalID, b.ExternalID)
	set(&i.RoleAttributes, b.RoleAttributes)
	set(&i.AuthPolicyID, b.AuthPolicyID)
	set(&i.AppData, b.AppData)
	set(&i.DefaultHostingCost, b.DefaultHostingCost)
	set(&i.DefaultHostingPrecedence, b.DefaultHostingPrecedence)
	set(&i.ServiceHostingCosts, b.ServiceHostingCosts)
	set(&i.ServiceHostingPrecedences, b.ServiceHostingPrecedences)
	set(&i.Permissions, b.Permissions)
	return nil
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

func (s *Server) createIdentity(c *call) error {
	var b identityBody
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if err := required(req("name", b.Name != nil), req("type", b.Type != nil), req("isAdmin", b.IsAdmin != nil)); err != nil {
		return err
	}
	var proto model.Identity
	if err := b.apply(&proto); err != nil {
		return err
	}
	in := model.IdentityCreate{
		Name: proto.Name, Type: proto.Type, IsAdmin: proto.IsAdmin, ExternalID: proto.ExternalID,
		RoleAttributes: proto.RoleAttributes, AuthPolicyID: proto.AuthPolicyID, Tags: proto.Tags,
		Hosting: proto.Hosting, AppData: proto.AppData, Permissions: proto.Permissions,
	}
	if e := b.Enrollment; e != nil {
		in.Enrollment = &model.EnrollmentRequest{}
		set(&in.Enrollment.OTT, e.OTT)
		set(&in.Enrollment.OTTCA, e.OTTCA)
		set(&in.Enrollment.Updb, e.Updb)
	}
	id, err := s.m.CreateIdentity(in)
	if err != nil {
		return err
	}
	return c.created("identities", id.ID)
}

func (s *Server) changeIdentity(c *call, replace bool) error {
	var b identityBody
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if b.Enrollment != nil {
		return fieldErr("enrollment", nil, "is set at creation; use /enrollments to add one")
	}
	if replace {
		if err := required(req("name", b.Name != nil), req("type", b.Type != nil), req("isAdmin", b.IsAdmin != nil)); err != nil {
			return err
		}
	}
	_, err := s.m.UpdateIdentity(c.path("id"), func(i *model.Identity) error {
		if replace {
			// A replace resets every optional field the body leaves out.
			*i = model.Identity{Base: model.Base{ID: i.ID, CreatedAt: i.CreatedAt}, IsDefaultAdmin: i.IsDefaultAdmin,
				AuthPolicyID: model.DefaultAuthPolicyID, EnvInfo: i.EnvInfo, SDKInfo: i.SDKInfo}
		}
		return b.apply(i)
	})
	if err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) updateIdentity(c *call) error { return s.changeIdentity(c, true) }
func (s *Server) patchIdentity(c *call) error  { return s.changeIdentity(c, false) }

func (s *Server) deleteIdentity(c *call) error {
	if err := s.m.DeleteIdentity(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}

// disableIdentity is POST /identities/{id}/disable with the reference's disableParams:
// durationMinutes, 0 or absent for until enabled.
func (s *Server) disableIdentity(c *call) error {
	var b struct {
		DurationMinutes *int64 `json:"durationMinutes"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	var minutes int64
	set(&minutes, b.DurationMinutes)
	if minutes < 0 || minutes > maxDisableMinutes {
		return fieldErr("durationMinutes", minutes, "must be 0 (until enabled) to %d minutes", maxDisableMinutes)
	}
	if err := s.m.DisableIdentity(c.path("id"), time.Duration(minutes)*time.Minute); err != nil {
		return err
	}
	return c.empty()
}

// maxDisableMinutes keeps durationMinutes × one minute within a time.Duration (about 290
// years); 0 disables for longer.
const maxDisableMinutes = int64(1<<63-1) / int64(time.Minute)

func (s *Server) enableIdentity(c *call) error {
	if err := s.m.EnableIdentity(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) identityEnrollments(c *call) error {
	v, err := s.m.IdentityView(c.path("id"))
	if err != nil {
		return err
	}
	return listOf(c, v.Enrollments, enrollmentFields(s.identityNames()), func(e *model.Enrollment) any { return renderEnrollment(e, v.Identity) })
}

func (s *Server) identityAuthenticators(c *call) error {
	v, err := s.m.IdentityView(c.path("id"))
	if err != nil {
		return err
	}
	return listOf(c, v.Authenticators, authenticatorFields(s.identityNames()), func(a *model.Authenticator) any { return renderAuthenticator(a, v.Identity) })
}

func renderIdentityType(t string) map[string]any {
	return map[string]any{"id": t, "name": t, "_links": links("identity-types", t),
		"createdAt": time.Time{}, "updatedAt": time.Time{}, "tags": map[string]any{}}
}

func (s *Server) identityTypes(c *call) error {
	fields := []field[string]{
		str("id", func(t string) string { return t }),
		str("name", func(t string) string { return t }),
	}
	return listOf(c, model.IdentityTypes(), fields, func(t string) any { return renderIdentityType(t) })
}

func (s *Server) identityType(c *call) error {
	for _, t := range model.IdentityTypes() {
		if t == c.path("id") {
			return c.data(http.StatusOK, renderIdentityType(t))
		}
	}
	return newErr(codeNotFound, "identity type %q not found", c.path("id"))
}

// enrollmentFields are the filterable fields of enrollments; identityName names an identity
// by id (identity.name).
func enrollmentFields(identityName func(string) string) []field[*model.Enrollment] {
	type e = *model.Enrollment
	return []field[e]{
		str("id", func(x e) string { return x.ID }),
		str("method", func(x e) string { return x.Method }),
		str("identityId", func(x e) string { return x.IdentityID }),
		str("identity", func(x e) string { return x.IdentityID }),
		str("identity.name", func(x e) string { return identityName(x.IdentityID) }),
		str("caId", func(x e) string { return x.CAID }),
		str("edgeRouterId", func(x e) string { return x.EdgeRouterID }),
		str("username", func(x e) string { return x.Username }),
		str("token", func(x e) string { return x.Token }),
		timeField("expiresAt", func(x e) time.Time { return x.ExpiresAt }),
		timeField("createdAt", func(x e) time.Time { return x.CreatedAt }),
	}
}

func renderEnrollment(e *model.Enrollment, ident *model.Identity) map[string]any {
	out := map[string]any{
		"id": e.ID, "_links": links("enrollments", e.ID),
		"createdAt": e.CreatedAt, "updatedAt": e.UpdatedAt, "tags": tagsOf(e.Tags),
		"method": e.Method, "token": e.Token, "jwt": e.JWT, "expiresAt": e.ExpiresAt,
		"identityId": e.IdentityID, "caId": nil, "username": e.Username,
	}
	if ident != nil {
		out["identity"] = ref("identities", ident.ID, ident.Name)
	}
	if e.CAID != "" {
		out["caId"] = e.CAID
	}
	if e.EdgeRouterID != "" {
		out["edgeRouterId"] = e.EdgeRouterID
		out["edgeRouter"] = ref("edge-routers", e.EdgeRouterID, "")
	}
	return out
}

func (s *Server) listEnrollments(c *call) error {
	list, err := s.m.Enrollments()
	if err != nil {
		return err
	}
	names := map[string]*model.Identity{}
	return listOf(c, list, enrollmentFields(s.identityNames()), func(e *model.Enrollment) any {
		ident, ok := names[e.IdentityID]
		if !ok {
			ident, _ = s.m.Identity(e.IdentityID)
			names[e.IdentityID] = ident
		}
		return renderEnrollment(e, ident)
	})
}

func (s *Server) getEnrollment(c *call) error {
	e, err := s.m.Enrollment(c.path("id"))
	if err != nil {
		return err
	}
	ident, _ := s.m.Identity(e.IdentityID)
	return c.data(http.StatusOK, renderEnrollment(e, ident))
}

func (s *Server) createEnrollment(c *call) error {
	var b struct {
		Method     *string    `json:"method"`
		IdentityID *string    `json:"identityId"`
		ExpiresAt  *time.Time `json:"expiresAt"`
		CAID       *string    `json:"caId"`
		Username   *string    `json:"username"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if err := required(req("method", b.Method != nil), req("identityId", b.IdentityID != nil), req("expiresAt", b.ExpiresAt != nil)); err != nil {
		return err
	}
	var r model.EnrollmentRequest
	switch *b.Method {
	case model.EnrollOTT:
		r.OTT = true
	case model.EnrollOTTCA:
		if err := required(req("caId", b.CAID != nil)); err != nil {
			return err
		}
		r.OTTCA = *b.CAID
	case model.EnrollUpdb:
		if err := required(req("username", b.Username != nil)); err != nil {
			return err
		}
		r.Updb = *b.Username
	default:
		return fieldErr("method", *b.Method, "is not an enrollment method; allowed: ott, ottca, updb")
	}
	e, err := s.m.CreateEnrollment(*b.IdentityID, r, *b.ExpiresAt)
	if err != nil {
		return err
	}
	return c.created("enrollments", e.ID)
}

func (s *Server) deleteEnrollment(c *call) error {
	if err := s.m.DeleteEnrollment(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}

// decodeExpiresAt reads a body of one required field, expiresAt (re-enroll, refresh).
func decodeExpiresAt(c *call) (time.Time, error) {
	var b struct {
		ExpiresAt *time.Time `json:"expiresAt"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return time.Time{}, err
	}
	if err := required(req("expiresAt", b.ExpiresAt != nil)); err != nil {
		return time.Time{}, err
	}
	return *b.ExpiresAt, nil
}

func (s *Server) refreshEnrollment(c *call) error {
	expiresAt, err := decodeExpiresAt(c)
	if err != nil {
		return err
	}
	e, err := s.m.RefreshEnrollment(c.path("id"), expiresAt)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{"id": e.ID, "_links": links("enrollments", e.ID)})
}

// authenticatorFields are the filterable fields of authenticators; identityName names an
// identity by id (identity.name).
func authenticatorFields(identityName func(string) string) []field[*model.Authenticator] {
	type a = *model.Authenticator
	return []field[a]{
		str("id", func(x a) string { return x.ID }),
		str("method", func(x a) string { return x.Method }),
		str("identityId", func(x a) string { return x.IdentityID }),
		str("identity", func(x a) string { return x.IdentityID }),
		str("identity.name", func(x a) string { return identityName(x.IdentityID) }),
		str("username", func(x a) string { return x.Username }),
		str("fingerprint", func(x a) string { return x.Fingerprint }),
		boolean("isIssuedByNetwork", func(x a) bool { return x.IssuedByNetwork }),
		timeField("createdAt", func(x a) time.Time { return x.CreatedAt }),
	}
}

func renderAuthenticator(a *model.Authenticator, ident *model.Identity) map[string]any {
	out := map[string]any{
		"id": a.ID, "_links": links("authenticators", a.ID),
		"createdAt": a.CreatedAt, "updatedAt": a.UpdatedAt, "tags": tagsOf(a.Tags),
		"method": a.Method, "identityId": a.IdentityID,
		"isIssuedByNetwork":    a.IssuedByNetwork,
		"isExtendRequested":    a.ExtendRequested,
		"isKeyRollRequested":   a.KeyRollRequested,
		"extendRequestedAt":    a.ExtendRequestedAt,
		"lastExtendRolledKeys": a.LastExtendRolledKeys,
	}
	if ident != nil {
		out["identity"] = ref("identities", ident.ID, ident.Name)
	}
	switch a.Method {
	case model.MethodUpdb:
		out["username"] = a.Username
	case model.MethodCert:
		out["certPem"], out["fingerprint"] = a.CertPEM, a.Fingerprint
	}
	return out
}

func (s *Server) listAuthenticators(c *call) error {
	list, err := s.m.Authenticators()
	if err != nil {
		return err
	}
	names := map[string]*model.Identity{}
	return listOf(c, list, authenticatorFields(s.identityNames()), func(a *model.Authenticator) any {
		ident, ok := names[a.IdentityID]
		if !ok {
			ident, _ = s.m.Identity(a.IdentityID)
			names[a.IdentityID] = ident
		}
		return renderAuthenticator(a, ident)
	})
}

func (s *Server) getAuthenticator(c *call) error {
	a, err := s.m.Authenticator(c.path("id"))
	if err != nil {
		return err
	}
	ident, _ := s.m.Identity(a.IdentityID)
	return c.data(http.StatusOK, renderAuthenticator(a, ident))
}

func (s *Server) deleteAuthenticator(c *call) error {
	if err := s.m.DeleteAuthenticator(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}
