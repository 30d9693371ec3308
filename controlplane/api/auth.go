package api

import (
	"net/http"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerAuth() {
	s.handle(both, "POST", "/authenticate", public, "Authenticates with a password, a client certificate or a JWT of an external signer and opens an API session", s.authenticate)
	s.handle(both, "GET", "/current-api-session", session, "Returns the current API session", s.currentSession)
	s.handle(both, "DELETE", "/current-api-session", session, "Ends the current API session (logout)", s.logout)
	s.handle(both, "GET", "/current-identity", session, "Returns the identity of the current API session", s.currentIdentity)
	s.handle(both, "GET", "/current-identity/authenticators", session, "Lists the authenticators of the current identity", s.ownAuthenticators)
	s.handle(both, "GET", "/current-identity/authenticators/{id}", session, "Returns an authenticator of the current identity", s.ownAuthenticator)
	s.handle(both, "PUT", "/current-identity/authenticators/{id}", session, "Replaces the username and password of an authenticator of the current identity", s.replaceOwnAuthenticator)
	s.handle(both, "PATCH", "/current-identity/authenticators/{id}", session, "Changes the username or password of an authenticator of the current identity", s.patchOwnAuthenticator)
	s.handle(both, "POST", "/current-identity/authenticators/{id}/extend", session, "Issues a new client certificate for a certificate authenticator", s.extend)
	s.handle(both, "POST", "/current-identity/authenticators/{id}/extend-verify", session, "Puts an extended client certificate in force", s.extendVerify)
	s.handle(client, "GET", "/current-api-session/certificates", session, "Lists the ephemeral certificates of the current API session", s.sessionCerts)
	s.handleCreate(client, "/current-api-session/certificates", session, "Issues an ephemeral certificate to the current API session from a CSR", s.createSessionCert)
	s.handle(client, "GET", "/current-api-session/certificates/{id}", session, "Returns an ephemeral certificate of the current API session", s.sessionCert)
	s.handle(client, "DELETE", "/current-api-session/certificates/{id}", session, "Deletes an ephemeral certificate of the current API session", s.deleteSessionCert)
}

type envInfo struct {
	Arch      string `json:"arch"`
	Domain    string `json:"domain"`
	Hostname  string `json:"hostname"`
	OS        string `json:"os"`
	OSRelease string `json:"osRelease"`
	OSVersion string `json:"osVersion"`
}

type sdkInfo struct {
	AppID      string `json:"appId"`
	AppVersion string `json:"appVersion"`
	Branch     string `json:"branch"`
	Revision   string `json:"revision"`
	Type       string `json:"type"`
	Version    string `json:"version"`
}

type authenticateBody struct {
	ConfigTypes []string `json:"configTypes"`
	EnvInfo     *envInfo `json:"envInfo"`
	SDKInfo     *sdkInfo `json:"sdkInfo"`
	Username    *string  `json:"username"`
	Password    *string  `json:"password"`
}

func (b *authenticateBody) check(method string) error {
	if b.EnvInfo != nil {
		e := b.EnvInfo
		for _, f := range []struct {
			name, v string
			max     int
		}{{"envInfo.arch", e.Arch, 255}, {"envInfo.domain", e.Domain, 253}, {"envInfo.hostname", e.Hostname, 253},
			{"envInfo.os", e.OS, 255}, {"envInfo.osRelease", e.OSRelease, 255}, {"envInfo.osVersion", e.OSVersion, 255}} {
			if err := checkLen(f.name, f.v, 0, f.max); err != nil {
				return err
			}
		}
	}
	if b.SDKInfo != nil {
		i := b.SDKInfo
		for _, f := range []struct{ name, v string }{{"sdkInfo.appId", i.AppID}, {"sdkInfo.appVersion", i.AppVersion},
			{"sdkInfo.branch", i.Branch}, {"sdkInfo.revision", i.Revision}, {"sdkInfo.type", i.Type}, {"sdkInfo.version", i.Version}} {
			if err := checkLen(f.name, f.v, 0, 255); err != nil {
				return err
			}
		}
	}
	if method == model.MethodPassword {
		if err := required(req("username", b.Username != nil), req("password", b.Password != nil)); err != nil {
			return err
		}
		if err := checkLen("username", *b.Username, model.MinUsernameLen, model.MaxUsernameLen); err != nil {
			return err
		}
		return checkLen("password", *b.Password, model.MinPasswordLen, model.MaxPasswordLen)
	}
	return nil
}

func (s *Server) authenticate(c *call) error {
	method := c.r.URL.Query().Get("method")
	if method != model.MethodPassword && method != model.MethodCertAuth && method != model.MethodExtJWT {
		return fieldErr("method", method, "is not an authentication method; allowed: password, cert, ext-jwt")
	}
	var body authenticateBody
	if c.r.ContentLength != 0 || method == model.MethodPassword {
		if err := decodeJSON(c.w, c.r, &body); err != nil {
			return err
		}
	}
	if err := body.check(method); err != nil {
		return err
	}
	login := model.Login{Source: c.source(), ConfigTypes: body.ConfigTypes}
	var sess *model.APISession
	var ident *model.Identity
	var err error
	switch method {
	case model.MethodPassword:
		sess, ident, err = s.m.AuthenticatePassword(c.r.Context(), *body.Username, *body.Password, login)
	case model.MethodCertAuth:
		sess, ident, err = s.m.AuthenticateCert(c.peerChain(), login)
	default:
		sess, ident, err = s.m.AuthenticateExtJWT(c.r.Context(), c.bearer(), login)
	}
	if err != nil {
		return err
	}
	if body.EnvInfo != nil || body.SDKInfo != nil {
		var env model.EnvInfo
		var sdk model.SDKInfo
		if e := body.EnvInfo; e != nil {
			env = model.EnvInfo(*e)
		}
		if i := body.SDKInfo; i != nil {
			sdk = model.SDKInfo(*i)
		}
		if err := s.m.RecordClientInfo(ident.ID, env, sdk); err != nil {
			return err
		}
	}
	c.w.Header().Set(SessionHeader, sess.Token)
	out, err := s.renderSession(c, sess, ident)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, out)
}

// authQueries renders the steps the API session has still to pass: MFA, and a JWT of the
// external signer the identity's policy requires on every call when this request carries
// none that is valid.
func (s *Server) authQueries(c *call, sess *model.APISession, ident *model.Identity, mfa model.SessionMFA) ([]any, error) {
	out := []any{}
	for _, q := range sess.AuthQueries {
		out = append(out, map[string]any{
			"typeId": q.TypeID, "provider": q.Provider, "format": q.Format, "httpMethod": q.HTTPMethod,
			"httpUrl": q.HTTPURL, "minLength": q.MinLength, "maxLength": q.MaxLength, "isTotpEnrolled": mfa.TOTPEnabled,
		})
	}
	signer, err := s.m.RequiredSigner(ident)
	if err != nil {
		return nil, err
	}
	if signer != nil && s.m.CheckSecondaryJWT(c.r.Context(), ident, c.bearer()) != nil {
		out = append(out, map[string]any{
			"typeId": model.AuthQueryExtJWT, "provider": "url", "id": signer.ID, "httpUrl": signer.ExternalAuthURL,
			"clientId": signer.ClientID, "scopes": nonNil(signer.Scopes),
		})
	}
	return out, nil
}

func (s *Server) renderSession(c *call, sess *model.APISession, ident *model.Identity) (map[string]any, error) {
	expires := s.m.ExpiresAt(sess)
	var extendable, extendRequested, keyRoll bool
	if sess.CertFingerprint != "" {
		if a, err := s.m.Authenticator(sess.AuthenticatorID); err == nil {
			extendable = a.IssuedByNetwork && a.Fingerprint == sess.CertFingerprint
			extendRequested, keyRoll = a.ExtendRequested, a.KeyRollRequested
		}
	}
	mfa, err := s.m.SessionMFAOf(sess)
	if err != nil {
		return nil, err
	}
	queries, err := s.authQueries(c, sess, ident, mfa)
	if err != nil {
		return nil, err
	}
	configTypes := sess.ConfigTypes
	if configTypes == nil {
		configTypes = []string{}
	}
	return map[string]any{
		"id": sess.ID, "_links": links("api-sessions", sess.ID),
		"createdAt": sess.CreatedAt, "updatedAt": sess.UpdatedAt, "tags": tagsOf(sess.Tags),
		"authQueries":            queries,
		"authenticatorId":        sess.AuthenticatorID,
		"cachedLastActivityAt":   sess.LastActivityAt,
		"lastActivityAt":         sess.LastActivityAt,
		"configTypes":            configTypes,
		"identity":               ref("identities", ident.ID, ident.Name),
		"identityId":             ident.ID,
		"ipAddress":              sess.IPAddress,
		"isCertExtendRequested":  extendable && extendRequested,
		"isCertExtendable":       extendable,
		"isCertKeyRollRequested": extendable && keyRoll,
		"isMfaComplete":          mfa.Complete,
		"isMfaRequired":          mfa.Required,
		"token":                  sess.Token,
		"expirationSeconds":      int(expires.Sub(s.m.Now()).Seconds()),
		"expiresAt":              expires,
	}, nil
}

func tagsOf(t model.Tags) map[string]any {
	if t == nil {
		return map[string]any{}
	}
	return t
}

func (s *Server) currentSession(c *call) error {
	out, err := s.renderSession(c, c.session, c.identity)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, out)
}

func (s *Server) logout(c *call) error {
	if err := s.m.DeleteAPISession(c.session.ID); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) currentIdentity(c *call) error {
	v, err := s.m.IdentityView(c.identity.ID)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, renderIdentity(v))
}

func (s *Server) ownAuthenticators(c *call) error {
	list, err := s.m.AuthenticatorsOf(c.identity.ID)
	if err != nil {
		return err
	}
	return listOf(c, list, authenticatorFields(s.identityNames()), func(a *model.Authenticator) any { return renderAuthenticator(a, c.identity) })
}

func (s *Server) ownAuthenticator(c *call) error {
	a, err := s.m.OwnAuthenticator(c.identity.ID, c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, renderAuthenticator(a, c.identity))
}

type authenticatorChange struct {
	Username        *string     `json:"username"`
	Password        *string     `json:"password"`
	CurrentPassword *string     `json:"currentPassword"`
	Tags            *model.Tags `json:"tags"`
}

func (b *authenticatorChange) check(replace bool) error {
	if replace {
		if err := required(req("username", b.Username != nil), req("password", b.Password != nil)); err != nil {
			return err
		}
	}
	if err := required(req("currentPassword", b.CurrentPassword != nil)); err != nil {
		return err
	}
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) changeOwnAuthenticator(c *call, replace bool) error {
	var body authenticatorChange
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := body.check(replace); err != nil {
		return err
	}
	err := s.m.ChangeCredentials(c.r.Context(), c.identity.ID, c.path("id"), model.CredentialsChange{
		Username: body.Username, Password: body.Password, Tags: body.Tags, CurrentPassword: *body.CurrentPassword,
		Source: c.source(),
	})
	if err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) replaceOwnAuthenticator(c *call) error { return s.changeOwnAuthenticator(c, true) }
func (s *Server) patchOwnAuthenticator(c *call) error   { return s.changeOwnAuthenticator(c, false) }

func (s *Server) extend(c *call) error {
	var body struct {
		ClientCertCsr *string `json:"clientCertCsr"`
	}
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := required(req("clientCertCsr", body.ClientCertCsr != nil)); err != nil {
		return err
	}
	cert, err := s.m.ExtendCert(c.session, c.path("id"), []byte(*body.ClientCertCsr))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{"clientCert": string(cert), "ca": string(s.m.CA().PEM())})
}

func (s *Server) extendVerify(c *call) error {
	var body struct {
		ClientCert *string `json:"clientCert"`
	}
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := required(req("clientCert", body.ClientCert != nil)); err != nil {
		return err
	}
	if err := s.m.ExtendVerify(c.session, c.path("id"), *body.ClientCert); err != nil {
		return err
	}
	return c.empty()
}

func renderSessionCert(sc *model.APISessionCert) map[string]any {
	return map[string]any{
		"id": sc.ID, "_links": links("current-api-session/certificates", sc.ID),
		"createdAt": sc.CreatedAt, "updatedAt": sc.UpdatedAt, "tags": tagsOf(sc.Tags),
		"certificate": sc.CertPEM, "fingerprint": sc.Fingerprint, "subject": sc.Subject,
		"validFrom": sc.ValidFrom, "validTo": sc.ValidTo,
	}
}

func (s *Server) sessionCerts(c *call) error {
	list, err := s.m.APISessionCerts(c.session.ID)
	if err != nil {
		return err
	}
	fields := []field[*model.APISessionCert]{
		str("id", func(x *model.APISessionCert) string { return x.ID }),
		str("subject", func(x *model.APISessionCert) string { return x.Subject }),
		str("fingerprint", func(x *model.APISessionCert) string { return x.Fingerprint }),
		timeField("validFrom", func(x *model.APISessionCert) time.Time { return x.ValidFrom }),
		timeField("validTo", func(x *model.APISessionCert) time.Time { return x.ValidTo }),
		timeField("createdAt", func(x *model.APISessionCert) time.Time { return x.CreatedAt }),
	}
	return listOf(c, list, fields, func(x *model.APISessionCert) any { return renderSessionCert(x) })
}

func (s *Server) createSessionCert(c *call) error {
	var body struct {
		CSR *string `json:"csr"`
	}
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := required(req("csr", body.CSR != nil)); err != nil {
		return err
	}
	sc, err := s.m.CreateAPISessionCert(c.session, []byte(*body.CSR))
	if err != nil {
		return err
	}
	return c.data(http.StatusCreated, map[string]any{
		"id": sc.ID, "_links": links("current-api-session/certificates", sc.ID),
		"certificate": sc.CertPEM, "cas": string(s.m.CA().PEM()),
	})
}

func (s *Server) sessionCert(c *call) error {
	sc, err := s.m.APISessionCert(c.session.ID, c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, renderSessionCert(sc))
}

func (s *Server) deleteSessionCert(c *call) error {
	if err := s.m.DeleteAPISessionCert(c.session.ID, c.path("id")); err != nil {
		return err
	}
	return c.empty()
}
