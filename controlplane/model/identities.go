package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/text/secure/precis"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Bounds of names and credentials (controller API spec, section 8).
const (
	MinPasswordLen = 5
	MaxPasswordLen = 100
	MinUsernameLen = 4
	MaxUsernameLen = 100
	MaxNameLen     = 255
)

// DefaultAuthPolicyID is the built-in authentication policy every identity starts with.
const DefaultAuthPolicyID = "default"

// EnrollmentRequest chooses how a new identity enrolls: at most one field is set.
type EnrollmentRequest struct {
	OTT   bool
	OTTCA string // id of a third-party CA
	Updb  string // the username
}

// IdentityCreate is what an administrator gives to create an identity.
type IdentityCreate struct {
	Name           string
	Type           string
	IsAdmin        bool
	ExternalID     string
	RoleAttributes []string
	AuthPolicyID   string
	Tags           Tags
	Enrollment     *EnrollmentRequest
	Hosting        Hosting
	AppData        map[string]any
	Permissions    []string
}

// checkName enforces the rule of entity names: 1 to MaxNameLen characters that the PRECIS
// Nickname profile (RFC 8266) keeps as they are.
func checkName(field, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return invalid(field, name, "must not be empty")
	case utf8.RuneCountInString(name) > MaxNameLen:
		return invalid(field, name, "is longer than %d characters", MaxNameLen)
	}
	return checkPRECIS(field, name, precis.Nickname, "Nickname")
}

// checkUsername enforces the rule of usernames: MinUsernameLen to MaxUsernameLen characters
// that the PRECIS UsernameCasePreserved profile (RFC 8265) keeps as they are.
func checkUsername(field, username string) error {
	if err := checkLength(field, username, MinUsernameLen, MaxUsernameLen); err != nil {
		return err
	}
	return checkPRECIS(field, username, precis.UsernameCasePreserved, "UsernameCasePreserved")
}

// checkPRECIS is the one rule of the strings that name entities and accounts: the PRECIS
// profile p (named rule) must accept s and leave it unchanged. It refuses control, formatting and
// invisible characters (NUL, zero-width joiners and spaces, bidi overrides, soft hyphens),
// and strings not in their normalised form (NFC; for names and usernames, compatibility and
// width forms such as fullwidth letters too), so that two names that look alike are one.
func checkPRECIS(field, s string, p *precis.Profile, rule string) error {
	out, err := p.String(s)
	if err != nil {
		for _, r := range s {
			if _, rerr := p.String(string(r)); rerr != nil {
				return invalid(field, s, "must not contain %U: control, formatting, invisible and other disallowed characters are refused", r)
			}
		}
		return invalid(field, s, "is refused by the PRECIS %s rule: %v", rule, err)
	}
	if out != s {
		return invalid(field, s, "is not in normalised form: write it as %q (the PRECIS %s rule maps it so)", out, rule)
	}
	return nil
}

func checkLength(field, value string, min, max int) error {
	if n := utf8.RuneCountInString(value); n < min || n > max {
		return invalid(field, nil, "must be %d to %d characters long, got %d", min, max, n)
	}
	return nil
}

func checkIdentityType(t string) error {
	if slices.Contains(IdentityTypes(), t) {
		return nil
	}
	return invalid("type", t, "is not an identity type; allowed: %s", strings.Join(IdentityTypes(), ", "))
}

// checkHosting checks hosting costs (0-65535) and precedences.
func checkHosting(h Hosting) error {
	precedence := func(field, p string) error {
		switch p {
		case "", "default", "required", "failed":
			return nil
		}
		return invalid(field, p, "is not a precedence; allowed: default, required, failed")
	}
	if h.DefaultHostingCost < 0 || h.DefaultHostingCost > 65535 {
		return invalid("defaultHostingCost", h.DefaultHostingCost, "must be 0 to 65535")
	}
	if err := precedence("defaultHostingPrecedence", h.DefaultHostingPrecedence); err != nil {
		return err
	}
	for svc, c := range h.ServiceHostingCosts {
		if c < 0 || c > 65535 {
			return invalid("serviceHostingCosts."+svc, c, "must be 0 to 65535")
		}
	}
	for svc, p := range h.ServiceHostingPrecedences {
		if err := precedence("serviceHostingPrecedences."+svc, p); err != nil {
			return err
		}
	}
	return nil
}

// CreateIdentity creates an identity and, when asked, its enrollment, in one transaction.
func (m *Model) CreateIdentity(in IdentityCreate) (*Identity, error) {
	if err := checkName("name", in.Name); err != nil {
		return nil, err
	}
	if in.Type == "" {
		in.Type = IdentityTypeDefault
	}
	if err := checkIdentityType(in.Type); err != nil {
		return nil, err
	}
	if err := checkHosting(in.Hosting); err != nil {
		return nil, err
	}
	if in.AuthPolicyID == "" {
		in.AuthPolicyID = DefaultAuthPolicyID
	}
	if e := in.Enrollment; e != nil {
		set := 0
		for _, on := range []bool{e.OTT, e.OTTCA != "", e.Updb != ""} {
			if on {
				set++
			}
		}
		if set > 1 {
			return nil, invalid("enrollment", nil, "holds more than one of ott, ottca, updb; choose one")
		}
		if e.Updb != "" {
			if err := checkUsername("enrollment.updb", e.Updb); err != nil {
				return nil, err
			}
		}
	}
	id := &Identity{
		Base:           m.newBase(in.Tags),
		Name:           in.Name,
		Type:           in.Type,
		IsAdmin:        in.IsAdmin,
		ExternalID:     in.ExternalID,
		RoleAttributes: in.RoleAttributes,
		AuthPolicyID:   in.AuthPolicyID,
		Hosting:        in.Hosting,
		AppData:        in.AppData,
		Permissions:    in.Permissions,
	}
	err := m.st.Update(func(tx *store.Tx) error {
		if err := m.checkAuthPolicyRef(tx, "authPolicyId", in.AuthPolicyID); err != nil {
			return err
		}
		if err := m.c.identities.Create(tx, id); err != nil {
			return conflict(err)
		}
		m.added(tx)
		if in.Enrollment != nil {
			if _, err := m.createEnrollment(tx, id, *in.Enrollment); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return id, nil
}

// createEnrollment stores a pending enrollment for identity and signs its token.
func (m *Model) createEnrollment(tx *store.Tx, id *Identity, req EnrollmentRequest) (*Enrollment, error) {
	e := &Enrollment{
		Base:       m.newBase(nil),
		IdentityID: id.ID,
		Token:      newToken(),
		ExpiresAt:  m.now().Add(m.opts.EnrollmentDuration),
	}
	switch {
	case req.OTT:
		e.Method = EnrollOTT
	case req.OTTCA != "":
		e.Method = EnrollOTTCA
		ca, err := m.c.cas.Get(tx, req.OTTCA)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, invalid("enrollment.ottca", req.OTTCA, "no certificate authority with this id")
			}
			return nil, err
		}
		if !ca.IsVerified || !ca.IsOttCaEnrollmentEnabled {
			return nil, invalid("enrollment.ottca", req.OTTCA, "certificate authority %q must be verified and have isOttCaEnrollmentEnabled", ca.Name)
		}
		e.CAID = ca.ID
	case req.Updb != "":
		e.Method = EnrollUpdb
		e.Username = req.Updb
		if ids, err := m.c.authenticators.IDsWith(tx, "username", req.Updb); err != nil {
			return nil, err
		} else if len(ids) > 0 {
			return nil, invalid("enrollment.updb", req.Updb, "username %q is already in use", req.Updb)
		}
	default:
		return nil, invalid("enrollment", nil, "must hold one of ott, ottca, updb")
	}
	for _, old := range mustList(m.c.enrollments.With(tx, "identityId", id.ID)) {
		if old.Method == e.Method {
			return nil, invalid("enrollment", e.Method, "identity %q already has a pending %s enrollment", id.Name, e.Method)
		}
	}
	if err := m.storeEnrollment(tx, id.ID, e); err != nil {
		return nil, err
	}
	return e, nil
}

// storeEnrollment signs the token of a new enrollment for subject and stores it.
func (m *Model) storeEnrollment(tx *store.Tx, subject string, e *Enrollment) error {
	jwt, err := m.signEnrollment(subject, e)
	if err != nil {
		return err
	}
	e.JWT = jwt
	if err := m.c.enrollments.Create(tx, e); err != nil {
		return conflict(err)
	}
	return nil
}

func mustList[T any](list []*T, err error) []*T {
	if err != nil {
		return nil
	}
	return list
}

// EnrollmentClaims are the claims of an enrollment token.
type EnrollmentClaims struct {
	jwt.RegisteredClaims
	Method   string `json:"em"`
	CA       string `json:"ca,omitempty"`
	Username string `json:"username,omitempty"`
}

// signEnrollment signs the token of enrollment e for subject, the id of the identity or edge
// router that enrolls.
func (m *Model) signEnrollment(subject string, e *Enrollment) (string, error) {
	claims := EnrollmentClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    m.opts.Issuer,
			Subject:   subject,
			ID:        e.Token,
			ExpiresAt: jwt.NewNumericDate(e.ExpiresAt),
			IssuedAt:  jwt.NewNumericDate(e.CreatedAt),
		},
		Method:   e.Method,
		CA:       e.CAID,
		Username: e.Username,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = m.opts.SigningKID
	s, err := t.SignedString(m.opts.SigningKey)
	if err != nil {
		return "", fmt.Errorf("sign enrollment token: %w", err)
	}
	return s, nil
}

// Identity returns the identity with id.
func (m *Model) Identity(id string) (*Identity, error) {
	var out *Identity
	err := m.st.View(func(tx *store.Tx) error {
		var err error
		out, err = m.c.identities.Get(tx, id)
		return missing(err, "identity", id)
	})
	return out, err
}

// IdentityByName returns the identity named name.
func (m *Model) IdentityByName(name string) (*Identity, error) {
	var out *Identity
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.identities.Lookup(tx, "name", name)
		return missing(err, "identity", name)
	})
	return out, err
}

// Identities returns every identity in id order.
func (m *Model) Identities() ([]*Identity, error) {
	var out []*Identity
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.identities.All(tx)
		return err
	})
	return out, err
}

// UpdateIdentity applies change to the identity with id and stores the result after checking
// it. The default administrator keeps its name, type and admin flag.
func (m *Model) UpdateIdentity(id string, change func(*Identity) error) (*Identity, error) {
	var out *Identity
	err := m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.identities.Get(tx, id)
		if err != nil {
			return missing(err, "identity", id)
		}
		next := *cur
		next.RoleAttributes = slices.Clone(cur.RoleAttributes)
		if err := change(&next); err != nil {
			return err
		}
		if next.Name != cur.Name { // a name stored under an older rule may stay
			if err := checkName("name", next.Name); err != nil {
				return err
			}
		}
		if err := checkIdentityType(next.Type); err != nil {
			return err
		}
		if err := checkHosting(next.Hosting); err != nil {
			return err
		}
		if next.AuthPolicyID == "" {
			next.AuthPolicyID = DefaultAuthPolicyID
		}
		if err := m.checkAuthPolicyRef(tx, "authPolicyId", next.AuthPolicyID); err != nil {
			return err
		}
		if cur.IsDefaultAdmin && (next.IsAdmin != cur.IsAdmin || next.Type != cur.Type) {
			return errorf(CodeCannotUpdateDefaultAdmin, "the default administrator stays an administrator")
		}
		next.ID, next.CreatedAt, next.IsDefaultAdmin = cur.ID, cur.CreatedAt, cur.IsDefaultAdmin
		// Only DisableIdentity and EnableIdentity change the disabled state.
		next.DisabledAt, next.DisabledUntil = cur.DisabledAt, cur.DisabledUntil
		next.UpdatedAt = m.now()
		if err := m.c.identities.Put(tx, &next); err != nil {
			return conflict(err)
		}
		if next.ExternalID != cur.ExternalID {
			// Sessions opened through a CA's claim of the old external id end.
			m.certsChanged(tx, id)
		}
		m.changed(tx)
		out = &next
		return nil
	})
	return out, err
}

// DeleteIdentity removes the identity and everything that belongs to it alone, in one
// transaction: its authenticators, enrollments, API sessions and their certificates. Its
// access ends with the commit: its API sessions no longer exist.
func (m *Model) DeleteIdentity(id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.identities.Get(tx, id)
		if err != nil {
			return missing(err, "identity", id)
		}
		if cur.IsDefaultAdmin {
			return errorf(CodeCannotDeleteDefaultAdmin, "the default administrator cannot be deleted")
		}
		if ok, err := m.c.edgeRouters.Has(tx, id); err != nil {
			return err
		} else if ok {
			return errorf(CodeCanNotDeleteReferenced, "identity %q is the identity of edge router %s; turn its tunneler off or delete the router", cur.Name, id)
		}
		return m.deleteIdentityTx(tx, id)
	})
}

func (m *Model) deleteIdentityTx(tx *store.Tx, id string) error {
	for _, del := range []func(*store.Tx, string) error{
		m.deleteAll(m.c.authenticators.IDsWith, "identityId", m.c.authenticators.Delete),
		m.deleteAll(m.c.enrollments.IDsWith, "identityId", m.c.enrollments.Delete),
	} {
		if err := del(tx, id); err != nil {
			return err
		}
	}
	// Its API sessions and sessions end right after the commit, in batches; from the commit
	// on, no request can use them.
	m.certsChanged(tx, id)
	if err := m.deleteMFAOf(tx, id); err != nil {
		return err
	}
	if ok, err := m.c.identityServiceConfigs.Has(tx, id); err != nil {
		return err
	} else if ok {
		if err := m.c.identityServiceConfigs.Delete(tx, id); err != nil {
			return err
		}
	}
	tx.OnCommit(func() { m.c.failed.forget(id) })
	m.changed(tx)
	return m.c.identities.Delete(tx, id)
}

// deleteAll returns a function that deletes every record whose index holds a value.
func (m *Model) deleteAll(ids func(*store.Tx, string, string) ([]string, error), index string,
	del func(*store.Tx, string) error) func(*store.Tx, string) error {
	return func(tx *store.Tx, value string) error {
		list, err := ids(tx, index, value)
		if err != nil {
			return err
		}
		for _, id := range list {
			if err := del(tx, id); err != nil {
				return err
			}
		}
		return nil
	}
}

// EnsureDefaultAdmin creates the default administrator with a username and password
// authenticator, and stores the built-in default authentication policy, on the controller's
// first start. Later starts find them and change nothing.
func (m *Model) EnsureDefaultAdmin(ctx context.Context, username, password string) (created bool, err error) {
	if err := checkUsername("admin.username", username); err != nil {
		return false, err
	}
	if err := checkLength("admin.password", password, MinPasswordLen, MaxPasswordLen); err != nil {
		return false, err
	}
	hash, err := m.hashes.hash(ctx, password)
	if err != nil {
		return false, err
	}
	err = m.st.Update(func(tx *store.Tx) error {
		created = false
		if err := m.ensureDefaultAuthPolicy(tx); err != nil {
			return err
		}
		exists := false
		if err := m.c.identities.Each(tx, func(i *Identity) error {
			if i.IsDefaultAdmin {
				exists = true
			}
			return nil
		}); err != nil || exists {
			return err
		}
		id := &Identity{Base: m.newBase(nil), Name: "Default Admin", Type: IdentityTypeDefault,
			IsAdmin: true, IsDefaultAdmin: true, AuthPolicyID: DefaultAuthPolicyID}
		if err := m.c.identities.Create(tx, id); err != nil {
			return conflict(err)
		}
		a := &Authenticator{Base: m.newBase(nil), IdentityID: id.ID, Method: MethodUpdb, Username: username, PasswordHash: hash}
		if err := m.c.authenticators.Create(tx, a); err != nil {
			return conflict(err)
		}
		created = true
		return nil
	})
	return created, err
}

// IdentityView is an identity with what the API shows alongside it.
type IdentityView struct {
	*Identity
	Authenticators []*Authenticator
	Enrollments    []*Enrollment
	CAs            map[string]*CA // the CAs of ottca enrollments, by id
	HasAPISession  bool
	AuthPolicyName string
	MFAEnabled     bool // the identity has a verified MFA enrollment
	Disabled       bool // disabled now (not past disabledUntil)
}

func (m *Model) identityView(tx *store.Tx, id *Identity) (*IdentityView, error) {
	v := &IdentityView{Identity: id, CAs: map[string]*CA{}, Disabled: id.IsDisabled(m.now())}
	var err error
	if v.Authenticators, err = m.c.authenticators.With(tx, "identityId", id.ID); err != nil {
		return nil, err
	}
	if v.Enrollments, err = m.c.enrollments.With(tx, "identityId", id.ID); err != nil {
		return nil, err
	}
	for _, e := range v.Enrollments {
		if e.CAID != "" {
			if ca, err := m.c.cas.Get(tx, e.CAID); err == nil {
				v.CAs[ca.ID] = ca
			}
		}
	}
	if p, err := m.authPolicyTx(tx, id.AuthPolicyID); err == nil {
		v.AuthPolicyName = p.Name
	}
	x, err := m.mfaTx(tx, id.ID)
	if err != nil {
		return nil, err
	}
	v.MFAEnabled = x != nil && x.IsVerified
	sessions, err := m.c.apiSessions.IDsWith(tx, "identityId", id.ID)
	v.HasAPISession = len(sessions) > 0
	return v, err
}

// IdentityView returns the identity with id and what is shown with it.
func (m *Model) IdentityView(id string) (*IdentityView, error) {
	var out *IdentityView
	err := m.st.View(func(tx *store.Tx) error {
		ident, err := m.c.identities.Get(tx, id)
		if err != nil {
			return missing(err, "identity", id)
		}
		out, err = m.identityView(tx, ident)
		return err
	})
	return out, err
}

// IdentityViews returns every identity with what is shown with it, in id order, from one
// snapshot.
func (m *Model) IdentityViews() ([]*IdentityView, error) {
	var out []*IdentityView
	err := m.st.View(func(tx *store.Tx) error {
		return m.c.identities.Each(tx, func(i *Identity) error {
			v, err := m.identityView(tx, i)
			out = append(out, v)
			return err
		})
	})
	return out, err
}

// RecordClientInfo stores the platform and SDK a client reported when it authenticated.
func (m *Model) RecordClientInfo(identityID string, env EnvInfo, sdk SDKInfo) error {
	return m.st.Update(func(tx *store.Tx) error {
		id, err := m.c.identities.Get(tx, identityID)
		if err != nil {
			return missing(err, "identity", identityID)
		}
		if id.EnvInfo == env && id.SDKInfo == sdk {
			return nil
		}
		id.EnvInfo, id.SDKInfo = env, sdk
		return m.c.identities.Put(tx, id)
	})
}
