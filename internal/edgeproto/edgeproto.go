// Package edgeproto is the protocol between SDK clients and edge routers. The client connects
// over TLS 1.3 with its identity certificate; then both ends run one smux session (version
// 2: every stream has its own flow-control window, so a slow stream never stalls the
// others). Every stream opens with one Request from the side that opened it and one
// Response from the other, each a big-endian uint32 length and a JSON body of at most
// MaxMessage bytes:
//
//   - hello (client → router, the session's first stream): the client's API session. The
//     stream stays open as the session's control stream: the client sends ping requests on
//     it to measure the router's latency, and the router closes the whole session when the
//     API session ends.
//   - dial (client → router): a Dial session of a service. After an OK response the stream
//     carries the circuit's bytes.
//   - bind (client → router): a Bind session of a service; the router creates a terminator
//     for it. The stream stays open while the client hosts the service; closing it removes
//     the terminator.
//   - connect (router → client): a circuit to one of the client's binds. After the client's
//     OK response the stream carries the circuit's bytes.
package edgeproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xtaci/smux"
)

// ProtocolVersion is sent in hello; a router refuses a client speaking another.
const ProtocolVersion = 1

// MaxMessage bounds a request or response body.
const MaxMessage = 64 << 10

// HandshakeTimeout bounds the exchange of a stream's request and response on the side that
// waits for them, the router's work for a dial or bind included.
const HandshakeTimeout = 30 * time.Second

// Op is what a stream is for.
type Op string

const (
	OpHello   Op = "hello"
	OpPing    Op = "ping" // on the control stream, after hello
	OpDial    Op = "dial"
	OpBind    Op = "bind"
	OpConnect Op = "connect"
)

// Request opens a stream; the fields set depend on Op.
type Request struct {
	Op Op `json:"op"`
	// hello
	Version         int    `json:"v,omitempty"`
	APISessionToken string `json:"apiSessionToken,omitempty"`
	SDKInfo         string `json:"sdkInfo,omitempty"`
	// dial and bind
	SessionToken string `json:"sessionToken,omitempty"`
	ServiceID    string `json:"serviceId,omitempty"`
	// Identity: on dial, reach the terminator hosted under this identity name (addressable
	// terminators); on bind, the name to host under.
	Identity string `json:"identity,omitempty"`
	// AppData (dial, connect) travels from the dialing end to the hosting end as is.
	AppData json.RawMessage `json:"appData,omitempty"`
	// E2EE (dial, connect) is the dialing end's offer of end-to-end encryption schemes;
	// a dial of a service that requires encryption must make one.
	E2EE       *E2EEOffer `json:"e2ee,omitempty"`
	Cost       int        `json:"cost,omitempty"`       // bind
	Precedence string     `json:"precedence,omitempty"` // bind: default, required or failed
	// connect
	TerminatorID string `json:"terminatorId,omitempty"`
	CircuitID    uint64 `json:"circuitId,omitempty"`
	InitiatorID  string `json:"initiatorId,omitempty"` // the identity that dialed
	// ping
	Seq uint64 `json:"seq,omitempty"`
}

// E2EEOffer is what a circuit's dialing end offers for end-to-end encryption; the hosting
// end chooses. It travels as the control protocol's offer does.
type E2EEOffer struct {
	Zmesh   bool   `json:"zmesh,omitempty"`   // zmesh's signed key exchange
	ZitiKey []byte `json:"zitiKey,omitempty"` // OpenZiti's scheme: the dialer's crypto_kx public key
	// ZmeshHello, with Zmesh: the dialer's ClientHello, which the host answers in
	// Response.HostHello instead of in-band.
	ZmeshHello []byte `json:"zmeshHello,omitempty"`
}

// Response answers a Request.
type Response struct {
	OK    bool   `json:"ok"`
	Code  string `json:"code,omitempty"` // why not, machine-readable
	Error string `json:"error,omitempty"`
	// hello
	RouterID string `json:"routerId,omitempty"`
	// dial
	CircuitID uint64 `json:"circuitId,omitempty"`
	HostID    string `json:"hostId,omitempty"` // the identity hosting the terminator reached
	// HostZitiKey (dial, connect): the hosting end took OpenZiti's end-to-end scheme with
	// this crypto_kx public key; empty when it took zmesh's or none.
	HostZitiKey []byte `json:"hostZitiKey,omitempty"`
	// HostHello (dial, connect): the hosting end's ServerHello answering the offer's
	// ZmeshHello; empty when it took another scheme or runs zmesh's in-band.
	HostHello []byte `json:"hostHello,omitempty"`
	// bind
	TerminatorID string `json:"terminatorId,omitempty"`
	// ping
	Seq uint64 `json:"seq,omitempty"`
}

// Err returns the refusal as an error, nil for an OK response.
func (r *Response) Err() error {
	if r.OK {
		return nil
	}
	return &Error{Code: r.Code, Message: r.Error}
}

// Error is a refusal from the other end.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return "edge: refused: " + e.Message
	}
	return fmt.Sprintf("edge: refused (%s): %s", e.Code, e.Message)
}

// Refusal codes.
const (
	CodeInvalidSession = "INVALID_SESSION" // unknown or ended API session or session
	CodeInvalid        = "INVALID"         // malformed or unexpected request
	CodeFailed         = "FAILED"          // the router or controller could not do it
	CodeUnavailable    = "UNAVAILABLE"     // no such bind any more (connect)
)

// ErrMessageTooLarge: a message over MaxMessage.
var ErrMessageTooLarge = errors.New("edge: message too large")

// Write sends one message.
func Write(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("edge: encode: %w", err)
	}
	if len(body) > MaxMessage {
		return fmt.Errorf("%w: %d bytes", ErrMessageTooLarge, len(body))
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// Read receives one message into v.
func Read(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxMessage {
		return fmt.Errorf("%w: %d bytes", ErrMessageTooLarge, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("edge: read message: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("edge: decode message: %w", err)
	}
	return nil
}

// Both ends run TLS over a tlscork.Conn: each smux frame's records leave in one system call
// (CorkSize covers the largest frame with its TLS overhead; the buffers are pooled), and
// reads take up to ReadAhead bytes, several records, at a time.
const (
	CorkSize  = 128 << 10
	ReadAhead = 64 << 10
)

// Smux returns the smux settings both ends use.
func Smux() *smux.Config {
	c := smux.DefaultConfig()
	c.Version = 2 // per-stream flow control
	c.KeepAliveInterval = 10 * time.Second
	c.KeepAliveTimeout = 30 * time.Second
	c.MaxFrameSize = 65535 // the most a frame holds (its length is 16 bits)
	c.MaxReceiveBuffer = 16 << 20
	c.MaxStreamBuffer = 1 << 20
	return c
}

// E2EEContext is the context string both ends of a circuit bind their end-to-end key
// exchange to (e2ee.Config.Context), so that a handshake recorded on one circuit cannot be
// replayed on another.
func E2EEContext(circuitID uint64, serviceID string) string {
	return fmt.Sprintf("zmesh circuit %d service %s", circuitID, serviceID)
}
