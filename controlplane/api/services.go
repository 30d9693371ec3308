package api

import (
	"net/http"
	"slices"
	"time"

	"github.com/zmesh/zmesh/controlplane/filter"
	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerServices() {
	registerCRUD(s, management, adminOnly, s.configTypeResource())
	registerCRUD(s, management, adminOnly, s.configResource())
	registerCRUD(s, management, adminOnly, s.serviceResource())
	registerCRUD(s, management, adminOnly, s.servicePolicyResource())
	registerCRUD(s, management, adminOnly, s.edgeRouterResource())
	registerCRUD(s, management, adminOnly, s.edgeRouterPolicyResource())
	registerCRUD(s, management, adminOnly, s.serviceEdgeRouterPolicyResource())

	s.handle(client, "GET", "/services", session, "Lists the services the current identity may dial or bind", s.clientServices)
	s.handle(client, "GET", "/services/{id}", session, "Returns a service the current identity may dial or bind", s.clientService)
	svc := s.serviceResource()
	s.handle(client, "PUT", "/services/{id}", adminOnly, "Replaces a service (administrators)", func(c *call) error { return s.changeService(c, svc, true) })
	s.handle(client, "PATCH", "/services/{id}", adminOnly, "Changes some fields of a service (administrators)", func(c *call) error { return s.changeService(c, svc, false) })
	s.handle(client, "DELETE", "/services/{id}", adminOnly, "Deletes a service (administrators)", func(c *call) error {
		if err := s.m.DeleteService(c.path("id")); err != nil {
			return err
		}
		return c.empty()
	})
	s.handle(client, "GET", "/services/{id}/edge-routers", session, "Lists the edge routers that may carry a service for the current identity", s.serviceEdgeRouters)
	s.handle(client, "GET", "/current-identity/edge-routers", session, "Lists the edge routers the current identity may connect to", s.currentIdentityEdgeRouters)
	s.handle(client, "GET", "/current-api-session/service-updates", session, "Returns when data relevant to the current API session last changed", s.serviceUpdates)

	s.handle(client, "GET", "/sessions", session, "Lists the sessions of the current API session", s.listSessions)
	s.handleCreate(client, "/sessions", session, "Creates a Dial or Bind session for a service", s.createSession)
	s.handle(client, "GET", "/sessions/{id}", session, "Returns a session of the current API session", s.getSession)
	s.handle(client, "DELETE", "/sessions/{id}", session, "Deletes a session of the current API session", s.deleteSession)
}

type serviceBody struct {
	Name               *string     `json:"name"`
	RoleAttributes     *[]string   `json:"roleAttributes"`
	Configs            *[]string   `json:"configs"`
	EncryptionRequired *bool       `json:"encryptionRequired"`
	OpenZitiEncryption *bool       `json:"openZitiEncryption"`
	MaxIdleTimeMillis  *int64      `json:"maxIdleTimeMillis"`
	TerminatorStrategy *string     `json:"terminatorStrategy"`
	Tags               *model.Tags `json:"tags"`
}

func (b *serviceBody) required() error {
	return required(req("name", b.Name != nil))
}

func (b *serviceBody) apply(s *model.Service) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&s.Name, b.Name)
	set(&s.RoleAttributes, b.RoleAttributes)
	set(&s.Configs, b.Configs)
	set(&s.EncryptionRequired, b.EncryptionRequired)
	set(&s.OpenZitiEncryption, b.OpenZitiEncryption)
	set(&s.MaxIdleTimeMillis, b.MaxIdleTimeMillis)
	set(&s.TerminatorStrategy, b.TerminatorStrategy)
	set(&s.Tags, b.Tags)
	return nil
}

func serviceFields() []field[*model.Service] {
	type v = *model.Service
	return []field[v]{
		str("id", func(x v) string { return x.ID }),
		str("name", func(x v) string { return x.Name }),
		str("terminatorStrategy", func(x v) string { return x.TerminatorStrategy }),
		boolean("encryptionRequired", func(x v) bool { return x.EncryptionRequired }),
		boolean("openZitiEncryption", func(x v) bool { return x.OpenZitiEncryption }),
		strs("roleAttributes", func(x v) []string { return x.RoleAttributes }),
		strs("configs", func(x v) []string { return x.Configs }),
		timeField("createdAt", func(x v) time.Time { return x.CreatedAt }),
		timeField("updatedAt", func(x v) time.Time { return x.UpdatedAt }),
	}
}

func renderService(sv *model.Service, perms []string) map[string]any {
	return map[string]any{
		"id": sv.ID, "_links": links("services", sv.ID),
		"createdAt": sv.CreatedAt, "updatedAt": sv.UpdatedAt, "tags": tagsOf(sv.Tags),
		"name": sv.Name, "roleAttributes": nonNil(sv.RoleAttributes), "configs": nonNil(sv.Configs),
		"config": map[string]any{}, "encryptionRequired": sv.EncryptionRequired,
		"openZitiEncryption": sv.OpenZitiEncryption,
		"maxIdleTimeMillis":  sv.MaxIdleTimeMillis, "terminatorStrategy": sv.TerminatorStrategy,
		"permissions": nonNil(perms), "postureQueries": []any{},
	}
}

func (s *Server) serviceResource() resource[*model.Service] {
	return resource[*model.Service]{
		path: "/services", entity: "services", what: "service", fields: serviceFields(),
		roles: func(sv *model.Service) []string { return sv.RoleAttributes }, list: s.listManagementServices,
		render: func(_ *call, sv *model.Service) any {
			return renderService(sv, []string{model.PolicyDial, model.PolicyBind})
		},
		newBody: func() body[*model.Service] { return new(serviceBody) },
		newRec:  func() *model.Service { return new(model.Service) },
		reset: func(sv *model.Service) {
			*sv = model.Service{Base: sv.Base, EncryptionRequired: sv.EncryptionRequired}
			sv.Tags = nil
		},
		id:     func(sv *model.Service) string { return sv.ID },
		create: s.m.CreateService, get: s.m.Service, all: s.m.Services, update: s.m.UpdateService, remove: s.m.DeleteService,
	}
}

func (s *Server) changeService(c *call, r resource[*model.Service], replace bool) error {
	b := new(serviceBody)
	if err := decodeJSON(c.w, c.r, b); err != nil {
		return err
	}
	if replace {
		if err := b.required(); err != nil {
			return err
		}
	}
	_, err := s.m.UpdateService(c.path("id"), func(sv *model.Service) error {
		if replace {
			r.reset(sv)
		}
		return b.apply(sv)
	})
	if err != nil {
		return err
	}
	return c.empty()
}

func permissions(a model.ServiceAccess) []string {
	var p []string
	if a.Dial {
		p = append(p, model.PolicyDial)
	}
	if a.Bind {
		p = append(p, model.PolicyBind)
	}
	return p
}

func (s *Server) clientServices(c *call) error {
	list, err := s.m.ServicesFor(c.identity.ID)
	if err != nil {
		return err
	}
	if q := c.r.URL.Query(); q.Has("roleFilter") {
		if list, err = model.FilterByRoles(list, q["roleFilter"], q.Get("roleSemantic")); err != nil {
			return err
		}
	}
	inner := serviceFields()
	fields := make([]field[model.ServiceAccess], 0, len(inner)+1)
	for _, f := range inner {
		fields = append(fields, field[model.ServiceAccess]{f.name, f.kind, func(a model.ServiceAccess) filter.Value { return f.get(a.Service) }})
	}
	fields = append(fields, strs("permissions", permissions))
	want, err := s.wantedConfigTypes(c)
	if err != nil {
		return err
	}
	posture, err := s.m.PostureQueriesOf(c.session)
	if err != nil {
		return err
	}
	overrides, err := s.m.ServiceConfigOverrides(c.identity.ID)
	if err != nil {
		return err
	}
	return listOf(c, list, fields, func(a model.ServiceAccess) any {
		out := renderService(a.Service, permissions(a))
		out["postureQueries"] = renderPostureQueries(posture(a.ID))
		s.embedConfigs(out, a.Service, want, overrides[a.ID])
		return out
	})
}

func (s *Server) accessTo(c *call, id string) (model.ServiceAccess, error) {
	list, err := s.m.ServicesFor(c.identity.ID)
	if err != nil {
		return model.ServiceAccess{}, err
	}
	i := slices.IndexFunc(list, func(a model.ServiceAccess) bool { return a.ID == id })
	if i < 0 {
		return model.ServiceAccess{}, newErr(codeNotFound, "service %q not found", id)
	}
	return list[i], nil
}

func (s *Server) clientService(c *call) error {
	a, err := s.accessTo(c, c.path("id"))
	if err != nil {
		return err
	}
	want, err := s.wantedConfigTypes(c)
	if err != nil {
		return err
	}
	posture, err := s.m.PostureQueriesOf(c.session)
	if err != nil {
		return err
	}
	overrides, err := s.m.ServiceConfigOverrides(c.identity.ID)
	if err != nil {
		return err
	}
	out := renderService(a.Service, permissions(a))
	out["postureQueries"] = renderPostureQueries(posture(a.ID))
	s.embedConfigs(out, a.Service, want, overrides[a.ID])
	return c.data(http.StatusOK, out)
}

func renderEdgeRouter(r *model.EdgeRouter, withURLs bool, info Info) map[string]any {
	out := map[string]any{
		"id": r.ID, "_links": links("edge-routers", r.ID),
		"createdAt": r.CreatedAt, "updatedAt": r.UpdatedAt, "tags": tagsOf(r.Tags),
		"name": r.Name, "roleAttributes": nonNil(r.RoleAttributes), "cost": r.Cost, "noTraversal": r.NoTraversal,
		"disabled": r.Disabled, "isTunnelerEnabled": r.IsTunnelerEnabled, "appData": tagsOf(r.AppData),
		"isOnline": false, "isVerified": false, "hostname": "", "supportedProtocols": map[string]string{},
		"syncStatus": "SYNC_UNKNOWN", "fingerprint": "",
	}
	protocols := map[string]string{}
	if info.Routers != nil {
		if online, hostname, p := info.Routers.Online(r.ID); online {
			protocols = p
			out["isOnline"], out["hostname"], out["supportedProtocols"] = true, hostname, p
		}
	}
	if withURLs {
		// Where SDK clients reach the router's SDK listeners: known while it is online.
		out["urls"] = protocols
	}
	return out
}

func (s *Server) serviceEdgeRouters(c *call) error {
	if _, err := s.accessTo(c, c.path("id")); err != nil {
		return err
	}
	if tok := c.r.Header.Get("session-token"); tok != "" {
		sess, err := s.m.SessionByTokenOf(c.session.ID, tok)
		if err != nil || sess.ServiceID != c.path("id") {
			return newErr(codeUnauthorized, "the session-token header does not name a session of this API session for this service")
		}
	}
	routers, err := s.m.EdgeRoutersFor(c.identity.ID, c.path("id"))
	if err != nil {
		return err
	}
	out := make([]any, 0, len(routers))
	for _, r := range routers {
		out = append(out, renderEdgeRouter(r, true, s.info))
	}
	return c.data(http.StatusOK, map[string]any{"edgeRouters": out})
}

func (s *Server) currentIdentityEdgeRouters(c *call) error {
	routers, err := s.m.EdgeRoutersFor(c.identity.ID, "")
	if err != nil {
		return err
	}
	return listOf(c, routers, edgeRouterFields(), func(r *model.EdgeRouter) any { return renderEdgeRouter(r, false, s.info) })
}

func (s *Server) serviceUpdates(c *call) error {
	return c.data(http.StatusOK, map[string]any{"lastChangeAt": time.Unix(0, s.m.LastChange()).UTC()})
}

// sessionFields are the filterable fields of sessions, with the names of their service and
// identity (service.name, identity.name) looked up once per request.
func (s *Server) sessionFields() []field[*model.Session] {
	type v = *model.Session
	serviceName, identityName := s.serviceNames(), s.identityNames()
	return []field[v]{
		str("id", func(x v) string { return x.ID }),
		str("serviceId", func(x v) string { return x.ServiceID }),
		str("service", func(x v) string { return x.ServiceID }),
		str("service.name", func(x v) string { return serviceName(x.ServiceID) }),
		str("identity", func(x v) string { return x.IdentityID }),
		str("identity.name", func(x v) string { return identityName(x.IdentityID) }),
		str("type", func(x v) string { return x.Type }),
		str("identityId", func(x v) string { return x.IdentityID }),
		str("apiSessionId", func(x v) string { return x.APISessionID }),
		timeField("createdAt", func(x v) time.Time { return x.CreatedAt }),
	}
}

// renderSessionDetail is the view of a session. Its token, a credential for the routers, is
// shown only to the API session that owns it.
func (s *Server) renderSessionDetail(c *call, se *model.Session, routers []*model.EdgeRouter) map[string]any {
	token := ""
	if c.session != nil && c.session.ID == se.APISessionID {
		token = se.Token
	}
	svcName := ""
	if sv, err := s.m.Service(se.ServiceID); err == nil {
		svcName = sv.Name
	}
	ers := make([]any, 0, len(routers))
	for _, r := range routers {
		ers = append(ers, renderEdgeRouter(r, true, s.info))
	}
	return map[string]any{
		"id": se.ID, "_links": links("sessions", se.ID),
		"createdAt": se.CreatedAt, "updatedAt": se.UpdatedAt, "tags": tagsOf(se.Tags),
		"apiSession": ref("api-sessions", se.APISessionID, ""), "apiSessionId": se.APISessionID,
		"identityId": se.IdentityID, "service": ref("services", se.ServiceID, svcName), "serviceId": se.ServiceID,
		"token": token, "type": se.Type, "edgeRouters": ers,
	}
}

func (s *Server) listSessions(c *call) error {
	list, err := s.m.SessionsOf(c.session.ID)
	if err != nil {
		return err
	}
	return listOf(c, list, s.sessionFields(), func(se *model.Session) any { return s.renderSessionDetail(c, se, nil) })
}

func (s *Server) createSession(c *call) error {
	var b struct {
		ServiceID *string     `json:"serviceId"`
		Type      *string     `json:"type"`
		Tags      *model.Tags `json:"tags"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if err := required(req("serviceId", b.ServiceID != nil), req("type", b.Type != nil)); err != nil {
		return err
	}
	var tags model.Tags
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
		tags = *b.Tags
	}
	se, routers, err := s.m.CreateSession(c.session, *b.ServiceID, *b.Type, tags)
	if err != nil {
		return err
	}
	return c.data(http.StatusCreated, s.renderSessionDetail(c, se, routers))
}

// ownSession returns a session of the current API session; others are NOT_FOUND.
func (s *Server) ownSession(c *call) (*model.Session, error) {
	se, err := s.m.Session(c.path("id"))
	if err != nil {
		return nil, err
	}
	if se.APISessionID != c.session.ID {
		return nil, newErr(codeNotFound, "session %q not found", c.path("id"))
	}
	return se, nil
}

func (s *Server) getSession(c *call) error {
	se, err := s.ownSession(c)
	if err != nil {
		return err
	}
	routers, _ := s.m.EdgeRoutersFor(se.IdentityID, se.ServiceID)
	return c.data(http.StatusOK, s.renderSessionDetail(c, se, routers))
}

func (s *Server) deleteSession(c *call) error {
	se, err := s.ownSession(c)
	if err != nil {
		return err
	}
	if err := s.m.DeleteSession(se.ID); err != nil {
		return err
	}
	return c.empty()
}
