package model

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// Login is what a client presents to authenticate, besides its credentials.
type Login struct {
	Source      string // the client's IP address, for rate limiting and the session record
	ConfigTypes []string
}

// RateLimitedError says when an account may try again from this source.
type RateLimitedError struct{ RetryAfter time.Duration }

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many failed attempts; retry in %s", e.RetryAfter.Round(time.Second))
}

func rateLimited(wait time.Duration) error {
	return &Error{Code: CodeRateLimited, Message: (&RateLimitedError{wait}).Error(), Cause: &RateLimitedError{wait}}
}

var errInvalidAuth = &Error{Code: CodeInvalidAuth, Message: "the authentication request failed"}

// AuthenticatePassword checks a username and password and opens an API session. Failures
// say nothing about which part was wrong. Failures are limited per (username, source), per
// username and for all usernames together, counting the attempts in progress; the argon2id
// work waits for a slot while ctx lasts.
func (m *Model) AuthenticatePassword(ctx context.Context, username, password string, login Login) (*APISession, *Identity, error) {
	try, err := startAttempt(m.limiter, "updb:"+username, m.updbLimits, username, login.Source)
	if err != nil {
		return nil, nil, err
	}
	defer try.release()
	var auth *Authenticator
	var ident *Identity
	var policy *AuthPolicy
	err = m.st.View(func(tx *store.Tx) (err error) {
		if auth, err = m.c.authenticators.Lookup(tx, "username", username); err != nil {
			return err
		}
		ident, policy, err = m.identityPolicy(tx, auth.IdentityID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) || CodeOf(err) == CodeNotFound {
		// Spend the work a real check takes, so that timing does not reveal usernames.
		if _, err := m.hashes.check(ctx, dummyHash, password); err != nil {
			return nil, nil, err
		}
		try.failed()
		return nil, nil, errInvalidAuth
	}
	if err != nil {
		return nil, nil, err
	}
	// A locked account, or a disabled identity, fails whatever the password, after the same
	// work and with the same answer.
	locked := m.auth.lockouts.locked(auth.IdentityID, m.now()) || ident.IsDisabled(m.now())
	ok, err := m.hashes.check(ctx, auth.PasswordHash, password)
	if err != nil {
		return nil, nil, err
	}
	if !ok || locked {
		try.failed()
		if !locked {
			m.auth.lockouts.failed(auth.IdentityID, policy.Primary.Updb, m.now())
		}
		return nil, nil, errInvalidAuth
	}
	try.succeeded()
	m.auth.lockouts.succeeded(auth.IdentityID)
	return m.openSession(auth, MethodPassword, "", login)
}

// dummyHash is checked against when a username does not exist.
const dummyHash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE"

// Authentication methods as clients name them.
const (
	MethodPassword = "password"
	MethodCertAuth = "cert"
)

// AuthenticateCert checks a client certificate chain (leaf first) and opens an API session.
// The leaf must be the certificate of a cert authenticator and chain to the controller's CA
// or to a verified third-party CA that allows authentication.
func (m *Model) AuthenticateCert(chain []*x509.Certificate, login Login) (*APISession, *Identity, error) {
	if len(chain) == 0 {
		return nil, nil, errInvalidAuth
	}
	fp := certid.Fingerprint(chain[0])
	// A certificate check is quick and proves possession rather than guessing, so it does
	// not reserve: many logins at once with one certificate stay possible.
	if wait := m.limiter.check("cert:"+fp, login.Source); wait > 0 {
		return nil, nil, rateLimited(wait)
	}
	who, err := m.certIdentity(chain)
	if CodeOf(err) == CodeInvalidAuth {
		m.limiter.end("cert:"+fp, login.Source, nil, failed)
	}
	if err != nil {
		return nil, nil, err
	}
	m.limiter.end("cert:"+fp, login.Source, nil, succeeded)
	if who.claim != nil {
		return m.openSessionWith(who.identityID, "", MethodCertAuth, fp, login, "", who.claim)
	}
	return m.openSession(who.auth, MethodCertAuth, fp, login)
}

// certHolder is whom a certificate chain stands for: the identity of its cert
// authenticator, or the identity whose external id its CA's claim names.
type certHolder struct {
	identityID string
	auth       *Authenticator // nil when claim is not
	claim      *certClaim
}

// certClaim is the external id a certificate claims through its CA's external id claim.
type certClaim struct {
	caFingerprint, externalID string
}

// claimedExternalID returns the external id a chain's leaf claims through the verified,
// authentication-enabled third-party CA that issued it, or nil when that CA has no claim or
// the leaf carries none.
func (m *Model) claimedExternalID(chain []*x509.Certificate, cas []*CA) *certClaim {
	for _, ca := range cas {
		if ca.ExternalIDClaim == nil || !ca.IsVerified || !ca.IsAuthEnabled || verifyWithCA(ca, chain, m.opts.Now()) != nil {
			continue
		}
		id, err := ca.ExternalIDClaim.ExternalID(chain[0])
		if err != nil {
			m.log.Info("client certificate without its CA's external id claim", "ca", ca.ID, "err", err)
			return nil
		}
		return &certClaim{caFingerprint: ca.Fingerprint, externalID: id}
	}
	return nil
}

// certIdentity finds whom a certificate chain stands for and checks the chain. A chain of a
// third-party CA with an external id claim stands for the identity with the external id it
// claims; any other for the identity of the cert authenticator holding its leaf.
func (m *Model) certIdentity(chain []*x509.Certificate) (certHolder, error) {
	fp := certid.Fingerprint(chain[0])
	var who certHolder
	var ident *Identity
	var cas []*CA
	var policy *AuthPolicy
	err := m.st.View(func(tx *store.Tx) (err error) {
		if cas, err = m.c.cas.All(tx); err != nil {
			return err
		}
		if claim := m.claimedExternalID(chain, cas); claim != nil {
			byExt, err := m.c.identities.Lookup(tx, "externalId", claim.externalID)
			if err != nil {
				return err
			}
			if byExt.IsAdmin || byExt.Type == IdentityTypeRouter {
				// A third party's claim does not reach administrators or routers' identities.
				m.log.Info("certificate refused: its CA's external id claim names an administrator or a router's identity", "identity", byExt.ID)
				return errInvalidAuth
			}
			who = certHolder{identityID: byExt.ID, claim: claim}
		} else {
			auth, err := m.c.authenticators.Lookup(tx, "fingerprint", fp)
			if err != nil {
				return err
			}
			who = certHolder{identityID: auth.IdentityID, auth: auth}
		}
		ident, policy, err = m.identityPolicy(tx, who.identityID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) || CodeOf(err) == CodeNotFound {
		return certHolder{}, errInvalidAuth
	}
	if err != nil {
		return certHolder{}, err
	}
	if ident.IsDisabled(m.now()) {
		m.log.Info("certificate refused: its identity is disabled", "identity", ident.ID)
		return certHolder{}, errInvalidAuth
	}
	err = m.verifyChain(chain, cas)
	if err != nil && policy.Primary.Cert.AllowExpiredCerts && m.opts.Now().After(chain[0].NotAfter) {
		// The identity's policy accepts an expired certificate that was valid otherwise.
		err = m.verifyChainAt(chain, cas, chain[0].NotAfter.Add(-time.Second))
	}
	if err != nil {
		return certHolder{}, &Error{Code: CodeInvalidAuth, Message: "the client certificate is not valid", Cause: err}
	}
	return who, nil
}

// verifyChain accepts a chain issued by the controller's CA or by a verified third-party CA
// that allows authentication.
func (m *Model) verifyChain(chain []*x509.Certificate, cas []*CA) error {
	if err := m.ca.VerifyClient(chain[0], chain[1:]); err == nil {
		return nil
	}
	return m.verifyThirdParty(chain, cas, m.opts.Now())
}

// verifyChainAt is verifyChain at another time than now.
func (m *Model) verifyChainAt(chain []*x509.Certificate, cas []*CA, at time.Time) error {
	if err := pki.VerifyChain(chain[0], chain[1:], m.ca.Pool(), at); err == nil {
		return nil
	}
	return m.verifyThirdParty(chain, cas, at)
}

func (m *Model) verifyThirdParty(chain []*x509.Certificate, cas []*CA, at time.Time) error {
	roots := x509.NewCertPool()
	n := 0
	for _, ca := range cas {
		if !ca.IsVerified || !ca.IsAuthEnabled {
			continue
		}
		if cert, err := pki.ParsePEMCert([]byte(ca.CertPEM)); err == nil {
			roots.AddCert(cert)
			n++
		}
	}
	if n == 0 {
		return errors.New("the certificate is not issued by the network's CA or a verified certificate authority")
	}
	return pki.VerifyChain(chain[0], chain[1:], roots, at)
}

// openSession stores a new API session for the authenticator's identity.
func (m *Model) openSession(auth *Authenticator, method, fingerprint string, login Login) (*APISession, *Identity, error) {
	return m.openSessionFor(auth.IdentityID, auth.ID, method, fingerprint, login, "")
}

// openSessionFor stores a new API session for the identity once its authentication policy
// allows the method (and, for ext-jwt, the signer). The session must still pass MFA when
// the identity has a verified MFA enrollment or its policy requires TOTP.
func (m *Model) openSessionFor(identityID, authenticatorID, method, fingerprint string, login Login, signerID string) (*APISession, *Identity, error) {
	return m.openSessionWith(identityID, authenticatorID, method, fingerprint, login, signerID, nil)
}

// openSessionWith is openSessionFor; claim, when not nil: the certificate stood for the
// identity through its CA's external id claim.
func (m *Model) openSessionWith(identityID, authenticatorID, method, fingerprint string, login Login, signerID string, claim *certClaim) (*APISession, *Identity, error) {
	s := &APISession{
		Base:            m.newBase(nil),
		Token:           newToken(),
		IdentityID:      identityID,
		AuthenticatorID: authenticatorID,
		AuthMethod:      method,
		IPAddress:       login.Source,
		ConfigTypes:     login.ConfigTypes,
		CertFingerprint: fingerprint,
	}
	if claim != nil {
		s.ExternalIDCert, s.ClaimCA, s.ClaimedExternalID = true, claim.caFingerprint, claim.externalID
	}
	s.LastActivityAt = s.CreatedAt
	var id *Identity
	err := m.st.Update(func(tx *store.Tx) error {
		ident, policy, err := m.identityPolicy(tx, identityID)
		if err != nil {
			return err
		}
		id = ident
		if ident.IsDisabled(m.now()) {
			m.log.Info("authentication refused: the identity is disabled", "identity", identityID, "method", method)
			return errInvalidAuth
		}
		var allowed bool
		switch method {
		case MethodPassword:
			allowed = policy.Primary.Updb.Allowed
		case MethodCertAuth:
			allowed = policy.Primary.Cert.Allowed
		case MethodExtJWT:
			allowed = policy.allowsSigner(signerID)
		}
		if !allowed {
			m.log.Info("authentication refused by policy", "identity", identityID, "method", method, "authPolicy", policy.ID)
			return errInvalidAuth
		}
		// The certificate may have been revoked since it was checked.
		if ok, err := m.certCurrent(tx, s); err != nil {
			return err
		} else if !ok {
			return errInvalidAuth
		}
		mfa, err := m.mfaTx(tx, identityID)
		if err != nil {
			return err
		}
		s.AuthQueries = nil
		if (mfa != nil && mfa.IsVerified) || policy.Secondary.RequireTotp {
			s.AuthQueries = []AuthQuery{MFAQuery()}
		}
		return m.c.apiSessions.Create(tx, s)
	})
	if err != nil {
		return nil, nil, err
	}
	return s, id, nil
}

// ExpiresAt returns when an API session ends if it stays idle, or at the latest when it
// reaches its maximum lifetime.
func (m *Model) ExpiresAt(s *APISession) time.Time {
	idle := s.LastActivityAt.Add(m.opts.SessionTimeout)
	if m.opts.SessionMaxLifetime > 0 {
		if end := s.CreatedAt.Add(m.opts.SessionMaxLifetime); end.Before(idle) {
			return end
		}
	}
	return idle
}

// touchEvery is how stale a session's recorded activity may get before a request records it
// again: a tenth of the timeout, at most 30 s. A session may thus end up to that much early.
func (m *Model) touchEvery() time.Duration { return min(m.opts.SessionTimeout/10, 30*time.Second) }

var errNoSession = &Error{Code: CodeUnauthorized, Message: "the API session is missing, expired or deleted"}

// SessionByToken returns the live API session with token and its identity, recording the
// activity. A missing, expired or orphaned session, one opened with a certificate that is
// no longer current, or one of a disabled identity, is UNAUTHORIZED.
func (m *Model) SessionByToken(token string) (*APISession, *Identity, error) {
	if token == "" {
		return nil, nil, errNoSession
	}
	var s *APISession
	var id *Identity
	current := true
	err := m.st.View(func(tx *store.Tx) (err error) {
		if s, err = m.c.apiSessions.Lookup(tx, "token", token); err != nil {
			return err
		}
		if id, err = m.c.identities.Get(tx, s.IdentityID); err != nil {
			return err
		}
		current, err = m.certCurrent(tx, s)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, errNoSession
	}
	if err != nil {
		return nil, nil, err
	}
	now := m.now()
	if !current || id.IsDisabled(now) || now.After(m.ExpiresAt(s)) {
		if err := m.DeleteAPISession(s.ID); err != nil && CodeOf(err) != CodeNotFound {
			return nil, nil, err
		}
		return nil, nil, errNoSession
	}
	if now.Sub(s.LastActivityAt) > m.touchEvery() {
		err := m.st.Update(func(tx *store.Tx) error {
			cur, err := m.c.apiSessions.Get(tx, s.ID)
			if err != nil {
				return err
			}
			cur.LastActivityAt = now
			s = cur
			return m.c.apiSessions.Put(tx, cur)
		})
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, errNoSession
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return s, id, nil
}

// DeleteAPISession ends an API session (logout) with its ephemeral certificates.
func (m *Model) DeleteAPISession(id string) error {
	return m.st.Update(func(tx *store.Tx) error { return m.deleteAPISessionTx(tx, id) })
}

func (m *Model) deleteAPISessionTx(tx *store.Tx, id string) error {
	certs, err := m.c.apiSessionCerts.IDsWith(tx, "apiSessionId", id)
	if err != nil {
		return err
	}
	for _, c := range certs {
		if err := m.c.apiSessionCerts.Delete(tx, c); err != nil {
			return err
		}
	}
	if err := m.deleteSessionsWhere(tx, "apiSessionId", id); err != nil {
		return err
	}
	return missing(m.c.apiSessions.Delete(tx, id), "API session", id)
}

// ExpireSessions deletes every API session idle for longer than the timeout, or older than
// the maximum lifetime, and every one that may no longer be used (endStaleSessions: left by
// a stop or a failure between a revocation's commit and the end of its sessions), and
// returns how many it deleted.
func (m *Model) ExpireSessions() (int, error) {
	now := m.now()
	var expired []string
	staleOf := map[string]bool{} // identities with an API session that may no longer be used
	err := m.st.View(func(tx *store.Tx) error {
		rules := map[string]func(*APISession) bool{}
		return m.c.apiSessions.Each(tx, func(s *APISession) error {
			if now.After(m.ExpiresAt(s)) {
				expired = append(expired, s.ID)
				return nil
			}
			stale, ok := rules[s.IdentityID]
			if !ok {
				var err error
				if stale, _, err = m.staleRule(tx, s.IdentityID); err != nil {
					return err
				}
				rules[s.IdentityID] = stale
			}
			if stale(s) {
				staleOf[s.IdentityID] = true
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range expired {
		if err := m.DeleteAPISession(id); err == nil {
			n++
		} else if CodeOf(err) != CodeNotFound {
			return n, err
		}
	}
	for id := range staleOf {
		ended, err := m.endStaleSessions(id)
		n += ended
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// IdentityByCert returns the identity whose cert authenticator holds the certificate chain's
// leaf, once the chain is checked as for authentication.
func (m *Model) IdentityByCert(chain []*x509.Certificate) (*Identity, error) {
	if len(chain) == 0 {
		return nil, errInvalidAuth
	}
	who, err := m.certIdentity(chain)
	if err != nil {
		return nil, err
	}
	return m.Identity(who.identityID)
}
