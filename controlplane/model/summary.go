package model

import (
	"slices"
	"strings"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Counts returns the number of entities of each stored type, keyed as the reference's
// summary names them (apiSessions, identities, servicePolicies, ...). Edge routers and
// services count under both the fabric's key and its ".edge" child, as every router and
// service is an edge one here.
func (m *Model) Counts() (map[string]int, error) {
	out := map[string]int{}
	err := m.st.View(func(tx *store.Tx) error {
		for _, c := range []struct {
			keys  []string
			count func(*store.Tx) (int, error)
		}{
			{[]string{"apiSessions"}, m.c.apiSessions.Count},
			{[]string{"apiSessionCertificates"}, m.c.apiSessionCerts.Count},
			{[]string{"authenticators"}, m.c.authenticators.Count},
			{[]string{"cas"}, m.c.cas.Count},
			{[]string{"configTypes"}, m.c.configTypes.Count},
			{[]string{"configs"}, m.c.configs.Count},
			{[]string{"edgeRouterPolicies"}, m.c.edgeRouterPolicies.Count},
			{[]string{"enrollments"}, m.c.enrollments.Count},
			{[]string{"externalJwtSigners"}, m.auth.signers.Count},
			{[]string{"identities"}, m.c.identities.Count},
			{[]string{"mfas"}, m.auth.mfa.Count},
			{[]string{"postureChecks"}, m.c.postureChecks.Count},
			{[]string{"routers", "routers.edge"}, m.c.edgeRouters.Count},
			{[]string{"serviceEdgeRouterPolicies"}, m.c.serviceEdgeRouterPolicies.Count},
			{[]string{"servicePolicies"}, m.c.servicePolicies.Count},
			{[]string{"services", "services.edge"}, m.c.services.Count},
			{[]string{"sessions"}, m.c.sessions.Count},
			{[]string{"terminators"}, m.c.terminators.Count},
		} {
			n, err := c.count(tx)
			if err != nil {
				return err
			}
			for _, k := range c.keys {
				out[k] = n
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	policies, err := m.AuthPolicies() // the built-in default counts though it may not be stored
	if err != nil {
		return nil, err
	}
	out["authPolicies"] = len(policies)
	out["identityTypes"] = len(IdentityTypes())
	out["postureCheckTypes"] = len(PostureCheckTypes())
	return out, nil
}

// RoleAttributes returns the role attributes in use by the entities of typ (identities,
// services, edge-routers, posture-checks), each once, sorted.
func (m *Model) RoleAttributes(typ string) ([]string, error) {
	seen := map[string]bool{}
	add := func(attrs []string) {
		for _, a := range attrs {
			seen[a] = true
		}
	}
	err := m.st.View(func(tx *store.Tx) error {
		switch typ {
		case TypeIdentities:
			return m.c.identities.Each(tx, func(i *Identity) error { add(i.RoleAttributes); return nil })
		case TypeServices:
			return m.c.services.Each(tx, func(s *Service) error { add(s.RoleAttributes); return nil })
		case TypeEdgeRouters:
			return m.c.edgeRouters.Each(tx, func(r *EdgeRouter) error { add(r.RoleAttributes); return nil })
		case TypePostureChecks:
			return m.c.postureChecks.Each(tx, func(c *PostureCheck) error { add(c.RoleAttributes); return nil })
		}
		return invalid("type", typ, "allowed: identities, services, edge-routers, posture-checks")
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.Sort(out)
	return out, nil
}

// SelectByRoles keeps the entities of list that roles select under semantic, as a policy's
// roles would: @id, #attribute, #all. roles and semantic are checked as the list parameters
// roleFilter and roleSemantic ("" means AllOf).
func SelectByRoles[T any](list []T, id func(T) string, attrs func(T) []string, roles []string, semantic string) ([]T, error) {
	if err := checkRoles("roleFilter", roles); err != nil {
		return nil, err
	}
	if semantic == "" {
		semantic = SemanticAll
	}
	if semantic != SemanticAll && semantic != SemanticAny {
		return nil, invalid("roleSemantic", semantic, "allowed: %s", strings.Join([]string{SemanticAll, SemanticAny}, ", "))
	}
	pop := newPopulation(len(list))
	for _, v := range list {
		pop.add(id(v), attrs(v), len(list))
	}
	selected := pop.match(roles, semantic)
	out := make([]T, 0, len(list))
	for i, v := range list {
		if selected.has(i) {
			out = append(out, v)
		}
	}
	return out, nil
}
