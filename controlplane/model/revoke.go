package model

import (
	"slices"

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
// authenticators authenticate with: each one's certificate, and an extension's certificate
// not yet verified.
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
		for _, fp := range []string{a.Fingerprint, a.UnverifiedFingerprint} {
			if fp != "" {
				cur[fp] = true
			}
		}
	}
	return cur, nil
}

// certsChanged follows a change of the identity's certificates within tx: its API sessions
// opened with a certificate that is no longer current end, with their sessions; the others
// are sent to routers again, whose edge listeners then close the connections made with a
// certificate that is no longer current.
func (m *Model) certsChanged(tx *store.Tx, identityID string) error {
	cur, err := m.currentCerts(tx, identityID)
	if err != nil {
		return err
	}
	apis, err := m.c.apiSessions.With(tx, "identityId", identityID)
	if err != nil {
		return err
	}
	for _, a := range apis {
		if a.CertFingerprint != "" && !a.ExternalIDCert && !cur[a.CertFingerprint] {
			m.log.Info("ending an API session: its certificate is no longer current", "apiSessionId", a.ID, "identity", identityID)
			if err := m.deleteAPISessionTx(tx, a.ID); err != nil {
				return err
			}
			continue
		}
		m.apiSessionHooks.watch(tx, a.ID)
	}
	return nil
}

// certCurrent tells whether an API session opened with a certificate may still be used:
// the certificate is still one of its identity's current ones. Sessions opened otherwise
// always may.
func (m *Model) certCurrent(tx *store.Tx, s *APISession) (bool, error) {
	if s.CertFingerprint == "" || s.ExternalIDCert {
		return true, nil
	}
	cur, err := m.currentCerts(tx, s.IdentityID)
	if err != nil {
		return false, err
	}
	return cur[s.CertFingerprint], nil
}
