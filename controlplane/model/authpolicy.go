package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Codes of the authentication policies, MFA, external JWT signers and token enrollment.
const (
	CodeMFAExists                = "MFA_EXISTS"
	CodeMFAInvalidToken          = "MFA_INVALID_TOKEN"
	CodeCanNotDeleteDefault      = "CAN_NOT_DELETE_DEFAULT_AUTH_POLICY"
	CodeEnrollmentIdentityExists = "IDENTITY_ALREADY_EXISTS"
	CodeEnrollmentNotAllowed     = "ENROLLMENT_NOT_ALLOWED"
)

// AuthPolicyCert is what an authentication policy says of client certificates.
type AuthPolicyCert struct {
	Allowed           bool `json:"allowed"`
	AllowExpiredCerts bool `json:"allowExpiredCerts"`
}

// AuthPolicyUpdb is what an authentication policy says of usernames and passwords.
// MaxAttempts consecutive failures (0: no limit) lock the account for
// LockoutDurationMinutes.
type AuthPolicyUpdb struct {
	Allowed                bool `json:"allowed"`
	MinPasswordLength      int  `json:"minPasswordLength"`
	RequireSpecialChar     bool `json:"requireSpecialChar"`
	RequireNumberChar      bool `json:"requireNumberChar"`
	RequireMixedCase       bool `json:"requireMixedCase"`
	MaxAttempts            int  `json:"maxAttempts"`
	LockoutDurationMinutes int  `json:"lockoutDurationMinutes"`
}

// AuthPolicyExtJWT is what an authentication policy says of JWTs of external signers: an
// empty AllowedSigners allows every enabled signer.
type AuthPolicyExtJWT struct {
	Allowed        bool     `json:"allowed"`
	AllowedSigners []string `json:"allowedSigners"`
}

// AuthPolicyPrimary holds the primary authentication mechanisms a policy allows.
type AuthPolicyPrimary struct {
	Cert   AuthPolicyCert   `json:"cert"`
	Updb   AuthPolicyUpdb   `json:"updb"`
	ExtJWT AuthPolicyExtJWT `json:"extJwt"`
}

// AuthPolicySecondary holds what a policy requires on top of primary authentication: a TOTP
// code once per API session, and a JWT of an external signer on every API call.
type AuthPolicySecondary struct {
	RequireTotp         bool   `json:"requireTotp"`
	RequireExtJWTSigner string `json:"requireExtJwtSigner,omitempty"`
}

// AuthPolicy decides which mechanisms the identities that reference it may authenticate
// with.
type AuthPolicy struct {
	Base
	Name      string              `json:"name"`
	Primary   AuthPolicyPrimary   `json:"primary"`
	Secondary AuthPolicySecondary `json:"secondary"`
}

// Bounds of authentication policy settings.
const (
	maxLockoutMinutes = 365 * 24 * 60
	maxAttemptsLimit  = 1000
)

// DefaultAuthPolicy is the built-in policy every identity has unless given another: any
// primary mechanism, certificates only while valid, passwords of the API's minimum length,
// no lockout beyond the per-source rate limit, and no secondary factor. Administrators may
// change it (PUT/PATCH /auth-policies/default) but not delete it.
func DefaultAuthPolicy() *AuthPolicy {
	return &AuthPolicy{
		Base: Base{ID: DefaultAuthPolicyID},
		Name: "Default",
		Primary: AuthPolicyPrimary{
			Cert:   AuthPolicyCert{Allowed: true},
			Updb:   AuthPolicyUpdb{Allowed: true, MinPasswordLength: MinPasswordLen},
			ExtJWT: AuthPolicyExtJWT{Allowed: true, AllowedSigners: []string{}},
		},
	}
}

// allowsSigner reports whether the policy lets its identities authenticate with a JWT of
// the signer.
func (p *AuthPolicy) allowsSigner(signerID string) bool {
	e := p.Primary.ExtJWT
	return e.Allowed && (len(e.AllowedSigners) == 0 || slices.Contains(e.AllowedSigners, signerID))
}

// authState is what the model keeps for authentication beyond the shared collections: the
// collections of this part of the model, the JWKS cache and the account lockouts.
type authState struct {
	mfa      *store.Collection[MFA]
	signers  *store.Collection[ExtJWTSigner]
	policies *store.Collection[AuthPolicy]
	jwks     *jwksCache
	lockouts *lockouts
}

func newAuthState(opts Options) *authState {
	return &authState{
		mfa: store.NewCollection("mfa", func(x *MFA) string { return x.ID },
			store.Index[MFA]{Name: "identityId", Unique: true, Keys: func(x *MFA) []string { return one(x.IdentityID) }},
		),
		signers: store.NewCollection("extJwtSigners", func(x *ExtJWTSigner) string { return x.ID },
			store.Index[ExtJWTSigner]{Name: "name", Unique: true, Keys: func(x *ExtJWTSigner) []string { return one(x.Name) }},
			store.Index[ExtJWTSigner]{Name: "issuer", Unique: true, Keys: func(x *ExtJWTSigner) []string { return one(x.Issuer) }},
		),
		policies: store.NewCollection("authPolicies", func(x *AuthPolicy) string { return x.ID },
			store.Index[AuthPolicy]{Name: "name", Unique: true, Keys: func(x *AuthPolicy) []string { return one(x.Name) }},
		),
		jwks:     newJWKSCache(opts),
		lockouts: &lockouts{m: map[string]*lockout{}},
	}
}

// authPolicyTx returns the policy with id; the built-in default when it was never changed.
func (m *Model) authPolicyTx(tx *store.Tx, id string) (*AuthPolicy, error) {
	if id == "" {
		id = DefaultAuthPolicyID
	}
	p, err := m.auth.policies.Get(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		if id == DefaultAuthPolicyID {
			return DefaultAuthPolicy(), nil
		}
		return nil, notFound("authentication policy", id)
	}
	return p, err
}

// ensureDefaultAuthPolicy stores the built-in default policy when it is not stored yet.
func (m *Model) ensureDefaultAuthPolicy(tx *store.Tx) error {
	if ok, err := m.auth.policies.Has(tx, DefaultAuthPolicyID); err != nil || ok {
		return err
	}
	p := DefaultAuthPolicy()
	p.CreatedAt, p.UpdatedAt = m.now(), m.now()
	return conflict(m.auth.policies.Create(tx, p))
}

// checkAuthPolicyRef checks, in tx, that an identity may reference the policy id.
func (m *Model) checkAuthPolicyRef(tx *store.Tx, field, id string) error {
	if id == DefaultAuthPolicyID {
		return nil
	}
	if ok, err := m.auth.policies.Has(tx, id); err != nil {
		return err
	} else if !ok {
		return invalid(field, id, "no authentication policy with this id")
	}
	return nil
}

// AuthPolicy returns the authentication policy with id.
func (m *Model) AuthPolicy(id string) (*AuthPolicy, error) {
	var out *AuthPolicy
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.authPolicyTx(tx, id)
		return err
	})
	return out, err
}

// AuthPolicies returns every authentication policy in id order, the default among them.
func (m *Model) AuthPolicies() ([]*AuthPolicy, error) {
	var out []*AuthPolicy
	err := m.st.View(func(tx *store.Tx) (err error) {
		if out, err = m.auth.policies.All(tx); err != nil {
			return err
		}
		if !slices.ContainsFunc(out, func(p *AuthPolicy) bool { return p.ID == DefaultAuthPolicyID }) {
			out = append(out, DefaultAuthPolicy())
			slices.SortFunc(out, func(a, b *AuthPolicy) int { return strings.Compare(a.ID, b.ID) })
		}
		return nil
	})
	return out, err
}

// checkAuthPolicy validates a policy about to be stored.
func (m *Model) checkAuthPolicy(tx *store.Tx, p *AuthPolicy) error {
	if err := checkName("name", p.Name); err != nil {
		return err
	}
	if def := DefaultAuthPolicy(); p.ID != def.ID && p.Name == def.Name {
		// The unique index does not know the built-in default until it is stored.
		if ok, err := m.auth.policies.Has(tx, def.ID); err != nil {
			return err
		} else if !ok {
			return invalid("name", p.Name, "name %q is already in use", p.Name)
		}
	}
	u := p.Primary.Updb
	if u.MinPasswordLength < MinPasswordLen || u.MinPasswordLength > MaxPasswordLen {
		return invalid("primary.updb.minPasswordLength", u.MinPasswordLength, "must be %d to %d", MinPasswordLen, MaxPasswordLen)
	}
	if u.MaxAttempts < 0 || u.MaxAttempts > maxAttemptsLimit {
		return invalid("primary.updb.maxAttempts", u.MaxAttempts, "must be 0 (no limit) to %d", maxAttemptsLimit)
	}
	if u.LockoutDurationMinutes < 0 || u.LockoutDurationMinutes > maxLockoutMinutes {
		return invalid("primary.updb.lockoutDurationMinutes", u.LockoutDurationMinutes, "must be 0 to %d", maxLockoutMinutes)
	}
	if u.MaxAttempts > 0 && u.LockoutDurationMinutes == 0 {
		return invalid("primary.updb.lockoutDurationMinutes", 0, "must be at least 1 when maxAttempts is set; this controller has no manual unlock")
	}
	if p.Primary.ExtJWT.AllowedSigners == nil {
		p.Primary.ExtJWT.AllowedSigners = []string{}
	}
	for i, id := range p.Primary.ExtJWT.AllowedSigners {
		if ok, err := m.auth.signers.Has(tx, id); err != nil {
			return err
		} else if !ok {
			return invalid(fmt.Sprintf("primary.extJwt.allowedSigners[%d]", i), id, "no external JWT signer with this id")
		}
	}
	if id := p.Secondary.RequireExtJWTSigner; id != "" {
		if ok, err := m.auth.signers.Has(tx, id); err != nil {
			return err
		} else if !ok {
			return invalid("secondary.requireExtJwtSigner", id, "no external JWT signer with this id")
		}
	}
	if !p.Primary.Cert.Allowed && !p.Primary.Updb.Allowed && !p.Primary.ExtJWT.Allowed {
		return invalid("primary", nil, "allows no authentication mechanism; allow one of cert, updb, extJwt")
	}
	return nil
}

// CreateAuthPolicy stores a new authentication policy.
func (m *Model) CreateAuthPolicy(p *AuthPolicy) error {
	now := m.now()
	p.ID, p.CreatedAt, p.UpdatedAt = newID(), now, now
	return m.st.Update(func(tx *store.Tx) error {
		if err := m.checkAuthPolicy(tx, p); err != nil {
			return err
		}
		return conflict(m.auth.policies.Create(tx, p))
	})
}

// UpdateAuthPolicy applies change to the policy with id and stores it after checking it.
// The default policy is stored on its first change.
func (m *Model) UpdateAuthPolicy(id string, change func(*AuthPolicy) error) (*AuthPolicy, error) {
	var out *AuthPolicy
	err := m.st.Update(func(tx *store.Tx) error {
		cur, err := m.authPolicyTx(tx, id)
		if err != nil {
			return err
		}
		created := cur.CreatedAt
		next := *cur
		next.Primary.ExtJWT.AllowedSigners = slices.Clone(cur.Primary.ExtJWT.AllowedSigners)
		if err := change(&next); err != nil {
			return err
		}
		next.ID, next.CreatedAt, next.UpdatedAt = cur.ID, created, m.now()
		if next.CreatedAt.IsZero() {
			next.CreatedAt = next.UpdatedAt
		}
		if err := m.checkAuthPolicy(tx, &next); err != nil {
			return err
		}
		if err := m.auth.policies.Put(tx, &next); err != nil {
			return conflict(err)
		}
		out = &next
		return nil
	})
	return out, err
}

// DeleteAuthPolicy removes a policy no identity or signer references; the default policy
// cannot be deleted.
func (m *Model) DeleteAuthPolicy(id string) error {
	if id == DefaultAuthPolicyID {
		return &Error{Code: CodeCanNotDeleteDefault, Message: "the default authentication policy cannot be deleted"}
	}
	return m.st.Update(func(tx *store.Tx) error {
		if ok, err := m.auth.policies.Has(tx, id); err != nil {
			return err
		} else if !ok {
			return notFound("authentication policy", id)
		}
		var users []string
		if err := m.c.identities.Each(tx, func(i *Identity) error {
			if i.AuthPolicyID == id {
				users = append(users, i.Name)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(users) > 0 {
			return errorf(CodeCanNotDeleteReferenced, "authentication policy %q is the policy of identities %s", id, strings.Join(first(users, 5), ", "))
		}
		if err := m.auth.signers.Each(tx, func(s *ExtJWTSigner) error {
			if s.EnrollAuthPolicyID == id {
				return errorf(CodeCanNotDeleteReferenced, "authentication policy %q is the enrollment policy of external JWT signer %q", id, s.Name)
			}
			return nil
		}); err != nil {
			return err
		}
		return m.auth.policies.Delete(tx, id)
	})
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// identityPolicy returns, in tx, the identity with id and its authentication policy.
func (m *Model) identityPolicy(tx *store.Tx, identityID string) (*Identity, *AuthPolicy, error) {
	id, err := m.c.identities.Get(tx, identityID)
	if err != nil {
		return nil, nil, missing(err, "identity", identityID)
	}
	p, err := m.authPolicyTx(tx, id.AuthPolicyID)
	if err != nil {
		return nil, nil, err
	}
	return id, p, nil
}

// checkPasswordPolicy checks a new password against the updb rules of the identity's policy.
func (m *Model) checkPasswordPolicy(tx *store.Tx, identityID, field, password string) error {
	_, p, err := m.identityPolicy(tx, identityID)
	if err != nil {
		return err
	}
	u := p.Primary.Updb
	if n := utf8.RuneCountInString(password); n < u.MinPasswordLength {
		return invalid(field, nil, "must be at least %d characters long (authentication policy %q), got %d", u.MinPasswordLength, p.Name, n)
	}
	has := func(f func(rune) bool) bool { return strings.ContainsFunc(password, f) }
	switch {
	case u.RequireNumberChar && !has(unicode.IsDigit):
		return invalid(field, nil, "must contain a digit (authentication policy %q)", p.Name)
	case u.RequireMixedCase && !(has(unicode.IsUpper) && has(unicode.IsLower)):
		return invalid(field, nil, "must contain upper and lower case letters (authentication policy %q)", p.Name)
	case u.RequireSpecialChar && !has(func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsSpace(r) }):
		return invalid(field, nil, "must contain a character that is neither a letter, a digit nor a space (authentication policy %q)", p.Name)
	}
	return nil
}

// lockouts count the consecutive failed password logins per identity, for policies with
// maxAttempts. Unlike the per-source rate limit, they lock the account wherever the attempts
// come from, as the policy asks.
type lockouts struct {
	mu sync.Mutex
	m  map[string]*lockout
}

type lockout struct {
	failures int
	until    time.Time
}

// locked reports whether the identity is locked out at now.
func (l *lockouts) locked(identityID string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lo := l.m[identityID]
	if lo == nil {
		return false
	}
	if !lo.until.IsZero() && !now.Before(lo.until) {
		delete(l.m, identityID)
		return false
	}
	return !lo.until.IsZero()
}

// failed counts a failure; maxAttempts of them lock the identity for lockFor.
func (l *lockouts) failed(identityID string, u AuthPolicyUpdb, now time.Time) {
	if u.MaxAttempts <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lo := l.m[identityID]
	if lo == nil {
		if len(l.m) >= limiterCap {
			for k, v := range l.m { // drop ended lockouts, then counts
				if v.until.IsZero() || !now.Before(v.until) {
					delete(l.m, k)
				}
			}
		}
		lo = &lockout{}
		l.m[identityID] = lo
	}
	lo.failures++
	if lo.failures >= u.MaxAttempts {
		lo.until = now.Add(time.Duration(u.LockoutDurationMinutes) * time.Minute)
	}
}

func (l *lockouts) succeeded(identityID string) {
	l.mu.Lock()
	delete(l.m, identityID)
	l.mu.Unlock()
}
