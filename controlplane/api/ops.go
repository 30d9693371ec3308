package api

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/zmesh/zmesh/controlplane/model"
)

// registerOps adds the operators' operations: policy advice, an identity's service configs.
func (s *Server) registerOps() {
	s.handle(management, "GET", "/identities/{id}/policy-advice/{serviceId}", adminOnly,
		"Analyzes whether an identity may dial or bind a service and which edge routers they share", s.policyAdvice)
	s.handle(management, "GET", "/identities/{id}/service-configs", adminOnly,
		"Lists the configs an identity uses for services in place of the services' own", s.identityServiceConfigs)
	s.handle(management, "POST", "/identities/{id}/service-configs", adminOnly,
		"Makes an identity use configs for services in place of the services' configs of the same type", s.assignServiceConfigs)
	s.handle(management, "DELETE", "/identities/{id}/service-configs", adminOnly,
		"Ends an identity's use of service configs; an absent or empty list ends all", s.removeServiceConfigs)
}

// routerRef is a reference to an edge router with whether its control channel is connected.
func (s *Server) routerRef(r *model.EdgeRouter) map[string]any {
	out := ref("edge-routers", r.ID, r.Name)
	out["isOnline"] = false
	if s.info.Routers != nil {
		online, _, _ := s.info.Routers.Online(r.ID)
		out["isOnline"] = online
	}
	return out
}

func (s *Server) policyAdvice(c *call) error {
	a, err := s.m.PolicyAdvice(c.path("id"), c.path("serviceId"))
	if err != nil {
		return err
	}
	common := make([]any, 0, len(a.Common))
	for _, r := range a.Common {
		common = append(common, s.routerRef(r))
	}
	return c.data(http.StatusOK, map[string]any{
		"identityId": a.Identity.ID, "identity": ref("identities", a.Identity.ID, a.Identity.Name),
		"serviceId": a.Service.ID, "service": ref("services", a.Service.ID, a.Service.Name),
		"isDialAllowed": a.Dial, "isBindAllowed": a.Bind,
		"identityRouterCount": a.IdentityRouters, "serviceRouterCount": a.ServiceRouters,
		"commonRouters": common,
	})
}

func (s *Server) identityServiceConfigs(c *call) error {
	pairs, err := s.m.ServiceConfigsOf(c.path("id"))
	if err != nil {
		return err
	}
	out := make([]any, 0, len(pairs))
	for _, p := range pairs {
		svcName, cfgName := "", ""
		if sv, err := s.m.Service(p.ServiceID); err == nil {
			svcName = sv.Name
		}
		if cf, err := s.m.Config(p.ConfigID); err == nil {
			cfgName = cf.Name
		}
		out = append(out, map[string]any{
			"serviceId": p.ServiceID, "service": ref("services", p.ServiceID, svcName),
			"configId": p.ConfigID, "config": ref("configs", p.ConfigID, cfgName),
		})
	}
	return c.data(http.StatusOK, out)
}

// serviceConfigPairs decodes a serviceConfigsAssignList body; an empty body is no pairs when
// allowEmpty.
func serviceConfigPairs(c *call, allowEmpty bool) ([]model.ServiceConfig, error) {
	data, err := readBody(c.w, c.r)
	if err != nil {
		return nil, err
	}
	if allowEmpty && len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var b []struct {
		ServiceID *string `json:"serviceId"`
		ConfigID  *string `json:"configId"`
	}
	if err := decodeJSONBytes(data, &b); err != nil {
		return nil, err
	}
	out := make([]model.ServiceConfig, 0, len(b))
	for i, p := range b {
		if p.ServiceID == nil || *p.ServiceID == "" {
			return nil, fieldErr(fmt.Sprintf("[%d].serviceId", i), nil, "is required: the id of a service")
		}
		if p.ConfigID == nil || *p.ConfigID == "" {
			return nil, fieldErr(fmt.Sprintf("[%d].configId", i), nil, "is required: the id of a config")
		}
		out = append(out, model.ServiceConfig{ServiceID: *p.ServiceID, ConfigID: *p.ConfigID})
	}
	return out, nil
}

func (s *Server) assignServiceConfigs(c *call) error {
	pairs, err := serviceConfigPairs(c, false)
	if err != nil {
		return err
	}
	if err := s.m.AssignServiceConfigs(c.path("id"), pairs); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) removeServiceConfigs(c *call) error {
	pairs, err := serviceConfigPairs(c, true)
	if err != nil {
		return err
	}
	if err := s.m.RemoveServiceConfigs(c.path("id"), pairs); err != nil {
		return err
	}
	return c.empty()
}
