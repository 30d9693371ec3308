package model

import (
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// Edge routers join the network by enrollment: creating an edge router stores a pending
// erott enrollment whose token the operator hands to the router; the router sends a client
// and a server CSR with it and gets both certificates. The client certificate is what the
// router presents to the controller from then on; extending it replaces it at once (the
// connections the router made with the previous one stay its own).

// EnrollErOtt is the enrollment method of edge routers.
const EnrollErOtt = "erott"

// RouterCerts are the certificates an edge router enrollment or extension issues, in PEM.
type RouterCerts struct {
	Cert       []byte // client certificate
	ServerCert []byte // server certificate, with the SANs of the server CSR
	CA         []byte // the network's CA certificates
}

// CreateEdgeRouter stores a new edge router with its pending erott enrollment.
func (m *Model) CreateEdgeRouter(r *EdgeRouter) error {
	k := m.edgeRouterKind()
	now := m.now()
	r.Base = Base{ID: newID(), CreatedAt: now, UpdatedAt: now, Tags: r.Tags}
	r.IsVerified, r.CertPEM, r.Fingerprint, r.ServerCertPEM, r.ServerFingerprint = false, "", "", "", ""
	r.PreviousFingerprint = ""
	return m.st.Update(func(tx *store.Tx) error {
		if err := k.check(tx, r); err != nil {
			return err
		}
		if err := m.c.edgeRouters.Create(tx, r); err != nil {
			return conflict(err)
		}
		if _, err := m.createRouterEnrollment(tx, r); err != nil {
			return err
		}
		m.added(tx)
		return nil
	})
}

func (m *Model) createRouterEnrollment(tx *store.Tx, r *EdgeRouter) (*Enrollment, error) {
	e := &Enrollment{
		Base:         m.newBase(nil),
		EdgeRouterID: r.ID,
		Method:       EnrollErOtt,
		Token:        newToken(),
	}
	e.ExpiresAt = e.CreatedAt.Add(m.opts.EnrollmentDuration)
	if err := m.storeEnrollment(tx, r.ID, e); err != nil {
		return nil, err
	}
	return e, nil
}

// RouterEnrollment returns the pending enrollment of an edge router, or nil once it has
// enrolled.
func (m *Model) RouterEnrollment(routerID string) (*Enrollment, error) {
	var out *Enrollment
	err := m.st.View(func(tx *store.Tx) error {
		list, err := m.c.enrollments.With(tx, "edgeRouterId", routerID)
		if len(list) > 0 {
			out = list[0]
		}
		return err
	})
	return out, err
}

// EnrollErOtt completes an edge router's enrollment: it signs the client CSR (client usage)
// and the server CSR (server usage, with the CSR's SANs) and records the client certificate
// as the router's.
func (m *Model) EnrollErOtt(token string, clientCSR, serverCSR []byte) (*RouterCerts, error) {
	var out *RouterCerts
	err := m.st.Update(func(tx *store.Tx) error {
		e, err := m.enrollment(tx, token, EnrollErOtt)
		if err != nil {
			return err
		}
		r, err := m.c.edgeRouters.Get(tx, e.EdgeRouterID)
		if err != nil {
			return missing(err, "edge router", e.EdgeRouterID)
		}
		if out, err = m.issueRouterCerts(tx, r, clientCSR, serverCSR, false); err != nil {
			return err
		}
		m.added(tx) // the router may now carry sessions
		return m.c.enrollments.Delete(tx, e.ID)
	})
	return out, err
}

// ExtendRouter issues new certificates to the edge router whose current client certificate
// is chain[0]. The previous client certificate stops being the router's at once, even though
// it has not expired.
func (m *Model) ExtendRouter(chain []*x509.Certificate, clientCSR, serverCSR []byte) (*RouterCerts, error) {
	if len(chain) == 0 {
		return nil, errorf(CodeInvalidAuth, "extending a router's certificates needs the router's current client certificate")
	}
	if err := pki.VerifyChain(chain[0], chain[1:], m.ca.Pool(), m.opts.Now(), x509.ExtKeyUsageClientAuth); err != nil {
		return nil, &Error{Code: CodeInvalidAuth, Message: fmt.Sprintf("the client certificate is not valid: %v", err), Cause: err}
	}
	var out *RouterCerts
	err := m.st.Update(func(tx *store.Tx) error {
		fp := certid.Fingerprint(chain[0])
		r, err := m.c.edgeRouters.Lookup(tx, "fingerprint", fp)
		if errors.Is(err, store.ErrNotFound) {
			if out, err = m.extendedAlready(tx, fp, clientCSR, serverCSR); out != nil || err != nil {
				return err
			}
			return errorf(CodeInvalidAuth, "the client certificate is not the current certificate of any edge router")
		}
		if err != nil {
			return err
		}
		out, err = m.issueRouterCerts(tx, r, clientCSR, serverCSR, true)
		return err
	})
	return out, err
}

// extendedAlready returns the current certificates of the router that last extended the
// client certificate of fingerprint fp, when clientCSR and serverCSR are for the keys of
// those certificates: the router asks again because the answer was lost. Nil otherwise.
func (m *Model) extendedAlready(tx *store.Tx, fp string, clientCSR, serverCSR []byte) (*RouterCerts, error) {
	r, err := m.c.edgeRouters.Lookup(tx, "previousFingerprint", fp)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, pair := range []struct {
		csr  []byte
		cert string
	}{{clientCSR, r.CertPEM}, {serverCSR, r.ServerCertPEM}} {
		req, err := pki.ParseCSR(pair.csr)
		if err != nil {
			return nil, nil
		}
		cert, err := pki.ParsePEMCert([]byte(pair.cert))
		if err != nil {
			return nil, nil
		}
		if !pki.PublicKeysEqual(cert.PublicKey, req.PublicKey) {
			return nil, nil
		}
	}
	return &RouterCerts{Cert: []byte(r.CertPEM), ServerCert: []byte(r.ServerCertPEM), CA: m.ca.PEM()}, nil
}

// EdgeRouterByCert returns the enrolled edge router whose current client certificate is cert.
func (m *Model) EdgeRouterByCert(cert *x509.Certificate) (*EdgeRouter, error) {
	var out *EdgeRouter
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.edgeRouters.Lookup(tx, "fingerprint", certid.Fingerprint(cert))
		return missing(err, "edge router with certificate", certid.Fingerprint(cert))
	})
	return out, err
}

// issueRouterCerts signs the router's CSRs and records the certificates as its own;
// extended says that the router asked with its current client certificate.
func (m *Model) issueRouterCerts(tx *store.Tx, r *EdgeRouter, clientCSR, serverCSR []byte, extended bool) (*RouterCerts, error) {
	if len(clientCSR) == 0 {
		return nil, invalid("certCsr", nil, "is required: the CSR of the router's client certificate")
	}
	if len(serverCSR) == 0 {
		return nil, invalid("serverCertCsr", nil, "is required: the CSR of the router's server certificate")
	}
	client, clientPEM, err := m.ca.SignCSR(clientCSR, pki.SignRequest{CommonName: r.ID, Usage: pki.Client, Validity: m.opts.RouterCertValidity})
	if err != nil {
		return nil, csrError(err)
	}
	server, serverPEM, err := m.ca.SignCSR(serverCSR, pki.SignRequest{CommonName: r.ID, Usage: pki.Server, Validity: m.opts.RouterCertValidity})
	if err != nil {
		return nil, csrError(err)
	}
	previous := ""
	if extended {
		previous = r.Fingerprint
	}
	r.IsVerified = true
	r.CertPEM, r.Fingerprint = string(clientPEM), certid.Fingerprint(client)
	r.ServerCertPEM, r.ServerFingerprint = string(serverPEM), certid.Fingerprint(server)
	r.PreviousFingerprint = previous
	change := RouterChange{}
	if extended {
		change = RouterChange{Extended: true, Previous: previous, Current: [2]string{r.Fingerprint, r.ServerFingerprint}}
	}
	r.UpdatedAt = m.now()
	if err := m.c.edgeRouters.Put(tx, r); err != nil {
		return nil, conflict(err)
	}
	m.routerChanged(tx, r.ID, change)
	return &RouterCerts{Cert: clientPEM, ServerCert: serverPEM, CA: m.ca.PEM()}, nil
}

// ReEnrollEdgeRouter drops an edge router's certificates and gives it a new pending
// enrollment: its current certificate stops working at once.
func (m *Model) ReEnrollEdgeRouter(id string) (*Enrollment, error) {
	var out *Enrollment
	err := m.st.Update(func(tx *store.Tx) error {
		r, err := m.c.edgeRouters.Get(tx, id)
		if err != nil {
			return missing(err, "edge router", id)
		}
		if err := m.deleteAll(m.c.enrollments.IDsWith, "edgeRouterId", m.c.enrollments.Delete)(tx, id); err != nil {
			return err
		}
		r.IsVerified, r.CertPEM, r.Fingerprint, r.ServerCertPEM, r.ServerFingerprint = false, "", "", "", ""
		r.PreviousFingerprint = ""
		r.UpdatedAt = m.now()
		if err := m.c.edgeRouters.Put(tx, r); err != nil {
			return err
		}
		m.routerChanged(tx, id, RouterChange{})
		m.added(tx) // the router no longer carries new sessions; existing ones are not tied to it
		out, err = m.createRouterEnrollment(tx, r)
		return err
	})
	return out, err
}

// syncRouterIdentity keeps the identity of a tunneler-enabled edge router: an identity of type
// Router with the router's id and name, which service policies grant Dial and Bind to, as
// for any identity; the router's tunnel acts as it. It is removed when the tunneler is turned
// off.
func (m *Model) syncRouterIdentity(tx *store.Tx, r *EdgeRouter) error {
	cur, err := m.c.identities.Get(tx, r.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	switch {
	case r.IsTunnelerEnabled && cur == nil:
		now := m.now()
		id := &Identity{Base: Base{ID: r.ID, CreatedAt: now, UpdatedAt: now}, Name: r.Name, Type: IdentityTypeRouter, AuthPolicyID: DefaultAuthPolicyID}
		if err := m.c.identities.Create(tx, id); err != nil {
			return routerNameConflict(err, r.Name)
		}
	case r.IsTunnelerEnabled && cur.Name != r.Name:
		cur.Name, cur.UpdatedAt = r.Name, m.now()
		if err := m.c.identities.Put(tx, cur); err != nil {
			return routerNameConflict(err, r.Name)
		}
	case !r.IsTunnelerEnabled && cur != nil:
		return m.deleteIdentityTx(tx, r.ID)
	}
	return nil
}

func routerNameConflict(err error, name string) error {
	var c *store.ConflictError
	if errors.As(err, &c) {
		return invalid("name", name, "an identity is already named %q; a tunneler-enabled edge router's identity takes the router's name", name)
	}
	return err
}

// RouterChange says how an edge router's credentials changed. Extended: the router extended
// its certificates itself, presenting its client certificate of fingerprint Previous, to
// those of fingerprints Current (client, server); the connections it made with the previous
// certificate are still the router's while Current is.
type RouterChange struct {
	Extended bool
	Previous string
	Current  [2]string
}

// RecordedChange is the RouterChange that r's record alone tells, for a member that decides
// on the record as it is (a replayed change, a replaced store's content): an extension
// while the record names the certificate it replaced, a change of any other kind otherwise.
func (r *EdgeRouter) RecordedChange() RouterChange {
	if r.PreviousFingerprint == "" {
		return RouterChange{}
	}
	return RouterChange{Extended: true, Previous: r.PreviousFingerprint, Current: [2]string{r.Fingerprint, r.ServerFingerprint}}
}

// routerHooks are the functions OnEdgeRouterChange registered.
type routerHooks struct {
	mu  sync.Mutex
	fns []func(routerID string, change RouterChange)
}

// OnEdgeRouterChange registers f to be called with an edge router's id after a committed
// change of its credentials: enrollment, extension, re-enrollment or deletion. The control
// channel uses it to drop a connection whose certificate no longer identifies the router,
// and to keep one whose router extended its certificates.
// f runs on the goroutine that made the change and must not block.
func (m *Model) OnEdgeRouterChange(f func(routerID string, change RouterChange)) {
	m.routerHooks.mu.Lock()
	m.routerHooks.fns = append(m.routerHooks.fns, f)
	m.routerHooks.mu.Unlock()
}

func (m *Model) routerChanged(tx *store.Tx, id string, change RouterChange) {
	tx.OnCommit(func() {
		m.routerHooks.mu.Lock()
		fns := m.routerHooks.fns
		m.routerHooks.mu.Unlock()
		for _, f := range fns {
			f(id, change)
		}
	})
}
