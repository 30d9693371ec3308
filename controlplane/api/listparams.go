package api

import (
	"net/http"
	"strings"

	"github.com/zmesh/zmesh/controlplane/model"
)

// byRoles applies the list parameters roleFilter and roleSemantic to the entities of a list
// that accepts them (attrs gives an entity's role attributes): the entities the roles
// select, as a policy's roles would. A list that does not accept them (attrs nil) refuses
// them rather than ignoring them.
func byRoles[T any](c *call, list []T, id func(T) string, attrs func(T) []string) ([]T, error) {
	q := c.r.URL.Query()
	if attrs == nil {
		for _, name := range []string{"roleFilter", "roleSemantic"} {
			if q.Has(name) {
				return nil, fieldErr(name, q.Get(name), "is not a parameter of this list")
			}
		}
		return list, nil
	}
	switch {
	case q.Has("roleFilter"):
		return model.SelectByRoles(list, id, attrs, q["roleFilter"], q.Get("roleSemantic"))
	case q.Has("roleSemantic"):
		// Checked though it selects nothing without roleFilter.
		if _, err := model.SelectByRoles[T](nil, id, attrs, nil, q.Get("roleSemantic")); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// refuseAsIdentity answers a list that does not take asIdentity.
func refuseAsIdentity(c *call) error {
	if q := c.r.URL.Query(); q.Has("asIdentity") {
		return fieldErr("asIdentity", q.Get("asIdentity"), "is not a parameter of this list; only GET /services takes it")
	}
	return nil
}

// identityByIDOrName finds the identity asIdentity names, by id first, then by name.
func (s *Server) identityByIDOrName(param, value string) (*model.Identity, error) {
	if value == "" {
		return nil, fieldErr(param, value, "must name an identity by id or name")
	}
	ident, err := s.m.Identity(value)
	if err == nil {
		return ident, nil
	}
	if model.CodeOf(err) != model.CodeNotFound {
		return nil, err
	}
	ident, err = s.m.IdentityByName(value)
	if err == nil {
		return ident, nil
	}
	if model.CodeOf(err) != model.CodeNotFound {
		return nil, err
	}
	return nil, fieldErr(param, value, "no identity has this id or name")
}

// listManagementServices lists services for an administrator: every service, or with
// asIdentity=ID|name those that identity may dial or bind, with its permissions, as it would
// see them; roleFilter and roleSemantic narrow either, and configTypes embeds configs.
func (s *Server) listManagementServices(c *call) error {
	q := c.r.URL.Query()
	var list []*model.Service
	perms := map[string][]string{}
	var overrides map[string]map[string]string // as the identity sees them: its own configs
	if q.Has("asIdentity") {
		ident, err := s.identityByIDOrName("asIdentity", q.Get("asIdentity"))
		if err != nil {
			return err
		}
		access, err := s.m.ServicesFor(ident.ID)
		if err != nil {
			return err
		}
		if overrides, err = s.m.ServiceConfigOverrides(ident.ID); err != nil {
			return err
		}
		for _, a := range access {
			list = append(list, a.Service)
			perms[a.ID] = permissions(a)
		}
	} else {
		all, err := s.m.Services()
		if err != nil {
			return err
		}
		list = all
		for _, sv := range all {
			perms[sv.ID] = []string{model.PolicyDial, model.PolicyBind}
		}
	}
	list, err := byRoles(c, list, func(sv *model.Service) string { return sv.ID }, func(sv *model.Service) []string { return sv.RoleAttributes })
	if err != nil {
		return err
	}
	want, err := s.wantedConfigTypes(c)
	if err != nil {
		return err
	}
	return listOf(c, list, serviceFields(), func(sv *model.Service) any {
		out := renderService(sv, perms[sv.ID])
		s.embedConfigs(out, sv, want, overrides[sv.ID])
		return out
	})
}

// registerRoleAttributes adds the lists of role attributes in use, per entity type.
func (s *Server) registerRoleAttributes() {
	for typ, path := range map[string]string{
		model.TypeIdentities: "/identity-role-attributes", model.TypeServices: "/service-role-attributes",
		model.TypeEdgeRouters: "/edge-router-role-attributes", model.TypePostureChecks: "/posture-check-role-attributes",
	} {
		s.handle(management, "GET", path, adminOnly, "Lists the role attributes in use by "+strings.ReplaceAll(typ, "-", " "), func(c *call) error {
			attrs, err := s.m.RoleAttributes(typ)
			if err != nil {
				return err
			}
			fields := []field[string]{str("id", func(a string) string { return a })}
			return listOf(c, attrs, fields, func(a string) any { return a })
		})
	}
	s.handle(management, "GET", "/summary", adminOnly, "Returns the number of entities of each type", func(c *call) error {
		counts, err := s.m.Counts()
		if err != nil {
			return err
		}
		return c.data(http.StatusOK, counts)
	})
}
