package ctrlproto

import (
	"encoding/json"
	"slices"
	"time"
)

// The protocol between a router and the controller. Requests are sent with Request and
// answered with the matching reply type; the other messages are sent with Send.

// Error codes carried by replies' Outcome.
const (
	ErrCodeInvalidSession  = "INVALID_SESSION"   // the session token is unknown or expired
	ErrCodeServiceNotFound = "SERVICE_NOT_FOUND" // no such service, or not the session's
	ErrCodeNoTerminator    = "NO_TERMINATOR"     // the service has no usable terminator
	ErrCodeNoPath          = "NO_PATH"           // no path of links reaches the terminator's router
	ErrCodeRouteFailed     = "ROUTE_FAILED"      // a router on the path refused or did not answer its Route
	ErrCodeDialFailed      = "DIAL_FAILED"       // the egress could not reach the terminator's address
	ErrCodeBusy            = "BUSY"              // a queue was full; the request may be retried
	ErrCodeTimeout         = "TIMEOUT"           // the work did not finish in time
	ErrCodeInvalid         = "INVALID"           // the request's fields are not acceptable
	// ErrCodeEncryptionRequired: the service requires end-to-end encryption and the
	// request's offer named no scheme.
	ErrCodeEncryptionRequired = "ENCRYPTION_REQUIRED"
	// ErrCodeInvalidE2EEOffer: the request's e2ee offer is malformed (a zitiKey that is
	// not 32 bytes).
	ErrCodeInvalidE2EEOffer = "INVALID_E2EE_OFFER"
	// ErrCodeOpenZitiEncryptionNotAllowed: the request offered only OpenZiti's end-to-end
	// scheme for a service whose openZitiEncryption is false.
	ErrCodeOpenZitiEncryptionNotAllowed = "OPENZITI_ENCRYPTION_NOT_ALLOWED"
)

// Outcome is the success-or-failure part of a reply: an empty ErrorCode is success.
type Outcome struct {
	ErrorCode    string `json:"errorCode,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
}

// Err returns the failure as an *Error, or nil on success.
func (o Outcome) Err() error {
	if o.ErrorCode == "" {
		return nil
	}
	return &Error{Code: o.ErrorCode, Message: o.ErrorMessage}
}

// Failed returns the Outcome of a failure.
func Failed(code, message string) Outcome { return Outcome{ErrorCode: code, ErrorMessage: message} }

// --- Session ---

// Hello is the router's first request after connecting (router → controller); the answer
// is a HelloReply. RouterID must be the id in the router's client certificate.
type Hello struct {
	RouterID string `json:"routerId"`
	Version  string `json:"version"`  // the router binary's version
	Protocol int    `json:"protocol"` // ProtocolVersion of the router's build
	// Hostname is where SDK clients reach the router: its SDK listener's advertised
	// host, or the machine's name.
	Hostname      string         `json:"hostname,omitempty"`
	LinkListeners []LinkListener `json:"linkListeners,omitempty"`
	Listeners     []Listener     `json:"listeners,omitempty"`
	// Circuits are the ids of the circuits routed on the router, so that a controller that
	// restarted learns the circuits that outlived it.
	Circuits []uint64 `json:"circuits,omitempty"`
	// Terminators are the ids of the terminators the router hosts now for SDK clients and its
	// tunnel (bindings edge and tunnel); the controller removes the router's other
	// terminators of those bindings, left from before a restart of the router.
	Terminators []string `json:"terminators,omitempty"`
}

func (*Hello) MessageType() Type { return TypeHello }

// LinkListener is one of the router's link listeners, as other routers dial it.
type LinkListener struct {
	Address   string   `json:"address"`   // advertised <transport>:<host>:<port>
	Transport string   `json:"transport"` // tls or quic
	Groups    []string `json:"groups"`
}

// Listener is one of the router's on-ramps.
type Listener struct {
	Binding string `json:"binding"`           // edge, tunnel or transport
	Address string `json:"address,omitempty"` // advertised <transport>:<host>:<port>, if any
}

// HelloReply answers Hello (controller → router). When Accepted is false, Reason says
// why and the controller closes the channel.
type HelloReply struct {
	Accepted     bool   `json:"accepted"`
	Reason       string `json:"reason,omitempty"`
	ControllerID string `json:"controllerId"`
	// Endpoints are the control channel addresses of the cluster's controllers,
	// <transport>:<host>:<port>; the router saves them to its endpointsFile.
	Endpoints []string `json:"endpoints"`
	// ClientAPI is the <host>:<port> of the controller's client API, where the router
	// extends its certificates.
	ClientAPI string `json:"clientApi,omitempty"`
}

func (*HelloReply) MessageType() Type { return TypeHelloReply }

// EndpointsUpdate replaces the router's list of controller endpoints
// (controller → router).
type EndpointsUpdate struct {
	Endpoints []string `json:"endpoints"`
}

func (*EndpointsUpdate) MessageType() Type { return TypeEndpointsUpdate }

// --- Circuits ---

// CircuitRequest asks for a circuit to a service (ingress router → controller); the
// answer is a CircuitReply.
type CircuitRequest struct {
	// RequestID is the ingress's id of the pending connection, echoed in the reply.
	RequestID string `json:"requestId"`
	// SessionToken is the dial session of the SDK client. Empty for tunnel-initiated
	// circuits, which name IngressIdentityID instead.
	SessionToken string `json:"sessionToken,omitempty"`
	// ServiceID or ServiceName names the service; ServiceID wins when both are set.
	ServiceID   string `json:"serviceId,omitempty"`
	ServiceName string `json:"serviceName,omitempty"`
	// IngressIdentityID is the identity a router's own tunnel dials as.
	IngressIdentityID string `json:"ingressIdentityId,omitempty"`
	// ClientCert is the certificate (DER) a client presented at a transport listener: the
	// circuit dials as the identity it authenticates.
	ClientCert []byte `json:"clientCert,omitempty"`
	// TerminatorIdentity selects the terminator hosted by that identity, if set.
	TerminatorIdentity string `json:"terminatorIdentity,omitempty"`
	// AppData is passed to the hosting end as is (at most MaxAppData bytes): what a tunnel
	// intercepted, so that a host config can forward to the same destination.
	AppData json.RawMessage `json:"appData,omitempty"`
	// E2EE is what the initiating end offers for end-to-end encryption; nil offers none,
	// which a service that requires encryption refuses.
	E2EE *E2EEOffer `json:"e2ee,omitempty"`
}

// E2EEOffer is what a circuit's initiating end offers for end-to-end encryption; the
// hosting end chooses.
type E2EEOffer struct {
	// Zmesh offers zmesh's signed key exchange: in-band once the circuit is up, unless
	// ZmeshHello carries its first message.
	Zmesh bool `json:"zmesh,omitempty"`
	// ZitiKey offers OpenZiti's scheme: the initiator's crypto_kx (X25519) public key.
	ZitiKey []byte `json:"zitiKey,omitempty"`
	// ZmeshHello, with Zmesh, is the initiator's ClientHello of zmesh's key exchange, so that
	// the hosting end answers it with HostHello in the route's reply instead of in-band.
	ZmeshHello []byte `json:"zmeshHello,omitempty"`
}

// MaxZmeshHello bounds E2EEOffer.ZmeshHello, MaxHostHello a HostHello (a ServerHello carries
// the host's certificate chain: a 4-byte header and at most 32 KiB).
const (
	MaxZmeshHello = 256
	MaxHostHello  = 4 + 32<<10
)

// ZitiKeySize is the length of an E2EEOffer.ZitiKey and of a HostZitiKey.
const ZitiKeySize = 32

// MaxAppData bounds CircuitRequest.AppData.
const MaxAppData = 4 << 10

func (*CircuitRequest) MessageType() Type { return TypeCircuitRequest }

// CircuitReply answers CircuitRequest (controller → ingress router). On success every
// router on Path has its route installed.
type CircuitReply struct {
	RequestID string `json:"requestId"`
	CircuitID uint64 `json:"circuitId,omitempty"`
	// Path lists the router ids from the ingress (first) to the egress (last).
	Path       []string      `json:"path,omitempty"`
	Terminator TerminatorRef `json:"terminator"`
	// ServiceID is the service's id; EncryptionRequired tells the ingress to run the
	// end-to-end key exchange with Terminator.HostID before carrying the client's bytes.
	ServiceID          string `json:"serviceId,omitempty"`
	EncryptionRequired bool   `json:"encryptionRequired,omitempty"`
	// ServiceName and InitiatorID (the identity that dialed) name the circuit in the
	// ingress's circuit events and per-service metrics.
	ServiceName string `json:"serviceName,omitempty"`
	InitiatorID string `json:"initiatorId,omitempty"`
	HostAnswer         // copied from the egress's RouteReply
	Outcome
}

func (*CircuitReply) MessageType() Type { return TypeCircuitReply }

// TerminatorRef is where a circuit leaves the overlay.
type TerminatorRef struct {
	ID       string `json:"id,omitempty"`
	RouterID string `json:"routerId,omitempty"`
	Binding  string `json:"binding,omitempty"`
	Address  string `json:"address,omitempty"`
	// HostID is the identity hosting the terminator, when a router created it for itself
	// or for an SDK: the identity the initiator's end-to-end encryption must find there.
	HostID string `json:"hostId,omitempty"`
}

// Route installs a circuit's forwarding entry on one router (controller → router); the
// answer is a RouteReply. Forward points toward the terminator, Reverse toward the
// initiator. The egress router gets Forward.Xgress with the address to dial; the ingress
// gets Reverse.Xgress, its waiting connection.
type Route struct {
	CircuitID uint64 `json:"circuitId"`
	Forward   Hop    `json:"forward"`
	Reverse   Hop    `json:"reverse"`
	// Timeout bounds the router's work, a dial at the egress included (nanoseconds).
	Timeout time.Duration `json:"timeout"`
}

func (*Route) MessageType() Type { return TypeRoute }

// Hop is where a router sends one direction of a circuit: over its link to a peer router,
// or to a local xgress when the circuit ends there. Exactly one is set.
type Hop struct {
	Router string  `json:"router,omitempty"` // the peer router's id
	Xgress *Xgress `json:"xgress,omitempty"`
}

// Xgress is a circuit's end on this router.
type Xgress struct {
	Binding string `json:"binding"`           // the dialer (egress) or listener (ingress) binding
	Address string `json:"address,omitempty"` // the egress's address to dial
	// InitiatorID is the identity that dialed the circuit (egress only), which a hosting
	// end checks in the end-to-end key exchange.
	InitiatorID string `json:"initiatorId,omitempty"`
	// AppData is the initiator's CircuitRequest.AppData (egress only).
	AppData json.RawMessage `json:"appData,omitempty"`
	// E2EE is the initiator's CircuitRequest.E2EE (egress only).
	E2EE *E2EEOffer `json:"e2ee,omitempty"`
	// ServiceID and ServiceName name the circuit's service (egress only), for the egress's
	// circuit events and per-service metrics.
	ServiceID   string `json:"serviceId,omitempty"`
	ServiceName string `json:"serviceName,omitempty"`
}

// RouteReply answers Route (router → controller).
type RouteReply struct {
	CircuitID  uint64 `json:"circuitId"`
	HostAnswer        // egress only
	Outcome
}

// HostAnswer is the hosting end's answer to the initiator's end-to-end offer, which the
// egress returns in its RouteReply and the controller passes on in the CircuitReply: at most
// one of the two is set, and neither when the hosting end runs zmesh's key exchange in-band
// or the circuit is not encrypted end to end.
type HostAnswer struct {
	// HostZitiKey is the hosting end's crypto_kx public key when it took OpenZiti's scheme.
	HostZitiKey []byte `json:"hostZitiKey,omitempty"`
	// HostHello is the hosting end's ServerHello answering the offer's ZmeshHello, when it
	// took zmesh's scheme.
	HostHello []byte `json:"hostHello,omitempty"`
}

func (*RouteReply) MessageType() Type { return TypeRouteReply }

// Unroute removes a circuit from a router (controller → router); the router closes the
// circuit's local xgress, if any.
type Unroute struct {
	CircuitID uint64 `json:"circuitId"`
	Reason    string `json:"reason"`
}

func (*Unroute) MessageType() Type { return TypeUnroute }

// Fault reports a circuit the router can no longer forward (router → controller), e.g.
// because its next hop's link is gone; the controller unroutes it everywhere.
type Fault struct {
	CircuitID uint64 `json:"circuitId"`
	Reason    string `json:"reason"`
	// Unrouted: the router has already removed the circuit's route and closed its end there,
	// so the controller unroutes it on the other routers only. A controller that does not
	// know the field sends the router an Unroute that changes nothing.
	Unrouted bool `json:"unrouted,omitempty"`
	// Clean: the circuit ended cleanly at its initiator on this router (both directions
	// closed, every byte acknowledged), so its terminator ends cleanly too and its router
	// removes the circuit without a Fault. On a two-router path the controller then unroutes
	// nothing more; with routers between, it unroutes them and the terminator's router.
	Clean bool `json:"clean,omitempty"`
}

func (*Fault) MessageType() Type { return TypeFault }

// IdleCircuitsCheck asks which of the router's idle circuits the controller still knows
// (router → controller); the answer is an IdleCircuitsReply. The router unroutes the rest.
type IdleCircuitsCheck struct {
	CircuitIDs []uint64 `json:"circuitIds"`
}

func (*IdleCircuitsCheck) MessageType() Type { return TypeIdleCircuitsCheck }

// IdleCircuitsReply answers IdleCircuitsCheck (controller → router) with the ids that
// are still valid.
type IdleCircuitsReply struct {
	Valid []uint64 `json:"valid"`
}

func (*IdleCircuitsReply) MessageType() Type { return TypeIdleCircuitsReply }

// --- Links ---

// LinkDial tells a router to dial a peer router's link listener (controller → router).
type LinkDial struct {
	PeerRouterID string   `json:"peerRouterId"`
	Address      string   `json:"address"` // <transport>:<host>:<port>
	Groups       []string `json:"groups"`  // the listener's groups
}

func (*LinkDial) MessageType() Type { return TypeLinkDial }

// LinkState reports a link coming up, its latency, or its going down
// (router → controller). The latency is the link's cost in path selection.
type LinkState struct {
	LinkID       string        `json:"linkId"`
	PeerRouterID string        `json:"peerRouterId"`
	Up           bool          `json:"up"`
	Latency      time.Duration `json:"latency,omitempty"` // nanoseconds; 0 when not measured yet
}

func (*LinkState) MessageType() Type { return TypeLinkState }

// PeerState tells a router that another router connected to or left the controller
// (controller → router): its link dialer retries a peer that is online with the healthy
// backoff, at once when the peer comes back, and one that is not with the unhealthy backoff.
type PeerState struct {
	RouterID string `json:"routerId"`
	Online   bool   `json:"online"`
	// Fingerprints are the SHA-1 fingerprints of the router's current client and server
	// certificates (sent when it comes online): links are accepted only with these.
	Fingerprints []string `json:"fingerprints,omitempty"`
	// Revoked: the router's certificates are no longer its own (it was deleted or
	// re-enrolled); links with them are refused.
	Revoked bool `json:"revoked,omitempty"`
}

func (*PeerState) MessageType() Type { return TypePeerState }

// --- Terminators ---

// TerminatorCreate creates a terminator on the sending router (router → controller);
// the answer is a TerminatorCreateReply. The terminator is hosted by the router's own
// identity, which a Bind policy must grant the service, or, with SessionToken, by the
// identity whose Bind session of the service that is (an SDK hosting through this router).
// Creating a terminator the router already has (same service, binding, address, identity
// and host) updates its cost and precedence and answers its id.
type TerminatorCreate struct {
	Service      string `json:"service"` // id or name
	Binding      string `json:"binding"`
	Address      string `json:"address"`
	Identity     string `json:"identity,omitempty"`
	Cost         int    `json:"cost,omitempty"`
	Precedence   string `json:"precedence,omitempty"` // default, required or failed
	SessionToken string `json:"sessionToken,omitempty"`
}

func (*TerminatorCreate) MessageType() Type { return TypeTerminatorCreate }

// TerminatorCreateReply answers TerminatorCreate (controller → router).
type TerminatorCreateReply struct {
	TerminatorID string `json:"terminatorId,omitempty"`
	Outcome
}

func (*TerminatorCreateReply) MessageType() Type { return TypeTerminatorCreateReply }

// TerminatorRemove removes one of the sending router's terminators (router → controller):
// the one with TerminatorID when set, otherwise the one with Service, Binding and Address.
// The answer is a TerminatorRemoveReply.
type TerminatorRemove struct {
	TerminatorID string `json:"terminatorId,omitempty"`
	Service      string `json:"service,omitempty"`
	Binding      string `json:"binding,omitempty"`
	Address      string `json:"address,omitempty"`
}

func (*TerminatorRemove) MessageType() Type { return TypeTerminatorRemove }

// TerminatorRemoveReply answers TerminatorRemove (controller → router).
type TerminatorRemoveReply struct {
	Outcome
}

func (*TerminatorRemoveReply) MessageType() Type { return TypeTerminatorRemoveReply }

// TerminatorUpdate changes the cost and precedence of one of the sending router's
// terminators (router → controller), as a hosting client asks; a field left unset keeps its
// value. The answer is a TerminatorUpdateReply.
type TerminatorUpdate struct {
	TerminatorID string `json:"terminatorId"`
	Cost         *int   `json:"cost,omitempty"`
	Precedence   string `json:"precedence,omitempty"` // default, required or failed
}

func (*TerminatorUpdate) MessageType() Type { return TypeTerminatorUpdate }

// TerminatorUpdateReply answers TerminatorUpdate (controller → router).
type TerminatorUpdateReply struct {
	Outcome
}

func (*TerminatorUpdateReply) MessageType() Type { return TypeTerminatorUpdateReply }

// --- Session state ---

// SessionState carries the controller's API sessions and sessions to a router
// (controller → router), which authorizes SDK clients with them even while the controller is
// away. After each Hello the controller sends the full state: the first message has Reset
// set (the router drops what it had and is not in the state), the last has Complete set, and
// large states span several messages. Then updates follow as they happen: entries to add or
// replace, and ids removed. Applying an update twice changes nothing.
type SessionState struct {
	Reset       bool         `json:"reset,omitempty"`
	Complete    bool         `json:"complete,omitempty"`
	APISessions []APISession `json:"apiSessions,omitempty"`
	Sessions    []Session    `json:"sessions,omitempty"`
	// RemovedAPISessions and RemovedSessions are ids.
	RemovedAPISessions []string `json:"removedApiSessions,omitempty"`
	RemovedSessions    []string `json:"removedSessions,omitempty"`
}

func (*SessionState) MessageType() Type { return TypeSessionState }

// APISession is an API session as routers know it.
type APISession struct {
	ID         string `json:"id"`
	Token      string `json:"token"`
	IdentityID string `json:"identityId"`
	// CertFingerprints are the certificates a client of the API session may present at an
	// edge listener (the identity's current ones, the session's ephemeral ones). Controllers
	// always send the list, empty if need be; nil (an entry saved by an older router) admits
	// any certificate of the identity until the controller's state replaces it.
	CertFingerprints []string `json:"certFingerprints"`
}

// AdmitsCert tells whether a client presenting the certificate with this fingerprint may use
// the API session.
func (a *APISession) AdmitsCert(fingerprint string) bool {
	return a.CertFingerprints == nil || slices.Contains(a.CertFingerprints, fingerprint)
}

// Session is a session (Dial or Bind of a service) as routers know it.
type Session struct {
	ID           string `json:"id"`
	Token        string `json:"token"`
	APISessionID string `json:"apiSessionId"`
	IdentityID   string `json:"identityId"`
	ServiceID    string `json:"serviceId"`
	Type         string `json:"type"` // Dial or Bind
}

// TunnelServices asks for the services the router's own identity may dial or bind, with
// their configs, for its tunnel (router → controller); the answer is a TunnelServicesReply.
// With Since set to the LastChange of an earlier reply, an unchanged list is answered with
// NotModified and no services.
type TunnelServices struct {
	Since int64 `json:"since,omitempty"`
}

func (*TunnelServices) MessageType() Type { return TypeTunnelServices }

// TunnelServicesReply answers TunnelServices (controller → router).
type TunnelServicesReply struct {
	// LastChange moves whenever services, configs or policies change (unix nanoseconds).
	LastChange  int64           `json:"lastChange"`
	NotModified bool            `json:"notModified,omitempty"`
	Services    []TunnelService `json:"services,omitempty"`
	Outcome
}

func (*TunnelServicesReply) MessageType() Type { return TypeTunnelServicesReply }

// TunnelService is a service a router's tunnel may use.
type TunnelService struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	EncryptionRequired bool   `json:"encryptionRequired"`
	// OpenZitiEncryption: the service allows OpenZiti's end-to-end scheme (see
	// E2EEOffer); without it the tunnel neither offers nor accepts a ZitiKey.
	OpenZitiEncryption bool     `json:"openZitiEncryption,omitempty"`
	Permissions        []string `json:"permissions"` // Dial, Bind
	// Configs holds the service's configs by config type name (intercept.v1, host.v1, ...).
	Configs map[string]json.RawMessage `json:"configs,omitempty"`
}

// --- Metrics ---

// Metrics is one report of the router's metrics (router → controller).
type Metrics struct {
	Timestamp time.Time          `json:"timestamp"`
	Values    map[string]float64 `json:"values"`
}

func (*Metrics) MessageType() Type { return TypeMetrics }
