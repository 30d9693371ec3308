package model

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// AuthenticatorCreate is what an administrator gives to add an authenticator to an identity:
// a username and password (updb), or a client certificate (cert).
type AuthenticatorCreate struct {
	IdentityID string
	Method     string
	Username   string
	Password   string
	CertPEM    string
	Tags       Tags
}

// CreateAuthenticator adds an authenticator to an identity (administrators). An identity has
// at most one updb authenticator; a certificate authenticates one identity.
func (m *Model) CreateAuthenticator(ctx context.Context, in AuthenticatorCreate) (*Authenticator, error) {
	a := &Authenticator{Base: m.newBase(in.Tags), IdentityID: in.IdentityID, Method: in.Method}
	switch in.Method {
	case MethodUpdb:
		if err := checkUsername("username", in.Username); err != nil {
			return nil, err
		}
		if err := checkLength("password", in.Password, MinPasswordLen, MaxPasswordLen); err != nil {
			return nil, err
		}
		hash, err := m.hashes.hash(ctx, in.Password)
		if err != nil {
			return nil, err
		}
		a.Username, a.PasswordHash = in.Username, hash
	case MethodCert:
		cert, err := pki.ParsePEMCert([]byte(in.CertPEM))
		if err != nil {
			return nil, invalid("certPem", nil, "%v", err)
		}
		if cert.IsCA {
			return nil, invalid("certPem", nil, "is a CA certificate; give the identity's client certificate")
		}
		a.CertPEM, a.Fingerprint = certPEM(cert), certid.Fingerprint(cert)
		a.IssuedByNetwork = m.ca.VerifyClient(cert, nil) == nil
	default:
		return nil, invalid("method", in.Method, "allowed: %s, %s", MethodUpdb, MethodCert)
	}
	err := m.st.Update(func(tx *store.Tx) error {
		if _, err := m.c.identities.Get(tx, in.IdentityID); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return invalid("identityId", in.IdentityID, "no identity with this id")
			}
			return err
		}
		if in.Method == MethodCert && !a.IssuedByNetwork {
			// Recorded as enrollments record it, so that the certificate stops being current
			// when that CA is deleted or stops allowing authentication.
			ca, err := m.issuingCA(tx, a.CertPEM)
			if err != nil {
				return err
			}
			if ca == nil {
				return invalid("certPem", nil, "is issued neither by the network's CA nor by a verified certificate authority, so it could not authenticate")
			}
			a.CAFingerprint = ca.Fingerprint
		}
		if in.Method == MethodUpdb {
			others, err := m.c.authenticators.With(tx, "identityId", in.IdentityID)
			if err != nil {
				return err
			}
			for _, o := range others {
				if o.Method == MethodUpdb {
					return invalid("method", in.Method, "identity %s already has a %s authenticator (%s); change it instead", in.IdentityID, MethodUpdb, o.ID)
				}
			}
			if err := m.checkPasswordPolicy(tx, in.IdentityID, "password", in.Password); err != nil {
				return err
			}
		}
		if err := m.c.authenticators.Create(tx, a); err != nil {
			var c *store.ConflictError
			if errors.As(err, &c) && c.Index == "fingerprint" {
				return &Error{Code: CodeCertInUse, Field: "certPem", Message: "the certificate is already an authenticator", Cause: err}
			}
			return conflict(err)
		}
		// A certificate added to an identity is one more its API sessions' clients may present.
		m.certsChanged(tx, in.IdentityID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// SetCredentials changes a updb authenticator's username and password (administrators: no
// current password asked). Nil fields stay as they are.
func (m *Model) SetCredentials(ctx context.Context, id string, username, password *string, tags *Tags) error {
	if username != nil {
		if err := checkUsername("username", *username); err != nil {
			return err
		}
	}
	var hash string
	if password != nil {
		if err := checkLength("password", *password, MinPasswordLen, MaxPasswordLen); err != nil {
			return err
		}
		var err error
		if hash, err = m.hashes.hash(ctx, *password); err != nil {
			return err
		}
	}
	return m.st.Update(func(tx *store.Tx) error {
		a, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		if a.Method != MethodUpdb && (username != nil || password != nil) {
			return invalid("method", a.Method, "only %s authenticators have a username and password", MethodUpdb)
		}
		if password != nil {
			if err := m.checkPasswordPolicy(tx, a.IdentityID, "password", *password); err != nil {
				return err
			}
			a.PasswordHash = hash
		}
		if username != nil {
			a.Username = *username
		}
		if tags != nil {
			a.Tags = *tags
		}
		a.UpdatedAt = m.now()
		return conflict(m.c.authenticators.Put(tx, a))
	})
}

// ReEnrollAuthenticator turns an authenticator back into an enrollment of its kind, valid
// until expiresAt: updb into updb with the same username, a certificate the network issued
// into ott, another into ottca of the verified CA that issued it. The authenticator goes,
// and the API sessions opened with its certificate end.
func (m *Model) ReEnrollAuthenticator(id string, expiresAt time.Time) (*Enrollment, error) {
	if !expiresAt.After(m.now()) {
		return nil, invalid("expiresAt", expiresAt, "must be in the future")
	}
	var out *Enrollment
	err := m.st.Update(func(tx *store.Tx) error {
		a, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		ident, err := m.c.identities.Get(tx, a.IdentityID)
		if err != nil {
			return missing(err, "identity", a.IdentityID)
		}
		var req EnrollmentRequest
		switch {
		case a.Method == MethodUpdb:
			req.Updb = a.Username
		case a.IssuedByNetwork:
			req.OTT = true
		default:
			ca, err := m.issuingCA(tx, a.CertPEM)
			if err != nil {
				return err
			}
			if ca == nil {
				return invalid("id", nil, "the authenticator's certificate was issued neither by the network nor by a verified certificate authority, so it has no enrollment to return to")
			}
			req.OTTCA = ca.ID
		}
		if err := m.c.authenticators.Delete(tx, id); err != nil {
			return err
		}
		e, err := m.createEnrollment(tx, ident, req)
		if err != nil {
			return err
		}
		e.ExpiresAt = expiresAt.UTC()
		if e.JWT, err = m.signEnrollment(ident.ID, e); err != nil {
			return err
		}
		if err := m.c.enrollments.Put(tx, e); err != nil {
			return err
		}
		out = e
		m.certsChanged(tx, a.IdentityID)
		return nil
	})
	return out, err
}

// issuingCA returns the verified third-party CA that issued a certificate, or nil when none
// did (nor can the certificate authenticate, unless the network's CA issued it).
func (m *Model) issuingCA(tx *store.Tx, pemCert string) (*CA, error) {
	cert, err := pki.ParsePEMCert([]byte(pemCert))
	if err != nil {
		return nil, invalid("certPem", nil, "%v", err)
	}
	cas, err := m.c.cas.All(tx)
	if err != nil {
		return nil, err
	}
	for _, ca := range cas {
		if ca.IsVerified && verifyWithCA(ca, []*x509.Certificate{cert}, m.now()) == nil {
			return ca, nil
		}
	}
	return nil, nil
}

// RequestExtend flags a cert authenticator so that its clients are asked, in their API
// sessions, to extend the certificate early, and with rollKeys to use a new key.
func (m *Model) RequestExtend(id string, rollKeys bool) error {
	return m.st.Update(func(tx *store.Tx) error {
		a, err := m.c.authenticators.Get(tx, id)
		if err != nil {
			return missing(err, "authenticator", id)
		}
		if a.Method != MethodCert {
			return invalid("method", a.Method, "only %s authenticators can be extended", MethodCert)
		}
		now := m.now()
		a.ExtendRequested, a.KeyRollRequested, a.ExtendRequestedAt, a.UpdatedAt = true, rollKeys, &now, now
		return m.c.authenticators.Put(tx, a)
	})
}

// compareKeys reports whether two PEM certificates parse (ok) and, if so, whether they hold
// the same public key.
func compareKeys(oldPEM, newPEM string) (same, ok bool) {
	o, err1 := pki.ParsePEMCert([]byte(oldPEM))
	n, err2 := pki.ParsePEMCert([]byte(newPEM))
	if err1 != nil || err2 != nil {
		return false, false
	}
	return pki.PublicKeysEqual(o.PublicKey, n.PublicKey), true
}
