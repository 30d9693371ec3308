package api

import (
	"net/http"
	"strings"

	"github.com/zmesh/zmesh/controlplane/model"
)

// MFAHeader carries the MFA code of the operations that need a current one.
const MFAHeader = "mfa-validation-code"

func (s *Server) registerMFA() {
	s.handle(both, "POST", "/authenticate/mfa", session, "Completes MFA authentication of the API session with a TOTP or recovery code", s.authenticateMFA)
	s.handleCreate(both, "/current-identity/mfa", session, "Starts TOTP MFA enrollment of the current identity", s.enrollMFA)
	s.handle(both, "GET", "/current-identity/mfa", session, "Returns the current identity's MFA enrollment; before verification with its provisioning URL and recovery codes", s.getMFA)
	s.handle(both, "DELETE", "/current-identity/mfa", session, "Disables MFA of the current identity (header mfa-validation-code once verified)", s.deleteMFA)
	s.handle(both, "GET", "/current-identity/mfa/qr-code", session, "Returns the QR code (PNG) of an unverified MFA enrollment", s.mfaQRCode)
	s.handle(both, "POST", "/current-identity/mfa/verify", session, "Completes MFA enrollment with a first TOTP code", s.verifyMFA)
	s.handle(both, "GET", "/current-identity/mfa/recovery-codes", session, "Checks a current TOTP code and tells how many recovery codes are unused (they are shown only when made)", s.mfaRecoveryCodes)
	s.handle(both, "POST", "/current-identity/mfa/recovery-codes", session, "Replaces every recovery code after checking a current TOTP code, and returns the new ones", s.newMFARecoveryCodes)
	s.handle(both, "POST", "/current-api-session/totp-token", session, "Checks a TOTP code and returns a token proving it passed at that time", s.totpToken)
	s.handle(management, "DELETE", "/identities/{id}/mfa", adminOnly, "Removes MFA from an identity", s.removeIdentityMFA)
}

// mfaCode reads the {code} body operations require.
func mfaCode(c *call) (string, error) {
	var body struct {
		Code *string `json:"code"`
	}
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return "", err
	}
	if err := required(req("code", body.Code != nil)); err != nil {
		return "", err
	}
	return *body.Code, nil
}

// headerCode reads the code of header mfa-validation-code, or of a {code} body when the
// header is absent.
func headerCode(c *call) (string, error) {
	if v, ok := c.r.Header[http.CanonicalHeaderKey(MFAHeader)]; ok && len(v) > 0 {
		return v[0], nil
	}
	if c.r.ContentLength == 0 || c.r.Body == nil || c.r.Body == http.NoBody {
		return "", nil
	}
	return mfaCode(c)
}

func (s *Server) authenticateMFA(c *call) error {
	code, err := mfaCode(c)
	if err != nil {
		return err
	}
	if err := s.m.AuthenticateMFA(c.session, code, c.source()); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) enrollMFA(c *call) error {
	x, err := s.m.EnrollMFA(c.identity.ID)
	if err != nil {
		return err
	}
	return c.data(http.StatusCreated, map[string]any{"id": x.ID, "_links": mfaLinks()})
}

func mfaLinks() map[string]any {
	return map[string]any{
		"self":           map[string]string{"href": "./current-identity/mfa"},
		"qr-code":        map[string]string{"href": "./current-identity/mfa/qr-code"},
		"verify":         map[string]string{"href": "./current-identity/mfa/verify"},
		"recovery-codes": map[string]string{"href": "./current-identity/mfa/recovery-codes"},
	}
}

func (s *Server) getMFA(c *call) error {
	x, err := s.m.MFAOf(c.identity.ID)
	if err != nil {
		return err
	}
	out := map[string]any{
		"id": x.ID, "_links": mfaLinks(), "createdAt": x.CreatedAt, "updatedAt": x.UpdatedAt, "tags": tagsOf(x.Tags),
		"isVerified": x.IsVerified,
	}
	if !x.IsVerified {
		url, err := s.m.MFAProvisioningURL(x)
		if err != nil {
			return err
		}
		out["provisioningUrl"] = url
		out["recoveryCodes"] = nonNil(x.PendingRecoveryCodes)
	}
	return c.data(http.StatusOK, out)
}

func (s *Server) deleteMFA(c *call) error {
	code, err := headerCode(c)
	if err != nil {
		return err
	}
	if err := s.m.DisableMFA(c.identity.ID, code, c.source()); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) mfaQRCode(c *call) error {
	img, err := s.m.MFAQRCode(c.identity.ID)
	if err != nil {
		return err
	}
	c.w.Header().Set("Content-Type", "image/png")
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.WriteHeader(http.StatusOK)
	_, err = c.w.Write(img)
	return err
}

func (s *Server) verifyMFA(c *call) error {
	code, err := mfaCode(c)
	if err != nil {
		return err
	}
	if err := s.m.VerifyMFA(c.session, code, c.source()); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) mfaRecoveryCodes(c *call) error {
	code, err := headerCode(c)
	if err != nil {
		return err
	}
	if strings.TrimSpace(code) == "" {
		return &model.Error{Code: model.CodeMFAInvalidToken, Message: "a current TOTP code is required in header " + MFAHeader}
	}
	left, err := s.m.CheckMFARecoveryCodes(c.identity.ID, code, c.source())
	if err != nil {
		return err
	}
	x, err := s.m.MFAOf(c.identity.ID)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{
		"id": x.ID, "_links": mfaLinks(), "createdAt": x.CreatedAt, "updatedAt": x.UpdatedAt, "tags": tagsOf(x.Tags),
		// Recovery codes are kept hashed once the enrollment is verified: they are shown only
		// when made, by the enrollment and by POST /current-identity/mfa/recovery-codes.
		"recoveryCodes":       []string{},
		"unusedRecoveryCodes": left,
	})
}

func (s *Server) newMFARecoveryCodes(c *call) error {
	code, err := mfaCode(c)
	if err != nil {
		return err
	}
	codes, err := s.m.RegenerateRecoveryCodes(c.identity.ID, code, c.source())
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{"recoveryCodes": codes})
}

func (s *Server) totpToken(c *call) error {
	code, err := mfaCode(c)
	if err != nil {
		return err
	}
	token, at, err := s.m.CreateTOTPToken(c.session, code, c.source())
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{"token": token, "issuedAt": at})
}

func (s *Server) removeIdentityMFA(c *call) error {
	if err := s.m.RemoveMFA(c.path("id")); err != nil {
		return err
	}
	return c.empty()
}
