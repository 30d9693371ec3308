package model

import (
	"fmt"
	"strings"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Service is something identities dial and bind over the network.
type Service struct {
	Base
	Name               string   `json:"name"`
	RoleAttributes     []string `json:"roleAttributes"`
	Configs            []string `json:"configs"`
	EncryptionRequired bool     `json:"encryptionRequired"`
	// OpenZitiEncryption lets circuits of an encryptionRequired service use OpenZiti's
	// end-to-end scheme, whose unsigned keys the routers relay, for OpenZiti clients;
	// without it only zmesh's signed scheme is allowed.
	OpenZitiEncryption bool   `json:"openZitiEncryption"`
	MaxIdleTimeMillis  int64  `json:"maxIdleTimeMillis"`
	TerminatorStrategy string `json:"terminatorStrategy"`
}

// Policy types and semantics.
const (
	PolicyDial   = "Dial"
	PolicyBind   = "Bind"
	SemanticAll  = "AllOf"
	SemanticAny  = "AnyOf"
	roleAll      = "#all"
	DefaultStrat = "smartrouting"
)

// ServicePolicy grants identities the right to dial or bind services.
type ServicePolicy struct {
	Base
	Name              string   `json:"name"`
	Type              string   `json:"type"`
	Semantic          string   `json:"semantic"`
	IdentityRoles     []string `json:"identityRoles"`
	ServiceRoles      []string `json:"serviceRoles"`
	PostureCheckRoles []string `json:"postureCheckRoles"`
}

// EdgeRouter is a router of the network as the edge sees it.
type EdgeRouter struct {
	Base
	Name              string   `json:"name"`
	RoleAttributes    []string `json:"roleAttributes"`
	IsTunnelerEnabled bool     `json:"isTunnelerEnabled"`
	Cost              int      `json:"cost"`
	NoTraversal       bool     `json:"noTraversal"`
	Disabled          bool     `json:"disabled"`
	AppData           Tags     `json:"appData,omitempty"`

	// Set by enrollment (erott) and certificate extension: the router's client certificate,
	// which the control channel accepts, and its server certificate. IsVerified: enrolled.
	IsVerified        bool   `json:"isVerified"`
	CertPEM           string `json:"certPem,omitempty"`
	Fingerprint       string `json:"fingerprint,omitempty"`
	ServerCertPEM     string `json:"serverCertPem,omitempty"`
	ServerFingerprint string `json:"serverFingerprint,omitempty"`
	// PreviousFingerprint is that of the client certificate the router last extended; an
	// extension asked again with it, for the same keys, is answered with the current
	// certificates (the first answer may have been lost).
	PreviousFingerprint string `json:"previousFingerprint,omitempty"`
}

// EdgeRouterPolicy lets identities connect to edge routers.
type EdgeRouterPolicy struct {
	Base
	Name            string   `json:"name"`
	Semantic        string   `json:"semantic"`
	IdentityRoles   []string `json:"identityRoles"`
	EdgeRouterRoles []string `json:"edgeRouterRoles"`
}

// ServiceEdgeRouterPolicy lets services be carried by edge routers.
type ServiceEdgeRouterPolicy struct {
	Base
	Name            string   `json:"name"`
	Semantic        string   `json:"semantic"`
	ServiceRoles    []string `json:"serviceRoles"`
	EdgeRouterRoles []string `json:"edgeRouterRoles"`
}

// checkRoles validates a role list: #attribute, @id or #all.
func checkRoles(field string, roles []string) error {
	for i, r := range roles {
		if len(r) < 2 || (r[0] != '#' && r[0] != '@') || strings.TrimSpace(r[1:]) != r[1:] {
			return invalid(fmt.Sprintf("%s[%d]", field, i), r, "is not a role; write #attribute, @id or #all")
		}
	}
	return nil
}

func checkAttributes(field string, attrs []string) error {
	for i, a := range attrs {
		if a == "" || strings.HasPrefix(a, "#") || strings.HasPrefix(a, "@") {
			return invalid(fmt.Sprintf("%s[%d]", field, i), a, "is not an attribute; attributes are plain names without # or @")
		}
	}
	return nil
}

func checkSemantic(s *string) error {
	switch *s {
	case "":
		*s = SemanticAll
	case SemanticAll, SemanticAny:
	default:
		return invalid("semantic", *s, "allowed: AllOf, AnyOf")
	}
	return nil
}

func (m *Model) serviceKind() kind[Service, *Service] {
	return kind[Service, *Service]{
		name: "service", coll: m.c.services,
		check: func(tx *store.Tx, s *Service) error {
			if err := checkName("name", s.Name); err != nil {
				return err
			}
			if s.MaxIdleTimeMillis < 0 {
				return invalid("maxIdleTimeMillis", s.MaxIdleTimeMillis, "must not be negative")
			}
			if s.TerminatorStrategy == "" {
				s.TerminatorStrategy = DefaultStrat
			}
			switch s.TerminatorStrategy {
			case "smartrouting", "weighted", "random", "ha":
			default:
				return invalid("terminatorStrategy", s.TerminatorStrategy, "allowed: smartrouting, weighted, random, ha")
			}
			s.RoleAttributes, s.Configs = nonNil(s.RoleAttributes), nonNil(s.Configs)
			if err := checkAttributes("roleAttributes", s.RoleAttributes); err != nil {
				return err
			}
			return m.checkServiceConfigs(tx, s)
		},
		deleted: func(tx *store.Tx, id string) error {
			if err := m.deleteAll(m.c.terminators.IDsWith, "serviceId", m.c.terminators.Delete)(tx, id); err != nil {
				return err
			}
			return m.deleteSessionsWhere(tx, "serviceId", id)
		},
	}
}

func (m *Model) servicePolicyKind() kind[ServicePolicy, *ServicePolicy] {
	return kind[ServicePolicy, *ServicePolicy]{
		name: "service policy", coll: m.c.servicePolicies,
		check: func(tx *store.Tx, p *ServicePolicy) error {
			if err := checkName("name", p.Name); err != nil {
				return err
			}
			if p.Type != PolicyDial && p.Type != PolicyBind {
				return invalid("type", p.Type, "allowed: Dial, Bind")
			}
			if err := checkSemantic(&p.Semantic); err != nil {
				return err
			}
			p.IdentityRoles, p.ServiceRoles, p.PostureCheckRoles = nonNil(p.IdentityRoles), nonNil(p.ServiceRoles), nonNil(p.PostureCheckRoles)
			for _, r := range []struct {
				f string
				v []string
			}{{"identityRoles", p.IdentityRoles}, {"serviceRoles", p.ServiceRoles}, {"postureCheckRoles", p.PostureCheckRoles}} {
				if err := checkRoles(r.f, r.v); err != nil {
					return err
				}
			}
			return m.checkPostureRoles(tx, p.PostureCheckRoles)
		},
	}
}

func (m *Model) edgeRouterKind() kind[EdgeRouter, *EdgeRouter] {
	return kind[EdgeRouter, *EdgeRouter]{
		name: "edge router", coll: m.c.edgeRouters,
		check: func(tx *store.Tx, r *EdgeRouter) error {
			if err := checkName("name", r.Name); err != nil {
				return err
			}
			if r.Cost < 0 || r.Cost > 65535 {
				return invalid("cost", r.Cost, "must be 0 to 65535")
			}
			r.RoleAttributes = nonNil(r.RoleAttributes)
			if err := checkAttributes("roleAttributes", r.RoleAttributes); err != nil {
				return err
			}
			return m.syncRouterIdentity(tx, r)
		},
		deleted: func(tx *store.Tx, id string) error {
			m.routerChanged(tx, id, RouterChange{})
			if err := m.deleteAll(m.c.enrollments.IDsWith, "edgeRouterId", m.c.enrollments.Delete)(tx, id); err != nil {
				return err
			}
			if ok, err := m.c.identities.Has(tx, id); err != nil {
				return err
			} else if ok {
				if err := m.deleteIdentityTx(tx, id); err != nil {
					return err
				}
			}
			return m.deleteAll(m.c.terminators.IDsWith, "routerId", m.c.terminators.Delete)(tx, id)
		},
	}
}

func (m *Model) edgeRouterPolicyKind() kind[EdgeRouterPolicy, *EdgeRouterPolicy] {
	return kind[EdgeRouterPolicy, *EdgeRouterPolicy]{
		name: "edge router policy", coll: m.c.edgeRouterPolicies,
		check: func(tx *store.Tx, p *EdgeRouterPolicy) error {
			if err := checkName("name", p.Name); err != nil {
				return err
			}
			if err := checkSemantic(&p.Semantic); err != nil {
				return err
			}
			p.IdentityRoles, p.EdgeRouterRoles = nonNil(p.IdentityRoles), nonNil(p.EdgeRouterRoles)
			if err := checkRoles("identityRoles", p.IdentityRoles); err != nil {
				return err
			}
			return checkRoles("edgeRouterRoles", p.EdgeRouterRoles)
		},
	}
}

func (m *Model) serviceEdgeRouterPolicyKind() kind[ServiceEdgeRouterPolicy, *ServiceEdgeRouterPolicy] {
	return kind[ServiceEdgeRouterPolicy, *ServiceEdgeRouterPolicy]{
		name: "service edge router policy", coll: m.c.serviceEdgeRouterPolicies,
		check: func(tx *store.Tx, p *ServiceEdgeRouterPolicy) error {
			if err := checkName("name", p.Name); err != nil {
				return err
			}
			if err := checkSemantic(&p.Semantic); err != nil {
				return err
			}
			p.ServiceRoles, p.EdgeRouterRoles = nonNil(p.ServiceRoles), nonNil(p.EdgeRouterRoles)
			if err := checkRoles("serviceRoles", p.ServiceRoles); err != nil {
				return err
			}
			return checkRoles("edgeRouterRoles", p.EdgeRouterRoles)
		},
	}
}

// CRUD of services and policies.

func (m *Model) CreateService(s *Service) error      { return createEntity(m, m.serviceKind(), s) }
func (m *Model) Service(id string) (*Service, error) { return getEntity(m, m.serviceKind(), id) }
func (m *Model) Services() ([]*Service, error)       { return allEntities(m, m.serviceKind()) }
func (m *Model) DeleteService(id string) error       { return deleteEntity(m, m.serviceKind(), id) }
func (m *Model) UpdateService(id string, f func(*Service) error) (*Service, error) {
	return updateEntity(m, m.serviceKind(), id, func(s *Service) error {
		enc := s.EncryptionRequired
		if err := f(s); err != nil {
			return err
		}
		if s.EncryptionRequired != enc {
			return invalid("encryptionRequired", s.EncryptionRequired, "is set when the service is created and cannot change")
		}
		return nil
	})
}

func (m *Model) CreateServicePolicy(p *ServicePolicy) error {
	return createEntity(m, m.servicePolicyKind(), p)
}
func (m *Model) ServicePolicy(id string) (*ServicePolicy, error) {
	return getEntity(m, m.servicePolicyKind(), id)
}
func (m *Model) ServicePolicies() ([]*ServicePolicy, error) {
	return allEntities(m, m.servicePolicyKind())
}
func (m *Model) UpdateServicePolicy(id string, f func(*ServicePolicy) error) (*ServicePolicy, error) {
	return updateEntity(m, m.servicePolicyKind(), id, f)
}
func (m *Model) DeleteServicePolicy(id string) error {
	return deleteEntity(m, m.servicePolicyKind(), id)
}

func (m *Model) EdgeRouter(id string) (*EdgeRouter, error) {
	return getEntity(m, m.edgeRouterKind(), id)
}
func (m *Model) EdgeRouters() ([]*EdgeRouter, error) { return allEntities(m, m.edgeRouterKind()) }
func (m *Model) DeleteEdgeRouter(id string) error    { return deleteEntity(m, m.edgeRouterKind(), id) }
func (m *Model) UpdateEdgeRouter(id string, f func(*EdgeRouter) error) (*EdgeRouter, error) {
	return updateEntity(m, m.edgeRouterKind(), id, func(r *EdgeRouter) error {
		enrolled := *r
		if err := f(r); err != nil {
			return err
		}
		// Enrollment alone sets the certificates.
		r.IsVerified, r.CertPEM, r.Fingerprint = enrolled.IsVerified, enrolled.CertPEM, enrolled.Fingerprint
		r.ServerCertPEM, r.ServerFingerprint = enrolled.ServerCertPEM, enrolled.ServerFingerprint
		return nil
	})
}

func (m *Model) CreateEdgeRouterPolicy(p *EdgeRouterPolicy) error {
	return createEntity(m, m.edgeRouterPolicyKind(), p)
}
func (m *Model) EdgeRouterPolicy(id string) (*EdgeRouterPolicy, error) {
	return getEntity(m, m.edgeRouterPolicyKind(), id)
}
func (m *Model) EdgeRouterPolicies() ([]*EdgeRouterPolicy, error) {
	return allEntities(m, m.edgeRouterPolicyKind())
}
func (m *Model) UpdateEdgeRouterPolicy(id string, f func(*EdgeRouterPolicy) error) (*EdgeRouterPolicy, error) {
	return updateEntity(m, m.edgeRouterPolicyKind(), id, f)
}
func (m *Model) DeleteEdgeRouterPolicy(id string) error {
	return deleteEntity(m, m.edgeRouterPolicyKind(), id)
}

func (m *Model) CreateServiceEdgeRouterPolicy(p *ServiceEdgeRouterPolicy) error {
	return createEntity(m, m.serviceEdgeRouterPolicyKind(), p)
}
func (m *Model) ServiceEdgeRouterPolicy(id string) (*ServiceEdgeRouterPolicy, error) {
	return getEntity(m, m.serviceEdgeRouterPolicyKind(), id)
}
func (m *Model) ServiceEdgeRouterPolicies() ([]*ServiceEdgeRouterPolicy, error) {
	return allEntities(m, m.serviceEdgeRouterPolicyKind())
}
func (m *Model) UpdateServiceEdgeRouterPolicy(id string, f func(*ServiceEdgeRouterPolicy) error) (*ServiceEdgeRouterPolicy, error) {
	return updateEntity(m, m.serviceEdgeRouterPolicyKind(), id, f)
}
func (m *Model) DeleteServiceEdgeRouterPolicy(id string) error {
	return deleteEntity(m, m.serviceEdgeRouterPolicyKind(), id)
}

// FilterByRoles keeps the services that roles select under semantic, with the semantics of
// policies (#all, @id, #attribute); the error names the roleFilter or roleSemantic at fault.
func FilterByRoles(list []ServiceAccess, roles []string, semantic string) ([]ServiceAccess, error) {
	return SelectByRoles(list, func(a ServiceAccess) string { return a.ID }, func(a ServiceAccess) []string { return a.RoleAttributes }, roles, semantic)
}

// ServiceByName returns the service named name.
func (m *Model) ServiceByName(name string) (*Service, error) {
	var out *Service
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.services.Lookup(tx, "name", name)
		return missing(err, "service", name)
	})
	return out, err
}
