package config

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// RouterVersion is the only router configuration version this binary reads.
const RouterVersion = 3

// Router is the effective configuration of a router: what the file says, with every default
// filled in. Its JSON and YAML forms use the file's key names. A nil pointer or an empty list
// stands for a section that is absent, where absence has a meaning (no edge: fabric only).
type Router struct {
	V            int           `json:"v" yaml:"v"`
	Ctrl         Ctrl          `json:"ctrl" yaml:"ctrl"`
	Identity     Identity      `json:"identity" yaml:"identity"`
	Edge         *Edge         `json:"edge,omitempty" yaml:"edge,omitempty"`
	Link         Link          `json:"link" yaml:"link"`
	Listeners    []Listener    `json:"listeners" yaml:"listeners"`
	Dialers      []Dialer      `json:"dialers" yaml:"dialers"`
	Forwarder    Forwarder     `json:"forwarder" yaml:"forwarder"`
	HealthChecks HealthChecks  `json:"healthChecks" yaml:"healthChecks"`
	Metrics      Metrics       `json:"metrics" yaml:"metrics"`
	Web          []WebListener `json:"web" yaml:"web"`
	Profile      Profile       `json:"profile" yaml:"profile"`
	Trace        *Trace        `json:"trace,omitempty" yaml:"trace,omitempty"`
	Transport    *Transport    `json:"transport,omitempty" yaml:"transport,omitempty"`
	// Log is zmesh's own section: the log level and format.
	Log Log `json:"log" yaml:"log"`
}

// Ctrl says how the router reaches its controller.
type Ctrl struct {
	Endpoint              *Address      `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Endpoints             []Address     `json:"endpoints,omitempty" yaml:"endpoints,omitempty"`
	Bind                  string        `json:"bind,omitempty" yaml:"bind,omitempty"`
	DefaultRequestTimeout time.Duration `json:"defaultRequestTimeout" yaml:"defaultRequestTimeout"`
	Heartbeats            Heartbeats    `json:"heartbeats" yaml:"heartbeats"`
	Options               CtrlOptions   `json:"options" yaml:"options"`
	EndpointsFile         string        `json:"endpointsFile" yaml:"endpointsFile"`
}

// Addresses returns the controller addresses to try in order: endpoint alone when it is
// set, endpoints otherwise.
func (c Ctrl) Addresses() []Address {
	if c.Endpoint != nil {
		return []Address{*c.Endpoint}
	}
	return c.Endpoints
}

// Heartbeats are the control channel's liveness probes.
type Heartbeats struct {
	SendInterval             time.Duration `json:"sendInterval" yaml:"sendInterval"`
	CheckInterval            time.Duration `json:"checkInterval" yaml:"checkInterval"`
	CloseUnresponsiveTimeout time.Duration `json:"closeUnresponsiveTimeout" yaml:"closeUnresponsiveTimeout"`
}

// CtrlOptions are the control channel's options. The file gives ConnectTimeout in whole
// milliseconds (connectTimeoutMs).
type CtrlOptions struct {
	ConnectTimeout time.Duration `json:"connectTimeoutMs" yaml:"connectTimeoutMs" unit:"ms"`
}

// Identity names the router's certificate and key files. Relative paths are taken relative
// to the configuration file's directory.
type Identity struct {
	Cert           string          `json:"cert" yaml:"cert"`
	ServerCert     string          `json:"server_cert,omitempty" yaml:"server_cert,omitempty"`
	Key            string          `json:"key" yaml:"key"`
	ServerKey      string          `json:"server_key,omitempty" yaml:"server_key,omitempty"`
	CA             string          `json:"ca" yaml:"ca"`
	AltServerCerts []AltServerCert `json:"alt_server_certs" yaml:"alt_server_certs"`
	// RenewAt is the fraction of the client certificate's lifetime after which the router
	// extends its certificates (an edge router's: the controller issued them).
	RenewAt float64 `json:"renew_at" yaml:"renew_at"`

	line          int  // where the section stands, for cross-section errors
	serverCertBad bool // server_cert is given but its value was wrong, and that is reported
}

// Bounds of identity.renew_at. Halfway leaves as long again to retry, should the controller
// be away when the time comes.
const (
	DefaultRenewAt = 0.5
	MinRenewAt     = 0.05
	MaxRenewAt     = 0.95
)

// AltServerCert is a further server certificate, chosen by SNI.
type AltServerCert struct {
	ServerCert string `json:"server_cert" yaml:"server_cert"`
	ServerKey  string `json:"server_key" yaml:"server_key"`
}

// Edge turns on edge functionality: SDK clients and tunnel bindings. The file gives
// DBSaveInterval in whole seconds (dbSaveIntervalSeconds).
type Edge struct {
	DB             string        `json:"db" yaml:"db"`
	DBSaveInterval time.Duration `json:"dbSaveIntervalSeconds" yaml:"dbSaveIntervalSeconds" unit:"s"`
	CSR            *CSR          `json:"csr,omitempty" yaml:"csr,omitempty"`
}

// CSR holds the subject and SANs of the certificates requested at enrollment and extension.
type CSR struct {
	Country            string `json:"country,omitempty" yaml:"country,omitempty"`
	Province           string `json:"province,omitempty" yaml:"province,omitempty"`
	Locality           string `json:"locality,omitempty" yaml:"locality,omitempty"`
	Organization       string `json:"organization,omitempty" yaml:"organization,omitempty"`
	OrganizationalUnit string `json:"organizationalUnit,omitempty" yaml:"organizationalUnit,omitempty"`
	SANs               SANs   `json:"sans" yaml:"sans"`

	line int
}

// SANs are subject alternative names.
type SANs struct {
	DNS   []string     `json:"dns" yaml:"dns"`
	IP    []netip.Addr `json:"ip" yaml:"ip"`
	URI   []string     `json:"uri" yaml:"uri"`
	Email []string     `json:"email" yaml:"email"`
}

func (s SANs) empty() bool { return len(s.DNS)+len(s.IP)+len(s.URI)+len(s.Email) == 0 }

// Link configures the router mesh.
type Link struct {
	Listeners []LinkListener `json:"listeners" yaml:"listeners"`
	Dialers   []LinkDialer   `json:"dialers" yaml:"dialers"`
}

// LinkListener accepts links from other routers.
type LinkListener struct {
	Binding   string   `json:"binding" yaml:"binding"`
	Bind      Address  `json:"bind" yaml:"bind"`
	Advertise Address  `json:"advertise" yaml:"advertise"`
	Groups    []string `json:"groups" yaml:"groups"`

	line int
}

// LinkDialer dials the link listeners of other routers that share a group with it.
type LinkDialer struct {
	Binding              string   `json:"binding" yaml:"binding"`
	Bind                 string   `json:"bind,omitempty" yaml:"bind,omitempty"`
	Groups               []string `json:"groups" yaml:"groups"`
	Split                bool     `json:"split" yaml:"split"`
	HealthyDialBackoff   Backoff  `json:"healthyDialBackoff" yaml:"healthyDialBackoff"`
	UnhealthyDialBackoff Backoff  `json:"unhealthyDialBackoff" yaml:"unhealthyDialBackoff"`
}

// Backoff is a retry policy: the wait starts at MinRetryInterval and is multiplied by
// RetryBackoffFactor after each failure, up to MaxRetryInterval.
type Backoff struct {
	MinRetryInterval   time.Duration `json:"minRetryInterval" yaml:"minRetryInterval"`
	MaxRetryInterval   time.Duration `json:"maxRetryInterval" yaml:"maxRetryInterval"`
	RetryBackoffFactor float64       `json:"retryBackoffFactor" yaml:"retryBackoffFactor"`
}

// Listener bindings.
const (
	BindingEdge      = "edge"
	BindingTransport = "transport"
	BindingTunnel    = "tunnel"
)

// Listener is an on-ramp: an SDK listener (binding edge), a transport listener for fabric
// clients, or the tunnel.
type Listener struct {
	Binding   string         `json:"binding" yaml:"binding"`
	Bind      *Address       `json:"bind,omitempty" yaml:"bind,omitempty"`
	Advertise *Address       `json:"advertise,omitempty" yaml:"advertise,omitempty"`
	Tunnel    *TunnelOptions `json:"options,omitempty" yaml:"options,omitempty"`

	line int
}

// Tunnel modes.
const (
	TunnelHost   = "host"
	TunnelTProxy = "tproxy"
	TunnelProxy  = "proxy"
)

// TunnelOptions are the options of the tunnel listener. Resolver and DNSSvcIPRange are set in
// tproxy mode only, Services in proxy mode only.
type TunnelOptions struct {
	Mode          string        `json:"mode" yaml:"mode"`
	Resolver      *Resolver     `json:"resolver,omitempty" yaml:"resolver,omitempty"`
	DNSSvcIPRange *netip.Prefix `json:"dnsSvcIpRange,omitempty" yaml:"dnsSvcIpRange,omitempty"`
	// Upstreams are where the tproxy resolver forwards names it does not intercept; the
	// nameservers of /etc/resolv.conf when empty.
	Upstreams []netip.AddrPort `json:"upstreams,omitempty" yaml:"upstreams,omitempty"`
	// UDPIdleTimeout ends a UDP flow (intercepted or hosted) that carried nothing either way
	// for so long.
	UDPIdleTimeout time.Duration   `json:"udpIdleTimeout" yaml:"udpIdleTimeout"`
	Services       []TunnelService `json:"services,omitempty" yaml:"services,omitempty"`
}

// Resolver is where the tproxy tunnel's DNS server listens, written udp://<host>:<port>.
type Resolver struct {
	Host string
	Port int
}

// Addr returns host:port.
func (r Resolver) Addr() string { return Address{Host: r.Host, Port: r.Port}.HostPort() }

func (r Resolver) MarshalText() ([]byte, error) { return []byte("udp://" + r.Addr()), nil }

// TunnelService is one <service>:<port> pair of the proxy tunnel.
type TunnelService struct {
	Service string
	Port    int
}

func (s TunnelService) MarshalText() ([]byte, error) {
	return []byte(s.Service + ":" + strconv.Itoa(s.Port)), nil
}

// Dialer bindings.
const (
	DialerProxy        = "proxy"
	DialerProxyUDP     = "proxy_udp"
	DialerTransport    = "transport"
	DialerTransportUDP = "transport_udp"
)

// Dialer takes circuits off the overlay to the services the router terminates.
type Dialer struct {
	Binding string        `json:"binding" yaml:"binding"`
	Options DialerOptions `json:"options" yaml:"options"`
}

// DialerOptions: MTU is the largest payload, in bytes, carried in one message: one datagram
// for the _udp bindings (larger datagrams are dropped), one read for the others.
type DialerOptions struct {
	MTU int `json:"mtu" yaml:"mtu"`
}

// Forwarder tunes circuit forwarding. The file gives its intervals and timeouts in whole
// milliseconds.
type Forwarder struct {
	FaultTxInterval          time.Duration `json:"faultTxInterval" yaml:"faultTxInterval" unit:"ms"`
	IdleCircuitTimeout       time.Duration `json:"idleCircuitTimeout" yaml:"idleCircuitTimeout" unit:"ms"`
	IdleTxInterval           time.Duration `json:"idleTxInterval" yaml:"idleTxInterval" unit:"ms"`
	LatencyProbeInterval     time.Duration `json:"latencyProbeInterval" yaml:"latencyProbeInterval" unit:"ms"`
	LinkDialQueueLength      int           `json:"linkDialQueueLength" yaml:"linkDialQueueLength"`
	LinkDialWorkerCount      int           `json:"linkDialWorkerCount" yaml:"linkDialWorkerCount"`
	RateLimitedQueueLength   int           `json:"rateLimitedQueueLength" yaml:"rateLimitedQueueLength"`
	RateLimitedWorkerCount   int           `json:"rateLimitedWorkerCount" yaml:"rateLimitedWorkerCount"`
	XgressCloseCheckInterval time.Duration `json:"xgressCloseCheckInterval" yaml:"xgressCloseCheckInterval" unit:"ms"`
	XgressDialDwellTime      time.Duration `json:"xgressDialDwellTime" yaml:"xgressDialDwellTime" unit:"ms"`
	XgressDialQueueLength    int           `json:"xgressDialQueueLength" yaml:"xgressDialQueueLength"`
	XgressDialWorkerCount    int           `json:"xgressDialWorkerCount" yaml:"xgressDialWorkerCount"`
}

// HealthChecks configures the router's own health checks.
type HealthChecks struct {
	CtrlPingCheck CtrlPingCheck `json:"ctrlPingCheck" yaml:"ctrlPingCheck"`
	LinkCheck     LinkCheck     `json:"linkCheck" yaml:"linkCheck"`
}

// CtrlPingCheck pings the controller over the control channel.
type CtrlPingCheck struct {
	Interval     time.Duration `json:"interval" yaml:"interval"`
	Timeout      time.Duration `json:"timeout" yaml:"timeout"`
	InitialDelay time.Duration `json:"initialDelay" yaml:"initialDelay"`
}

// LinkCheck counts the router's links.
type LinkCheck struct {
	Interval     time.Duration `json:"interval" yaml:"interval"`
	InitialDelay time.Duration `json:"initialDelay" yaml:"initialDelay"`
	MinLinks     int           `json:"minLinks" yaml:"minLinks"`
}

// Metrics configures the metrics messages sent to the controller and, zmesh's additions to
// the specification's section, what the router tells operators of its circuits.
type Metrics struct {
	ReportInterval       time.Duration `json:"reportInterval" yaml:"reportInterval"`
	MessageQueueSize     int           `json:"messageQueueSize" yaml:"messageQueueSize"`
	IntervalAgeThreshold time.Duration `json:"intervalAgeThreshold" yaml:"intervalAgeThreshold"`
	// CircuitEvents logs one line per circuit created, ended or refused at an end here.
	CircuitEvents bool `json:"circuitEvents" yaml:"circuitEvents"`
	// ServiceLabelLimit is the most services the per-service metrics label by name; the
	// others are counted under ServiceOther.
	ServiceLabelLimit int `json:"serviceLabelLimit" yaml:"serviceLabelLimit"`
}

// ServiceOther is the service label of the circuits of services beyond
// metrics.serviceLabelLimit.
const ServiceOther = "_other"

// Web APIs a router serves: its health checks as JSON (GET /health-checks) and its
// Prometheus metrics (GET /metrics).
const (
	APIHealthChecks = "health-checks"
	APIMetrics      = "metrics"
)

// WebAPIs returns the API bindings a web listener may serve, in the order error messages
// list them.
func WebAPIs() []string { return []string{APIHealthChecks, APIMetrics} }

// WebListener serves web APIs on one or more bind points.
type WebListener struct {
	Name       string      `json:"name" yaml:"name"`
	BindPoints []BindPoint `json:"bindPoints" yaml:"bindPoints"`
	APIs       []WebAPI    `json:"apis" yaml:"apis"`
}

// BindPoint is where a web listener listens (Interface) and the host:port clients use to
// reach it (Address).
type BindPoint struct {
	Interface string `json:"interface" yaml:"interface"`
	Address   string `json:"address" yaml:"address"`
}

// WebAPI names an API served by a web listener.
type WebAPI struct {
	Binding string `json:"binding" yaml:"binding"`
}

// Profile turns on CPU and memory profiling.
type Profile struct {
	CPU    *ProfileCPU    `json:"cpu,omitempty" yaml:"cpu,omitempty"`
	Memory *ProfileMemory `json:"memory,omitempty" yaml:"memory,omitempty"`
}

// ProfileCPU writes a CPU profile for the router's lifetime.
type ProfileCPU struct {
	Path string `json:"path" yaml:"path"`
}

// ProfileMemory writes a heap profile every Interval. The file gives Interval in whole
// milliseconds (intervalMs).
type ProfileMemory struct {
	Path     string        `json:"path" yaml:"path"`
	Interval time.Duration `json:"intervalMs" yaml:"intervalMs" unit:"ms"`
}

// Trace writes every decoded message to Path.
type Trace struct {
	Path string `json:"path" yaml:"path"`
}

// Transport holds tuning of an underlay zmesh does not have; it is read for compatibility
// and has no effect.
type Transport struct {
	Westworld3 *Westworld3 `json:"westworld3,omitempty" yaml:"westworld3,omitempty"`
}

// Westworld3 is the tuning block of that underlay.
type Westworld3 struct {
	ProfileVersion int         `json:"profile_version" yaml:"profile_version"`
	TxPortalMinSz  int         `json:"tx_portal_min_sz" yaml:"tx_portal_min_sz"`
	TxPortalMaxSz  int         `json:"tx_portal_max_sz" yaml:"tx_portal_max_sz"`
	Instrument     *Instrument `json:"instrument,omitempty" yaml:"instrument,omitempty"`
}

// Instrument is the instrumentation block of that underlay.
type Instrument struct {
	Name       string `json:"name" yaml:"name"`
	Path       string `json:"path" yaml:"path"`
	SnapshotMs int    `json:"snapshot_ms" yaml:"snapshot_ms"`
	Enabled    bool   `json:"enabled" yaml:"enabled"`
}

// Defaults and bounds that are not written inline where they are read.
const (
	maxMillis = 24 * 60 * 60 * 1000 // a day, the largest interval in milliseconds

	defaultMTU = 65535
	minMTU     = 512
	maxMTU     = 65535
)

// DefaultDNSSvcIPRange returns the range the tproxy resolver allocates addresses from when
// the file does not say: 100.64.0.1/10.
func DefaultDNSSvcIPRange() netip.Prefix { return netip.MustParsePrefix("100.64.0.1/10") }

// DefaultResolver returns where the tproxy resolver listens when the file does not say:
// udp://127.0.0.1:53.
func DefaultResolver() Resolver { return Resolver{Host: "127.0.0.1", Port: 53} }

// LoadRouter reads the router configuration at path. lookupEnv resolves ${VAR} references
// (os.LookupEnv in production). The error, when not nil, is of type Errors and holds every
// problem of the file; warnings are returned in either case.
func LoadRouter(path string, lookupEnv func(string) (string, bool)) (*Router, []Diagnostic, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	return ParseRouter(path, data, lookupEnv)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Errors{{File: path, Message: fmt.Sprintf("cannot read the file: %v", err)}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, Errors{{File: path, Message: fmt.Sprintf("cannot read the file: %v", err)}}
	}
	return data, nil
}

// ParseRouter checks data as the router configuration file at path; path names the file in
// messages and anchors relative paths.
func ParseRouter(path string, data []byte, lookupEnv func(string) (string, bool)) (*Router, []Diagnostic, error) {
	r := &reader{file: path, lookupEnv: lookupEnv}
	cfg := r.router(path, data)
	sortDiagnostics(r.errs)
	sortDiagnostics(r.warns)
	if len(r.errs) > 0 {
		return nil, r.warns, Errors(r.errs)
	}
	return cfg, r.warns, nil
}

func (r *reader) router(path string, data []byte) *Router {
	root := r.parseDocument(data)
	if root == nil {
		return nil
	}
	top := r.mapping(root, "", 1)
	if !r.version(top, RouterVersion) {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dir := filepath.Dir(abs)

	cfg := &Router{V: RouterVersion}
	top.whenAbsent("edge", "section missing: the router runs fabric-only, without edge functionality or SDK connectivity")
	top.whenAbsent("link", "section missing: the router neither dials nor accepts other routers")
	top.whenAbsent("listeners", "section missing: no listeners for outside clients")
	top.whenAbsent("dialers", "section missing: the router cannot terminate services")
	cfg.Ctrl = r.ctrl(top, dir)
	cfg.Identity = r.identity(top, dir)
	cfg.Edge = r.edge(top, abs, dir)
	cfg.Link = r.link(top)
	cfg.Listeners = r.listeners(top)
	cfg.Dialers = r.dialers(top)
	cfg.Forwarder = r.forwarder(top.child("forwarder"))
	cfg.HealthChecks = r.healthChecks(top.child("healthChecks"))
	cfg.Metrics = r.metrics(top.child("metrics"))
	cfg.Web = r.web(top)
	cfg.Profile = r.profile(top, dir)
	cfg.Trace = r.trace(top, dir)
	cfg.Transport = r.transport(top)
	cfg.Log = r.log(top)
	top.finish()

	r.crossChecks(cfg)
	return cfg
}

// version checks the top-level key v. A file of another version is not read further: its
// sections would only produce noise.
func (r *reader) version(top *mapping, want int) bool {
	n := top.get("v")
	if n == nil {
		r.errorf(top.lineOfKey("v"), "v", "is required: the configuration version; supported: %d", want)
		return false
	}
	s, ok := r.scalar(n, "v")
	if !ok {
		return false
	}
	if v, err := strconv.Atoi(s); err != nil || v != want {
		r.errorf(n.Line, "v", "version %s is not supported; supported: %d", s, want)
		return false
	}
	return true
}

// filePath reads a file path, cleaned; relative paths are taken relative to dir.
func (m *mapping) filePath(key, def, dir string) string {
	p := m.str(key, def)
	if p == "" || filepath.IsAbs(p) {
		if p != "" {
			p = filepath.Clean(p)
		}
		return p
	}
	return filepath.Join(dir, p)
}
