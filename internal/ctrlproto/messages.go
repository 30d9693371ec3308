package ctrlproto

import (
	"fmt"
	"reflect"
	"strconv"
)

// ProtocolVersion is the version of the message set below. Hello carries it; the
// controller refuses a router that speaks another.
const ProtocolVersion = 1

// Type identifies a message on the wire. Values are stable: never renumber one.
type Type uint16

// Message types. The direction each travels is documented on its struct.
const (
	// Framework messages, handled by the channel itself.
	TypeError Type = 1
	TypePing  Type = 2
	TypePong  Type = 3

	// Session.
	TypeHello           Type = 10
	TypeHelloReply      Type = 11
	TypeEndpointsUpdate Type = 12

	// Circuits.
	TypeCircuitRequest    Type = 20
	TypeCircuitReply      Type = 21
	TypeRoute             Type = 22
	TypeRouteReply        Type = 23
	TypeUnroute           Type = 24
	TypeFault             Type = 25
	TypeIdleCircuitsCheck Type = 26
	TypeIdleCircuitsReply Type = 27

	// Links.
	TypeLinkDial  Type = 30
	TypeLinkState Type = 31
	TypePeerState Type = 32

	// Terminators.
	TypeTerminatorCreate      Type = 40
	TypeTerminatorCreateReply Type = 41
	TypeTerminatorRemove      Type = 42
	TypeTerminatorRemoveReply Type = 43
	TypeTerminatorUpdate      Type = 44
	TypeTerminatorUpdateReply Type = 45

	// Metrics.
	TypeMetrics Type = 50

	// Session state.
	TypeSessionState        Type = 60
	TypeTunnelServices      Type = 61
	TypeTunnelServicesReply Type = 62
)

// Message is a body the channel carries: a struct encoded as JSON.
type Message interface {
	MessageType() Type
}

// newMessage returns an empty message of type t, or nil for a type this version does not
// know.
func newMessage(t Type) Message {
	switch t {
	case TypeError:
		return new(Error)
	case TypePing:
		return new(Ping)
	case TypePong:
		return new(Pong)
	case TypeHello:
		return new(Hello)
	case TypeHelloReply:
		return new(HelloReply)
	case TypeEndpointsUpdate:
		return new(EndpointsUpdate)
	case TypeCircuitRequest:
		return new(CircuitRequest)
	case TypeCircuitReply:
		return new(CircuitReply)
	case TypeRoute:
		return new(Route)
	case TypeRouteReply:
		return new(RouteReply)
	case TypeUnroute:
		return new(Unroute)
	case TypeFault:
		return new(Fault)
	case TypeIdleCircuitsCheck:
		return new(IdleCircuitsCheck)
	case TypeIdleCircuitsReply:
		return new(IdleCircuitsReply)
	case TypeLinkDial:
		return new(LinkDial)
	case TypeLinkState:
		return new(LinkState)
	case TypePeerState:
		return new(PeerState)
	case TypeSessionState:
		return new(SessionState)
	case TypeTunnelServices:
		return new(TunnelServices)
	case TypeTunnelServicesReply:
		return new(TunnelServicesReply)
	case TypeTerminatorCreate:
		return new(TerminatorCreate)
	case TypeTerminatorCreateReply:
		return new(TerminatorCreateReply)
	case TypeTerminatorRemove:
		return new(TerminatorRemove)
	case TypeTerminatorRemoveReply:
		return new(TerminatorRemoveReply)
	case TypeTerminatorUpdate:
		return new(TerminatorUpdate)
	case TypeTerminatorUpdateReply:
		return new(TerminatorUpdateReply)
	case TypeMetrics:
		return new(Metrics)
	}
	return nil
}

// String names the type, e.g. "Hello", or "Type(99)" for one this version does not know.
func (t Type) String() string {
	if m := newMessage(t); m != nil {
		return reflect.TypeOf(m).Elem().Name()
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// errUnknownType is returned by decodeMessage for a type this version does not know.
type errUnknownType Type

func (e errUnknownType) Error() string { return "unknown message type " + Type(e).String() }

// decodeMessage decodes a body of type t. An empty body is the type's zero value.
func decodeMessage(t Type, body []byte) (Message, error) {
	m := newMessage(t)
	if m == nil {
		return nil, errUnknownType(t)
	}
	if len(body) == 0 {
		return m, nil
	}
	m, err := decodeBody(t, body)
	if err != nil {
		return nil, fmt.Errorf("channel: decode %s body: %w", t, err)
	}
	return m, nil
}

// Error codes of the framework: carried by Error replies the channel sends itself.
const (
	// ErrCodeUnsupported: the peer has no handler for the request's type.
	ErrCodeUnsupported = "UNSUPPORTED"
	// ErrCodeBadMessage: the request's body did not decode.
	ErrCodeBadMessage = "BAD_MESSAGE"
	// ErrCodeFailed: the handler returned an error that is not an *Error.
	ErrCodeFailed = "FAILED"
)

// Error is a failed request: the peer could not handle it. A handler that returns an
// *Error has it sent as is; Request returns it wrapped (use errors.As).
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (*Error) MessageType() Type { return TypeError }

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Ping is a heartbeat, sent by either side. T is the sender's monotonic clock in
// nanoseconds; the answer echoes it so the sender measures the round trip.
type Ping struct {
	T int64 `json:"t"`
}

func (*Ping) MessageType() Type { return TypePing }

// Pong answers a Ping, echoing its T; its reply-to is the Ping's sequence.
type Pong struct {
	T int64 `json:"t"`
}

func (*Pong) MessageType() Type { return TypePong }
