package config

import (
	"net/netip"
	"path/filepath"
	"time"
	"unicode/utf8"
)

// ControllerVersion is the only controller configuration version this binary reads.
const ControllerVersion = 1

// Controller is the effective configuration of a standalone or co-located controller. Its
// JSON and YAML forms use the file's key names, durations written as in the file ("30m").
type Controller struct {
	V              int            `json:"v" yaml:"v"`
	DataDir        string         `json:"dataDir" yaml:"dataDir"`
	API            ControllerAPI  `json:"api" yaml:"api"`
	Ctrl           ControllerCtrl `json:"ctrl" yaml:"ctrl"`
	Admin          Admin          `json:"admin" yaml:"admin"`
	SessionTimeout time.Duration  `json:"sessionTimeout" yaml:"sessionTimeout"`
	// SessionMaxLifetime ends an API session this long after it was opened, however active.
	SessionMaxLifetime time.Duration `json:"sessionMaxLifetime" yaml:"sessionMaxLifetime"`
	// Web lists the listeners of the health-checks and metrics APIs (the bindings of
	// WebAPIs, as on routers), served over HTTPS with the API's server certificate.
	Web []WebListener `json:"web" yaml:"web"`
	// ExtJWT holds what concerns external JWT signers.
	ExtJWT ControllerExtJWT `json:"extJwt,omitzero" yaml:"extJwt,omitempty"`
	// Certificates are the lifetimes of the certificates the network's CA issues.
	Certificates CertLifetimes `json:"certificates" yaml:"certificates"`
	// Log is zmesh's own section: the log level and format.
	Log Log `json:"log" yaml:"log"`
	// Cluster makes the controller a member of a cluster of controllers; nil: a single
	// controller.
	Cluster *ControllerCluster `json:"cluster,omitempty" yaml:"cluster,omitempty"`
}

// CertLifetimes are how long the certificates issued at enrollment and at extension are
// valid: the edge routers' client and server certificates, and the identities' client
// certificates. Clients renew theirs before the end.
type CertLifetimes struct {
	Routers    time.Duration `json:"routers" yaml:"routers"`
	Identities time.Duration `json:"identities" yaml:"identities"`
}

// Bounds of the certificate lifetimes: the shortest is for tests of renewal; the longest
// stays within the CA's own ten years.
const (
	DefaultCertLifetime = 365 * day
	MinCertLifetime     = time.Minute
	MaxCertLifetime     = 5 * 365 * day
)

// ControllerExtJWT holds what concerns external JWT signers. CABundle is a PEM file of CA
// certificates trusted, besides the system's roots, for https key-set endpoints (an
// identity provider with a private CA); "" when none.
type ControllerExtJWT struct {
	CABundle string `json:"caBundle,omitempty" yaml:"caBundle,omitempty"`
}

// ControllerAPI is where the HTTPS API (client and management) listens. Advertise is the
// host:port clients use; it names the API in enrollment tokens and in the server certificate.
type ControllerAPI struct {
	Listen    string `json:"listen" yaml:"listen"`
	Advertise string `json:"advertise" yaml:"advertise"`
}

// ControllerCtrl is where routers connect their control channel.
type ControllerCtrl struct {
	Listen Address `json:"listen" yaml:"listen"`
}

// Admin is the administrator identity created on the controller's first start.
type Admin struct {
	Username string `json:"username" yaml:"username"`
	Password Secret `json:"password" yaml:"password"`
}

// Secret is a value the effective configuration never prints.
type Secret string

func (Secret) MarshalText() ([]byte, error) { return []byte("(hidden)"), nil }

// Bounds of credentials (controller API spec, section 8).
const (
	MinPasswordLen = 5
	MaxPasswordLen = 100
	MinUsernameLen = 4
	MaxUsernameLen = 100
)

// LoadController reads the controller configuration at path; see LoadRouter.
func LoadController(path string, lookupEnv func(string) (string, bool)) (*Controller, []Diagnostic, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	return ParseController(path, data, lookupEnv)
}

// ParseController checks data as the controller configuration file at path.
func ParseController(path string, data []byte, lookupEnv func(string) (string, bool)) (*Controller, []Diagnostic, error) {
	r := &reader{file: path, lookupEnv: lookupEnv}
	cfg := r.controller(path, data)
	sortDiagnostics(r.errs)
	sortDiagnostics(r.warns)
	if len(r.errs) > 0 {
		return nil, r.warns, Errors(r.errs)
	}
	return cfg, r.warns, nil
}

func (r *reader) controller(path string, data []byte) *Controller {
	root := r.parseDocument(data)
	if root == nil {
		return nil
	}
	top := r.mapping(root, "", 1)
	if !r.version(top, ControllerVersion) {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dir := filepath.Dir(abs)

	cfg := &Controller{V: ControllerVersion}
	if top.require("dataDir", "the directory that holds the store and the PKI") {
		cfg.DataDir = top.filePath("dataDir", "", dir)
	}
	top.whenAbsent("api", "section missing, using the default listen address 127.0.0.1:1280")
	top.whenAbsent("ctrl", "section missing, using the default listen address tls:127.0.0.1:6262")
	api := top.child("api")
	cfg.API.Listen = r.hostPort(api, "listen", "127.0.0.1:1280")
	cfg.API.Advertise = r.hostPort(api, "advertise", "")
	if cfg.API.Advertise == "" && cfg.API.Listen != "" {
		if unspecifiedHost(cfg.API.Listen) {
			r.errorf(api.lineOfKey("advertise"), "api.advertise", "is required when api.listen (%s) listens on every address: the <host>:<port> clients use", cfg.API.Listen)
		} else {
			cfg.API.Advertise = cfg.API.Listen
		}
	}
	api.finish()

	ctrl := top.child("ctrl")
	cfg.Ctrl.Listen = Address{Transport: TransportTLS, Host: "127.0.0.1", Port: 6262}
	if n := ctrl.get("listen"); n != nil {
		if a, ok := r.address(n, "ctrl.listen", TransportTLS); ok {
			cfg.Ctrl.Listen = a
		}
	}
	ctrl.finish()

	admin := top.child("admin")
	cfg.Admin.Username = admin.str("username", "admin")
	if n := utf8.RuneCountInString(cfg.Admin.Username); n < MinUsernameLen || n > MaxUsernameLen {
		r.errorf(admin.lineOfKey("username"), "admin.username", "has %d characters; allowed: %d to %d", n, MinUsernameLen, MaxUsernameLen)
	}
	if admin.require("password", "the administrator's password, usually ${ZMESH_ADMIN_PASSWORD}") {
		pw := admin.str("password", "")
		if n := utf8.RuneCountInString(pw); n < MinPasswordLen || n > MaxPasswordLen {
			r.errorf(admin.lineOfKey("password"), "admin.password", "has %d characters; allowed: %d to %d", n, MinPasswordLen, MaxPasswordLen)
		}
		cfg.Admin.Password = Secret(pw)
	}
	admin.finish()

	cfg.SessionTimeout = top.duration("sessionTimeout", 30*time.Minute, time.Minute, day)
	cfg.SessionMaxLifetime = top.duration("sessionMaxLifetime", DefaultSessionMaxLifetime, time.Minute, MaxSessionMaxLifetime)
	if cfg.SessionMaxLifetime < cfg.SessionTimeout {
		r.errorf(top.lineOfKey("sessionMaxLifetime"), "sessionMaxLifetime", "%s is shorter than sessionTimeout (%s); allowed: sessionTimeout to %s",
			duration(cfg.SessionMaxLifetime), duration(cfg.SessionTimeout), duration(MaxSessionMaxLifetime))
	}
	ext := top.child("extJwt")
	cfg.ExtJWT.CABundle = ext.filePath("caBundle", "", dir)
	ext.finish()
	certs := top.child("certificates")
	cfg.Certificates.Routers = certs.duration("routers", DefaultCertLifetime, MinCertLifetime, MaxCertLifetime)
	cfg.Certificates.Identities = certs.duration("identities", DefaultCertLifetime, MinCertLifetime, MaxCertLifetime)
	certs.finish()
	cfg.Cluster = r.cluster(top, cfg, dir)
	var points []webPoint
	cfg.Web, points = r.webListeners(top, WebAPIs()...)
	r.controllerWebChecks(cfg, points)
	cfg.Log = r.log(top)
	top.finish()
	return cfg
}

// Bounds of sessionMaxLifetime. The default caps what a stolen API session token is worth
// at a day while clients (the SDK re-authenticates on 401) pay one login a day.
const (
	DefaultSessionMaxLifetime = day
	MaxSessionMaxLifetime     = 365 * day
)

// hostPort reads a <host>:<port> value; def when absent.
func (r *reader) hostPort(m *mapping, key, def string) string {
	n := m.get(key)
	if n == nil {
		return def
	}
	s, ok := r.scalar(n, m.keyPath(key))
	if !ok {
		return def
	}
	if _, _, err := parseHostPort(s); err != nil {
		r.errorf(n.Line, m.keyPath(key), "%q: %v", s, err)
		return def
	}
	return s
}

func unspecifiedHost(hostPort string) bool {
	host, _, err := parseHostPort(hostPort)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}
