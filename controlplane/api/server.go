package api

import (
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Base paths of the two APIs.
const (
	ClientBase     = "/edge/client/v1"
	ManagementBase = "/edge/management/v1"
)

// SessionHeader carries the API session token.
const SessionHeader = "zt-session"

// Info describes the controller for the informational endpoints.
type Info struct {
	Version   string
	Revision  string
	BuildDate string
	// Advertise is the host:port clients use to reach the API.
	Advertise string
	// ServerCert is the API's server certificate.
	ServerCert *x509.Certificate
	// Started is when the controller started.
	Started time.Time
	// Routers tells which edge routers have their control channel connected; nil: none.
	Routers RouterStatus
	// Observer, when not nil, is told of every request and authentication (the
	// controller's metrics).
	Observer Observer
	// Backup, when not nil, writes a consistent backup of the store (store.Store.Backup).
	Backup func(io.Writer) error
	// Verify, when not nil, checks the checksums of the store's files (store.Store.Verify).
	Verify func() error
	// Snapshot, when not nil, writes a backup of the store into the data directory and
	// returns its path.
	Snapshot func() (string, error)
	// Fabric, when not nil, is the live mesh the fabric API shows; nil: no router, link or
	// circuit is known.
	Fabric Fabric
	// Controllers lists the controllers /controllers shows: the members of the
	// controller's cluster, or the controller alone; nil: none.
	Controllers func() ([]Controller, error)
}

// Controller is a controller of the cluster, as /controllers lists it.
type Controller struct {
	ID string
	// APIAddress is its api.advertise; CtrlAddress its routers' control channel endpoint.
	APIAddress, CtrlAddress string
	// Cert is its API server certificate.
	Cert     *x509.Certificate
	Online   bool
	Leader   bool
	JoinedAt time.Time
}

// RouterStatus reports an edge router's control channel: whether it is connected, and the
// hostname and edge protocols (e.g. "tls" → "tls://host:3022") it announced; and the latest
// metrics report it sent.
type RouterStatus interface {
	Online(id string) (online bool, hostname string, protocols map[string]string)
	LatestMetrics(id string) (*ctrlproto.Metrics, bool)
}

// Server is the HTTP handler of both APIs.
type Server struct {
	m      *model.Model
	log    *slog.Logger
	info   Info
	mux    *http.ServeMux
	routes []route
}

// New builds the API server over the model.
func New(m *model.Model, log *slog.Logger, info Info) *Server {
	s := &Server{m: m, log: log, info: info, mux: http.NewServeMux()}
	s.register()
	return s
}

// access says who may call an operation.
type access int

const (
	public    access = iota // no session needed
	session                 // a valid API session
	adminOnly               // a valid API session of an administrator
)

// which APIs serve a route.
type apiSet int

const (
	client apiSet = 1 << iota
	management
	// root: the server root, where the reference serves /, /version and the EST CAs.
	root
	fabric // the fabric management API
	both   = client | management
)

type route struct {
	apis    apiSet
	method  string
	path    string // below the API's base path, with {name} wildcards
	access  access
	summary string
	creates bool // answers 201 with the new entity's id
	// pending: an API session that must still pass MFA may call it (pendingMFARoutes).
	pending bool
	// authMethod, when set, names the authentication method a request of the route makes
	// (model.MethodPassword, ..., AuthMFA), or "" when it names none; its outcome is
	// reported to the Observer.
	authMethod func(*http.Request) string
	handler    func(*call) error
}

// call is one request being served.
type call struct {
	s         *Server
	w         http.ResponseWriter
	r         *http.Request
	requestID string
	base      string // the API's base path
	session   *model.APISession
	identity  *model.Identity
}

func (c *call) path(name string) string { return c.r.PathValue(name) }

// source is the client's IP address.
func (c *call) source() string {
	host, _, err := net.SplitHostPort(c.r.RemoteAddr)
	if err != nil {
		return c.r.RemoteAddr
	}
	return host
}

// peerChain is the client certificate chain the TLS handshake received, leaf first.
func (c *call) peerChain() []*x509.Certificate {
	if c.r.TLS == nil {
		return nil
	}
	return c.r.TLS.PeerCertificates
}

func (c *call) data(status int, v any) error {
	writeData(c.w, status, v)
	return nil
}

func (c *call) empty() error { return c.data(http.StatusOK, struct{}{}) }

func (c *call) created(entity, id string) error {
	return c.data(http.StatusCreated, map[string]any{"id": id, "_links": links(entity, id)})
}

// handle adds a route.
func (s *Server) handle(apis apiSet, method, path string, acc access, summary string, h func(*call) error) {
	s.routes = append(s.routes, route{apis: apis, method: method, path: path, access: acc, summary: summary, handler: h})
}

// handleCreate adds a route that creates an entity and answers 201.
func (s *Server) handleCreate(apis apiSet, path string, acc access, summary string, h func(*call) error) {
	s.routes = append(s.routes, route{apis: apis, method: "POST", path: path, access: acc, summary: summary, creates: true, handler: h})
}

// mount registers every route on the mux, plus JSON answers for unknown paths and methods.
func (s *Server) mount() {
	// The methods of each path, keyed by the path's shape (wildcards unnamed) so that two
	// operations naming a wildcard differently share one answer to other methods.
	type pathMethods struct {
		full    string
		allowed []string
	}
	var shapes []string
	methods := map[string]*pathMethods{}
	allow := func(method, full string) {
		shape := opKey("", full)
		pm, ok := methods[shape]
		if !ok {
			pm = &pathMethods{full: full}
			methods[shape] = pm
			shapes = append(shapes, shape)
		}
		pm.allowed = append(pm.allowed, method)
	}
	served := map[string]bool{} // opKey of every served operation, with its base
	for _, rt := range s.routes {
		for _, base := range bases(rt.apis) {
			full := base + rt.path
			if rt.path == "/" {
				full = base + "/{$}"
			}
			s.mux.Handle(rt.method+" "+full, s.serve(rt, base))
			allow(rt.method, full)
			served[opKey(rt.method, full)] = true
		}
	}
	for _, op := range absentOps() {
		for _, base := range bases(op.apis) {
			full := base + op.path
			if served[opKey(op.method, full)] {
				continue // served after all; the conformance test asks to drop it from the list
			}
			s.mux.Handle(op.method+" "+full, s.absentHandler(op))
			allow(op.method, full)
		}
	}
	for _, shape := range shapes {
		pm := methods[shape]
		s.mux.HandleFunc(pm.full, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", strings.Join(pm.allowed, ", "))
			writeError(w, s.log, newRequestID(), newErr(codeMethodNotAllowed, "%s is not allowed here; allowed: %s", r.Method, strings.Join(pm.allowed, ", ")))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, s.log, newRequestID(), newErr(codeNotFound, "no API operation at %s", r.URL.Path))
	})
}

func bases(a apiSet) []string {
	var out []string
	if a&client != 0 {
		out = append(out, ClientBase)
	}
	if a&management != 0 {
		out = append(out, ManagementBase)
	}
	if a&root != 0 {
		out = append(out, "")
	}
	if a&fabric != 0 {
		out = append(out, FabricBase)
	}
	return out
}

// serve wraps a route's handler: request id, session and access checks, errors, panics.
func (s *Server) serve(rt route, base string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{s: s, w: w, r: r, requestID: newRequestID(), base: base}
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("handler panic", "requestId", c.requestID, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				writeError(w, s.log, c.requestID, newErr(codeUnhandled, "internal error; see the controller log for request %s", c.requestID))
			}
		}()
		succeeded := false
		if rt.authMethod != nil && s.info.Observer != nil {
			if method := rt.authMethod(r); method != "" {
				// Deferred after the recover above, so it runs first: a panic counts as a failure.
				defer func() { s.info.Observer.ObserveAuthentication(method, succeeded) }()
			}
		}
		if err := s.authorize(c, rt); err != nil {
			writeError(w, s.log, c.requestID, err)
			return
		}
		if err := rt.handler(c); err != nil {
			writeError(w, s.log, c.requestID, err)
			return
		}
		succeeded = true
	})
}

// errMFAPending answers an API session that must pass MFA before anything else.
var errMFAPending = newErr(codeUnauthorized, "the API session must pass MFA first: POST %s/authenticate/mfa with a code", ClientBase)

// authorize resolves the API session of the request when the route needs one. A session
// that must still pass MFA may only call the routes marked pending; when the identity's
// authentication policy requires a JWT of an external signer, every call must carry one
// (Authorization: Bearer).
func (s *Server) authorize(c *call, rt route) error {
	if rt.access == public {
		return nil
	}
	sess, ident, err := s.m.SessionByToken(c.r.Header.Get(SessionHeader))
	if err != nil {
		return err
	}
	c.session, c.identity = sess, ident
	if model.PendingMFA(sess) && !rt.pending {
		return errMFAPending
	}
	if err := s.m.CheckSecondaryJWT(c.r.Context(), ident, c.bearer()); err != nil {
		return err
	}
	if rt.access == adminOnly && !ident.IsAdmin {
		return errForbidden
	}
	return nil
}

// bearer is the token of the request's Authorization: Bearer header, or "".
func (c *call) bearer() string { return model.BearerToken(c.r.Header.Get("Authorization")) }

// pendingMFARoutes are what an API session that must still pass MFA (partially
// authenticated, in the reference's terms) may do: pass it, read and end itself, and enroll
// in MFA when its policy requires TOTP. Everything else, its identity included, answers 401
// UNAUTHORIZED until MFA is passed, as the reference's fully authenticated routes do.
var pendingMFARoutes = []string{
	"POST /authenticate/mfa",
	"GET /current-api-session", "DELETE /current-api-session",
	"GET /current-identity/mfa", "POST /current-identity/mfa", "GET /current-identity/mfa/qr-code",
	"POST /current-identity/mfa/verify",
}

// ServeHTTP serves both APIs, and tells the Observer of each request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.info.Observer == nil {
		s.mux.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	s.mux.ServeHTTP(sw, r)
	method, route := requestLabels(r)
	s.info.Observer.ObserveRequest(method, route, sw.code(), time.Since(start))
}

// Routes lists the operations of the API set (for the OpenAPI document).
func (s *Server) routesOf(a apiSet) []route {
	var out []route
	for _, rt := range s.routes {
		if rt.apis&a != 0 {
			out = append(out, rt)
		}
	}
	slices.SortFunc(out, func(x, y route) int { return strings.Compare(x.path+" "+x.method, y.path+" "+y.method) })
	return out
}

// register declares every operation; see the handler files for each group.
func (s *Server) register() {
	s.registerInfo()
	s.registerAuth()
	s.registerEnroll()
	s.registerIdentities()
	s.registerCAs()
	s.registerServices()
	s.registerPosture()
	s.registerRouters()
	s.registerMFA()
	s.registerExtJWT()
	s.registerAuthPolicies()
	s.registerTokenEnroll()
	s.registerDatabase()
	s.registerAPISessions()
	s.registerFabric()
	s.registerRelated()
	s.registerRoleAttributes()
	s.registerOps()
	s.registerIntegrity()
	s.registerFabricRouters()
	for i := range s.routes {
		s.routes[i].pending = slices.Contains(pendingMFARoutes, s.routes[i].method+" "+s.routes[i].path)
		s.routes[i].authMethod = authMethodOf(s.routes[i])
	}
	s.mount()
}

// links is the _links object of an entity.
func links(entity, id string) map[string]any {
	return map[string]any{"self": map[string]string{"href": "./" + entity + "/" + id}}
}

// ref is a reference to another entity.
func ref(entity, id, name string) map[string]any {
	return map[string]any{"_links": links(entity, id), "entity": entity, "id": id, "name": name}
}
