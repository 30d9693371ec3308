package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"net"
)

// Service is a service a tunnel may serve, with its configs by config type name
// (intercept.v1, host.v1, host.v2, ...) as the controller gives them.
type Service struct {
	ID                 string
	Name               string
	EncryptionRequired bool
	Dial, Bind         bool // what the tunnel's identity may do with it
	Configs            map[string]json.RawMessage
}

// AppData tells the hosting end of a circuit what the dialing end intercepted, so that a
// host config's forwardProtocol, forwardAddress and forwardPort can follow it. It travels
// with the circuit request as JSON (field names as in OpenZiti's tunnelers).
type AppData struct {
	Protocol    string `json:"dst_protocol,omitempty"` // tcp or udp
	DstIP       string `json:"dst_ip,omitempty"`
	DstPort     string `json:"dst_port,omitempty"`
	DstHostname string `json:"dst_hostname,omitempty"`
	SrcIP       string `json:"src_ip,omitempty"`
	SrcPort     string `json:"src_port,omitempty"`
}

// Overlay is what a tunnel reaches services through: the router's own identity in an
// in-router tunnel, or an SDK client in the standalone tunneler. A circuit is a byte
// stream either way; UDP flows cross it as length-prefixed datagrams (see udp.go), so both
// ends of a UDP service must be tunnels (or SDK applications that speak that framing).
// Host mode calls Bind once per service; WatchServices may be called by several engines at
// once. Sockets the overlay opens toward addresses a tproxy tunnel intercepts would loop
// into the tunnel unless they carry the interceptor's bypass mark.
type Overlay interface {
	// WatchServices calls f with the full list of services now and again whenever it
	// changes, until ctx ends; it returns ctx's error then.
	WatchServices(ctx context.Context, f func([]Service)) error
	// Dial opens a circuit to the service, carrying app to the hosting end. With end-to-end
	// encryption required, the returned conn is already the decrypted stream.
	Dial(ctx context.Context, svc Service, app AppData) (net.Conn, error)
	// Bind hosts the service until the listener is closed or ctx ends.
	Bind(ctx context.Context, svc Service) (Listener, error)
}

// Listener hands out the circuits that reach a bound service.
type Listener interface {
	// Accept returns the next circuit with the app data of its dialing end.
	Accept() (net.Conn, AppData, error)
	Close() error
}

// Reacher is a Listener whose overlay can carry a circuit without the host: given Reach
// (by the host, right after Bind), it has the host connect to the circuit's target while the
// circuit is set up, and joins the circuit to that connection itself (the router's overlay
// does, for end-to-end encrypted circuits, with no goroutine of its own per circuit). The
// circuits it does not carry that way still come out of Accept.
type Reacher interface {
	SetReach(Reach)
}

// Reach says how the host reaches the target of a circuit that carries app: the Connect
// that connects to it, or ErrDatagramTarget when a UDP terminator of the service's host
// config accepts the circuit, which must then come out of Accept.
type Reach func(app AppData) (Connect, error)

// Connect connects to a circuit's target as the host would (the first terminator of the
// service's host config that accepts the circuit's app data and answers, within ctx). It
// returns the connection, which the host closes when the service is unbound or the host
// stops, and the function to call once the circuit has ended.
type Connect func(ctx context.Context) (net.Conn, func(), error)

// ErrDatagramTarget is Reach's refusal of a circuit whose target is a UDP socket.
var ErrDatagramTarget = errors.New("the target is UDP: the host carries its datagrams")
