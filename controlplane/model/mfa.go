package model

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"image/png"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
	"github.com/pquerna/otp/totp"

	"github.com/zmesh/zmesh/controlplane/store"
)

// MFA is an identity's TOTP enrollment (RFC 6238: SHA-1, 6 digits, 30 s steps). Until it is
// verified with a first code it grants and requires nothing, and its recovery codes are kept
// so that the client can show them; verification drops them and keeps only their salted
// hashes. The secret is never shown again after verification.
type MFA struct {
	Base
	IdentityID string `json:"identityId"`
	IsVerified bool   `json:"isVerified"`
	Secret     string `json:"secret"` // base32, as in the provisioning URL
	// LastStep is the TOTP time step of the last code accepted: a code of that step or an
	// earlier one is refused, so a code cannot be replayed within its window.
	LastStep       int64    `json:"lastStep"`
	RecoverySalt   string   `json:"recoverySalt"`
	RecoveryHashes []string `json:"recoveryHashes"`
	// PendingRecoveryCodes are the recovery codes in clear, kept only until verification.
	PendingRecoveryCodes []string `json:"pendingRecoveryCodes,omitempty"`
}

// TOTP and recovery code parameters.
const (
	TOTPPeriod         = 30 * time.Second
	TOTPDigits         = 6
	totpSkew           = 1 // steps accepted either side of the current one
	RecoveryCodeCount  = 20
	recoveryCodeLen    = 12 // 60 bits
	recoveryAlphabet   = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	mfaIssuer          = "zmesh"
	AuthQueryMFA       = "MFA"
	AuthQueryExtJWT    = "EXT-JWT"
	MethodExtJWT       = "ext-jwt"
	totpTokenAudience  = "zmesh-totp"
	mfaLimiterAccount  = "mfa:"
	mfaNotEnrolledText = "the identity has no MFA enrollment"
)

var errBadMFACode = &Error{Code: CodeMFAInvalidToken, Message: "the MFA code is not valid, or was already used"}

// MFAQuery is the auth query of an API session that must still pass MFA.
func MFAQuery() AuthQuery {
	return AuthQuery{TypeID: AuthQueryMFA, Provider: "ziti", HTTPMethod: "POST", HTTPURL: "./authenticate/mfa",
		Format: "alphaNumeric", MinLength: TOTPDigits, MaxLength: recoveryCodeLen}
}

// PendingMFA reports whether the API session still has to pass MFA.
func PendingMFA(s *APISession) bool {
	return slices.ContainsFunc(s.AuthQueries, func(q AuthQuery) bool { return q.TypeID == AuthQueryMFA })
}

func totpOpts() hotp.ValidateOpts {
	return hotp.ValidateOpts{Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}
}

// mfaTx returns the identity's enrollment, or nil when it has none.
func (m *Model) mfaTx(tx *store.Tx, identityID string) (*MFA, error) {
	x, err := m.auth.mfa.Lookup(tx, "identityId", identityID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return x, err
}

// MFAOf returns the identity's MFA enrollment; NOT_FOUND when it has none.
func (m *Model) MFAOf(identityID string) (*MFA, error) {
	var out *MFA
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.mfaTx(tx, identityID)
		return err
	})
	if err == nil && out == nil {
		err = &Error{Code: CodeNotFound, Message: mfaNotEnrolledText}
	}
	return out, err
}

func newRecoveryCodes() []string {
	codes := make([]string, RecoveryCodeCount)
	b := make([]byte, recoveryCodeLen)
	for i := range codes {
		rand.Read(b)
		for j := range b {
			b[j] = recoveryAlphabet[int(b[j])%len(recoveryAlphabet)]
		}
		codes[i] = string(b)
	}
	return codes
}

// normalizeRecoveryCode makes the comparison blind to case, spaces and dashes.
func normalizeRecoveryCode(code string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' {
			return -1
		}
		return r
	}, strings.ToUpper(strings.TrimSpace(code)))
}

func hashRecoveryCode(salt, code string) string {
	sum := sha256.Sum256([]byte(salt + ":" + normalizeRecoveryCode(code)))
	return hex.EncodeToString(sum[:])
}

// setRecoveryCodes replaces the enrollment's recovery codes and returns them in clear.
func setRecoveryCodes(x *MFA) []string {
	codes := newRecoveryCodes()
	salt := make([]byte, 16)
	rand.Read(salt)
	x.RecoverySalt = hex.EncodeToString(salt)
	x.RecoveryHashes = make([]string, len(codes))
	for i, c := range codes {
		x.RecoveryHashes[i] = hashRecoveryCode(x.RecoverySalt, c)
	}
	return codes
}

// EnrollMFA starts the identity's TOTP enrollment: a new secret and recovery codes.
// MFA_EXISTS when it has one, verified or not.
func (m *Model) EnrollMFA(identityID string) (*MFA, error) {
	var out *MFA
	err := m.st.Update(func(tx *store.Tx) error {
		ident, err := m.c.identities.Get(tx, identityID)
		if err != nil {
			return missing(err, "identity", identityID)
		}
		if cur, err := m.mfaTx(tx, identityID); err != nil {
			return err
		} else if cur != nil {
			return &Error{Code: CodeMFAExists, Message: "the identity already has an MFA enrollment; disable it first (DELETE /current-identity/mfa)"}
		}
		key, err := totp.Generate(totp.GenerateOpts{Issuer: mfaIssuer, AccountName: m.mfaAccount(ident),
			Period: uint(TOTPPeriod / time.Second), Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
		if err != nil {
			return fmt.Errorf("generate TOTP secret: %w", err)
		}
		x := &MFA{Base: m.newBase(nil), IdentityID: identityID, Secret: key.Secret()}
		x.PendingRecoveryCodes = setRecoveryCodes(x)
		if err := m.auth.mfa.Create(tx, x); err != nil {
			return conflict(err)
		}
		out = x
		return nil
	})
	return out, err
}

// mfaAccount is the account name authenticator apps show: the identity's name at the
// controller's host.
func (m *Model) mfaAccount(ident *Identity) string {
	if u, err := url.Parse(m.opts.Issuer); err == nil && u.Hostname() != "" {
		return ident.Name + "@" + u.Hostname()
	}
	return ident.Name
}

// MFAProvisioningURL returns the otpauth:// URL of an unverified enrollment, "" once it is
// verified.
func (m *Model) MFAProvisioningURL(x *MFA) (string, error) {
	if x.IsVerified {
		return "", nil
	}
	ident, err := m.Identity(x.IdentityID)
	if err != nil {
		return "", err
	}
	v := url.Values{}
	v.Set("secret", x.Secret)
	v.Set("issuer", mfaIssuer)
	v.Set("algorithm", otp.AlgorithmSHA1.String())
	v.Set("digits", otp.DigitsSix.String())
	v.Set("period", fmt.Sprint(int(TOTPPeriod/time.Second)))
	u := url.URL{Scheme: "otpauth", Host: "totp", Path: "/" + mfaIssuer + ":" + m.mfaAccount(ident), RawQuery: v.Encode()}
	return u.String(), nil
}

// MFAQRCode returns a PNG of the provisioning URL of the identity's unverified enrollment;
// NOT_FOUND when it has none or it is verified.
func (m *Model) MFAQRCode(identityID string) ([]byte, error) {
	x, err := m.MFAOf(identityID)
	if err != nil {
		return nil, err
	}
	if x.IsVerified {
		return nil, &Error{Code: CodeNotFound, Message: "the MFA enrollment is verified; its QR code is no longer shown"}
	}
	u, err := m.MFAProvisioningURL(x)
	if err != nil {
		return nil, err
	}
	key, err := otp.NewKeyFromURL(u)
	if err != nil {
		return nil, err
	}
	img, err := key.Image(256, 256)
	if err != nil {
		return nil, fmt.Errorf("QR code: %w", err)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// codeKinds says which codes a check accepts.
type codeKinds int

const (
	totpCode codeKinds = 1 << iota
	recoveryCode
)

// useCode checks code against the enrollment at now and, when it holds, records its use in x
// (the caller stores x): the TOTP step becomes LastStep, a recovery code is used up.
func useCode(x *MFA, code string, kinds codeKinds, now time.Time) bool {
	code = strings.TrimSpace(code)
	if kinds&totpCode != 0 && len(code) == TOTPDigits && strings.Trim(code, "0123456789") == "" {
		step := now.Unix() / int64(TOTPPeriod/time.Second)
		for s := step - totpSkew; s <= step+totpSkew; s++ {
			if s <= x.LastStep {
				continue
			}
			if ok, err := hotp.ValidateCustom(code, uint64(s), x.Secret, totpOpts()); err == nil && ok {
				x.LastStep = s
				return true
			}
		}
		return false
	}
	if kinds&recoveryCode != 0 && x.IsVerified && code != "" {
		h := hashRecoveryCode(x.RecoverySalt, code)
		for i, stored := range x.RecoveryHashes {
			if subtle.ConstantTimeCompare([]byte(h), []byte(stored)) == 1 {
				x.RecoveryHashes = slices.Delete(x.RecoveryHashes, i, i+1)
				return true
			}
		}
	}
	return false
}

// mfaState is the state of an enrollment a code check needs.
type mfaState int

const (
	anyEnrollment mfaState = iota
	unverified
	verified
)

// withCode checks code against the identity's enrollment in one transaction, records its
// use, and runs then, when not nil, in the same transaction. Failed checks are rate-limited
// per identity and source, and per identity from any source, like logins.
func (m *Model) withCode(identityID, source, code string, kinds codeKinds, want mfaState, then func(*store.Tx, *MFA) error) error {
	try, err := startAttempt(m.limiter, mfaLimiterAccount+identityID, m.mfaLimits, identityID, source)
	if err != nil {
		return err
	}
	defer try.release()
	bad := false
	err = m.st.Update(func(tx *store.Tx) error {
		bad = false
		x, err := m.mfaTx(tx, identityID)
		if err != nil {
			return err
		}
		switch {
		case x == nil:
			return &Error{Code: CodeNotFound, Message: mfaNotEnrolledText}
		case want == unverified && x.IsVerified:
			return &Error{Code: CodeNotFound, Message: "the MFA enrollment is already verified"}
		case want == verified && !x.IsVerified:
			return &Error{Code: CodeNotFound, Message: "the MFA enrollment is not verified yet (POST /current-identity/mfa/verify)"}
		}
		if !useCode(x, code, kinds, m.now()) {
			bad = true
			return errBadMFACode
		}
		if then != nil {
			if err := then(tx, x); err != nil {
				return err
			}
		}
		if x.ID == "" { // then deleted it
			return nil
		}
		x.UpdatedAt = m.now()
		return m.auth.mfa.Put(tx, x)
	})
	switch {
	case bad:
		try.failed()
	case err == nil:
		try.succeeded()
	}
	return err
}

// passMFA removes the MFA auth query of an API session, in tx.
func (m *Model) passMFA(tx *store.Tx, sessionID string) error {
	s, err := m.c.apiSessions.Get(tx, sessionID)
	if err != nil {
		return missing(err, "API session", sessionID)
	}
	if !PendingMFA(s) {
		return nil
	}
	s.AuthQueries = slices.DeleteFunc(s.AuthQueries, func(q AuthQuery) bool { return q.TypeID == AuthQueryMFA })
	if len(s.AuthQueries) == 0 {
		s.AuthQueries = nil
	}
	return m.c.apiSessions.Put(tx, s)
}

// VerifyMFA completes the enrollment of the session's identity with its first TOTP code.
// The recovery codes in clear are dropped; the session counts as having passed MFA.
func (m *Model) VerifyMFA(s *APISession, code, source string) error {
	err := m.withCode(s.IdentityID, source, code, totpCode, unverified, func(tx *store.Tx, x *MFA) error {
		x.IsVerified = true
		x.PendingRecoveryCodes = nil
		return m.passMFA(tx, s.ID)
	})
	if err != nil {
		return err
	}
	return m.RecordMFA(s.ID, m.now())
}

// AuthenticateMFA passes MFA for an API session with a TOTP or recovery code of the
// identity's verified enrollment. It also renews the time MFA posture checks count from.
func (m *Model) AuthenticateMFA(s *APISession, code, source string) error {
	err := m.withCode(s.IdentityID, source, code, totpCode|recoveryCode, verified, func(tx *store.Tx, _ *MFA) error {
		return m.passMFA(tx, s.ID)
	})
	var e *Error
	if errors.As(err, &e) && e.Code == CodeNotFound {
		// The reference answers MFA authentication of an identity without MFA as unauthorized.
		return &Error{Code: CodeMFAInvalidToken, Message: e.Message}
	}
	if err != nil {
		return err
	}
	return m.RecordMFA(s.ID, m.now())
}

// DisableMFA removes the identity's enrollment: with a current TOTP code once verified; an
// unverified one also with an empty code.
func (m *Model) DisableMFA(identityID, code, source string) error {
	if strings.TrimSpace(code) == "" {
		err := m.st.Update(func(tx *store.Tx) error {
			x, err := m.mfaTx(tx, identityID)
			switch {
			case err != nil:
				return err
			case x == nil:
				return &Error{Code: CodeNotFound, Message: mfaNotEnrolledText}
			case x.IsVerified:
				return &Error{Code: CodeMFAInvalidToken, Message: "disabling a verified MFA enrollment needs a current code in header mfa-validation-code"}
			}
			return m.deleteMFATx(tx, x)
		})
		return err
	}
	return m.withCode(identityID, source, code, totpCode, anyEnrollment, func(tx *store.Tx, x *MFA) error {
		err := m.deleteMFATx(tx, x)
		x.ID = ""
		return err
	})
}

// RemoveMFA removes an identity's MFA enrollment without a code (administrators).
func (m *Model) RemoveMFA(identityID string) error {
	return m.st.Update(func(tx *store.Tx) error {
		if ok, err := m.c.identities.Has(tx, identityID); err != nil {
			return err
		} else if !ok {
			return notFound("identity", identityID)
		}
		x, err := m.mfaTx(tx, identityID)
		if err != nil || x == nil {
			return err
		}
		return m.deleteMFATx(tx, x)
	})
}

// deleteMFATx deletes an enrollment and lets the identity's API sessions waiting for MFA
// go on, unless its policy requires TOTP.
func (m *Model) deleteMFATx(tx *store.Tx, x *MFA) error {
	if err := m.auth.mfa.Delete(tx, x.ID); err != nil {
		return err
	}
	_, p, err := m.identityPolicy(tx, x.IdentityID)
	if err != nil || p.Secondary.RequireTotp {
		return err
	}
	sessions, err := m.c.apiSessions.IDsWith(tx, "identityId", x.IdentityID)
	if err != nil {
		return err
	}
	for _, id := range sessions {
		if err := m.passMFA(tx, id); err != nil {
			return err
		}
	}
	return nil
}

// deleteMFAOf deletes the identity's enrollment, if any, with the identity (in tx).
func (m *Model) deleteMFAOf(tx *store.Tx, identityID string) error {
	x, err := m.mfaTx(tx, identityID)
	if err != nil || x == nil {
		return err
	}
	return m.auth.mfa.Delete(tx, x.ID)
}

// CheckMFARecoveryCodes checks a current TOTP code of the identity's verified enrollment and
// returns how many recovery codes are left unused. The codes themselves are stored hashed:
// they are shown only when made (enrollment, regeneration).
func (m *Model) CheckMFARecoveryCodes(identityID, code, source string) (int, error) {
	left := 0
	err := m.withCode(identityID, source, code, totpCode, verified, func(_ *store.Tx, x *MFA) error {
		left = len(x.RecoveryHashes)
		return nil
	})
	return left, err
}

// RegenerateRecoveryCodes replaces every recovery code of the identity's verified enrollment
// after checking a current TOTP code, and returns the new codes: the only time they are
// shown.
func (m *Model) RegenerateRecoveryCodes(identityID, code, source string) ([]string, error) {
	var codes []string
	err := m.withCode(identityID, source, code, totpCode, verified, func(_ *store.Tx, x *MFA) error {
		codes = setRecoveryCodes(x)
		return nil
	})
	return codes, err
}

// TOTPTokenClaims are the claims of a TOTP token.
type TOTPTokenClaims struct {
	jwt.RegisteredClaims
	APISessionID string `json:"apiSessionId"`
}

// CreateTOTPToken checks a TOTP code of the identity's verified enrollment and returns a
// token, signed by the controller, proving the check passed at issuedAt. The API session
// counts as having passed MFA then.
func (m *Model) CreateTOTPToken(s *APISession, code, source string) (string, time.Time, error) {
	if err := m.withCode(s.IdentityID, source, code, totpCode, verified, nil); err != nil {
		return "", time.Time{}, err
	}
	now := m.now()
	claims := TOTPTokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: m.opts.Issuer, Subject: s.IdentityID, Audience: jwt.ClaimStrings{totpTokenAudience},
			ID: newToken(), IssuedAt: jwt.NewNumericDate(now),
		},
		APISessionID: s.ID,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = m.opts.SigningKID
	signed, err := t.SignedString(m.opts.SigningKey)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign TOTP token: %w", err)
	}
	if err := m.RecordMFA(s.ID, now); err != nil {
		return "", time.Time{}, err
	}
	return signed, now, nil
}

// SessionMFA is what the API shows of an API session's MFA.
type SessionMFA struct {
	Required    bool // the identity has verified MFA or its policy requires TOTP
	Complete    bool // the session passed MFA
	TOTPEnabled bool // the identity has a verified enrollment
}

// SessionMFAOf returns the MFA state of an API session.
func (m *Model) SessionMFAOf(s *APISession) (SessionMFA, error) {
	var out SessionMFA
	err := m.st.View(func(tx *store.Tx) error {
		x, err := m.mfaTx(tx, s.IdentityID)
		if err != nil {
			return err
		}
		_, p, err := m.identityPolicy(tx, s.IdentityID)
		if err != nil {
			return err
		}
		out.TOTPEnabled = x != nil && x.IsVerified
		out.Required = out.TOTPEnabled || p.Secondary.RequireTotp
		out.Complete = s.MFACompletedAt != nil && !PendingMFA(s)
		return nil
	})
	return out, err
}
