package model

import (
	"strings"
)

// Entity types as the related-entity lists name them (the paths of the management API).
const (
	TypeIdentities                = "identities"
	TypeServices                  = "services"
	TypeEdgeRouters               = "edge-routers"
	TypeServicePolicies           = "service-policies"
	TypeEdgeRouterPolicies        = "edge-router-policies"
	TypeServiceEdgeRouterPolicies = "service-edge-router-policies"
	TypePostureChecks             = "posture-checks"
)

// PolicyRelations are the related-entity lists the policies define, "type/related".
func PolicyRelations() []string {
	return []string{
		"identities/services", "identities/edge-routers", "identities/service-policies", "identities/edge-router-policies",
		"services/identities", "services/edge-routers", "services/service-policies", "services/service-edge-router-policies",
		"edge-routers/identities", "edge-routers/services", "edge-routers/edge-router-policies", "edge-routers/service-edge-router-policies",
		"service-policies/identities", "service-policies/services", "service-policies/posture-checks",
		"edge-router-policies/identities", "edge-router-policies/edge-routers",
		"service-edge-router-policies/services", "service-edge-router-policies/edge-routers",
	}
}

// Related returns the ids of the entities of type related that the policies relate to the
// entity typ/id, one of PolicyRelations: the services an identity may dial or bind, the
// identities a service policy's roles select, the edge router policies that apply to an
// edge router, and so on. policyType ("", "dial" or "bind", any case) keeps only service
// policies of that type where service policies make the relation.
func (m *Model) Related(typ, id, related, policyType string) ([]string, error) {
	sp, err := servicePolicyTypes(policyType)
	if err != nil {
		return nil, err
	}
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	grantsOf := func() []grant {
		var out []grant
		if sp[PolicyDial] {
			out = append(out, idx.dial...)
		}
		if sp[PolicyBind] {
			out = append(out, idx.bind...)
		}
		return out
	}
	pos := func(p *population, what string) (int, error) {
		i, ok := p.pos[id]
		if !ok {
			return 0, notFound(what, id)
		}
		return i, nil
	}
	switch typ + "/" + related {
	case "identities/services", "identities/edge-routers", "identities/service-policies", "identities/edge-router-policies":
		i, err := pos(idx.identities, "identity")
		if err != nil {
			return nil, err
		}
		switch related {
		case TypeServices:
			return idsOf(idx.services, granted(grantsOf(), i, len(idx.services.ids))), nil
		case TypeEdgeRouters:
			return idsOf(idx.routers, granted(idx.erp, i, len(idx.routers.ids))), nil
		case TypeServicePolicies:
			return policiesWhere(grantsOf(), func(g grant) bool { return g.identities.has(i) }), nil
		}
		return policiesWhere(idx.erp, func(g grant) bool { return g.identities.has(i) }), nil
	case "services/identities", "services/edge-routers", "services/service-policies", "services/service-edge-router-policies":
		s, err := pos(idx.services, "service")
		if err != nil {
			return nil, err
		}
		switch related {
		case TypeIdentities:
			return idsOf(idx.identities, grantedTo(grantsOf(), s, len(idx.identities.ids))), nil
		case TypeEdgeRouters:
			return idsOf(idx.routers, granted(idx.serp, s, len(idx.routers.ids))), nil
		case TypeServicePolicies:
			return policiesWhere(grantsOf(), func(g grant) bool { return g.targets.has(s) }), nil
		}
		return policiesWhere(idx.serp, func(g grant) bool { return g.identities.has(s) }), nil
	case "edge-routers/identities", "edge-routers/services", "edge-routers/edge-router-policies", "edge-routers/service-edge-router-policies":
		r, err := pos(idx.routers, "edge router")
		if err != nil {
			return nil, err
		}
		switch related {
		case TypeIdentities:
			return idsOf(idx.identities, grantedTo(idx.erp, r, len(idx.identities.ids))), nil
		case TypeServices:
			return idsOf(idx.services, grantedTo(idx.serp, r, len(idx.services.ids))), nil
		case TypeEdgeRouterPolicies:
			return policiesWhere(idx.erp, func(g grant) bool { return g.targets.has(r) }), nil
		}
		return policiesWhere(idx.serp, func(g grant) bool { return g.targets.has(r) }), nil
	case "service-policies/identities", "service-policies/services", "service-policies/posture-checks":
		p, err := m.ServicePolicy(id)
		if err != nil {
			return nil, err
		}
		switch related {
		case TypeIdentities:
			return idsOf(idx.identities, idx.identities.match(p.IdentityRoles, p.Semantic)), nil
		case TypeServices:
			return idsOf(idx.services, idx.services.match(p.ServiceRoles, p.Semantic)), nil
		}
		return idsOf(idx.checks, idx.checks.match(p.PostureCheckRoles, p.Semantic)), nil
	case "edge-router-policies/identities", "edge-router-policies/edge-routers":
		p, err := m.EdgeRouterPolicy(id)
		if err != nil {
			return nil, err
		}
		if related == TypeIdentities {
			return idsOf(idx.identities, idx.identities.match(p.IdentityRoles, p.Semantic)), nil
		}
		return idsOf(idx.routers, idx.routers.match(p.EdgeRouterRoles, p.Semantic)), nil
	case "service-edge-router-policies/services", "service-edge-router-policies/edge-routers":
		p, err := m.ServiceEdgeRouterPolicy(id)
		if err != nil {
			return nil, err
		}
		if related == TypeServices {
			return idsOf(idx.services, idx.services.match(p.ServiceRoles, p.Semantic)), nil
		}
		return idsOf(idx.routers, idx.routers.match(p.EdgeRouterRoles, p.Semantic)), nil
	}
	return nil, invalid("related", typ+"/"+related, "allowed: %s", strings.Join(PolicyRelations(), ", "))
}

// servicePolicyTypes reads a policyType parameter: the service policy types it keeps.
func servicePolicyTypes(policyType string) (map[string]bool, error) {
	switch {
	case policyType == "":
		return map[string]bool{PolicyDial: true, PolicyBind: true}, nil
	case strings.EqualFold(policyType, PolicyDial):
		return map[string]bool{PolicyDial: true}, nil
	case strings.EqualFold(policyType, PolicyBind):
		return map[string]bool{PolicyBind: true}, nil
	}
	return nil, invalid("policyType", policyType, "allowed: dial, bind")
}

// grantedTo returns the entities (of the grants' identities side) that some grant gives
// target t.
func grantedTo(grants []grant, t, n int) bitset {
	out := newBitset(n)
	for _, g := range grants {
		if g.targets.has(t) {
			out.or(g.identities)
		}
	}
	return out
}

// policiesWhere returns the ids of the policies whose grant satisfies keep, once each.
func policiesWhere(grants []grant, keep func(grant) bool) []string {
	var out []string
	for _, g := range grants {
		if keep(g) {
			out = append(out, g.id)
		}
	}
	return out
}

func idsOf(p *population, set bitset) []string {
	var out []string
	set.each(func(i int) { out = append(out, p.ids[i]) })
	return out
}
