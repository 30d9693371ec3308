package api

import (
	"net/http"

	"github.com/zmesh/zmesh/controlplane/model"
)

// registerFabricRouters serves the management API's /routers and /transit-routers, the
// reference's routers of the fabric. Every zmesh router is an edge router (a router without
// an edge section still enrolls as one), so both show the edge routers as routerDetail, and
// change or delete them as /edge-routers does. Creating one is absent: a router is created
// at /edge-routers, which gives it its enrollment.
func (s *Server) registerFabricRouters() {
	for _, base := range []string{"/routers", "/transit-routers"} {
		entity := base[1:]
		s.handle(management, "GET", base, adminOnly, "Lists the routers (every zmesh router is an edge router)", func(c *call) error {
			list, err := s.m.EdgeRouters()
			if err != nil {
				return err
			}
			return listOf(c, list, edgeRouterFields(), func(r *model.EdgeRouter) any { return s.renderRouter(entity, r) })
		})
		s.handle(management, "GET", base+"/{id}", adminOnly, "Returns a router", func(c *call) error {
			r, err := s.m.EdgeRouter(c.path("id"))
			if err != nil {
				return err
			}
			return c.data(http.StatusOK, s.renderRouter(entity, r))
		})
		s.handle(management, "PUT", base+"/{id}", adminOnly, "Replaces a router's name, cost, traversal, disabled state and tags", func(c *call) error { return s.changeRouter(c, true) })
		s.handle(management, "PATCH", base+"/{id}", adminOnly, "Changes some of a router's name, cost, traversal, disabled state and tags", func(c *call) error { return s.changeRouter(c, false) })
		s.handle(management, "DELETE", base+"/{id}", adminOnly, "Deletes a router, as DELETE /edge-routers/{id}", func(c *call) error {
			if err := s.m.DeleteEdgeRouter(c.path("id")); err != nil {
				return err
			}
			return c.empty()
		})
	}
}

// renderRouter is the reference's routerDetail of a router.
func (s *Server) renderRouter(entity string, r *model.EdgeRouter) map[string]any {
	d := s.renderEdgeRouterDetail(r)
	out := map[string]any{"_links": links(entity, r.ID), "configs": []string{}, "ctrlChanListeners": map[string]string{}, "interfaces": []any{}}
	for _, k := range []string{"id", "createdAt", "updatedAt", "tags", "name", "fingerprint", "isOnline", "isVerified", "cost", "noTraversal", "disabled",
		"enrollmentToken", "enrollmentJwt", "enrollmentCreatedAt", "enrollmentExpiresAt", "unverifiedCertPem", "unverifiedFingerprint"} {
		out[k] = d[k]
	}
	return out
}

// routerBody is the reference's routerUpdate and routerPatch: what zmesh keeps of a router.
// Router configs and control channel listeners are fabric settings zmesh does not have.
type routerBody struct {
	Name              *string         `json:"name"`
	Cost              nullField[int]  `json:"cost"`
	NoTraversal       nullField[bool] `json:"noTraversal"`
	Disabled          nullField[bool] `json:"disabled"`
	Tags              *model.Tags     `json:"tags"`
	Configs           []string        `json:"configs"`
	CtrlChanListeners map[string]any  `json:"ctrlChanListeners"`
}

func (s *Server) changeRouter(c *call, replace bool) error {
	var b routerBody
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if replace {
		if err := required(req("name", b.Name != nil)); err != nil {
			return err
		}
	}
	if len(b.Configs) > 0 {
		return fieldErr("configs", b.Configs, "router configs are not supported: zmesh routers take their settings from their configuration file; leave it out or empty")
	}
	if len(b.CtrlChanListeners) > 0 {
		return fieldErr("ctrlChanListeners", nil, "is not supported: routers dial the controller's ctrl.endpoint; leave it out or empty")
	}
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	_, err := s.m.UpdateEdgeRouter(c.path("id"), func(r *model.EdgeRouter) error {
		if replace {
			r.Cost, r.NoTraversal, r.Disabled, r.Tags = 0, false, false, nil
		}
		set(&r.Name, b.Name)
		b.Cost.apply(&r.Cost)
		b.NoTraversal.apply(&r.NoTraversal)
		b.Disabled.apply(&r.Disabled)
		set(&r.Tags, b.Tags)
		return nil
	})
	if err != nil {
		return err
	}
	return c.empty()
}
