package api

import (
	"slices"
	"strings"

	"github.com/zmesh/zmesh/controlplane/model"
)

// singular names one entity of a type in summaries.
func singular(typ string) string {
	switch typ {
	case model.TypeIdentities:
		return "identity"
	case model.TypeServicePolicies:
		return "service policy"
	case model.TypeEdgeRouterPolicies:
		return "edge router policy"
	}
	return strings.ReplaceAll(strings.TrimSuffix(typ, "s"), "-", " ")
}

// registerRelated adds the related-entity lists of the management API: GET
// /{type}/{id}/{related}, the entities the policies (or, for configs and terminators, the
// entities' own references) relate to one entity, as lists with paging and filters.
func (s *Server) registerRelated() {
	for _, rel := range model.PolicyRelations() {
		typ, related, _ := strings.Cut(rel, "/")
		// policyType narrows the service policies that relate identities and services.
		withType := rel == "identities/services" || rel == "services/identities"
		s.handle(management, "GET", "/"+typ+"/{id}/"+related, adminOnly,
			"Lists the "+strings.ReplaceAll(related, "-", " ")+" the policies relate to a "+singular(typ), func(c *call) error {
				q := c.r.URL.Query()
				if q.Has("policyType") && !withType {
					return fieldErr("policyType", q.Get("policyType"), "is not a parameter of this list")
				}
				ids, err := s.m.Related(typ, c.path("id"), related, q.Get("policyType"))
				if err != nil {
					return err
				}
				return s.listRelated(c, related, ids)
			})
	}
	s.handle(management, "GET", "/config-types/{id}/configs", adminOnly, "Lists the configs of a config type", func(c *call) error {
		if _, err := s.m.ConfigType(c.path("id")); err != nil {
			return err
		}
		r := s.configResource()
		return relatedWhere(c, r, func(cf *model.Config) bool { return cf.ConfigTypeID == c.path("id") })
	})
	s.handle(management, "GET", "/configs/{id}/services", adminOnly, "Lists the services that use a config", func(c *call) error {
		if _, err := s.m.Config(c.path("id")); err != nil {
			return err
		}
		return relatedWhere(c, s.serviceResource(), func(sv *model.Service) bool { return slices.Contains(sv.Configs, c.path("id")) })
	})
	s.handle(management, "GET", "/services/{id}/configs", adminOnly, "Lists the configs of a service", func(c *call) error {
		sv, err := s.m.Service(c.path("id"))
		if err != nil {
			return err
		}
		return relatedWhere(c, s.configResource(), func(cf *model.Config) bool { return slices.Contains(sv.Configs, cf.ID) })
	})
	s.handle(management, "GET", "/services/{id}/terminators", adminOnly, "Lists the terminators of a service", func(c *call) error {
		if _, err := s.m.Service(c.path("id")); err != nil {
			return err
		}
		list, err := s.m.TerminatorsOf(c.path("id"))
		if err != nil {
			return err
		}
		return listOf(c, list, s.terminatorFields(), func(t *model.Terminator) any { return s.renderTerminator(t) })
	})
}

// listRelated writes the entities of type related with the given ids as a list.
func (s *Server) listRelated(c *call, related string, ids []string) error {
	switch related {
	case model.TypeIdentities:
		list, err := s.m.IdentityViews()
		if err != nil {
			return err
		}
		set := idSet(ids)
		list = slices.DeleteFunc(list, func(v *model.IdentityView) bool { return !set[v.ID] })
		return listOf(c, list, identityFields(), func(v *model.IdentityView) any { return renderIdentity(v) })
	case model.TypeServices:
		return relatedByID(c, s.serviceResource(), ids)
	case model.TypeEdgeRouters:
		return relatedByID(c, s.edgeRouterResource(), ids)
	case model.TypeServicePolicies:
		return relatedByID(c, s.servicePolicyResource(), ids)
	case model.TypeEdgeRouterPolicies:
		return relatedByID(c, s.edgeRouterPolicyResource(), ids)
	case model.TypeServiceEdgeRouterPolicies:
		return relatedByID(c, s.serviceEdgeRouterPolicyResource(), ids)
	case model.TypePostureChecks:
		return relatedByID(c, s.postureCheckResource(), ids)
	}
	return newErr(codeUnhandled, "no list of %s", related)
}

// relatedByID lists the entities of r whose ids are given.
func relatedByID[P any](c *call, r resource[P], ids []string) error {
	set := idSet(ids)
	return relatedWhere(c, r, func(p P) bool { return set[r.id(p)] })
}

func idSet(ids []string) map[string]bool {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// relatedWhere lists the entities of r that keep selects.
func relatedWhere[P any](c *call, r resource[P], keep func(P) bool) error {
	all, err := r.all()
	if err != nil {
		return err
	}
	list := slices.DeleteFunc(all, func(p P) bool { return !keep(p) })
	return listOf(c, list, r.fields, func(p P) any { return r.render(c, p) })
}
