package model

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// CACreate is what an administrator gives to add a third-party certificate authority.
type CACreate struct {
	Name                      string
	CertPEM                   string
	IsAutoCaEnrollmentEnabled bool
	IsOttCaEnrollmentEnabled  bool
	IsAuthEnabled             bool
	IdentityRoles             []string
	IdentityNameFormat        string
	ExternalIDClaim           *ExternalIDClaim
	Tags                      Tags
}

// parseCACert checks that certPEM holds one CA certificate.
func parseCACert(certPEM string) (*x509.Certificate, error) {
	certs, err := pki.ParseCertificatesPEM([]byte(certPEM))
	if err != nil {
		return nil, invalid("certPem", nil, "%v", err)
	}
	if len(certs) != 1 {
		return nil, invalid("certPem", nil, "must hold exactly one certificate, found %d", len(certs))
	}
	if !certs[0].IsCA || !certs[0].BasicConstraintsValid {
		return nil, invalid("certPem", nil, "is not a CA certificate (basic constraints CA:TRUE missing)")
	}
	return certs[0], nil
}

// CreateCA adds a certificate authority; it is unverified until VerifyCA.
func (m *Model) CreateCA(in CACreate) (*CA, error) {
	if err := checkName("name", in.Name); err != nil {
		return nil, err
	}
	cert, err := parseCACert(in.CertPEM)
	if err != nil {
		return nil, err
	}
	if in.IdentityNameFormat == "" {
		in.IdentityNameFormat = DefaultIdentityNameFormat
	}
	if in.ExternalIDClaim != nil {
		if err := in.ExternalIDClaim.check(); err != nil {
			return nil, err
		}
	}
	ca := &CA{
		Base:                      m.newBase(in.Tags),
		Name:                      in.Name,
		CertPEM:                   certPEM(cert),
		Fingerprint:               certid.Fingerprint(cert),
		VerificationToken:         newToken(),
		IsAutoCaEnrollmentEnabled: in.IsAutoCaEnrollmentEnabled,
		IsOttCaEnrollmentEnabled:  in.IsOttCaEnrollmentEnabled,
		IsAuthEnabled:             in.IsAuthEnabled,
		IdentityRoles:             nonNil(in.IdentityRoles),
		IdentityNameFormat:        in.IdentityNameFormat,
		ExternalIDClaim:           in.ExternalIDClaim,
	}
	if certid.Fingerprint(m.ca.Certificate()) == ca.Fingerprint {
		return nil, invalid("certPem", nil, "is the network's own CA, which is always trusted")
	}
	err = m.st.Update(func(tx *store.Tx) error { return conflict(m.c.cas.Create(tx, ca)) })
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Field == "fingerprint" {
			e.Field, e.Message = "certPem", "this certificate is already a certificate authority"
		}
		return nil, err
	}
	return ca, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// VerifyCA proves possession of a CA's key: certPEM must be a certificate signed by the CA
// whose common name is the CA's verification token.
func (m *Model) VerifyCA(id, verificationPEM string) error {
	return m.st.Update(func(tx *store.Tx) error {
		ca, err := m.c.cas.Get(tx, id)
		if err != nil {
			return missing(err, "certificate authority", id)
		}
		if ca.IsVerified {
			return errorf(CodeCAAlreadyVerified, "certificate authority %q is already verified", ca.Name)
		}
		certs, err := pki.ParseCertificatesPEM([]byte(verificationPEM))
		if err != nil || len(certs) == 0 {
			return &Error{Code: CodeInvalidCertificate, Message: "the body must be one PEM certificate signed by the certificate authority", Cause: err}
		}
		root, err := pki.ParsePEMCert([]byte(ca.CertPEM))
		if err != nil {
			return err
		}
		if err := certs[0].CheckSignatureFrom(root); err != nil {
			return &Error{Code: CodeInvalidCertificate, Message: "the verification certificate is not signed by the certificate authority's key", Cause: err}
		}
		if certs[0].Subject.CommonName != ca.VerificationToken {
			return &Error{Code: CodeInvalidCertificate, Message: "the verification certificate's common name must be the verification token"}
		}
		ca.IsVerified, ca.UpdatedAt = true, m.now()
		return m.c.cas.Put(tx, ca)
	})
}

// CA returns the certificate authority with id.
func (m *Model) GetCA(id string) (*CA, error) {
	var out *CA
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.cas.Get(tx, id)
		return missing(err, "certificate authority", id)
	})
	return out, err
}

// CAs returns every certificate authority in id order.
func (m *Model) CAs() ([]*CA, error) {
	var out []*CA
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.cas.All(tx)
		return err
	})
	return out, err
}

// UpdateCA applies change to a certificate authority; its certificate cannot change. When
// isAuthEnabled turns false, the API sessions of its certificates end right after the
// commit (certsChanged); when its external id claim is removed, those opened through it.
func (m *Model) UpdateCA(id string, change func(*CA) error) (*CA, error) {
	var out *CA
	var revoked bool
	err := m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.cas.Get(tx, id)
		if err != nil {
			return missing(err, "certificate authority", id)
		}
		next := *cur
		next.IdentityRoles = slices.Clone(cur.IdentityRoles)
		if cur.ExternalIDClaim != nil {
			claim := *cur.ExternalIDClaim
			next.ExternalIDClaim = &claim
		}
		if err := change(&next); err != nil {
			return err
		}
		if next.ExternalIDClaim != nil {
			if err := next.ExternalIDClaim.check(); err != nil {
				return err
			}
		}
		if next.IdentityNameFormat == "" {
			next.IdentityNameFormat = DefaultIdentityNameFormat
		}
		if next.Name != cur.Name { // a name stored under an older rule may stay
			if err := checkName("name", next.Name); err != nil {
				return err
			}
		}
		next.ID, next.CreatedAt, next.CertPEM, next.Fingerprint = cur.ID, cur.CreatedAt, cur.CertPEM, cur.Fingerprint
		next.IsVerified, next.VerificationToken = cur.IsVerified, cur.VerificationToken
		next.IdentityRoles = nonNil(next.IdentityRoles)
		next.UpdatedAt = m.now()
		out = &next
		if err := m.c.cas.Put(tx, &next); err != nil {
			return conflict(err)
		}
		if caTrustMoved(cur, &next) {
			revoked = !next.IsAuthEnabled || caClaimRemoved(cur, &next)
			return m.caTrustChanged(tx, &next)
		}
		return nil
	})
	if err != nil || !revoked {
		return out, err
	}
	return out, m.caSweep(out)
}

// DeleteCA removes a certificate authority and the pending enrollments that name it. Its
// certificates no longer authenticate: the API sessions opened with them end right after
// the commit (certsChanged).
func (m *Model) DeleteCA(id string) error {
	var ca *CA
	err := m.st.Update(func(tx *store.Tx) (err error) {
		ca, err = m.c.cas.Get(tx, id)
		if err != nil {
			return missing(err, "certificate authority", id)
		}
		if err := m.deleteAll(m.c.enrollments.IDsWith, "caId", m.c.enrollments.Delete)(tx, id); err != nil {
			return err
		}
		if err := m.c.cas.Delete(tx, id); err != nil {
			return err
		}
		return m.caTrustChanged(tx, ca)
	})
	if err != nil {
		return err
	}
	return m.caSweep(ca)
}

// caSweep runs caTrustChanged once more after a commit that took a CA's trust away, unless
// it is trusted again: a login that read the CA before that commit and committed first made
// an API session the change's scan could not see; every later login sees the change.
func (m *Model) caSweep(ca *CA) error {
	return m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.cas.Lookup(tx, "fingerprint", ca.Fingerprint)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil && cur.IsVerified && cur.IsAuthEnabled && cur.ExternalIDClaim != nil {
			return nil // trusted again, claim and all
		}
		return m.caTrustChanged(tx, ca)
	})
}

// CAJWT returns the enrollment token of a certificate authority's auto-enrollment: it names
// the CA and the controller, and carries no secret (the CA's certificates are the credential).
func (m *Model) CAJWT(id string) (string, error) {
	ca, err := m.GetCA(id)
	if err != nil {
		return "", err
	}
	claims := EnrollmentClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:   m.opts.Issuer,
			Subject:  ca.ID,
			ID:       ca.ID,
			Audience: jwt.ClaimStrings{EnrollmentAudience},
			IssuedAt: jwt.NewNumericDate(m.now()),
		},
		Method: EnrollCA,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = m.opts.SigningKID
	s, err := t.SignedString(m.opts.SigningKey)
	if err != nil {
		return "", fmt.Errorf("sign the enrollment token of certificate authority %s: %w", ca.ID, err)
	}
	return s, nil
}

// EnrollmentAudience is the audience of a CA's enrollment token, as the reference names it.
const EnrollmentAudience = "openziti-enroller"

// caTrustMoved tells whether a CA's change from old to cur changes what stands on it, which
// caTrustChanged follows: whether it allows authentication, or its external id claim removed.
func caTrustMoved(old, cur *CA) bool {
	return old.IsAuthEnabled != cur.IsAuthEnabled || caClaimRemoved(old, cur)
}

func caClaimRemoved(old, cur *CA) bool {
	return old.ExternalIDClaim != nil && cur.ExternalIDClaim == nil
}
