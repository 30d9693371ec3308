package model

import (
	"crypto/x509"
	"errors"
	"slices"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
)

// RoutedAPISession is an API session as routers receive it: with the fingerprints of the
// client certificates its clients may present at an edge listener.
type RoutedAPISession struct {
	*APISession
	// CertFingerprints are the identity's current certificates (those of its cert
	// authenticators), the API session's ephemeral certificates and the certificate it was
	// opened with when its CA's external id claim named the identity, sorted; never nil.
	CertFingerprints []string
}

// routedAPISession adds the certificates routers admit to an API session; idents caches the
// identities' certificates for one read.
func (m *Model) routedAPISession(tx *store.Tx, a *APISession, idents map[string][]string) (*RoutedAPISession, error) {
	own, ok := idents[a.IdentityID]
	if !ok {
		cur, err := m.currentCerts(tx, a.IdentityID)
		if err != nil {
			return nil, err
		}
		own = make([]string, 0, len(cur))
		for fp := range cur {
			own = append(own, fp)
		}
		idents[a.IdentityID] = own
	}
	fps := append([]string{}, own...)
	certs, err := m.c.apiSessionCerts.With(tx, "apiSessionId", a.ID)
	if err != nil {
		return nil, err
	}
	for _, c := range certs {
		fps = append(fps, c.Fingerprint)
	}
	if a.ExternalIDCert {
		fps = append(fps, a.CertFingerprint)
	}
	slices.Sort(fps)
	return &RoutedAPISession{APISession: a, CertFingerprints: slices.Compact(fps)}, nil
}

// currentCerts returns the fingerprints of the certificates the identity's cert
// authenticators stand for: each one's certificate, an extension's certificate not yet
// verified, and the certificate a verified extension replaced with the same key (for the
// sessions opened with it: a login looks certificates up by the authenticators'
// fingerprints, and finds none for it); not those of a third-party CA that is gone,
// unverified or does not allow authentication.
func (m *Model) currentCerts(tx *store.Tx, identityID string) (map[string]bool, error) {
	auths, err := m.c.authenticators.With(tx, "identityId", identityID)
	if err != nil {
		return nil, err
	}
	cur := map[string]bool{}
	for _, a := range auths {
		if a.Method != MethodCert {
			continue
		}
		if ok, err := m.caTrusted(tx, a.CAFingerprint); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		for _, fp := range []string{a.Fingerprint, a.UnverifiedFingerprint, a.PreviousFingerprint} {
			if fp != "" {
				cur[fp] = true
			}
		}
	}
	return cur, nil
}

// certsChanged follows a change of the identity's certificates within tx: once tx commits,
// endStaleSessions ends its API sessions opened with a certificate that is no longer current
// and sends the others to routers again, whose edge listeners then close the connections
// made with such a certificate. Until then the controller already refuses those sessions
// (certCurrent). Ending sessions writes, so it runs only on the member that made the change;
// the others call the hooks from the records replayed (identityCertsReplayed).
func (m *Model) certsChanged(tx *store.Tx, identityID string) {
	tx.OnCommit(func() { m.endStaleSessionsLogged(identityID) })
	m.credentialHooks.watch(tx, identityID)
}

// revokeBatch bounds the API sessions one transaction ends, so that revocation never meets
// Badger's limit on a transaction's size however many sessions an identity opened.
const revokeBatch = 256

// endStaleSessions ends the identity's API sessions that may no longer be used (every one
// when the identity is deleted or disabled, else those opened with a certificate that is no
// longer current), with their sessions, in transactions of at most revokeBatch, and sends its
// other API sessions to routers again. Run after the change that made sessions stale has
// committed, its first pass also sees a login that committed just before the change and so
// escaped the change's own reads; every later login sees the change. It returns how many API
// sessions it ended.
func (m *Model) endStaleSessions(identityID string) (int, error) {
	ended := 0
	for {
		n := 0
		err := m.st.Update(func(tx *store.Tx) error {
			n = 0
			stale, all, err := m.staleRule(tx, identityID)
			if err != nil {
				return err
			}
			apis, err := m.c.apiSessions.With(tx, "identityId", identityID)
			if err != nil {
				return err
			}
			for _, a := range apis {
				if !stale(a) {
					m.apiSessionHooks.watch(tx, a.ID)
					continue
				}
				if n == revokeBatch {
					continue // the next pass
				}
				if err := m.deleteAPISessionTx(tx, a.ID); err != nil {
					return err
				}
				n++
			}
			if all && n < revokeBatch {
				return m.deleteSessionsWhere(tx, "identityId", identityID)
			}
			return nil
		})
		ended += n
		if err != nil || n < revokeBatch {
			return ended, err
		}
	}
}

// staleRule returns, read in tx, which of the identity's API sessions may no longer be used:
// all of them when the identity is gone or disabled, else those opened with a certificate
// that is no longer current; and whether that is all of them.
func (m *Model) staleRule(tx *store.Tx, identityID string) (stale func(*APISession) bool, all bool, err error) {
	ident, err := m.c.identities.Get(tx, identityID)
	if errors.Is(err, store.ErrNotFound) {
		return func(*APISession) bool { return true }, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if ident.IsDisabled(m.now()) {
		return func(*APISession) bool { return true }, true, nil
	}
	cur, err := m.currentCerts(tx, identityID)
	if err != nil {
		return nil, false, err
	}
	claims := map[string]bool{} // CA fingerprint -> its claim still stands for ident
	return func(a *APISession) bool {
		switch {
		case a.CertFingerprint == "":
			return false
		case !a.ExternalIDCert:
			return !cur[a.CertFingerprint]
		}
		ok, seen := claims[a.ClaimCA]
		if !seen {
			// A store error counts as stale: the session ends and its client logs in again.
			ok, _ = m.claimCurrent(tx, ident, a)
			claims[a.ClaimCA] = ok
		}
		return !ok
	}, false, nil
}

// endStaleSessionsLogged is endStaleSessions for an after-commit hook, which cannot fail: an
// error is logged, and the sweep (ExpireSessions) ends what is left.
func (m *Model) endStaleSessionsLogged(identityID string) {
	n, err := m.endStaleSessions(identityID)
	if n > 0 {
		m.log.Info("API sessions ended: identity deleted or disabled, or certificate no longer current", "identity", identityID, "apiSessions", n)
	}
	if err != nil {
		m.log.Error("cannot end API sessions that may no longer be used; the controller refuses them, and the next sweep tries again", "identity", identityID, "err", err)
	}
}

// certCurrent tells whether an API session opened with a certificate may still be used:
// the certificate is still one of its identity's current ones, or, for one opened through a
// CA's external id claim, the claim still stands (claimCurrent). Sessions opened otherwise
// always may.
func (m *Model) certCurrent(tx *store.Tx, s *APISession) (bool, error) {
	if s.CertFingerprint == "" {
		return true, nil
	}
	if s.ExternalIDCert {
		ident, err := m.c.identities.Get(tx, s.IdentityID)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return m.claimCurrent(tx, ident, s)
	}
	cur, err := m.currentCerts(tx, s.IdentityID)
	if err != nil {
		return false, err
	}
	return cur[s.CertFingerprint], nil
}

// claimCurrent tells whether an API session opened through a CA's external id claim may
// still be used: the CA still exists, is verified, allows authentication and has a claim, and
// the identity still has the external id the certificate claimed.
func (m *Model) claimCurrent(tx *store.Tx, ident *Identity, s *APISession) (bool, error) {
	if s.ClaimCA == "" || ident.ExternalID != s.ClaimedExternalID {
		return false, nil
	}
	ca, err := m.c.cas.Lookup(tx, "fingerprint", s.ClaimCA)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ca.IsVerified && ca.IsAuthEnabled && ca.ExternalIDClaim != nil, nil
}

// caTrusted tells whether certificates enrolled with the third-party CA of fingerprint fp
// authenticate: the CA exists, is verified and allows authentication. An empty fp (the
// network's own CA) always does.
func (m *Model) caTrusted(tx *store.Tx, fp string) (bool, error) {
	if fp == "" {
		return true, nil
	}
	ca, err := m.c.cas.Lookup(tx, "fingerprint", fp)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ca.IsVerified && ca.IsAuthEnabled, nil
}

// caTrustChanged follows, within tx, a third-party CA's deletion, a change of whether it
// allows authentication, or the removal of its external id claim: the identities with
// certificates enrolled with it, or with API sessions opened through its claim, go through
// certsChanged, so API sessions opened with those certificates end and routers learn which
// certificates the others admit. A certificate stored without its CA (enrolled before the
// CA was recorded) that the CA signed directly is given the CA's fingerprint first.
func (m *Model) caTrustChanged(tx *store.Tx, ca *CA) error {
	root, err := pki.ParsePEMCert([]byte(ca.CertPEM))
	if err != nil {
		return err
	}
	var idents []string
	var backfill []*Authenticator
	err = m.c.authenticators.Each(tx, func(a *Authenticator) error {
		if a.Method != MethodCert || a.IssuedByNetwork {
			return nil
		}
		switch {
		case a.CAFingerprint == ca.Fingerprint:
		case a.CAFingerprint == "" && signedBy(a.CertPEM, root):
			a.CAFingerprint = ca.Fingerprint
			backfill = append(backfill, a)
		default:
			return nil
		}
		idents = append(idents, a.IdentityID)
		return nil
	})
	if err != nil {
		return err
	}
	for _, a := range backfill {
		if err := m.c.authenticators.Put(tx, a); err != nil {
			return err
		}
	}
	// Identities whose API sessions stand on the CA's external id claim hold no authenticator
	// of it.
	claimed, err := m.identitiesClaimedThrough(tx, ca.Fingerprint)
	if err != nil {
		return err
	}
	idents = append(idents, claimed...)
	slices.Sort(idents)
	for _, id := range slices.Compact(idents) {
		m.certsChanged(tx, id)
	}
	return nil
}

// signedBy tells whether the PEM certificate carries root's signature.
func signedBy(certPEM string, root *x509.Certificate) bool {
	cert, err := pki.ParsePEMCert([]byte(certPEM))
	return err == nil && cert.CheckSignatureFrom(root) == nil
}

// identitiesClaimedThrough returns the identities of the API sessions opened through the
// external id claim of the CA of fingerprint fp (an identity once per session).
func (m *Model) identitiesClaimedThrough(tx *store.Tx, fp string) ([]string, error) {
	var idents []string
	err := m.c.apiSessions.Each(tx, func(a *APISession) error {
		if a.ExternalIDCert && a.ClaimCA == fp {
			idents = append(idents, a.IdentityID)
		}
		return nil
	})
	return idents, err
}
