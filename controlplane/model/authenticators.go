package model

import (
	"context"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// Authenticators returns every authenticator in id order.
func (m *Model) Authenticators() ([]*Authenticator, error) {
	var out []*Authenticator
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.authenticators.All(tx)
		return err
	})
	return out, err
}

// AuthenticatorsOf returns the authenticators of an identity.
func (m *Model) AuthenticatorsOf(identityID string) ([]*Authenticator, error) {
	var out []*Authenticator
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.authenticators.With(tx, "identityId", identityID)
		return err
	})
	return out, err
}

// Authenticator returns the authenticator with id.
func (m *Model) Authenticator(id string) (*Authenticator, error) {
	var out *Authenticator
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.authenticators.Get(tx, id)
		return missing(err, "authenticator", id)
	})
	return out, err
}

// DeleteAuthenticator removes an authenticator (administrators only). The API sessions
// opened with its certificate end with it.
func (m *Model) DeleteAuthenticator(id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		a, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		if err := m.c.authenticators.Delete(tx, id); err != nil {
			return err
		}
		m.certsChanged(tx, a.IdentityID)
		return nil
	})
}

// OwnAuthenticator returns the authenticator with id if it belongs to identityID; others are
// NOT_FOUND, so that their existence does not leak.
func (m *Model) OwnAuthenticator(identityID, id string) (*Authenticator, error) {
	a, err := m.Authenticator(id)
	if err != nil {
		return nil, err
	}
	if a.IdentityID != identityID {
		return nil, notFound("authenticator", id)
	}
	return a, nil
}

// CredentialsChange changes a username and password authenticator. Nil fields stay as they are.
type CredentialsChange struct {
	Username        *string
	Password        *string
	Tags            *Tags
	CurrentPassword string
	Source          string // the client's IP address, for rate limiting
}

// ChangeCredentials applies a change to the identity's own updb authenticator after checking
// the current password. Wrong current passwords are limited like failed logins of the
// username; the new password is hashed only once the current one is right.
func (m *Model) ChangeCredentials(ctx context.Context, identityID, id string, ch CredentialsChange) error {
	a, err := m.OwnAuthenticator(identityID, id)
	if err != nil {
		return err
	}
	if a.Method != MethodUpdb {
		return invalid("method", a.Method, "only %s authenticators have a username and password", MethodUpdb)
	}
	if err := checkLength("currentPassword", ch.CurrentPassword, MinPasswordLen, MaxPasswordLen); err != nil {
		return err
	}
	if ch.Username != nil {
		if err := checkUsername("username", *ch.Username); err != nil {
			return err
		}
	}
	if ch.Password != nil {
		if err := checkLength("password", *ch.Password, MinPasswordLen, MaxPasswordLen); err != nil {
			return err
		}
	}
	try, err := startAttempt(m.limiter, "updb:"+a.Username, m.updbLimits, a.Username, ch.Source)
	if err != nil {
		return err
	}
	defer try.release()
	ok, err := m.hashes.check(ctx, a.PasswordHash, ch.CurrentPassword)
	if err != nil {
		return err
	}
	if !ok {
		try.failed()
		return &Error{Code: CodeUnauthorized, Field: "currentPassword", Message: "the current password is wrong"}
	}
	try.succeeded()
	var hash string
	if ch.Password != nil {
		if hash, err = m.hashes.hash(ctx, *ch.Password); err != nil {
			return err
		}
	}
	return m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		if cur.PasswordHash != a.PasswordHash {
			return &Error{Code: CodeUnauthorized, Field: "currentPassword", Message: "the password changed meanwhile"}
		}
		if ch.Password != nil {
			if err := m.checkPasswordPolicy(tx, cur.IdentityID, "password", *ch.Password); err != nil {
				return err
			}
		}
		if ch.Username != nil {
			cur.Username = *ch.Username
		}
		if hash != "" {
			cur.PasswordHash = hash
		}
		if ch.Tags != nil {
			cur.Tags = *ch.Tags
		}
		cur.UpdatedAt = m.now()
		return conflict(m.c.authenticators.Put(tx, cur))
	})
}

// ExtendCert issues a new client certificate for the identity's own cert authenticator from a
// CSR. The request must come from a session made with the authenticator's current
// certificate. The old certificate stays valid until ExtendVerify.
func (m *Model) ExtendCert(s *APISession, id string, csrPEM []byte) ([]byte, error) {
	a, err := m.OwnAuthenticator(s.IdentityID, id)
	if err != nil {
		return nil, err
	}
	if a.Method != MethodCert || !a.IssuedByNetwork {
		return nil, errorf(CodeCertExtendNotSupported, "only certificates issued by the network can be extended")
	}
	if s.CertFingerprint != a.Fingerprint {
		return nil, errorf(CodeUnauthorized, "a certificate is extended from an API session authenticated with that certificate")
	}
	cert, pemBytes, err := m.ca.SignCSR(csrPEM, pki.SignRequest{CommonName: s.IdentityID, Usage: pki.Client, Validity: m.opts.IdentityCertValidity})
	if err != nil {
		return nil, csrError(err)
	}
	err = m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		cur.UnverifiedCertPEM, cur.UnverifiedFingerprint, cur.UpdatedAt = string(pemBytes), certid.Fingerprint(cert), m.now()
		if err := conflict(m.c.authenticators.Put(tx, cur)); err != nil {
			return err
		}
		// An earlier extension's certificate, never verified, is no longer current.
		m.certsChanged(tx, cur.IdentityID)
		return nil
	})
	return pemBytes, err
}

// ExtendVerify puts the extended certificate in force once the client shows it has it; the
// previous certificate stops authenticating. When the extension kept the key, the API
// sessions opened with the previous certificate go on, with their circuits; when it rolled
// the key, they end (the one making this request included).
func (m *Model) ExtendVerify(s *APISession, id, clientCertPEM string) error {
	a, err := m.OwnAuthenticator(s.IdentityID, id)
	if err != nil {
		return err
	}
	if a.UnverifiedFingerprint == "" {
		return errorf(CodeNoAuthenticatorToVerify, "authenticator %q has no certificate extension to verify", id)
	}
	cert, err := pki.ParsePEMCert([]byte(clientCertPEM))
	if err != nil || certid.Fingerprint(cert) != a.UnverifiedFingerprint {
		return &Error{Code: CodeCertExtendMismatch, Field: "clientCert", Message: "is not the certificate the extension issued"}
	}
	return m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		same, ok := compareKeys(cur.CertPEM, cur.UnverifiedCertPEM)
		cur.LastExtendRolledKeys = ok && !same
		cur.PreviousFingerprint = ""
		if ok && same {
			cur.PreviousFingerprint = cur.Fingerprint
		}
		cur.ExtendRequested, cur.KeyRollRequested, cur.ExtendRequestedAt = false, false, nil
		cur.CertPEM, cur.Fingerprint = cur.UnverifiedCertPEM, cur.UnverifiedFingerprint
		cur.UnverifiedCertPEM, cur.UnverifiedFingerprint, cur.UpdatedAt = "", "", m.now()
		if err := m.c.authenticators.Put(tx, cur); err != nil {
			return err
		}
		m.certsChanged(tx, cur.IdentityID)
		return nil
	})
}

// APISessionCertValidity is the lifetime of ephemeral API session certificates.
const APISessionCertValidity = 12 * time.Hour

// CreateAPISessionCert signs an ephemeral client certificate for an API session.
func (m *Model) CreateAPISessionCert(s *APISession, csrPEM []byte) (*APISessionCert, error) {
	cert, pemBytes, err := m.ca.SignCSR(csrPEM, pki.SignRequest{CommonName: s.IdentityID, Usage: pki.Client, Validity: APISessionCertValidity})
	if err != nil {
		return nil, csrError(err)
	}
	c := &APISessionCert{Base: m.newBase(nil), APISessionID: s.ID, Subject: cert.Subject.String(),
		Fingerprint: certid.Fingerprint(cert), ValidFrom: cert.NotBefore.UTC(), ValidTo: cert.NotAfter.UTC(), CertPEM: string(pemBytes)}
	err = m.st.Update(func(tx *store.Tx) error {
		if _, err := m.c.apiSessions.Get(tx, s.ID); err != nil {
			return errNoSession
		}
		// Routers learn that the session's clients may present this certificate.
		m.apiSessionHooks.watch(tx, s.ID)
		return m.c.apiSessionCerts.Create(tx, c)
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// APISessionCerts returns the ephemeral certificates of an API session.
func (m *Model) APISessionCerts(sessionID string) ([]*APISessionCert, error) {
	var out []*APISessionCert
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.apiSessionCerts.With(tx, "apiSessionId", sessionID)
		return err
	})
	return out, err
}

// APISessionCert returns an ephemeral certificate of the API session.
func (m *Model) APISessionCert(sessionID, id string) (*APISessionCert, error) {
	var out *APISessionCert
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.apiSessionCerts.Get(tx, id)
		if err == nil && out.APISessionID != sessionID {
			return notFound("API session certificate", id)
		}
		return missing(err, "API session certificate", id)
	})
	return out, err
}

// DeleteAPISessionCert removes an ephemeral certificate of the API session.
func (m *Model) DeleteAPISessionCert(sessionID, id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		c, err := m.c.apiSessionCerts.Get(tx, id)
		if err != nil || c.APISessionID != sessionID {
			return notFound("API session certificate", id)
		}
		m.apiSessionHooks.watch(tx, sessionID)
		return m.c.apiSessionCerts.Delete(tx, id)
	})
}

// APISessions returns every API session in id order.
func (m *Model) APISessions() ([]*APISession, error) {
	var out []*APISession
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.apiSessions.All(tx)
		return err
	})
	return out, err
}

// APISession returns the API session with id.
func (m *Model) APISession(id string) (*APISession, error) {
	var out *APISession
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.apiSessions.Get(tx, id)
		return missing(err, "API session", id)
	})
	return out, err
}
