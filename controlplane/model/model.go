package model

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
)

// Options are the model's settings.
type Options struct {
	// SessionTimeout ends an API session after this long without a request.
	SessionTimeout time.Duration
	// SessionMaxLifetime ends an API session this long after it was opened, however active;
	// 0: no limit.
	SessionMaxLifetime time.Duration
	// EnrollmentDuration is how long an enrollment token stays valid.
	EnrollmentDuration time.Duration
	// RouterCertValidity and IdentityCertValidity are the lifetimes of the certificates
	// issued to edge routers and to identities, at enrollment and at extension; 0: a year.
	RouterCertValidity   time.Duration
	IdentityCertValidity time.Duration
	// Issuer is the URL of the client API's host, https://<api.advertise>; enrollment tokens
	// name it as their issuer.
	Issuer string
	// SigningKey signs enrollment tokens: the key of the API's server certificate, so that a
	// client can check a token against the certificate the API presents. SigningKID names it.
	SigningKey *ecdsa.PrivateKey
	SigningKID string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// JWKSClient fetches the key sets of external JWT signers; nil: a client that trusts
	// JWKSRoots. JWKSRefetchInterval is how often at most a key set is fetched
	// again for a key id it lacks; 0: DefaultJWKSRefetchInterval.
	JWKSClient *http.Client
	// JWKSRoots are the CAs the default JWKS client trusts for https key-set endpoints;
	// nil: the system's roots (the controller passes them plus extJwt.caBundle).
	JWKSRoots           *x509.CertPool
	JWKSRefetchInterval time.Duration
	// PasswordHashers is how many argon2id password checks and hashes may run at once;
	// 0: GOMAXPROCS.
	PasswordHashers int
}

// DefaultEnrollmentDuration is the validity of enrollment tokens when Options leaves it zero.
const DefaultEnrollmentDuration = 3 * time.Hour

// Model applies the rules of the data model to the store.
type Model struct {
	st      *store.Store
	ca      *pki.CA
	opts    Options
	log     *slog.Logger
	c       collections
	limiter *limiter
	// updbLimits and mfaLimits limit failures per account from any source; hashes bounds
	// the concurrent argon2id work.
	updbLimits, mfaLimits *accountLimiter
	hashes                *hashGate

	cache      indexCache
	reads      readCaches
	schemas    schemaCache
	lastChange atomic.Int64 // unix nanoseconds of the last policy-relevant change

	// auth holds the authentication policies, MFA enrollments and external JWT signers.
	auth *authState

	routerHooks routerHooks
	// apiSessionHooks and sessionHooks are told of committed changes of those collections.
	apiSessionHooks, sessionHooks changeHooks
	// credentialHooks are told of committed changes of what an identity may authenticate
	// with (identityID): its certificates, its CAs' trust, disabling, deletion.
	credentialHooks changeHooks
}

// New returns the model over an open store and the controller's CA.
func New(st *store.Store, ca *pki.CA, log *slog.Logger, opts Options) *Model {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.EnrollmentDuration == 0 {
		opts.EnrollmentDuration = DefaultEnrollmentDuration
	}
	if opts.RouterCertValidity == 0 {
		opts.RouterCertValidity = DefaultCertValidity
	}
	if opts.IdentityCertValidity == 0 {
		opts.IdentityCertValidity = DefaultCertValidity
	}
	m := &Model{st: st, ca: ca, opts: opts, log: log, c: newCollections(), limiter: newLimiter(opts.Now), auth: newAuthState(opts),
		updbLimits: newAccountLimiter(opts.Now, true), mfaLimits: newAccountLimiter(opts.Now, false),
		hashes: newHashGate(opts.PasswordHashers)}
	m.watchReads()
	m.watchReplays()
	m.lastChange.Store(opts.Now().UnixNano())
	return m
}

func (m *Model) now() time.Time { return m.opts.Now().UTC() }

// CA returns the controller's certificate authority.
func (m *Model) CA() *pki.CA { return m.ca }

// SessionTimeout returns how long an idle API session lives.
func (m *Model) SessionTimeout() time.Duration { return m.opts.SessionTimeout }

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns a random entity id of 10 characters (59 bits).
func newID() string {
	b := make([]byte, 10)
	rand.Read(b) // never fails: crypto/rand ends the program rather than return an error
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// newToken returns a random secret of 128 bits as a UUID-shaped string.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (m *Model) newBase(tags Tags) Base {
	now := m.now()
	return Base{ID: newID(), CreatedAt: now, UpdatedAt: now, Tags: tags}
}

// conflict turns a unique-index conflict into the COULD_NOT_VALIDATE error the API reports,
// naming the field.
func conflict(err error) error {
	var c *store.ConflictError
	if errors.As(err, &c) {
		return &Error{Code: CodeCouldNotValidate, Field: c.Index, Value: c.Value,
			Message: fmt.Sprintf("%s %q is already in use", c.Index, c.Value), Cause: err}
	}
	return err
}

// missing turns the store's not-found into the model's.
func missing(err error, kind, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFound(kind, id)
	}
	return err
}

// Now returns the model's current time.
func (m *Model) Now() time.Time { return m.now() }
