package api

import (
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// registerRouters declares edge router enrollment and certificate extension, and terminators.
func (s *Server) registerRouters() {
	s.handle(client, "POST", "/enroll/erott", public, "Enrolls an edge router with its one-time token; returns its client and server certificates", s.enrollErOtt)
	s.handle(client, "POST", "/enroll/extend/router", public, "Issues new certificates to the edge router presenting its current client certificate; the old one stops working", s.extendRouter)
	s.handle(management, "POST", "/edge-routers/{id}/re-enroll", adminOnly, "Drops an edge router's certificates and gives it a new enrollment token", s.reEnrollRouter)
	s.handle(management, "GET", "/edge-routers/{id}/metrics", adminOnly, "Returns the latest metrics report the edge router sent over its control channel", s.routerMetrics)

	registerCRUD(s, management, adminOnly, s.terminatorResource())
	s.handle(client, "GET", "/services/{id}/terminators", session, "Lists the terminators of a service the current identity may dial or bind", s.serviceTerminators)
}

// erOttRequest is the body of /enroll/erott. The CSRs come under the names of the reference's
// erOttEnrollmentRequest (clientCsr, serverCsr) or of its generic enrollment (certCsr,
// serverCertCsr), which routers in the field send.
type erOttRequest struct {
	Token         *string `json:"token"`
	ClientCsr     *string `json:"clientCsr"`
	ServerCsr     *string `json:"serverCsr"`
	CertCsr       *string `json:"certCsr"`
	ServerCertCsr *string `json:"serverCertCsr"`
}

// csrs returns the client and server CSRs, whichever names carried them.
func (b *erOttRequest) csrs() (clientCSR, serverCSR []byte, err error) {
	pick := func(a, b *string, names string) ([]byte, error) {
		switch {
		case a != nil && b != nil:
			return nil, fieldErr(names, nil, "give the CSR under one of the names, not both")
		case a != nil:
			return []byte(*a), nil
		case b != nil:
			return []byte(*b), nil
		}
		return nil, nil
	}
	if clientCSR, err = pick(b.ClientCsr, b.CertCsr, "clientCsr/certCsr"); err != nil {
		return nil, nil, err
	}
	if serverCSR, err = pick(b.ServerCsr, b.ServerCertCsr, "serverCsr/serverCertCsr"); err != nil {
		return nil, nil, err
	}
	if err := required(req("certCsr", clientCSR != nil), req("serverCertCsr", serverCSR != nil)); err != nil {
		return nil, nil, err
	}
	return clientCSR, serverCSR, nil
}

func (s *Server) enrollErOtt(c *call) error {
	var b erOttRequest
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	return s.erOtt(c, tokenOf(c, b.Token), &b)
}

func (s *Server) erOtt(c *call, token string, b *erOttRequest) error {
	clientCSR, serverCSR, err := b.csrs()
	if err != nil {
		return err
	}
	certs, err := s.m.EnrollErOtt(token, clientCSR, serverCSR)
	if err != nil {
		return err
	}
	return routerCertsReply(c, certs)
}

func routerCertsReply(c *call, certs *model.RouterCerts) error {
	return c.data(http.StatusOK, map[string]any{"cert": string(certs.Cert), "serverCert": string(certs.ServerCert), "ca": string(certs.CA)})
}

func (s *Server) extendRouter(c *call) error {
	var b struct {
		CertCsr       *string `json:"certCsr"`
		ServerCertCsr *string `json:"serverCertCsr"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if err := required(req("certCsr", b.CertCsr != nil), req("serverCertCsr", b.ServerCertCsr != nil)); err != nil {
		return err
	}
	certs, err := s.m.ExtendRouter(c.peerChain(), []byte(*b.CertCsr), []byte(*b.ServerCertCsr))
	if err != nil {
		return err
	}
	return routerCertsReply(c, certs)
}

func (s *Server) reEnrollRouter(c *call) error {
	e, err := s.m.ReEnrollEdgeRouter(c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{"id": e.ID, "_links": links("enrollments", e.ID)})
}

// routerMetrics answers the latest metrics report of an edge router: when it was built
// and its values by name. Reports are kept in memory: a router that has sent none since the
// controller started answers NOT_FOUND, like an unknown one.
func (s *Server) routerMetrics(c *call) error {
	r, err := s.m.EdgeRouter(c.path("id"))
	if err != nil {
		return err
	}
	var report *ctrlproto.Metrics
	if s.info.Routers != nil {
		report, _ = s.info.Routers.LatestMetrics(r.ID)
	}
	if report == nil {
		return newErr(codeNotFound, "edge router %s has sent no metrics report since the controller started", r.ID)
	}
	values := report.Values
	if values == nil {
		values = map[string]float64{}
	}
	return c.data(http.StatusOK, map[string]any{"timestamp": report.Timestamp, "values": values})
}

// renderEdgeRouterDetail is the management view of an edge router: the common view plus its
// enrollment (token and JWT while it is pending) and certificates.
func (s *Server) renderEdgeRouterDetail(r *model.EdgeRouter) map[string]any {
	out := renderEdgeRouter(r, false, s.info)
	out["isVerified"] = r.IsVerified
	out["fingerprint"] = nullable(r.Fingerprint)
	out["certPem"] = nullable(r.CertPEM)
	out["unverifiedCertPem"] = nil
	out["unverifiedFingerprint"] = nil
	out["enrollmentToken"], out["enrollmentJwt"], out["enrollmentCreatedAt"], out["enrollmentExpiresAt"] = nil, nil, nil, nil
	if e, err := s.m.RouterEnrollment(r.ID); err == nil && e != nil {
		out["enrollmentToken"], out["enrollmentJwt"] = e.Token, e.JWT
		out["enrollmentCreatedAt"], out["enrollmentExpiresAt"] = e.CreatedAt, e.ExpiresAt
	}
	return out
}

// nullable renders "" as null.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

type terminatorBody struct {
	Service        *string     `json:"service"`
	Router         *string     `json:"router"`
	Binding        *string     `json:"binding"`
	Address        *string     `json:"address"`
	Identity       *string     `json:"identity"`
	IdentitySecret *[]byte     `json:"identitySecret"`
	Cost           *int        `json:"cost"`
	Precedence     *string     `json:"precedence"`
	Tags           *model.Tags `json:"tags"`
}

func (b *terminatorBody) required() error {
	return required(req("service", b.Service != nil), req("router", b.Router != nil),
		req("address", b.Address != nil), req("binding", b.Binding != nil))
}

func (b *terminatorBody) apply(t *model.Terminator) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&t.ServiceID, b.Service)
	set(&t.RouterID, b.Router)
	set(&t.Binding, b.Binding)
	set(&t.Address, b.Address)
	set(&t.Identity, b.Identity)
	set(&t.IdentitySecret, b.IdentitySecret)
	set(&t.Cost, b.Cost)
	set(&t.Precedence, b.Precedence)
	set(&t.Tags, b.Tags)
	return nil
}

// terminatorFields are the filterable fields of terminators, with the names of their service
// and router (service.name, router.name) looked up once per request.
func (s *Server) terminatorFields() []field[*model.Terminator] {
	type v = *model.Terminator
	serviceName, routerName := s.serviceNames(), s.routerNames()
	return []field[v]{
		str("service.name", func(t v) string { return serviceName(t.ServiceID) }),
		str("router.name", func(t v) string { return routerName(t.RouterID) }),
		str("id", func(t v) string { return t.ID }),
		str("serviceId", func(t v) string { return t.ServiceID }),
		str("service", func(t v) string { return t.ServiceID }),
		str("routerId", func(t v) string { return t.RouterID }),
		str("router", func(t v) string { return t.RouterID }),
		str("binding", func(t v) string { return t.Binding }),
		str("address", func(t v) string { return t.Address }),
		str("identity", func(t v) string { return t.Identity }),
		str("precedence", func(t v) string { return t.Precedence }),
		number("cost", func(t v) float64 { return float64(t.Cost) }),
		timeField("createdAt", func(t v) time.Time { return t.CreatedAt }),
		timeField("updatedAt", func(t v) time.Time { return t.UpdatedAt }),
	}
}

// renderTerminator is the management view (terminatorDetail); the client view
// (terminatorClientDetail) is a subset of it.
func (s *Server) renderTerminator(t *model.Terminator) map[string]any {
	svcName, routerName := "", ""
	if sv, err := s.m.Service(t.ServiceID); err == nil {
		svcName = sv.Name
	}
	if r, err := s.m.EdgeRouter(t.RouterID); err == nil {
		routerName = r.Name
	}
	return map[string]any{
		"id": t.ID, "_links": links("terminators", t.ID),
		"createdAt": t.CreatedAt, "updatedAt": t.UpdatedAt, "tags": tagsOf(t.Tags),
		"serviceId": t.ServiceID, "service": ref("services", t.ServiceID, svcName),
		"routerId": t.RouterID, "router": ref("edge-routers", t.RouterID, routerName),
		"binding": t.Binding, "address": t.Address, "identity": t.Identity,
		"cost": t.Cost, "dynamicCost": t.Cost, "precedence": t.Precedence,
	}
}

func (s *Server) terminatorResource() resource[*model.Terminator] {
	type v = *model.Terminator
	return resource[v]{
		path: "/terminators", entity: "terminators", what: "terminator",
		// Its own list: the fields look related names up, once per request.
		list: func(c *call) error {
			if err := refuseAsIdentity(c); err != nil {
				return err
			}
			list, err := s.m.Terminators()
			if err != nil {
				return err
			}
			if _, err := byRoles(c, list, nil, nil); err != nil {
				return err
			}
			return listOf(c, list, s.terminatorFields(), func(t *model.Terminator) any { return s.renderTerminator(t) })
		},
		render:  func(_ *call, t v) any { return s.renderTerminator(t) },
		newBody: func() body[v] { return new(terminatorBody) },
		newRec:  func() v { return new(model.Terminator) },
		reset:   func(t v) { *t = model.Terminator{Base: t.Base}; t.Tags = nil },
		id:      func(t v) string { return t.ID },
		create:  s.m.CreateTerminator, get: s.m.Terminator, all: s.m.Terminators,
		update: s.m.UpdateTerminator, remove: s.m.DeleteTerminator,
	}
}

// serviceTerminators lists a service's terminators for an identity that may use the service.
func (s *Server) serviceTerminators(c *call) error {
	if _, err := s.accessTo(c, c.path("id")); err != nil {
		return err
	}
	list, err := s.m.TerminatorsOf(c.path("id"))
	if err != nil {
		return err
	}
	return listOf(c, list, s.terminatorFields(), func(t *model.Terminator) any {
		full := s.renderTerminator(t)
		out := map[string]any{}
		for _, k := range []string{"id", "_links", "createdAt", "updatedAt", "tags", "serviceId", "service", "routerId", "identity"} {
			out[k] = full[k]
		}
		return out
	})
}
