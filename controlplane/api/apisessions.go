package api

import (
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// The management API's API sessions and sessions: administrators list them and end any of
// them. Ending one reaches routers as a deletion does: they close its edge connections and
// circuits.
func (s *Server) registerAPISessions() {
	s.handle(management, "GET", "/api-sessions", adminOnly, "Lists API sessions", s.listAPISessions)
	s.handle(management, "GET", "/api-sessions/{id}", adminOnly, "Returns an API session", s.getAPISession)
	s.handle(management, "DELETE", "/api-sessions/{id}", adminOnly, "Ends an API session, with its sessions", s.deleteAPISession)
	s.handle(management, "GET", "/sessions", adminOnly, "Lists sessions", s.listAllSessions)
	s.handle(management, "GET", "/sessions/{id}", adminOnly, "Returns a session", s.getAnySession)
	s.handle(management, "DELETE", "/sessions/{id}", adminOnly, "Ends a session", s.deleteAnySession)
}

// apiSessionFields are the filterable fields of API sessions; identityName names an
// identity by id (identity.name).
func apiSessionFields(identityName func(string) string) []field[*model.APISession] {
	type v = *model.APISession
	return []field[v]{
		str("id", func(x v) string { return x.ID }),
		str("identityId", func(x v) string { return x.IdentityID }),
		str("identity", func(x v) string { return x.IdentityID }),
		str("identity.name", func(x v) string { return identityName(x.IdentityID) }),
		str("authenticatorId", func(x v) string { return x.AuthenticatorID }),
		str("ipAddress", func(x v) string { return x.IPAddress }),
		timeField("createdAt", func(x v) time.Time { return x.CreatedAt }),
		timeField("updatedAt", func(x v) time.Time { return x.UpdatedAt }),
		timeField("lastActivityAt", func(x v) time.Time { return x.LastActivityAt }),
		timeField("cachedLastActivityAt", func(x v) time.Time { return x.LastActivityAt }),
	}
}

// renderAPISession is the management API's view of any API session, the reference's
// apiSessionDetail. Its token is shown only to the session itself: a token is a credential,
// and a list of them would let anyone holding an administrator's session act as every user.
func (s *Server) renderAPISession(c *call, a *model.APISession, ident *model.Identity) (map[string]any, error) {
	mfa, err := s.m.SessionMFAOf(a)
	if err != nil {
		return nil, err
	}
	queries := []any{}
	for _, q := range a.AuthQueries {
		queries = append(queries, map[string]any{
			"typeId": q.TypeID, "provider": q.Provider, "format": q.Format, "httpMethod": q.HTTPMethod,
			"httpUrl": q.HTTPURL, "minLength": q.MinLength, "maxLength": q.MaxLength, "isTotpEnrolled": mfa.TOTPEnabled,
		})
	}
	var extendable, extendRequested, keyRoll bool
	if a.CertFingerprint != "" {
		if auth, err := s.m.Authenticator(a.AuthenticatorID); err == nil {
			extendable = auth.IssuedByNetwork && auth.Fingerprint == a.CertFingerprint
			extendRequested, keyRoll = auth.ExtendRequested, auth.KeyRollRequested
		}
	}
	identName := ""
	if ident != nil {
		identName = ident.Name
	}
	token := ""
	if c.session != nil && c.session.ID == a.ID {
		token = a.Token
	}
	expires := s.m.ExpiresAt(a)
	return map[string]any{
		"id": a.ID, "_links": links("api-sessions", a.ID),
		"createdAt": a.CreatedAt, "updatedAt": a.UpdatedAt, "tags": tagsOf(a.Tags),
		"authQueries":            queries,
		"authenticatorId":        a.AuthenticatorID,
		"cachedLastActivityAt":   a.LastActivityAt,
		"lastActivityAt":         a.LastActivityAt,
		"configTypes":            nonNil(a.ConfigTypes),
		"identity":               ref("identities", a.IdentityID, identName),
		"identityId":             a.IdentityID,
		"ipAddress":              a.IPAddress,
		"isCertExtendRequested":  extendable && extendRequested,
		"isCertExtendable":       extendable,
		"isCertKeyRollRequested": extendable && keyRoll,
		"isMfaComplete":          mfa.Complete,
		"isMfaRequired":          mfa.Required,
		"token":                  token,
		"expirationSeconds":      int(expires.Sub(s.m.Now()).Seconds()),
		"expiresAt":              expires,
	}, nil
}

func (s *Server) listAPISessions(c *call) error {
	list, err := s.m.APISessions()
	if err != nil {
		return err
	}
	idents := map[string]*model.Identity{}
	var renderErr error
	err = listOf(c, list, apiSessionFields(s.identityNames()), func(a *model.APISession) any {
		ident, ok := idents[a.IdentityID]
		if !ok {
			ident, _ = s.m.Identity(a.IdentityID)
			idents[a.IdentityID] = ident
		}
		out, err := s.renderAPISession(c, a, ident)
		if err != nil && renderErr == nil {
			renderErr = err
		}
		return out
	})
	if renderErr != nil {
		return renderErr
	}
	return err
}

func (s *Server) getAPISession(c *call) error {
	a, err := s.m.APISession(c.path("id"))
	if err != nil {
		return err
	}
	ident, _ := s.m.Identity(a.IdentityID)
	out, err := s.renderAPISession(c, a, ident)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, out)
}

func (s *Server) deleteAPISession(c *call) error {
	if err := s.m.DeleteAPISession(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) listAllSessions(c *call) error {
	list, err := s.m.Sessions()
	if err != nil {
		return err
	}
	return listOf(c, list, s.sessionFields(), func(se *model.Session) any { return s.renderSessionDetail(c, se, nil) })
}

func (s *Server) getAnySession(c *call) error {
	se, err := s.m.Session(c.path("id"))
	if err != nil {
		return err
	}
	routers, _ := s.m.EdgeRoutersFor(se.IdentityID, se.ServiceID)
	return c.data(http.StatusOK, s.renderSessionDetail(c, se, routers))
}

func (s *Server) deleteAnySession(c *call) error {
	if err := s.m.DeleteSession(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}
