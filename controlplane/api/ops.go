package api

import (
	"net/http"

	"github.com/zmesh/zmesh/controlplane/model"
)

// registerOps adds the operators' operations: policy advice.
func (s *Server) registerOps() {
	s.handle(management, "GET", "/identities/{id}/policy-advice/{serviceId}", adminOnly,
		"Analyzes whether an identity may dial or bind a service and which edge routers they share", s.policyAdvice)
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
