package model

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// DefaultCertValidity is the lifetime of the certificates enrollment and extension issue
// when Options leaves it zero.
const DefaultCertValidity = 365 * 24 * time.Hour

// enrollment finds the pending enrollment of token for method and checks it is still valid.
func (m *Model) enrollment(tx *store.Tx, token, method string) (*Enrollment, error) {
	if _, err := uuid.Parse(token); err != nil {
		return nil, &Error{Code: CodeInvalidEnrollmentToken, Field: "token", Message: "the enrollment token is not a UUID"}
	}
	e, err := m.c.enrollments.Lookup(tx, "token", token)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &Error{Code: CodeInvalidEnrollmentToken, Field: "token", Message: "the enrollment token is unknown or has been used"}
	}
	if err != nil {
		return nil, err
	}
	if e.Method != method {
		return nil, &Error{Code: CodeInvalidEnrollMethod, Field: "method",
			Message: fmt.Sprintf("the enrollment token is for method %s, not %s", e.Method, method)}
	}
	if m.now().After(e.ExpiresAt) {
		return nil, &Error{Code: CodeEnrollmentExpired, Field: "token",
			Message: fmt.Sprintf("the enrollment token expired at %s", e.ExpiresAt.Format(time.RFC3339))}
	}
	return e, nil
}

// EnrollOTT completes a one-time-token enrollment: it signs the CSR with the network's CA and
// gives the identity a certificate authenticator. It returns the certificate in PEM.
func (m *Model) EnrollOTT(token string, csrPEM []byte) ([]byte, error) {
	var certPEM []byte
	err := m.st.Update(func(tx *store.Tx) error {
		e, err := m.enrollment(tx, token, EnrollOTT)
		if err != nil {
			return err
		}
		cert, pemBytes, err := m.ca.SignCSR(csrPEM, pki.SignRequest{CommonName: e.IdentityID, Usage: pki.Client, Validity: m.opts.IdentityCertValidity})
		if err != nil {
			return csrError(err)
		}
		a := &Authenticator{Base: m.newBase(nil), IdentityID: e.IdentityID, Method: MethodCert,
			CertPEM: string(pemBytes), Fingerprint: certid.Fingerprint(cert), IssuedByNetwork: true}
		if err := m.finishEnrollment(tx, e, a); err != nil {
			return err
		}
		certPEM = pemBytes
		return nil
	})
	return certPEM, err
}

func csrError(err error) error {
	if errors.Is(err, pki.ErrBadCSR) {
		return &Error{Code: CodeCouldNotProcessCSR, Message: err.Error(), Cause: err}
	}
	return err
}

// finishEnrollment stores the authenticator an enrollment produced and uses the token up,
// unless the identity is disabled.
func (m *Model) finishEnrollment(tx *store.Tx, e *Enrollment, a *Authenticator) error {
	if err := m.checkEnabled(tx, e.IdentityID); err != nil {
		return err
	}
	if err := m.c.authenticators.Create(tx, a); err != nil {
		var c *store.ConflictError
		if errors.As(err, &c) && c.Index == "fingerprint" {
			return &Error{Code: CodeCertInUse, Message: "the certificate is already used by another authenticator", Cause: err}
		}
		return conflict(err)
	}
	m.certsChanged(tx, e.IdentityID)
	return m.c.enrollments.Delete(tx, e.ID)
}

// EnrollUpdb completes a username and password enrollment with the password the client
// chose. The token and the password's rules are checked before the password is hashed, so
// that requests without a valid token take no argon2id work.
func (m *Model) EnrollUpdb(ctx context.Context, token, password string) error {
	if err := checkLength("password", password, MinPasswordLen, MaxPasswordLen); err != nil {
		return err
	}
	err := m.st.View(func(tx *store.Tx) error {
		e, err := m.enrollment(tx, token, EnrollUpdb)
		if err != nil {
			return err
		}
		return m.checkPasswordPolicy(tx, e.IdentityID, "password", password)
	})
	if err != nil {
		return err
	}
	hash, err := m.hashes.hash(ctx, password)
	if err != nil {
		return err
	}
	return m.st.Update(func(tx *store.Tx) error {
		e, err := m.enrollment(tx, token, EnrollUpdb)
		if err != nil {
			return err
		}
		if err := m.checkPasswordPolicy(tx, e.IdentityID, "password", password); err != nil {
			return err
		}
		a := &Authenticator{Base: m.newBase(nil), IdentityID: e.IdentityID, Method: MethodUpdb,
			Username: e.Username, PasswordHash: hash}
		return m.finishEnrollment(tx, e, a)
	})
}

// EnrollOTTCA completes a one-time-token enrollment with a certificate of a third-party CA:
// the client presents a certificate chain signed by the CA the enrollment names.
func (m *Model) EnrollOTTCA(token string, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return &Error{Code: CodeCertFailedValidation, Message: "enrollment with method ottca needs a client certificate"}
	}
	return m.st.Update(func(tx *store.Tx) error {
		e, err := m.enrollment(tx, token, EnrollOTTCA)
		if err != nil {
			return err
		}
		ca, err := m.c.cas.Get(tx, e.CAID)
		if err != nil {
			return missing(err, "certificate authority", e.CAID)
		}
		if err := verifyWithCA(ca, chain, m.opts.Now()); err != nil {
			return err
		}
		a := &Authenticator{Base: m.newBase(nil), IdentityID: e.IdentityID, Method: MethodCert,
			CertPEM: certPEM(chain[0]), Fingerprint: certid.Fingerprint(chain[0]), CAFingerprint: ca.Fingerprint}
		return m.finishEnrollment(tx, e, a)
	})
}

func certPEM(cert *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func verifyWithCA(ca *CA, chain []*x509.Certificate, now time.Time) error {
	root, err := pki.ParsePEMCert([]byte(ca.CertPEM))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	if err := pki.VerifyChain(chain[0], chain[1:], roots, now); err != nil {
		return &Error{Code: CodeCertFailedValidation, Message: fmt.Sprintf("the client certificate is not valid for certificate authority %q: %v", ca.Name, err), Cause: err}
	}
	return nil
}

// EnrollCA creates an identity from a client certificate signed by a verified certificate
// authority with auto-enrollment on (CA auto-enrollment). It returns the new identity. When
// the CA has an external id claim, the identity gets the external id the certificate claims
// and no authenticator: any certificate of the CA with that claim authenticates it.
func (m *Model) EnrollCA(chain []*x509.Certificate) (*Identity, error) {
	if len(chain) == 0 {
		return nil, &Error{Code: CodeCertFailedValidation, Message: "CA auto-enrollment needs a client certificate"}
	}
	var id *Identity
	err := m.st.Update(func(tx *store.Tx) error {
		cas, err := m.c.cas.All(tx)
		if err != nil {
			return err
		}
		var ca *CA
		for _, c := range cas {
			if c.IsVerified && c.IsAutoCaEnrollmentEnabled && verifyWithCA(c, chain, m.opts.Now()) == nil {
				ca = c
				break
			}
		}
		if ca == nil {
			return &Error{Code: CodeCertFailedValidation, Message: "the client certificate is not signed by a verified certificate authority with auto-enrollment enabled"}
		}
		externalID := ""
		if ca.ExternalIDClaim != nil {
			if externalID, err = ca.ExternalIDClaim.ExternalID(chain[0]); err != nil {
				return &Error{Code: CodeMissingCertClaim, Message: fmt.Sprintf("the client certificate lacks the external id claim of certificate authority %q: %v", ca.Name, err), Cause: err}
			}
		}
		if externalID == "" {
			if used, err := m.c.authenticators.IDsWith(tx, "fingerprint", certid.Fingerprint(chain[0])); err != nil {
				return err
			} else if len(used) > 0 {
				return &Error{Code: CodeCertInUse, Message: "the certificate is already enrolled"}
			}
		}
		id = &Identity{
			Base:           m.newBase(nil),
			Type:           IdentityTypeDefault,
			ExternalID:     externalID,
			RoleAttributes: ca.IdentityRoles,
			AuthPolicyID:   DefaultAuthPolicyID,
		}
		if id.Name, err = m.freeIdentityName(tx, identityName(ca, chain[0], id.ID)); err != nil {
			return err
		}
		if err := m.c.identities.Create(tx, id); err != nil {
			return conflict(err)
		}
		m.added(tx)
		if externalID != "" {
			return nil
		}
		a := &Authenticator{Base: m.newBase(nil), IdentityID: id.ID, Method: MethodCert,
			CertPEM: certPEM(chain[0]), Fingerprint: certid.Fingerprint(chain[0]), CAFingerprint: ca.Fingerprint}
		if err := m.c.authenticators.Create(tx, a); err != nil {
			var c *store.ConflictError
			if errors.As(err, &c) && c.Index == "fingerprint" {
				return &Error{Code: CodeCertInUse, Message: "the certificate is already enrolled", Cause: err}
			}
			return err
		}
		return nil
	})
	return id, err
}

// DefaultIdentityNameFormat names identities created by CA auto-enrollment.
const DefaultIdentityNameFormat = "[caName]-[commonName]"

// identityName fills a CA's identityNameFormat for a certificate enrolling as the identity
// with id. CA enrollment requests no name, so [requestedName] is the identity's id, as in
// the reference.
func identityName(ca *CA, cert *x509.Certificate, id string) string {
	format := ca.IdentityNameFormat
	if format == "" {
		format = DefaultIdentityNameFormat
	}
	return strings.NewReplacer(
		"[caName]", ca.Name,
		"[caId]", ca.ID,
		"[commonName]", cert.Subject.CommonName,
		"[requestedName]", id,
		"[identityId]", id,
	).Replace(format)
}

// freeIdentityName returns name when no identity has it, else name with the first
// six-digit counter (000001, 000002, ...) that makes it unique.
func (m *Model) freeIdentityName(tx *store.Tx, name string) (string, error) {
	candidate := name
	for i := 1; ; i++ {
		ids, err := m.c.identities.IDsWith(tx, "name", candidate)
		if err != nil {
			return "", err
		}
		if len(ids) == 0 {
			return candidate, nil
		}
		candidate = fmt.Sprintf("%s%06d", name, i)
	}
}

// Enrollments returns every pending enrollment in id order.
func (m *Model) Enrollments() ([]*Enrollment, error) {
	var out []*Enrollment
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.enrollments.All(tx)
		return err
	})
	return out, err
}

// EnrollmentsOf returns the pending enrollments of an identity.
func (m *Model) EnrollmentsOf(identityID string) ([]*Enrollment, error) {
	var out []*Enrollment
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.enrollments.With(tx, "identityId", identityID)
		return err
	})
	return out, err
}

// Enrollment returns the pending enrollment with id.
func (m *Model) Enrollment(id string) (*Enrollment, error) {
	var out *Enrollment
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.enrollments.Get(tx, id)
		return missing(err, "enrollment", id)
	})
	return out, err
}

// DeleteEnrollment cancels a pending enrollment.
func (m *Model) DeleteEnrollment(id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		return missing(m.c.enrollments.Delete(tx, id), "enrollment", id)
	})
}

// RefreshEnrollment gives a pending enrollment a new token valid from now until expiresAt.
func (m *Model) RefreshEnrollment(id string, expiresAt time.Time) (*Enrollment, error) {
	if !expiresAt.After(m.now()) {
		return nil, invalid("expiresAt", expiresAt, "must be in the future")
	}
	var out *Enrollment
	err := m.st.Update(func(tx *store.Tx) error {
		e, err := m.c.enrollments.Get(tx, id)
		if err != nil {
			return missing(err, "enrollment", id)
		}
		subject := e.IdentityID
		if e.EdgeRouterID != "" {
			subject = e.EdgeRouterID
		} else if _, err := m.c.identities.Get(tx, e.IdentityID); err != nil {
			return missing(err, "identity", e.IdentityID)
		}
		e.Token, e.ExpiresAt, e.UpdatedAt = newToken(), expiresAt.UTC(), m.now()
		if e.JWT, err = m.signEnrollment(subject, e); err != nil {
			return err
		}
		out = e
		return m.c.enrollments.Put(tx, e)
	})
	return out, err
}

// CreateEnrollment adds a pending enrollment to an existing identity.
func (m *Model) CreateEnrollment(identityID string, req EnrollmentRequest, expiresAt time.Time) (*Enrollment, error) {
	var out *Enrollment
	err := m.st.Update(func(tx *store.Tx) error {
		ident, err := m.c.identities.Get(tx, identityID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return invalid("identityId", identityID, "no identity with this id")
			}
			return err
		}
		if req.Updb != "" {
			if err := checkUsername("username", req.Updb); err != nil {
				return err
			}
		}
		e, err := m.createEnrollment(tx, ident, req)
		if err != nil {
			return err
		}
		if !expiresAt.IsZero() {
			if !expiresAt.After(m.now()) {
				return invalid("expiresAt", expiresAt, "must be in the future")
			}
			e.ExpiresAt = expiresAt.UTC()
			if e.JWT, err = m.signEnrollment(ident.ID, e); err != nil {
				return err
			}
			if err := m.c.enrollments.Put(tx, e); err != nil {
				return err
			}
		}
		out = e
		return nil
	})
	return out, err
}
