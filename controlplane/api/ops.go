package api

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// registerOps adds the operators' operations: policy advice, an identity's service configs,
// authenticators' administration.
func (s *Server) registerOps() {
	s.handleCreate(management, "/authenticators", adminOnly, "Creates a updb or cert authenticator for an identity", s.createAuthenticator)
	s.handle(management, "PUT", "/authenticators/{id}", adminOnly, "Sets a updb authenticator's username and password", func(c *call) error { return s.setCredentials(c, true) })
	s.handle(management, "PATCH", "/authenticators/{id}", adminOnly, "Changes a updb authenticator's username or password, or an authenticator's tags", func(c *call) error { return s.setCredentials(c, false) })
	s.handle(management, "POST", "/authenticators/{id}/re-enroll", adminOnly, "Replaces an authenticator with an enrollment of its kind", s.reEnrollAuthenticator)
	s.handle(management, "POST", "/authenticators/{id}/request-extend", adminOnly, "Asks the clients of a cert authenticator to extend the certificate early", s.requestExtend)
	s.handle(management, "GET", "/identities/{id}/policy-advice/{serviceId}", adminOnly,
		"Analyzes whether an identity may dial or bind a service and which edge routers they share", s.policyAdvice)
	s.handle(management, "GET", "/identities/{id}/failed-service-requests", adminOnly,
		"Lists an identity's latest session requests that posture checks refused (volatile)", s.failedServiceRequests)
	s.handle(management, "GET", "/identities/{id}/posture-data", adminOnly,
		"Returns the posture data an identity's API sessions reported (volatile)", s.identityPostureData)
	s.handle(management, "GET", "/identities/{id}/service-configs", adminOnly,
		"Lists the configs an identity uses for services in place of the services' own", s.identityServiceConfigs)
	s.handle(management, "POST", "/identities/{id}/service-configs", adminOnly,
		"Makes an identity use configs for services in place of the services' configs of the same type", s.assignServiceConfigs)
	s.handle(management, "DELETE", "/identities/{id}/service-configs", adminOnly,
		"Ends an identity's use of service configs; an absent or empty list ends all", s.removeServiceConfigs)
}

// edgeRouterRef is a reference to an edge router with whether its control channel is
// connected.
func (s *Server) edgeRouterRef(r *model.EdgeRouter) map[string]any {
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
		common = append(common, s.edgeRouterRef(r))
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

func (s *Server) createAuthenticator(c *call) error {
	var b struct {
		Method     *string     `json:"method"`
		IdentityID *string     `json:"identityId"`
		Username   *string     `json:"username"`
		Password   *string     `json:"password"`
		CertPEM    *string     `json:"certPem"`
		Tags       *model.Tags `json:"tags"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if err := required(req("method", b.Method != nil), req("identityId", b.IdentityID != nil)); err != nil {
		return err
	}
	switch *b.Method {
	case model.MethodUpdb:
		if err := required(req("username", b.Username != nil), req("password", b.Password != nil)); err != nil {
			return err
		}
	case model.MethodCert:
		if err := required(req("certPem", b.CertPEM != nil)); err != nil {
			return err
		}
	}
	in := model.AuthenticatorCreate{Method: *b.Method, IdentityID: *b.IdentityID}
	set(&in.Username, b.Username)
	set(&in.Password, b.Password)
	set(&in.CertPEM, b.CertPEM)
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
		in.Tags = *b.Tags
	}
	a, err := s.m.CreateAuthenticator(c.r.Context(), in)
	if err != nil {
		return err
	}
	return c.created("authenticators", a.ID)
}

// setCredentials is an administrator's change of an authenticator: replace needs the
// username and password; a patch changes what it names (null leaves a field as it is).
func (s *Server) setCredentials(c *call, replace bool) error {
	var b struct {
		Username nullField[string]     `json:"username"`
		Password nullField[string]     `json:"password"`
		Tags     nullField[model.Tags] `json:"tags"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	if replace {
		if err := required(req("username", b.Username.present()), req("password", b.Password.present())); err != nil {
			return err
		}
	}
	var username, password *string
	var tags *model.Tags
	if b.Username.present() {
		username = &b.Username.v
	}
	if b.Password.present() {
		password = &b.Password.v
	}
	if b.Tags.set {
		tags = new(model.Tags)
		b.Tags.apply(tags)
		if err := checkTags("tags", *tags); err != nil {
			return err
		}
	} else if replace {
		tags = new(model.Tags)
	}
	if err := s.m.SetCredentials(c.r.Context(), c.path("id"), username, password, tags); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) reEnrollAuthenticator(c *call) error {
	expiresAt, err := decodeExpiresAt(c)
	if err != nil {
		return err
	}
	e, err := s.m.ReEnrollAuthenticator(c.path("id"), expiresAt)
	if err != nil {
		return err
	}
	return c.created("enrollments", e.ID)
}

func (s *Server) requestExtend(c *call) error {
	var b struct {
		RollKeys *bool `json:"rollKeys"`
	}
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	a, err := s.m.Authenticator(c.path("id"))
	if err != nil {
		return err
	}
	if a.Method != model.MethodCert {
		return &apiErr{code: codeUnauthorized, status: http.StatusForbidden,
			message: fmt.Sprintf("authenticator %s is a %s authenticator; only %s authenticators can be extended", a.ID, a.Method, model.MethodCert)}
	}
	if err := s.m.RequestExtend(a.ID, b.RollKeys != nil && *b.RollKeys); err != nil {
		return err
	}
	return c.empty()
}

// postureBase is the reference's postureDataBase of a report made at at (zero: never).
func postureBase(checkID string, at time.Time) map[string]any {
	return map[string]any{"postureCheckId": checkID, "timedOut": false, "lastUpdatedAt": timeOrNil(at)}
}

func (s *Server) identityPostureData(c *call) error {
	p, err := s.m.PostureDataOf(c.path("id"))
	if err != nil {
		return err
	}
	mac := postureBase("", p.MACsAt)
	mac["addresses"] = nonNil(p.MACs)
	domain := postureBase("", p.DomainAt)
	domain["domain"] = p.Domain
	osData := postureBase("", p.OSAt)
	osData["type"], osData["version"], osData["build"] = p.OSType, p.OSVersion, p.OSBuild
	processes := make([]any, 0, len(p.Processes))
	for _, pr := range p.Processes {
		v := postureBase(pr.CheckID, pr.At)
		v["path"], v["binaryHash"], v["isRunning"], v["signerFingerprints"] = pr.Path, pr.Hash, pr.IsRunning, nonNil(pr.SignerFingerprints)
		processes = append(processes, v)
	}
	sessions := map[string]any{}
	for id, sp := range p.Sessions {
		passed := sp.MFAPassedAt != nil
		after := func(t time.Time) bool { return passed && !t.IsZero() && !sp.MFAPassedAt.Before(t) }
		var passedAt any
		if passed {
			passedAt = *sp.MFAPassedAt
		}
		sessions[id] = map[string]any{
			"mfa": map[string]any{"apiSessionId": id, "passedMfa": passed, "passedAt": passedAt,
				"passedOnWake": after(sp.WokenAt), "passedOnUnlock": after(sp.UnlockedAt)},
			"endpointState": map[string]any{"wokenAt": timeOrNil(sp.WokenAt), "unlockedAt": timeOrNil(sp.UnlockedAt)},
		}
	}
	return c.data(http.StatusOK, map[string]any{
		"mac": mac, "domain": domain, "os": osData, "processes": processes, "apiSessionPostureData": sessions,
	})
}

func (s *Server) failedServiceRequests(c *call) error {
	list, err := s.m.FailedServiceRequests(c.path("id"))
	if err != nil {
		return err
	}
	out := make([]any, 0, len(list))
	for _, r := range list {
		policies := make([]any, 0, len(r.PolicyFailures))
		for _, p := range r.PolicyFailures {
			checks := make([]any, 0, len(p.Checks))
			for _, cf := range p.Checks {
				v := map[string]any{"postureCheckId": cf.CheckID, "postureCheckName": cf.CheckName, "postureCheckType": cf.CheckType, "reason": cf.Reason}
				if cf.Expected != nil {
					v["actualValue"], v["expectedValue"] = cf.Actual, cf.Expected
				}
				checks = append(checks, v)
			}
			policies = append(policies, map[string]any{"policyId": p.PolicyID, "policyName": p.PolicyName, "checks": checks})
		}
		out = append(out, map[string]any{
			"apiSessionId": r.APISessionID, "serviceId": r.ServiceID, "serviceName": r.ServiceName,
			"sessionType": r.SessionType, "when": r.When, "policyFailures": policies,
		})
	}
	return c.data(http.StatusOK, out)
}
