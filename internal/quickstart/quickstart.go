// Package quickstart builds and runs a complete zmesh network on one machine for trying zmesh
// out (`zmesh quickstart`). Prepare creates, or on a later run reuses, a directory holding a
// controller's configuration and data, the administrator's generated password, edge routers
// enrolled through the controller's model with their configurations, a demo "echo" service
// hosted by the first router's tunnel, its policies, and an enrolled client identity. Run then
// runs the controller, every router and the echo server itself in the calling process, on
// fixed 127.0.0.1 ports (shifted together by a port offset), until its context ends.
package quickstart

import (
	"fmt"
	"net"
	"strconv"
)

// Names of what Prepare creates in the network.
const (
	// ServiceName is the demo service: an echo server that Run serves on Ports.Echo, hosted
	// by the first router's tunnel and reached through each router's tunnel proxy port.
	ServiceName = "echo"
	// ClientName is the client identity whose identity file Prepare writes (ClientFile).
	ClientName = "quickstart-client"
	// AdminUsername is the default administrator's username.
	AdminUsername = "admin"
	// MaxRouters is the most routers a quickstart network runs: the router ports of one
	// router must not run into the next range.
	MaxRouters = 9
	// MaxPortOffset is the largest port offset: every port stays at most 65535. Offsets up to
	// 20000 also keep every port below Linux's ephemeral range (32768 and up), from which
	// outgoing connections take their ports.
	MaxPortOffset = 50000
)

// Files of the quickstart directory.
const (
	// StateFile marks a directory as a quickstart directory and records how it was made.
	StateFile = "quickstart.json"
	// PasswordFile holds the administrator's generated password (mode 0600).
	PasswordFile = "admin-password"
	// ControllerFile is the controller's configuration; its admin password is
	// ${ZMESH_ADMIN_PASSWORD}, which Run takes from PasswordFile.
	ControllerFile = "controller.yml"
	// ControllerDataDir is the controller's data directory (PKI, store, lock).
	ControllerDataDir = "controller"
	// ClientFile is the client identity's file, usable with `zmesh tunnel --identity`.
	ClientFile = "client.json"
	// RouterConfigFile, RouterCAFile and the other files of a router's directory
	// (<dir>/router-<i>/).
	RouterConfigFile     = "router.yml"
	RouterKeyFile        = "key.pem"
	RouterCertFile       = "client.cert"
	RouterServerCertFile = "server.cert"
	RouterCAFile         = "ca.cert"
)

// PasswordEnv is the variable ControllerFile takes the administrator's password from.
const PasswordEnv = "ZMESH_ADMIN_PASSWORD"

// Host is the only address a quickstart network listens on.
const Host = "127.0.0.1"

// Ports are the quickstart's TCP ports on 127.0.0.1: fixed defaults, so that instructions
// can name them, each shifted by Offset when the defaults are taken. Routers are numbered
// from 1.
type Ports struct {
	Offset int
}

// The default ports; router i's ports are base + i.
const (
	defaultAPIPort         = 1280
	defaultCtrlPort        = 6262
	defaultEchoPort        = 2000
	defaultProxyBase       = 2000 // router i's tunnel proxy for the echo service: 2001, 2002, ...
	defaultClientProxyPort = 2010 // suggested for `zmesh tunnel proxy` with the client identity
	defaultEdgeBase        = 3021 // 3022, 3023, ...
	defaultWebBase         = 8080 // 8081, 8082, ...
	defaultLinkBase        = 10079
)

// API is the controller's HTTPS API (client and management).
func (p Ports) API() int { return defaultAPIPort + p.Offset }

// Ctrl is the controller's control channel, which routers dial.
func (p Ports) Ctrl() int { return defaultCtrlPort + p.Offset }

// Echo is the echo server, the demo service's own address.
func (p Ports) Echo() int { return defaultEchoPort + p.Offset }

// ClientProxy is the port the printed `zmesh tunnel proxy` example listens on. Run does not
// listen on it.
func (p Ports) ClientProxy() int { return defaultClientProxyPort + p.Offset }

// Proxy is router i's tunnel proxy port of the echo service.
func (p Ports) Proxy(i int) int { return defaultProxyBase + i + p.Offset }

// Edge is router i's SDK listener for SDK clients.
func (p Ports) Edge(i int) int { return defaultEdgeBase + i + p.Offset }

// Link is router i's link listener.
func (p Ports) Link(i int) int { return defaultLinkBase + i + p.Offset }

// Web is router i's web listener: health checks and metrics over HTTPS.
func (p Ports) Web(i int) int { return defaultWebBase + i + p.Offset }

// Port is a port Run listens on and what for.
type Port struct {
	Port int
	Role string // "the controller's API", "router-2's link listener", ...
}

// Addr is 127.0.0.1:<port>.
func (p Port) Addr() string { return Addr(p.Port) }

// Listening lists every port Run listens on with routers routers.
func (p Ports) Listening(routers int) []Port {
	list := []Port{
		{p.API(), "the controller's API"},
		{p.Ctrl(), "the controller's control channel"},
		{p.Echo(), "the echo server"},
	}
	for i := 1; i <= routers; i++ {
		name := RouterName(i)
		list = append(list,
			Port{p.Edge(i), name + "'s SDK listener"},
			Port{p.Link(i), name + "'s link listener"},
			Port{p.Web(i), name + "'s health and metrics listener"},
			Port{p.Proxy(i), name + "'s tunnel proxy of the echo service"})
	}
	return list
}

// Addr is 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort(Host, strconv.Itoa(port)) }

// RouterName is the name of router i (1-based): its edge router's name, its identity's
// name and its directory.
func RouterName(i int) string { return fmt.Sprintf("router-%d", i) }

// Network is a prepared quickstart network: where everything is, ready for Run.
type Network struct {
	// Dir is the quickstart directory, absolute.
	Dir string
	// Created is true when this Prepare created the directory's network; false when it
	// reused one.
	Created bool
	Ports   Ports
	// ControllerConfig, PasswordFile and ClientIdentity are files in Dir.
	ControllerConfig string
	PasswordFile     string
	ClientIdentity   string
	// Routers are the routers to run, router-1 first.
	Routers []Router
}

// Router is one prepared router.
type Router struct {
	// Index is the router's number, from 1.
	Index int
	Name  string
	// ID is the edge router's id, which is also its identity's id.
	ID string
	// Dir holds its configuration (Config), key, certificates and CA (CAFile).
	Dir    string
	Config string
	CAFile string
}

// APIURL is the controller's API, https://127.0.0.1:<port>.
func (n *Network) APIURL() string { return "https://" + Addr(n.Ports.API()) }
