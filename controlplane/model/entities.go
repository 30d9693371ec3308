// Package model is the controller's data model and its rules: the entities kept in the store
// (identities, authenticators, enrollments, API sessions, certificate authorities), the
// transactions that change them together, and the checks that decide who may authenticate
// and enroll. The HTTP APIs translate requests into calls of this package.
package model

import (
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Tags are user-defined fields of an entity; values are nil, strings or booleans.
type Tags map[string]any

// Base holds the fields every entity has.
type Base struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Tags      Tags      `json:"tags,omitempty"`
}

// Identity types.
const (
	IdentityTypeDefault = "Default"
	IdentityTypeUser    = "User"
	IdentityTypeDevice  = "Device"
	IdentityTypeService = "Service"
	IdentityTypeRouter  = "Router"
)

// IdentityTypes are the allowed identity types, in the order the API lists them.
func IdentityTypes() []string {
	return []string{IdentityTypeUser, IdentityTypeDevice, IdentityTypeService, IdentityTypeRouter, IdentityTypeDefault}
}

// Hosting holds how an identity's terminators rank against others': cost 0-65535 and
// precedence default, required or failed, per identity and per service.
type Hosting struct {
	DefaultHostingCost        int               `json:"defaultHostingCost"`
	DefaultHostingPrecedence  string            `json:"defaultHostingPrecedence,omitempty"`
	ServiceHostingCosts       map[string]int    `json:"serviceHostingCosts,omitempty"`
	ServiceHostingPrecedences map[string]string `json:"serviceHostingPrecedences,omitempty"`
}

// EnvInfo and SDKInfo describe a client's platform and SDK as it reported them when it last
// authenticated.
type EnvInfo struct {
	Arch      string `json:"arch,omitempty"`
	Domain    string `json:"domain,omitempty"`
	Hostname  string `json:"hostname,omitempty"`
	OS        string `json:"os,omitempty"`
	OSRelease string `json:"osRelease,omitempty"`
	OSVersion string `json:"osVersion,omitempty"`
}

type SDKInfo struct {
	AppID      string `json:"appId,omitempty"`
	AppVersion string `json:"appVersion,omitempty"`
	Branch     string `json:"branch,omitempty"`
	Revision   string `json:"revision,omitempty"`
	Type       string `json:"type,omitempty"`
	Version    string `json:"version,omitempty"`
}

// Identity is a security principal: a person, a device, an application or a router.
type Identity struct {
	Base
	Name           string   `json:"name"`
	Type           string   `json:"type"`
	IsAdmin        bool     `json:"isAdmin"`
	IsDefaultAdmin bool     `json:"isDefaultAdmin"`
	ExternalID     string   `json:"externalId,omitempty"`
	RoleAttributes []string `json:"roleAttributes,omitempty"`
	AuthPolicyID   string   `json:"authPolicyId"`
	Hosting
	AppData     map[string]any `json:"appData,omitempty"`
	Permissions []string       `json:"permissions,omitempty"`
	EnvInfo     EnvInfo        `json:"envInfo"`
	SDKInfo     SDKInfo        `json:"sdkInfo"`
	// DisabledAt is set while an administrator has disabled the identity; DisabledUntil,
	// when set, is when the disabling lapses by itself.
	DisabledAt    *time.Time `json:"disabledAt,omitempty"`
	DisabledUntil *time.Time `json:"disabledUntil,omitempty"`
}

// IsDisabled tells whether the identity is disabled at now: disabled and not past its
// DisabledUntil.
func (i *Identity) IsDisabled(now time.Time) bool {
	return i.DisabledAt != nil && (i.DisabledUntil == nil || now.Before(*i.DisabledUntil))
}

// Authentication methods of authenticators.
const (
	MethodCert = "cert"
	MethodUpdb = "updb"
)

// Authenticator is one way an identity proves who it is: a certificate or a username and
// password.
type Authenticator struct {
	Base
	IdentityID string `json:"identityId"`
	Method     string `json:"method"`

	// updb
	Username     string `json:"username,omitempty"`
	PasswordHash string `json:"passwordHash,omitempty"`

	// cert
	CertPEM     string `json:"certPem,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// IssuedByNetwork: the certificate was signed by the controller's CA; only those can be
	// extended.
	IssuedByNetwork bool `json:"isIssuedByNetwork,omitempty"`
	// CAFingerprint is the fingerprint of the third-party CA the certificate was enrolled
	// with; the certificate is current only while that CA is verified and allows
	// authentication.
	CAFingerprint string `json:"caFingerprint,omitempty"`
	// An extension issues a new certificate that takes over once the client verifies it.
	UnverifiedCertPEM     string `json:"unverifiedCertPem,omitempty"`
	UnverifiedFingerprint string `json:"unverifiedFingerprint,omitempty"`
	// PreviousFingerprint is the certificate the last verified extension replaced when it
	// kept the key: the API sessions opened with it, and their connections to edge routers,
	// go on (the holder of the key renewed, not someone else); it opens no new session.
	PreviousFingerprint string `json:"previousFingerprint,omitempty"`
	// An administrator may ask the client to extend its certificate early, and to use a new
	// key for it; the next verified extension clears the request.
	ExtendRequested      bool       `json:"extendRequested,omitempty"`
	KeyRollRequested     bool       `json:"keyRollRequested,omitempty"`
	ExtendRequestedAt    *time.Time `json:"extendRequestedAt,omitempty"`
	LastExtendRolledKeys bool       `json:"lastExtendRolledKeys,omitempty"`
}

// Enrollment methods.
const (
	EnrollOTT   = "ott"
	EnrollOTTCA = "ottca"
	EnrollUpdb  = "updb"
	EnrollCA    = "ca"
)

// Enrollment is a pending enrollment of an identity: a one-time token and what it allows.
type Enrollment struct {
	Base
	// IdentityID names the identity that enrolls; EdgeRouterID the edge router, for erott.
	IdentityID   string    `json:"identityId,omitempty"`
	EdgeRouterID string    `json:"edgeRouterId,omitempty"`
	Method       string    `json:"method"`
	Token        string    `json:"token"`
	ExpiresAt    time.Time `json:"expiresAt"`
	CAID         string    `json:"caId,omitempty"`
	Username     string    `json:"username,omitempty"`
	JWT          string    `json:"jwt"`
}

// AuthQuery is a further authentication step an API session still has to pass.
type AuthQuery struct {
	TypeID     string `json:"typeId"`
	Provider   string `json:"provider"`
	Format     string `json:"format,omitempty"`
	HTTPMethod string `json:"httpMethod,omitempty"`
	HTTPURL    string `json:"httpUrl,omitempty"`
	MinLength  int    `json:"minLength,omitempty"`
	MaxLength  int    `json:"maxLength,omitempty"`
}

// APISession is an authenticated client's session with the controller.
type APISession struct {
	Base
	Token           string      `json:"token"`
	IdentityID      string      `json:"identityId"`
	AuthenticatorID string      `json:"authenticatorId"`
	AuthMethod      string      `json:"authMethod"`
	IPAddress       string      `json:"ipAddress"`
	ConfigTypes     []string    `json:"configTypes,omitempty"`
	LastActivityAt  time.Time   `json:"lastActivityAt"`
	AuthQueries     []AuthQuery `json:"authQueries,omitempty"`
	// CertFingerprint is set when the session was made with a client certificate.
	CertFingerprint string `json:"certFingerprint,omitempty"`
	// ExternalIDCert: the certificate stood for the identity through its CA's external id
	// claim, not through a cert authenticator, whatever the identity's authenticators are.
	// It stays usable while that CA (ClaimCA, its fingerprint) is verified, allows
	// authentication and keeps its claim, and the identity keeps ClaimedExternalID.
	ExternalIDCert    bool   `json:"externalIdCert,omitempty"`
	ClaimCA           string `json:"claimCa,omitempty"`
	ClaimedExternalID string `json:"claimedExternalId,omitempty"`
	// MFACompletedAt is when the session last passed MFA (set by RecordMFA); MFA posture
	// checks count from it and never hold while it is nil.
	MFACompletedAt *time.Time `json:"mfaCompletedAt,omitempty"`
}

// APISessionCert is an ephemeral certificate issued to an API session from a CSR.
type APISessionCert struct {
	Base
	APISessionID string    `json:"apiSessionId"`
	Subject      string    `json:"subject"`
	Fingerprint  string    `json:"fingerprint"`
	ValidFrom    time.Time `json:"validFrom"`
	ValidTo      time.Time `json:"validTo"`
	CertPEM      string    `json:"certPem"`
}

// CA is a third-party certificate authority whose certificates may enroll and authenticate.
type CA struct {
	Base
	Name                      string   `json:"name"`
	CertPEM                   string   `json:"certPem"`
	Fingerprint               string   `json:"fingerprint"`
	IsVerified                bool     `json:"isVerified"`
	VerificationToken         string   `json:"verificationToken"`
	IsAutoCaEnrollmentEnabled bool     `json:"isAutoCaEnrollmentEnabled"`
	IsOttCaEnrollmentEnabled  bool     `json:"isOttCaEnrollmentEnabled"`
	IsAuthEnabled             bool     `json:"isAuthEnabled"`
	IdentityRoles             []string `json:"identityRoles"`
	IdentityNameFormat        string   `json:"identityNameFormat"`
	// ExternalIDClaim, when set, maps the CA's certificates to identities by external id.
	ExternalIDClaim *ExternalIDClaim `json:"externalIdClaim,omitempty"`
}

// The collections and their indexes.
type collections struct {
	identities      *store.Collection[Identity]
	authenticators  *store.Collection[Authenticator]
	enrollments     *store.Collection[Enrollment]
	apiSessions     *store.Collection[APISession]
	apiSessionCerts *store.Collection[APISessionCert]
	cas             *store.Collection[CA]

	services                  *store.Collection[Service]
	servicePolicies           *store.Collection[ServicePolicy]
	edgeRouters               *store.Collection[EdgeRouter]
	edgeRouterPolicies        *store.Collection[EdgeRouterPolicy]
	serviceEdgeRouterPolicies *store.Collection[ServiceEdgeRouterPolicy]
	sessions                  *store.Collection[Session]
	postureChecks             *store.Collection[PostureCheck]
	posture                   *postureStore // reported posture per API session, in memory only
	failed                    *failedStore  // session requests posture refused, per identity, in memory only
	configTypes               *store.Collection[ConfigType]
	configs                   *store.Collection[Config]
	terminators               *store.Collection[Terminator]
	identityServiceConfigs    *store.Collection[IdentityServiceConfigs]
}

func one(s string) []string { return []string{s} }

func newCollections() collections {
	return collections{
		identities: store.NewCollection("identities", func(i *Identity) string { return i.ID },
			store.Index[Identity]{Name: "name", Unique: true, Keys: func(i *Identity) []string { return one(i.Name) }},
			store.Index[Identity]{Name: "externalId", Unique: true, Keys: func(i *Identity) []string { return one(i.ExternalID) }},
		),
		authenticators: store.NewCollection("authenticators", func(a *Authenticator) string { return a.ID },
			store.Index[Authenticator]{Name: "identityId", Keys: func(a *Authenticator) []string { return one(a.IdentityID) }},
			store.Index[Authenticator]{Name: "username", Unique: true, Keys: func(a *Authenticator) []string { return one(a.Username) }},
			store.Index[Authenticator]{Name: "fingerprint", Unique: true, Keys: func(a *Authenticator) []string {
				return []string{a.Fingerprint, a.UnverifiedFingerprint}
			}},
		),
		enrollments: store.NewCollection("enrollments", func(e *Enrollment) string { return e.ID },
			store.Index[Enrollment]{Name: "identityId", Keys: func(e *Enrollment) []string { return one(e.IdentityID) }},
			store.Index[Enrollment]{Name: "token", Unique: true, Keys: func(e *Enrollment) []string { return one(e.Token) }},
			store.Index[Enrollment]{Name: "caId", Keys: func(e *Enrollment) []string { return one(e.CAID) }},
			store.Index[Enrollment]{Name: "edgeRouterId", Keys: func(e *Enrollment) []string { return one(e.EdgeRouterID) }},
		),
		apiSessions: store.NewCollection("apiSessions", func(s *APISession) string { return s.ID },
			store.Index[APISession]{Name: "token", Unique: true, Keys: func(s *APISession) []string { return one(s.Token) }},
			store.Index[APISession]{Name: "identityId", Keys: func(s *APISession) []string { return one(s.IdentityID) }},
		),
		apiSessionCerts: store.NewCollection("apiSessionCerts", func(c *APISessionCert) string { return c.ID },
			store.Index[APISessionCert]{Name: "apiSessionId", Keys: func(c *APISessionCert) []string { return one(c.APISessionID) }},
			store.Index[APISessionCert]{Name: "fingerprint", Unique: true, Keys: func(c *APISessionCert) []string { return one(c.Fingerprint) }},
		),
		cas: store.NewCollection("cas", func(c *CA) string { return c.ID },
			store.Index[CA]{Name: "name", Unique: true, Keys: func(c *CA) []string { return one(c.Name) }},
			store.Index[CA]{Name: "fingerprint", Unique: true, Keys: func(c *CA) []string { return one(c.Fingerprint) }},
		),
		services: store.NewCollection("services", func(s *Service) string { return s.ID },
			store.Index[Service]{Name: "name", Unique: true, Keys: func(s *Service) []string { return one(s.Name) }},
		),
		servicePolicies: store.NewCollection("servicePolicies", func(p *ServicePolicy) string { return p.ID },
			store.Index[ServicePolicy]{Name: "name", Unique: true, Keys: func(p *ServicePolicy) []string { return one(p.Name) }},
		),
		edgeRouters: store.NewCollection("edgeRouters", func(r *EdgeRouter) string { return r.ID },
			store.Index[EdgeRouter]{Name: "name", Unique: true, Keys: func(r *EdgeRouter) []string { return one(r.Name) }},
			store.Index[EdgeRouter]{Name: "fingerprint", Unique: true, Keys: func(r *EdgeRouter) []string { return one(r.Fingerprint) }},
			store.Index[EdgeRouter]{Name: "previousFingerprint", Unique: true, Keys: func(r *EdgeRouter) []string { return one(r.PreviousFingerprint) }},
		),
		edgeRouterPolicies: store.NewCollection("edgeRouterPolicies", func(p *EdgeRouterPolicy) string { return p.ID },
			store.Index[EdgeRouterPolicy]{Name: "name", Unique: true, Keys: func(p *EdgeRouterPolicy) []string { return one(p.Name) }},
		),
		serviceEdgeRouterPolicies: store.NewCollection("serviceEdgeRouterPolicies", func(p *ServiceEdgeRouterPolicy) string { return p.ID },
			store.Index[ServiceEdgeRouterPolicy]{Name: "name", Unique: true, Keys: func(p *ServiceEdgeRouterPolicy) []string { return one(p.Name) }},
		),
		configTypes: store.NewCollection("configTypes", func(c *ConfigType) string { return c.ID },
			store.Index[ConfigType]{Name: "name", Unique: true, Keys: func(c *ConfigType) []string { return one(c.Name) }},
		),
		configs: store.NewCollection("configs", func(c *Config) string { return c.ID },
			store.Index[Config]{Name: "name", Unique: true, Keys: func(c *Config) []string { return one(c.Name) }},
			store.Index[Config]{Name: "configTypeId", Keys: func(c *Config) []string { return one(c.ConfigTypeID) }},
		),
		terminators: store.NewCollection("terminators", func(t *Terminator) string { return t.ID },
			store.Index[Terminator]{Name: "serviceId", Keys: func(t *Terminator) []string { return one(t.ServiceID) }},
			store.Index[Terminator]{Name: "routerId", Keys: func(t *Terminator) []string { return one(t.RouterID) }},
		),
		postureChecks: store.NewCollection("postureChecks", func(c *PostureCheck) string { return c.ID },
			store.Index[PostureCheck]{Name: "name", Unique: true, Keys: func(c *PostureCheck) []string { return one(c.Name) }},
		),
		posture: newPostureStore(),
		failed:  newFailedStore(),
		identityServiceConfigs: store.NewCollection("identityServiceConfigs",
			func(c *IdentityServiceConfigs) string { return c.IdentityID }),
		sessions: store.NewCollection("sessions", func(s *Session) string { return s.ID },
			store.Index[Session]{Name: "token", Unique: true, Keys: func(s *Session) []string { return one(s.Token) }},
			store.Index[Session]{Name: "apiSessionId", Keys: func(s *Session) []string { return one(s.APISessionID) }},
			store.Index[Session]{Name: "identityId", Keys: func(s *Session) []string { return one(s.IdentityID) }},
			store.Index[Session]{Name: "serviceId", Keys: func(s *Session) []string { return one(s.ServiceID) }},
		),
	}
}
