package main

import (
	"slices"
	"strings"
)

// valueKind says how the text of a flag becomes a value of the request body.
type valueKind int

const (
	textValue     valueKind = iota // the text as it is
	choiceValue                    // one of field.choices, matched without regard to case
	onOffValue                     // on or off, sent as a boolean
	boolValue                      // a flag without value (or --flag=false), sent as a boolean
	intValue                       // a whole number from field.min to field.max
	durationValue                  // a duration such as 90s or 30m, sent in milliseconds
	listValue                      // comma-separated texts
	refValue                       // the name or id of an entity of field.ref, sent as its id
	refsValue                      // comma-separated names or ids of entities of field.ref, sent as ids
	rolesValue                     // comma-separated roles #attribute, #all or @name-or-id (of field.ref), sent with ids
	jsonValue                      // a JSON object
	jsonFileValue                  // a file holding a JSON object
	osValue                        // operating systems TYPE[:VERSION...], comma-separated or repeated
	textFileValue                  // a file whose text is the value (a PEM certificate)
)

// field is one flag of an entity type and the request body field it sets.
type field struct {
	flag, short, usage string
	kind               valueKind
	body               string // dotted path in the request body; "" for flags the command uses itself
	choices            []string
	ref                string   // collection that names resolve in, for refValue, refsValue and rolesValue
	min, max           int      // bounds of an intValue
	def                string   // the value create sends when the flag is absent
	required           bool     // create needs it, or one of the flags exclusive with it
	createOnly         bool     // the field cannot change after create: update does not offer it
	needs              []string // flags of which one must be given with this one
	// implies is the boolean flag that giving this one sets when none of needs is given.
	implies string
	aliases []string // older names of the flag, still accepted
}

// argument is a positional argument of create after NAME; it fills the flag of that name.
type argument struct{ name, flag string }

// column is one column of the list table: a header and a dotted path in each item.
type column struct{ header, path string }

// variant is a subtype of an entity type chosen by the first argument of create and update,
// e.g. the DOMAIN posture check: its flags come on top of the type's own.
type variant struct {
	name, value, short string // CLI name, value of the type's discriminator field, description
	args               []argument
	fields             []field
}

// enrollment says how to find the enrollment token of a newly created entity.
type enrollment struct {
	jwt      func(detail map[string]any) string
	toStdout bool // with text output and no --jwt-output-file, print the token on stdout
}

// entityType describes one entity type of the management API for the edge commands.
type entityType struct {
	name, plural  string // CLI names; plural is also the collection below the API
	what          string // in messages: "service policy"
	short         string
	aliases       []string
	args          []argument
	fields        []field
	exclusive     [][]string // flags of which at most one may be given
	columns       []column
	discriminator string // body field a variant sets
	variants      []variant
	enrollment    *enrollment
	// verbs are the edge commands the management API serves for the type; nil: create,
	// list, get, update and delete.
	verbs []string
	// unnamed: its entities have no name; commands find them by id, and create takes no NAME.
	unnamed bool
}

// serves reports whether the edge command verb (create, list, ...) applies to the type.
func (t *entityType) serves(verb string) bool {
	return t.verbs == nil || slices.Contains(t.verbs, verb)
}

// Allowed values shared by several types.
var (
	semantics = []string{"AllOf", "AnyOf"}
	osTypes   = []string{"Windows", "WindowsServer", "Android", "iOS", "Linux", "macOS"}
)

func roleAttributesField() field {
	return field{flag: "role-attributes", short: "a", kind: listValue, body: "roleAttributes",
		usage: "role attributes, comma-separated (policies select them as #attribute)"}
}

func rolesField(flag, short, body, ref, what string) field {
	return field{flag: flag, short: short, kind: rolesValue, body: body, ref: ref,
		usage: what + " roles, comma-separated: #attribute, #all or @name-or-id"}
}

func semanticField() field {
	return field{flag: "semantic", kind: choiceValue, body: "semantic", choices: semantics, def: "AllOf",
		usage: "how #attribute roles combine: AllOf or AnyOf"}
}

func jwtFileField() field {
	return field{flag: "jwt-output-file", kind: textValue, createOnly: true,
		usage: "write the enrollment token to this file (mode 0600)"}
}

// edgeTypes is the table of entity types the edge commands manage.
func edgeTypes() []*entityType {
	return []*entityType{
		{
			name: "identity", plural: "identities", what: "identity", short: "an identity: a user, device or service of the network",
			fields: []field{
				{flag: "type", kind: choiceValue, body: "type", choices: []string{"User", "Device", "Service", "Router", "Default"}, def: "Default",
					usage: "identity type: User, Device, Service, Router or Default"},
				{flag: "admin", kind: boolValue, body: "isAdmin", def: "false", usage: "make the identity an administrator"},
				{flag: "external-id", kind: textValue, body: "externalId", usage: "the identity's id in an external identity provider"},
				{flag: "auth-policy", kind: refValue, ref: "auth-policies", body: "authPolicyId", usage: "its authentication policy, name or id (default: the default policy)"},
				roleAttributesField(),
				{flag: "ott", kind: boolValue, body: "enrollment.ott", createOnly: true, usage: "enroll with a one-time token and a certificate of the network"},
				{flag: "updb", kind: textValue, body: "enrollment.updb", createOnly: true, usage: "enroll with a one-time token that sets a password for this username"},
				{flag: "ottca", kind: refValue, ref: "cas", body: "enrollment.ottca", createOnly: true, usage: "enroll with a one-time token and a certificate of this CA (name or id)"},
				func() field {
					f := jwtFileField()
					f.needs, f.aliases = []string{"ott", "updb", "ottca"}, []string{"jwt-output"}
					f.implies = "ott" // as OpenZiti's CLI does
					return f
				}(),
			},
			exclusive:  [][]string{{"ott", "updb", "ottca"}},
			columns:    []column{{"ID", "id"}, {"NAME", "name"}, {"TYPE", "typeId"}, {"ADMIN", "isAdmin"}, {"ATTRIBUTES", "roleAttributes"}},
			enrollment: &enrollment{jwt: enrollmentJWT},
		},
		{
			name: "service", plural: "services", what: "service", short: "a service that identities dial and bind",
			fields: []field{
				roleAttributesField(),
				{flag: "configs", short: "c", kind: refsValue, ref: "configs", body: "configs", usage: "configs of the service, names or ids, comma-separated"},
				{flag: "encryption", short: "e", kind: onOffValue, body: "encryptionRequired", def: "on", createOnly: true,
					usage: "end-to-end encryption between the ends of each circuit: on or off"},
				{flag: "openziti-encryption", kind: onOffValue, body: "openZitiEncryption", def: "off",
					usage: "allow OpenZiti's end-to-end scheme, whose keys routers relay unsigned, for OpenZiti clients: on or off"},
				{flag: "terminator-strategy", kind: choiceValue, body: "terminatorStrategy", choices: []string{"smartrouting", "weighted", "random", "ha"},
					usage: "how a terminator is chosen: smartrouting, weighted, random or ha"},
				{flag: "max-idle-time", kind: durationValue, body: "maxIdleTimeMillis", usage: "end circuits idle this long, e.g. 30m (0: never)"},
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"ENCRYPTED", "encryptionRequired"}, {"STRATEGY", "terminatorStrategy"},
				{"ATTRIBUTES", "roleAttributes"}, {"CONFIGS", "configs"}},
		},
		{
			name: "config", plural: "configs", what: "config", short: "a configuration of a config type, attached to services",
			args: []argument{{"TYPE", "config-type"}, {"JSON", "data"}},
			fields: []field{
				{flag: "config-type", kind: refValue, ref: "config-types", body: "configTypeId", required: true, createOnly: true,
					usage: "config type, name or id (also the argument TYPE)"},
				{flag: "data", kind: jsonValue, body: "data", required: true, usage: "the configuration, a JSON object (also the argument JSON)"},
				{flag: "json-file", short: "f", kind: jsonFileValue, body: "data", usage: "read the configuration from this JSON file"},
			},
			exclusive: [][]string{{"data", "json-file"}},
			columns:   []column{{"ID", "id"}, {"NAME", "name"}, {"TYPE", "configType.name"}},
		},
		{
			name: "config-type", plural: "config-types", what: "config type", short: "a kind of service configuration and its JSON schema",
			fields: []field{
				{flag: "schema", kind: jsonValue, body: "schema", usage: "JSON schema the configs of this type follow"},
				{flag: "schema-file", short: "f", kind: jsonFileValue, body: "schema", usage: "read the JSON schema from this file"},
			},
			exclusive: [][]string{{"schema", "schema-file"}},
			columns:   []column{{"ID", "id"}, {"NAME", "name"}},
		},
		{
			name: "service-policy", plural: "service-policies", what: "service policy", aliases: []string{"sp"},
			short: "a policy that lets identities dial or bind services",
			args:  []argument{{"Dial|Bind", "type"}},
			fields: []field{
				{flag: "type", kind: choiceValue, body: "type", choices: []string{"Dial", "Bind"}, required: true,
					usage: "what the policy grants: Dial or Bind (also the argument Dial|Bind)"},
				rolesField("identity-roles", "i", "identityRoles", "identities", "identity"),
				rolesField("service-roles", "s", "serviceRoles", "services", "service"),
				rolesField("posture-check-roles", "p", "postureCheckRoles", "posture-checks", "posture check"),
				semanticField(),
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"TYPE", "type"}, {"SEMANTIC", "semantic"},
				{"IDENTITY ROLES", "identityRoles"}, {"SERVICE ROLES", "serviceRoles"}, {"POSTURE CHECK ROLES", "postureCheckRoles"}},
		},
		{
			name: "edge-router", plural: "edge-routers", what: "edge router", aliases: []string{"er"},
			short: "an edge router, the node clients connect to; create prints its enrollment token",
			fields: []field{
				roleAttributesField(),
				{flag: "tunneler-enabled", short: "t", kind: boolValue, body: "isTunnelerEnabled", usage: "let the router act as a tunneler"},
				{flag: "cost", kind: intValue, body: "cost", min: 0, max: 65535, usage: "cost of routing through the router, 0 to 65535"},
				{flag: "no-traversal", kind: boolValue, body: "noTraversal", usage: "carry no circuits that only pass through the router"},
				{flag: "disabled", kind: boolValue, body: "disabled", usage: "disable the router"},
				{flag: "app-data-json", kind: jsonValue, body: "appData", usage: "application data, a JSON object"},
				jwtFileField(),
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"ONLINE", "isOnline"}, {"TUNNELER", "isTunnelerEnabled"},
				{"COST", "cost"}, {"ATTRIBUTES", "roleAttributes"}},
			enrollment: &enrollment{toStdout: true, jwt: func(d map[string]any) string { s, _ := d["enrollmentJwt"].(string); return s }},
		},
		{
			name: "edge-router-policy", plural: "edge-router-policies", what: "edge router policy", aliases: []string{"erp"},
			short: "a policy that lets identities connect to edge routers",
			fields: []field{
				rolesField("identity-roles", "i", "identityRoles", "identities", "identity"),
				rolesField("edge-router-roles", "e", "edgeRouterRoles", "edge-routers", "edge router"),
				semanticField(),
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"SEMANTIC", "semantic"},
				{"IDENTITY ROLES", "identityRoles"}, {"EDGE ROUTER ROLES", "edgeRouterRoles"}},
		},
		{
			name: "service-edge-router-policy", plural: "service-edge-router-policies", what: "service edge router policy", aliases: []string{"serp"},
			short: "a policy that lets edge routers carry services",
			fields: []field{
				rolesField("service-roles", "s", "serviceRoles", "services", "service"),
				rolesField("edge-router-roles", "e", "edgeRouterRoles", "edge-routers", "edge router"),
				semanticField(),
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"SEMANTIC", "semantic"},
				{"SERVICE ROLES", "serviceRoles"}, {"EDGE ROUTER ROLES", "edgeRouterRoles"}},
		},
		{
			name: "ext-jwt-signer", plural: "external-jwt-signers", what: "external JWT signer", aliases: []string{"ejs"},
			short: "an external identity provider whose JWTs authenticate (and may enroll) identities",
			fields: []field{
				{flag: "issuer", kind: textValue, body: "issuer", required: true, usage: "the iss claim of its tokens"},
				{flag: "audience", kind: textValue, body: "audience", required: true, usage: "the aud claim its tokens must hold"},
				{flag: "jwks-endpoint", kind: textValue, body: "jwksEndpoint", required: true,
					usage: "https:// URL of its key set (keys may rotate; http:// only on 127.0.0.1 or [::1]); or --cert-file with --kid"},
				{flag: "cert-file", kind: textFileValue, body: "certPem", needs: []string{"kid"},
					usage: "PEM file of its static signing certificate, instead of --jwks-endpoint"},
				{flag: "kid", kind: textValue, body: "kid", usage: "the kid header of tokens signed with --cert-file's key"},
				{flag: "enabled", kind: onOffValue, body: "enabled", def: "on", usage: "whether its tokens are accepted: on or off"},
				{flag: "claims-property", kind: textValue, body: "claimsProperty", usage: "the claim naming the identity (default sub)"},
				{flag: "use-external-id", kind: boolValue, body: "useExternalId", usage: "match the claim to identities' externalId instead of their id"},
				{flag: "enroll-to-cert", kind: boolValue, body: "enrollToCertEnabled", usage: "let a token enroll a new identity with a certificate (POST /enroll/token with a CSR)"},
				{flag: "enroll-to-token", kind: boolValue, body: "enrollToTokenEnabled", usage: "let a token enroll a new identity that authenticates with tokens"},
				{flag: "enroll-auth-policy", kind: refValue, ref: "auth-policies", body: "enrollAuthPolicyId", usage: "authentication policy of enrolled identities, name or id (default: the default policy)"},
				{flag: "enroll-name-selector", kind: textValue, body: "enrollNameClaimsSelector", usage: "claim (name or JSON pointer) naming enrolled identities (default /sub)"},
				{flag: "enroll-attribute-selector", kind: textValue, body: "enrollAttributeClaimsSelector", usage: "claim (name or JSON pointer, a string or strings) giving enrolled identities' role attributes"},
				{flag: "external-auth-url", kind: textValue, body: "externalAuthUrl", usage: "URL where clients start authentication with the provider"},
				{flag: "openid-configuration-url", kind: textValue, body: "openIdConfigurationUrl", usage: "URL of the provider's OIDC discovery document"},
				{flag: "client-id", kind: textValue, body: "clientId", usage: "OAuth2/OIDC client id clients use"},
				{flag: "scopes", kind: listValue, body: "scopes", usage: "OAuth2 scopes clients ask for, comma-separated"},
				{flag: "target-token", kind: choiceValue, body: "targetToken", choices: []string{"ACCESS", "ID"}, usage: "which token of an OIDC flow clients send: ACCESS or ID"},
			},
			exclusive: [][]string{{"jwks-endpoint", "cert-file"}},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"ENABLED", "enabled"}, {"ISSUER", "issuer"}, {"AUDIENCE", "audience"},
				{"KEYS", "jwksEndpoint"}, {"KID", "kid"}},
		},
		{
			name: "auth-policy", plural: "auth-policies", what: "authentication policy", aliases: []string{"ap"},
			short: "an authentication policy: the mechanisms its identities may authenticate with",
			fields: []field{
				{flag: "cert", kind: onOffValue, body: "primary.cert.allowed", def: "on", usage: "client certificates: on or off"},
				{flag: "allow-expired-certs", kind: boolValue, body: "primary.cert.allowExpiredCerts", def: "false", usage: "accept expired client certificates"},
				{flag: "updb", kind: onOffValue, body: "primary.updb.allowed", def: "on", usage: "usernames and passwords: on or off"},
				{flag: "min-password-length", kind: intValue, body: "primary.updb.minPasswordLength", min: 5, max: 100, def: "5", usage: "shortest password allowed"},
				{flag: "require-special-char", kind: boolValue, body: "primary.updb.requireSpecialChar", def: "false", usage: "passwords need a character that is not a letter or digit"},
				{flag: "require-number-char", kind: boolValue, body: "primary.updb.requireNumberChar", def: "false", usage: "passwords need a digit"},
				{flag: "require-mixed-case", kind: boolValue, body: "primary.updb.requireMixedCase", def: "false", usage: "passwords need upper and lower case letters"},
				{flag: "max-attempts", kind: intValue, body: "primary.updb.maxAttempts", min: 0, max: 1000, def: "0", usage: "failed password logins that lock the account (0: no lockout)", needs: []string{"lockout-minutes"}},
				{flag: "lockout-minutes", kind: intValue, body: "primary.updb.lockoutDurationMinutes", min: 0, max: 525600, def: "0", usage: "how long --max-attempts failures lock the account"},
				{flag: "ext-jwt", kind: onOffValue, body: "primary.extJwt.allowed", def: "on", usage: "JWTs of external signers: on or off"},
				{flag: "allowed-signers", kind: refsValue, ref: "external-jwt-signers", body: "primary.extJwt.allowedSigners", def: "all",
					usage: "external JWT signers allowed, names or ids, comma-separated (none given: all)"},
				{flag: "require-totp", kind: boolValue, body: "secondary.requireTotp", def: "false", usage: "require a TOTP code (MFA) after primary authentication"},
				{flag: "require-ext-jwt-signer", kind: refValue, ref: "external-jwt-signers", body: "secondary.requireExtJwtSigner",
					usage: "require a JWT of this signer (name or id) on every API call"},
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"CERT", "primary.cert.allowed"}, {"UPDB", "primary.updb.allowed"},
				{"EXT-JWT", "primary.extJwt.allowed"}, {"TOTP", "secondary.requireTotp"}, {"JWT ON EVERY CALL", "secondary.requireExtJwtSigner"}},
		},
		{
			name: "posture-check", plural: "posture-checks", what: "posture check", aliases: []string{"pc"},
			short:         "a condition on a client's device that service policies can require",
			fields:        []field{roleAttributesField()},
			columns:       []column{{"ID", "id"}, {"NAME", "name"}, {"TYPE", "typeId"}, {"ATTRIBUTES", "roleAttributes"}},
			discriminator: "typeId",
			variants: []variant{
				{name: "domain", value: "DOMAIN", short: "the device is in one of these Windows domains", fields: []field{
					{flag: "domains", short: "d", kind: listValue, body: "domains", required: true, usage: "allowed domains, comma-separated"},
				}},
				{name: "mac", value: "MAC", short: "the device has one of these MAC addresses", fields: []field{
					{flag: "mac-addresses", short: "m", kind: listValue, body: "macAddresses", required: true, usage: "allowed MAC addresses, comma-separated"},
				}},
				{name: "mfa", value: "MFA", short: "the identity passed multi-factor authentication", fields: []field{
					{flag: "seconds", short: "s", kind: intValue, body: "timeoutSeconds", min: -1, max: 1 << 31, def: "-1",
						usage: "seconds an MFA code holds before another is needed (-1: no limit)"},
					{flag: "wake", short: "w", kind: boolValue, body: "promptOnWake", usage: "ask for a code when the device wakes"},
					{flag: "unlock", short: "u", kind: boolValue, body: "promptOnUnlock", usage: "ask for a code when the device is unlocked"},
					{flag: "ignore-legacy", kind: boolValue, body: "ignoreLegacyEndpoints", usage: "do not apply timeout and prompts to clients that do not support them"},
				}},
				{name: "os", value: "OS", short: "the device runs one of these operating systems", fields: []field{
					{flag: "os", kind: osValue, body: "operatingSystems", required: true,
						usage: "allowed systems as TYPE[:VERSION...], comma-separated or repeated; TYPE: " + strings.Join(osTypes, ", ")},
				}},
				{name: "process", value: "PROCESS", short: "a process runs on the device",
					args: []argument{{"OS", "os-type"}, {"PATH", "path"}},
					fields: []field{
						{flag: "os-type", kind: choiceValue, body: "process.osType", choices: []string{"Windows", "WindowsServer", "Linux", "macOS"}, required: true,
							usage: "operating system of the process: Windows, WindowsServer, Linux or macOS (also the argument OS)"},
						{flag: "path", kind: textValue, body: "process.path", required: true, usage: "absolute path of the executable (also the argument PATH)"},
						{flag: "hash-sigs", kind: listValue, body: "process.hashes", usage: "SHA-512 hashes of allowed executables, comma-separated"},
						{flag: "signer-fingerprint", kind: textValue, body: "process.signerFingerprint", usage: "SHA-1 fingerprint of the certificate that signs the executable"},
					}},
			},
		},
		{
			name: "terminator", plural: "terminators", what: "terminator", unnamed: true,
			short: "a terminator: where a router ends the circuits of a service",
			args:  []argument{{"SERVICE", "service"}, {"ROUTER", "router"}, {"ADDRESS", "address"}},
			fields: []field{
				{flag: "service", kind: refValue, ref: "services", body: "service", required: true, createOnly: true,
					usage: "the service, name or id (also the argument SERVICE)"},
				{flag: "router", kind: refValue, ref: "edge-routers", body: "router", required: true,
					usage: "the router that ends the circuits, name or id (also the argument ROUTER)"},
				{flag: "address", kind: textValue, body: "address", required: true,
					usage: "the address the router's dialer connects to, e.g. tcp:127.0.0.1:5432 (also the argument ADDRESS)"},
				{flag: "binding", kind: textValue, body: "binding", def: "transport", usage: "the router's dialer: transport, transport_udp, edge, tunnel..."},
				{flag: "cost", short: "c", kind: intValue, body: "cost", min: 0, max: 65535, usage: "cost of the terminator, 0 to 65535"},
				{flag: "precedence", short: "p", kind: choiceValue, body: "precedence", choices: []string{"default", "required", "failed"},
					usage: "precedence among the service's terminators: default, required or failed"},
				{flag: "identity", kind: textValue, body: "identity", usage: "the identity the terminator answers for, for addressable terminators"},
			},
			columns: []column{{"ID", "id"}, {"SERVICE", "service.name"}, {"ROUTER", "router.name"}, {"BINDING", "binding"},
				{"ADDRESS", "address"}, {"IDENTITY", "identity"}, {"COST", "cost"}, {"PRECEDENCE", "precedence"}},
		},
		{
			name: "ca", plural: "cas", what: "CA",
			short: "a third-party certificate authority whose certificates enroll and authenticate identities",
			args:  []argument{{"PEM_FILE", "cert-file"}},
			fields: []field{
				{flag: "cert-file", kind: textFileValue, body: "certPem", required: true, createOnly: true,
					usage: "PEM file of the CA's certificate (also the argument PEM_FILE)"},
				{flag: "auth", short: "e", kind: boolValue, body: "isAuthEnabled", def: "false", usage: "its certificates authenticate identities"},
				{flag: "ottca", kind: boolValue, body: "isOttCaEnrollmentEnabled", def: "false",
					usage: "identities may enroll with a one-time token and a certificate of the CA"},
				{flag: "autoca", short: "u", kind: boolValue, body: "isAutoCaEnrollmentEnabled", def: "false",
					usage: "a certificate of the CA enrolls a new identity on its own (once the CA is verified)"},
				{flag: "role-attributes", short: "a", kind: listValue, body: "identityRoles", def: "none",
					usage: "role attributes of the identities the CA enrolls, comma-separated"},
				{flag: "identity-name-format", short: "f", kind: textValue, body: "identityNameFormat",
					usage: "name of the identities the CA enrolls, e.g. [caName]-[commonName]"},
				{flag: "location", short: "l", kind: choiceValue, body: "externalIdClaim.location", choices: []string{"COMMON_NAME", "SAN_URI", "SAN_EMAIL"},
					usage: "where certificates name their identity's external id: COMMON_NAME, SAN_URI or SAN_EMAIL"},
				{flag: "matcher", short: "m", kind: choiceValue, body: "externalIdClaim.matcher", choices: []string{"ALL", "PREFIX", "SUFFIX", "SCHEME"},
					usage: "which values of --location count: ALL, PREFIX, SUFFIX or SCHEME"},
				{flag: "matcher-criteria", short: "x", kind: textValue, body: "externalIdClaim.matcherCriteria", usage: "the prefix, suffix or scheme --matcher looks for"},
				{flag: "parser", short: "p", kind: choiceValue, body: "externalIdClaim.parser", choices: []string{"NONE", "SPLIT"},
					usage: "how a value becomes claims: NONE or SPLIT"},
				{flag: "parser-criteria", short: "z", kind: textValue, body: "externalIdClaim.parserCriteria", usage: "the separator SPLIT splits at"},
				{flag: "index", short: "d", kind: intValue, body: "externalIdClaim.index", min: 0, max: 1 << 20, usage: "which of the claims is the external id"},
			},
			columns: []column{{"ID", "id"}, {"NAME", "name"}, {"VERIFIED", "isVerified"}, {"AUTH", "isAuthEnabled"},
				{"OTTCA", "isOttCaEnrollmentEnabled"}, {"AUTOCA", "isAutoCaEnrollmentEnabled"}, {"ATTRIBUTES", "identityRoles"}},
		},
		{
			name: "enrollment", plural: "enrollments", what: "enrollment", unnamed: true, verbs: []string{"list", "get", "delete"},
			short: "a pending enrollment of an identity or edge router",
			columns: []column{{"ID", "id"}, {"METHOD", "method"}, {"IDENTITY", "identity.name"}, {"EDGE ROUTER ID", "edgeRouterId"},
				{"USERNAME", "username"}, {"EXPIRES", "expiresAt"}},
		},
		{
			name: "authenticator", plural: "authenticators", what: "authenticator", unnamed: true, verbs: []string{"list", "get", "update", "delete"},
			short: "a way an identity authenticates: a certificate or a username and password",
			fields: []field{
				{flag: "username", kind: textValue, body: "username", usage: "new username (updb authenticators)"},
				{flag: "password", kind: textValue, body: "password", usage: "new password (updb authenticators)"},
			},
			columns: []column{{"ID", "id"}, {"METHOD", "method"}, {"IDENTITY", "identity.name"}, {"USERNAME", "username"},
				{"ISSUED BY NETWORK", "isIssuedByNetwork"}},
		},
		{
			name: "api-session", plural: "api-sessions", what: "API session", unnamed: true, verbs: []string{"list", "get", "delete"},
			short:   "an API session: a login of an identity",
			columns: []column{{"ID", "id"}, {"IDENTITY", "identity.name"}, {"IP", "ipAddress"}, {"CREATED", "createdAt"}, {"LAST ACTIVITY", "lastActivityAt"}},
		},
		{
			name: "session", plural: "sessions", what: "session", unnamed: true, verbs: []string{"list", "get", "delete"},
			short: "a session: an API session's permission to dial or bind a service",
			columns: []column{{"ID", "id"}, {"TYPE", "type"}, {"SERVICE", "service.name"}, {"IDENTITY ID", "identityId"},
				{"API SESSION ID", "apiSessionId"}, {"CREATED", "createdAt"}},
		},
	}
}
