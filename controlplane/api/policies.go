package api

import (
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// rolesDisplay is the display form of roles: each role with the name it resolves to.
func rolesDisplay(roles []string) []map[string]string {
	out := make([]map[string]string, 0, len(roles))
	for _, r := range roles {
		out = append(out, map[string]string{"role": r, "name": r})
	}
	return out
}

func policyFields[P any](name func(P) string, semantic func(P) string, id func(P) string, created func(P) time.Time, lists map[string]func(P) []string) []field[P] {
	f := []field[P]{str("id", id), str("name", name), str("semantic", semantic), timeField("createdAt", created)}
	for n, get := range lists {
		f = append(f, strs(n, get))
	}
	return f
}

type servicePolicyBody struct {
	Name              *string     `json:"name"`
	Type              *string     `json:"type"`
	Semantic          *string     `json:"semantic"`
	IdentityRoles     *[]string   `json:"identityRoles"`
	ServiceRoles      *[]string   `json:"serviceRoles"`
	PostureCheckRoles *[]string   `json:"postureCheckRoles"`
	Tags              *model.Tags `json:"tags"`
}

func (b *servicePolicyBody) required() error {
	return required(req("name", b.Name != nil), req("type", b.Type != nil), req("semantic", b.Semantic != nil))
}

func (b *servicePolicyBody) apply(p *model.ServicePolicy) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&p.Name, b.Name)
	set(&p.Type, b.Type)
	set(&p.Semantic, b.Semantic)
	set(&p.IdentityRoles, b.IdentityRoles)
	set(&p.ServiceRoles, b.ServiceRoles)
	set(&p.PostureCheckRoles, b.PostureCheckRoles)
	set(&p.Tags, b.Tags)
	return nil
}

func (s *Server) servicePolicyResource() resource[*model.ServicePolicy] {
	type v = *model.ServicePolicy
	fields := policyFields(func(p v) string { return p.Name }, func(p v) string { return p.Semantic }, func(p v) string { return p.ID },
		func(p v) time.Time { return p.CreatedAt }, map[string]func(v) []string{
			"identityRoles": func(p v) []string { return p.IdentityRoles }, "serviceRoles": func(p v) []string { return p.ServiceRoles }})
	fields = append(fields, str("type", func(p v) string { return p.Type }))
	return resource[v]{
		path: "/service-policies", entity: "service-policies", what: "service policy", fields: fields,
		render: func(_ *call, p v) any {
			return map[string]any{
				"id": p.ID, "_links": links("service-policies", p.ID), "createdAt": p.CreatedAt, "updatedAt": p.UpdatedAt, "tags": tagsOf(p.Tags),
				"name": p.Name, "type": p.Type, "semantic": p.Semantic,
				"identityRoles": nonNil(p.IdentityRoles), "identityRolesDisplay": rolesDisplay(p.IdentityRoles),
				"serviceRoles": nonNil(p.ServiceRoles), "serviceRolesDisplay": rolesDisplay(p.ServiceRoles),
				"postureCheckRoles": nonNil(p.PostureCheckRoles), "postureCheckRolesDisplay": rolesDisplay(p.PostureCheckRoles),
			}
		},
		newBody: func() body[v] { return new(servicePolicyBody) },
		newRec:  func() v { return new(model.ServicePolicy) },
		reset:   func(p v) { *p = model.ServicePolicy{Base: p.Base}; p.Tags = nil },
		id:      func(p v) string { return p.ID },
		create:  s.m.CreateServicePolicy, get: s.m.ServicePolicy, all: s.m.ServicePolicies,
		update: s.m.UpdateServicePolicy, remove: s.m.DeleteServicePolicy,
	}
}

type edgeRouterBody struct {
	Name              *string     `json:"name"`
	RoleAttributes    *[]string   `json:"roleAttributes"`
	IsTunnelerEnabled *bool       `json:"isTunnelerEnabled"`
	Cost              *int        `json:"cost"`
	NoTraversal       *bool       `json:"noTraversal"`
	Disabled          *bool       `json:"disabled"`
	AppData           *model.Tags `json:"appData"`
	Tags              *model.Tags `json:"tags"`
}

func (b *edgeRouterBody) required() error { return required(req("name", b.Name != nil)) }

func (b *edgeRouterBody) apply(r *model.EdgeRouter) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&r.Name, b.Name)
	set(&r.RoleAttributes, b.RoleAttributes)
	set(&r.IsTunnelerEnabled, b.IsTunnelerEnabled)
	set(&r.Cost, b.Cost)
	set(&r.NoTraversal, b.NoTraversal)
	set(&r.Disabled, b.Disabled)
	set(&r.AppData, b.AppData)
	set(&r.Tags, b.Tags)
	return nil
}

func edgeRouterFields() []field[*model.EdgeRouter] {
	type v = *model.EdgeRouter
	return []field[v]{
		str("id", func(r v) string { return r.ID }),
		str("name", func(r v) string { return r.Name }),
		strs("roleAttributes", func(r v) []string { return r.RoleAttributes }),
		boolean("isTunnelerEnabled", func(r v) bool { return r.IsTunnelerEnabled }),
		boolean("disabled", func(r v) bool { return r.Disabled }),
		timeField("createdAt", func(r v) time.Time { return r.CreatedAt }),
	}
}

func (s *Server) edgeRouterResource() resource[*model.EdgeRouter] {
	type v = *model.EdgeRouter
	return resource[v]{
		path: "/edge-routers", entity: "edge-routers", what: "edge router", fields: edgeRouterFields(),
		roles:   func(r v) []string { return r.RoleAttributes },
		render:  func(_ *call, r v) any { return s.renderEdgeRouterDetail(r) },
		newBody: func() body[v] { return new(edgeRouterBody) },
		newRec:  func() v { return new(model.EdgeRouter) },
		reset:   func(r v) { *r = model.EdgeRouter{Base: r.Base}; r.Tags = nil }, // the model keeps the certificates
		id:      func(r v) string { return r.ID },
		create:  s.m.CreateEdgeRouter, get: s.m.EdgeRouter, all: s.m.EdgeRouters,
		update: s.m.UpdateEdgeRouter, remove: s.m.DeleteEdgeRouter,
	}
}

type routerPolicyBody struct {
	Name            *string     `json:"name"`
	Semantic        *string     `json:"semantic"`
	IdentityRoles   *[]string   `json:"identityRoles"`
	ServiceRoles    *[]string   `json:"serviceRoles"`
	EdgeRouterRoles *[]string   `json:"edgeRouterRoles"`
	Tags            *model.Tags `json:"tags"`
	forServices     bool
}

func (b *routerPolicyBody) required() error {
	return required(req("name", b.Name != nil), req("semantic", b.Semantic != nil))
}

func (b *routerPolicyBody) check() error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	if b.forServices && b.IdentityRoles != nil {
		return fieldErr("identityRoles", nil, "is not a field of service edge router policies")
	}
	if !b.forServices && b.ServiceRoles != nil {
		return fieldErr("serviceRoles", nil, "is not a field of edge router policies")
	}
	return nil
}

type erpBody struct{ routerPolicyBody }

func (b *erpBody) apply(p *model.EdgeRouterPolicy) error {
	if err := b.check(); err != nil {
		return err
	}
	set(&p.Name, b.Name)
	set(&p.Semantic, b.Semantic)
	set(&p.IdentityRoles, b.IdentityRoles)
	set(&p.EdgeRouterRoles, b.EdgeRouterRoles)
	set(&p.Tags, b.Tags)
	return nil
}

type serpBody struct{ routerPolicyBody }

func (b *serpBody) apply(p *model.ServiceEdgeRouterPolicy) error {
	b.forServices = true
	if err := b.check(); err != nil {
		return err
	}
	set(&p.Name, b.Name)
	set(&p.Semantic, b.Semantic)
	set(&p.ServiceRoles, b.ServiceRoles)
	set(&p.EdgeRouterRoles, b.EdgeRouterRoles)
	set(&p.Tags, b.Tags)
	return nil
}

func (s *Server) edgeRouterPolicyResource() resource[*model.EdgeRouterPolicy] {
	type v = *model.EdgeRouterPolicy
	fields := policyFields(func(p v) string { return p.Name }, func(p v) string { return p.Semantic }, func(p v) string { return p.ID },
		func(p v) time.Time { return p.CreatedAt }, map[string]func(v) []string{
			"identityRoles": func(p v) []string { return p.IdentityRoles }, "edgeRouterRoles": func(p v) []string { return p.EdgeRouterRoles }})
	return resource[v]{
		path: "/edge-router-policies", entity: "edge-router-policies", what: "edge router policy", fields: fields,
		render: func(_ *call, p v) any {
			return map[string]any{
				"id": p.ID, "_links": links("edge-router-policies", p.ID), "createdAt": p.CreatedAt, "updatedAt": p.UpdatedAt, "tags": tagsOf(p.Tags),
				"name": p.Name, "semantic": p.Semantic, "isSystem": false,
				"identityRoles": nonNil(p.IdentityRoles), "identityRolesDisplay": rolesDisplay(p.IdentityRoles),
				"edgeRouterRoles": nonNil(p.EdgeRouterRoles), "edgeRouterRolesDisplay": rolesDisplay(p.EdgeRouterRoles),
			}
		},
		newBody: func() body[v] { return new(erpBody) },
		newRec:  func() v { return new(model.EdgeRouterPolicy) },
		reset:   func(p v) { *p = model.EdgeRouterPolicy{Base: p.Base}; p.Tags = nil },
		id:      func(p v) string { return p.ID },
		create:  s.m.CreateEdgeRouterPolicy, get: s.m.EdgeRouterPolicy, all: s.m.EdgeRouterPolicies,
		update: s.m.UpdateEdgeRouterPolicy, remove: s.m.DeleteEdgeRouterPolicy,
	}
}

func (s *Server) serviceEdgeRouterPolicyResource() resource[*model.ServiceEdgeRouterPolicy] {
	type v = *model.ServiceEdgeRouterPolicy
	fields := policyFields(func(p v) string { return p.Name }, func(p v) string { return p.Semantic }, func(p v) string { return p.ID },
		func(p v) time.Time { return p.CreatedAt }, map[string]func(v) []string{
			"serviceRoles": func(p v) []string { return p.ServiceRoles }, "edgeRouterRoles": func(p v) []string { return p.EdgeRouterRoles }})
	return resource[v]{
		path: "/service-edge-router-policies", entity: "service-edge-router-policies", what: "service edge router policy", fields: fields,
		render: func(_ *call, p v) any {
			return map[string]any{
				"id": p.ID, "_links": links("service-edge-router-policies", p.ID), "createdAt": p.CreatedAt, "updatedAt": p.UpdatedAt, "tags": tagsOf(p.Tags),
				"name": p.Name, "semantic": p.Semantic,
				"serviceRoles": nonNil(p.ServiceRoles), "serviceRolesDisplay": rolesDisplay(p.ServiceRoles),
				"edgeRouterRoles": nonNil(p.EdgeRouterRoles), "edgeRouterRolesDisplay": rolesDisplay(p.EdgeRouterRoles),
			}
		},
		newBody: func() body[v] { return new(serpBody) },
		newRec:  func() v { return new(model.ServiceEdgeRouterPolicy) },
		reset:   func(p v) { *p = model.ServiceEdgeRouterPolicy{Base: p.Base}; p.Tags = nil },
		id:      func(p v) string { return p.ID },
		create:  s.m.CreateServiceEdgeRouterPolicy, get: s.m.ServiceEdgeRouterPolicy, all: s.m.ServiceEdgeRouterPolicies,
		update: s.m.UpdateServiceEdgeRouterPolicy, remove: s.m.DeleteServiceEdgeRouterPolicy,
	}
}
