package ctrlproto

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The messages every circuit sends (CircuitRequest, Route and their replies, Fault, Unroute)
// are encoded and decoded without reflection. The bytes are those encoding/json makes of the
// message, field for field; a value the fast encoder does not handle itself (a string that
// needs escaping, app data with characters HTML-escaped) has the whole message encoded by
// encoding/json. The fast decoder reads the shape the encoders make (known keys spelled
// exactly, each once; strings without escapes; integers; true and false); any other body,
// valid or not, is decoded by encoding/json, so that every body decodes as encoding/json
// decodes it.
//
// Each codec lists the JSON fields it writes (codecFields). A message type whose fields, as
// encoding/json sees them, are not exactly those (a field was added to the struct and not to
// its codec) is left to encoding/json altogether, so that no field is ever dropped; a test
// checks that every codec is current.

// fastMessage is a message with its own JSON encoder and decoder.
type fastMessage interface {
	Message
	// appendJSON appends the message's JSON to b; ok is false when encoding/json must
	// encode it.
	appendJSON(b []byte) (out []byte, ok bool)
	// decodeJSON decodes an object into the zero message; false: leave it to encoding/json.
	decodeJSON(d *decoder) bool
}

// encodeBody returns the JSON body of msg.
func encodeBody(msg Message) ([]byte, error) { return appendBody(make([]byte, 0, 256), msg) }

// appendBody appends the JSON body of msg to dst; encoding/json's bodies are not appended
// but returned as they come.
func appendBody(dst []byte, msg Message) ([]byte, error) {
	if fm, ok := msg.(fastMessage); ok && currentCodecs[msg.MessageType()] {
		if b, ok := fm.appendJSON(dst); ok {
			return b, nil
		}
	}
	return json.Marshal(msg)
}

// decodeBody decodes body into a new message of type t (known to newMessage).
func decodeBody(t Type, body []byte) (Message, error) {
	m := newMessage(t)
	if fm, ok := m.(fastMessage); ok && currentCodecs[t] {
		d := decoder{b: body}
		if fm.decodeJSON(&d) && d.end() {
			return m, nil
		}
		m = newMessage(t) // without what the fast decoder set
	}
	return m, json.Unmarshal(body, m)
}

// codecFields lists, for each type the codecs write, its JSON fields in the order they are
// written (those of embedded structs in their place).
var codecFields = map[reflect.Type][]string{
	reflect.TypeFor[CircuitRequest](): {"requestId", "sessionToken", "serviceId", "serviceName", "ingressIdentityId", "clientCert",
		"terminatorIdentity", "appData", "e2ee"},
	reflect.TypeFor[E2EEOffer](): {"zmesh", "zitiKey", "zmeshHello"},
	reflect.TypeFor[CircuitReply](): {"requestId", "circuitId", "path", "terminator", "serviceId", "encryptionRequired",
		"serviceName", "initiatorId", "hostZitiKey", "hostHello", "errorCode", "errorMessage"},
	reflect.TypeFor[TerminatorRef](): {"id", "routerId", "binding", "address", "hostId"},
	reflect.TypeFor[Route]():         {"circuitId", "forward", "reverse", "timeout"},
	reflect.TypeFor[Hop]():           {"router", "xgress"},
	reflect.TypeFor[Xgress]():        {"binding", "address", "initiatorId", "appData", "e2ee", "serviceId", "serviceName"},
	reflect.TypeFor[RouteReply]():    {"circuitId", "hostZitiKey", "hostHello", "errorCode", "errorMessage"},
	reflect.TypeFor[Fault]():         {"circuitId", "reason", "unrouted", "clean"},
	reflect.TypeFor[Unroute]():       {"circuitId", "reason"},
}

// codecTypes lists, for each message type with a codec, the types its codec writes.
var codecTypes = map[Type][]reflect.Type{
	TypeCircuitRequest: {reflect.TypeFor[CircuitRequest](), reflect.TypeFor[E2EEOffer]()},
	TypeCircuitReply:   {reflect.TypeFor[CircuitReply](), reflect.TypeFor[TerminatorRef]()},
	TypeRoute:          {reflect.TypeFor[Route](), reflect.TypeFor[Hop](), reflect.TypeFor[Xgress](), reflect.TypeFor[E2EEOffer]()},
	TypeRouteReply:     {reflect.TypeFor[RouteReply]()},
	TypeFault:          {reflect.TypeFor[Fault]()},
	TypeUnroute:        {reflect.TypeFor[Unroute]()},
}

// currentCodecs tells which message types' codecs write every field of their types. It is
// computed once and never changed.
var currentCodecs = func() map[Type]bool {
	current := map[Type]bool{}
	for t, types := range codecTypes {
		current[t] = true
		for _, rt := range types {
			if !slices.Equal(jsonFields(rt), codecFields[rt]) {
				current[t] = false
			}
		}
	}
	return current
}()

// jsonFields returns the JSON names of a struct's fields as encoding/json writes them, in
// order, with the fields of untagged embedded structs in their place.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case !f.IsExported() && !f.Anonymous, name == "-":
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonFields(f.Type)...)
		case name == "":
			out = append(out, f.Name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// --- Encoding ---

// safeString reports whether encoding/json writes s as is between quotes: printable ASCII
// without '"', '\\' and the characters it escapes for HTML.
func safeString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// enc appends JSON to b; ok turns false, for good, at the first value it cannot write as
// encoding/json would.
type enc struct {
	b     []byte
	ok    bool
	first bool // no field in the current object yet
}

func newEnc(b []byte) *enc { return &enc{b: b, ok: true} }

func (e *enc) open() { e.b = append(e.b, '{'); e.first = true }

func (e *enc) close() { e.b = append(e.b, '}'); e.first = false }

// key writes "k": after a comma unless it is the object's first field; k needs no escaping.
func (e *enc) key(k string) {
	if !e.first {
		e.b = append(e.b, ',')
	}
	e.first = false
	e.b = append(e.b, '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

func (e *enc) str(k, v string) {
	e.key(k)
	e.strValue(v)
}

func (e *enc) strValue(v string) {
	if !safeString(v) {
		e.ok = false
		return
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, v...)
	e.b = append(e.b, '"')
}

func (e *enc) strOmit(k, v string) {
	if v != "" {
		e.str(k, v)
	}
}

func (e *enc) uint(k string, v uint64) {
	e.key(k)
	e.b = strconv.AppendUint(e.b, v, 10)
}

func (e *enc) uintOmit(k string, v uint64) {
	if v != 0 {
		e.uint(k, v)
	}
}

func (e *enc) int(k string, v int64) {
	e.key(k)
	e.b = strconv.AppendInt(e.b, v, 10)
}

func (e *enc) boolOmit(k string, v bool) {
	if v {
		e.key(k)
		e.b = append(e.b, "true"...)
	}
}

func (e *enc) bytesOmit(k string, v []byte) {
	if len(v) == 0 {
		return
	}
	e.key(k)
	e.b = append(e.b, '"')
	e.b = base64.StdEncoding.AppendEncode(e.b, v)
	e.b = append(e.b, '"')
}

// rawOmit writes raw JSON compacted, as encoding/json does, unless it holds characters
// encoding/json would escape for HTML (or any non-ASCII byte).
func (e *enc) rawOmit(k string, v json.RawMessage) {
	if len(v) == 0 {
		return
	}
	for _, c := range v {
		if c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			e.ok = false
			return
		}
	}
	e.key(k)
	buf := bytes.NewBuffer(e.b)
	if err := json.Compact(buf, v); err != nil {
		e.ok = false // invalid: encoding/json reports the error
		return
	}
	e.b = buf.Bytes()
}

// e2ee writes an offer, if any.
func (e *enc) e2ee(o *E2EEOffer) {
	if o == nil {
		return
	}
	e.key("e2ee")
	e.open()
	e.boolOmit("zmesh", o.Zmesh)
	e.bytesOmit("zitiKey", o.ZitiKey)
	e.bytesOmit("zmeshHello", o.ZmeshHello)
	e.close()
}

func (e *enc) outcome(o Outcome) {
	e.strOmit("errorCode", o.ErrorCode)
	e.strOmit("errorMessage", o.ErrorMessage)
}

func (m *CircuitRequest) appendJSON(b []byte) ([]byte, bool) {
	e := newEnc(b)
	e.open()
	e.str("requestId", m.RequestID)
	e.strOmit("sessionToken", m.SessionToken)
	e.strOmit("serviceId", m.ServiceID)
	e.strOmit("serviceName", m.ServiceName)
	e.strOmit("ingressIdentityId", m.IngressIdentityID)
	e.bytesOmit("clientCert", m.ClientCert)
	e.strOmit("terminatorIdentity", m.TerminatorIdentity)
	e.rawOmit("appData", m.AppData)
	e.e2ee(m.E2EE)
	e.close()
	return e.b, e.ok
}

func (m *CircuitReply) appendJSON(b []byte) ([]byte, bool) {
	e := newEnc(b)
	e.open()
	e.str("requestId", m.RequestID)
	e.uintOmit("circuitId", m.CircuitID)
	if len(m.Path) > 0 {
		e.key("path")
		e.b = append(e.b, '[')
		for i, r := range m.Path {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.strValue(r)
		}
		e.b = append(e.b, ']')
	}
	e.key("terminator")
	t := &m.Terminator
	e.open()
	e.strOmit("id", t.ID)
	e.strOmit("routerId", t.RouterID)
	e.strOmit("binding", t.Binding)
	e.strOmit("address", t.Address)
	e.strOmit("hostId", t.HostID)
	e.close()
	e.strOmit("serviceId", m.ServiceID)
	e.boolOmit("encryptionRequired", m.EncryptionRequired)
	e.strOmit("serviceName", m.ServiceName)
	e.strOmit("initiatorId", m.InitiatorID)
	e.bytesOmit("hostZitiKey", m.HostZitiKey)
	e.bytesOmit("hostHello", m.HostHello)
	e.outcome(m.Outcome)
	e.close()
	return e.b, e.ok
}

func (e *enc) hop(k string, h *Hop) {
	e.key(k)
	e.open()
	e.strOmit("router", h.Router)
	if x := h.Xgress; x != nil {
		e.key("xgress")
		e.open()
		e.str("binding", x.Binding)
		e.strOmit("address", x.Address)
		e.strOmit("initiatorId", x.InitiatorID)
		e.rawOmit("appData", x.AppData)
		e.e2ee(x.E2EE)
		e.strOmit("serviceId", x.ServiceID)
		e.strOmit("serviceName", x.ServiceName)
		e.close()
	}
	e.close()
}

func (m *Route) appendJSON(b []byte) ([]byte, bool) {
	e := newEnc(b)
	e.open()
	e.uint("circuitId", m.CircuitID)
	e.hop("forward", &m.Forward)
	e.hop("reverse", &m.Reverse)
	e.int("timeout", int64(m.Timeout))
	e.close()
	return e.b, e.ok
}

func (m *RouteReply) appendJSON(b []byte) ([]byte, bool) {
	e := newEnc(b)
	e.open()
	e.uint("circuitId", m.CircuitID)
	e.bytesOmit("hostZitiKey", m.HostZitiKey)
	e.bytesOmit("hostHello", m.HostHello)
	e.outcome(m.Outcome)
	e.close()
	return e.b, e.ok
}

func (m *Fault) appendJSON(b []byte) ([]byte, bool) {
	e := newEnc(b)
	e.open()
	e.uint("circuitId", m.CircuitID)
	e.str("reason", m.Reason)
	e.boolOmit("unrouted", m.Unrouted)
	e.boolOmit("clean", m.Clean)
	e.close()
	return e.b, e.ok
}

func (m *Unroute) appendJSON(b []byte) ([]byte, bool) {
	e := newEnc(b)
	e.open()
	e.uint("circuitId", m.CircuitID)
	e.str("reason", m.Reason)
	e.close()
	return e.b, e.ok
}

// --- Decoding ---

// decoder reads the JSON the fast encoders write. Its methods return false at anything
// else, and the message is then decoded by encoding/json.
type decoder struct {
	b []byte
	i int
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (d *decoder) end() bool {
	d.ws()
	return d.i == len(d.b)
}

func (d *decoder) byte(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// rawString returns the bytes of a string without escapes or control characters, in valid
// UTF-8; they alias the body.
func (d *decoder) rawString() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	ascii := true
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (d *decoder) str(v *string) bool {
	s, ok := d.rawString()
	*v = string(s)
	return ok
}

// uint reads a non-negative integer that fits 64 bits.
func (d *decoder) uint(v *uint64) bool {
	d.ws()
	return d.digits(v)
}

// digits reads the digits of an integer that fits 64 bits, without a leading zero.
func (d *decoder) digits(v *uint64) bool {
	start := d.i
	var n uint64
	for ; d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9'; d.i++ {
		digit := uint64(d.b[d.i] - '0')
		if n > (1<<64-1-digit)/10 {
			return false
		}
		n = n*10 + digit
	}
	count := d.i - start
	if count == 0 || count > 1 && d.b[start] == '0' || d.i < len(d.b) && isNumberPart(d.b[d.i]) {
		return false
	}
	*v = n
	return true
}

func (d *decoder) int(v *int64) bool {
	d.ws()
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	var u uint64
	if !d.digits(&u) {
		return false
	}
	switch {
	case !neg && u <= 1<<63-1:
		*v = int64(u)
	case neg && u <= 1<<63:
		*v = -int64(u-1) - 1
	default:
		return false
	}
	return true
}

// isNumberPart reports whether c may continue a JSON number past its integer digits.
func isNumberPart(c byte) bool { return c == '.' || c == 'e' || c == 'E' || c >= '0' && c <= '9' }

func (d *decoder) bool(v *bool) bool {
	d.ws()
	switch {
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		*v, d.i = true, d.i+4
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		*v, d.i = false, d.i+5
	default:
		return false
	}
	return d.i == len(d.b) || !isNumberPart(d.b[d.i]) && (d.b[d.i] < 'a' || d.b[d.i] > 'z')
}

func (d *decoder) base64(v *[]byte) bool {
	s, ok := d.rawString()
	if !ok {
		return false
	}
	out, err := base64.StdEncoding.AppendDecode(nil, s)
	if err != nil || len(out) == 0 {
		return false
	}
	*v = out
	return true
}

// object reads an object, calling field with each key (which aliases the body) to read its
// value. Each of the keys, at most 64, may come once.
func (d *decoder) object(keys []string, field func(k int) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen uint64
	for {
		k, ok := d.rawString()
		if !ok || !d.byte(':') {
			return false
		}
		i := indexOf(keys, k)
		if i < 0 || seen&(1<<i) != 0 {
			return false // unknown (perhaps another spelling) or repeated: encoding/json decides
		}
		seen |= 1 << i
		if !field(i) {
			return false
		}
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

func indexOf(keys []string, k []byte) int {
	for i, key := range keys {
		if key == string(k) {
			return i
		}
	}
	return -1
}

func (d *decoder) strings(v *[]string) bool {
	if !d.byte('[') {
		return false
	}
	out := []string{}
	if !d.byte(']') {
		for {
			var s string
			if !d.str(&s) {
				return false
			}
			out = append(out, s)
			if d.byte(']') {
				break
			}
			if !d.byte(',') {
				return false
			}
		}
	}
	*v = out
	return true
}

func (d *decoder) outcome(o *Outcome, k int) bool {
	if k == 0 {
		return d.str(&o.ErrorCode)
	}
	return d.str(&o.ErrorMessage)
}

var (
	circuitRequestKeys = []string{"requestId", "sessionToken", "serviceId", "serviceName", "ingressIdentityId", "clientCert", "terminatorIdentity", "e2ee"}
	e2eeOfferKeys      = []string{"zmesh", "zitiKey", "zmeshHello"}
)

// e2ee reads an offer object.
func (d *decoder) e2ee(v **E2EEOffer) bool {
	o := new(E2EEOffer)
	*v = o
	return d.object(e2eeOfferKeys, func(k int) bool {
		switch k {
		case 0:
			return d.bool(&o.Zmesh)
		case 1:
			return d.base64(&o.ZitiKey)
		default:
			return d.base64(&o.ZmeshHello)
		}
	})
}

func (m *CircuitRequest) decodeJSON(d *decoder) bool {
	return d.object(circuitRequestKeys, func(k int) bool {
		switch k {
		case 0:
			return d.str(&m.RequestID)
		case 1:
			return d.str(&m.SessionToken)
		case 2:
			return d.str(&m.ServiceID)
		case 3:
			return d.str(&m.ServiceName)
		case 4:
			return d.str(&m.IngressIdentityID)
		case 5:
			return d.base64(&m.ClientCert)
		case 6:
			return d.str(&m.TerminatorIdentity)
		default:
			return d.e2ee(&m.E2EE)
		}
	})
}

var (
	circuitReplyKeys  = []string{"requestId", "circuitId", "path", "terminator", "serviceId", "encryptionRequired", "serviceName", "initiatorId", "hostZitiKey", "hostHello", "errorCode", "errorMessage"}
	terminatorRefKeys = []string{"id", "routerId", "binding", "address", "hostId"}
)

func (m *CircuitReply) decodeJSON(d *decoder) bool {
	return d.object(circuitReplyKeys, func(k int) bool {
		switch k {
		case 0:
			return d.str(&m.RequestID)
		case 1:
			return d.uint(&m.CircuitID)
		case 2:
			return d.strings(&m.Path)
		case 3:
			t := &m.Terminator
			return d.object(terminatorRefKeys, func(k int) bool {
				return d.str([]*string{&t.ID, &t.RouterID, &t.Binding, &t.Address, &t.HostID}[k])
			})
		case 4:
			return d.str(&m.ServiceID)
		case 5:
			return d.bool(&m.EncryptionRequired)
		case 6:
			return d.str(&m.ServiceName)
		case 7:
			return d.str(&m.InitiatorID)
		case 8:
			return d.base64(&m.HostZitiKey)
		case 9:
			return d.base64(&m.HostHello)
		default:
			return d.outcome(&m.Outcome, k-10)
		}
	})
}

var (
	routeKeys  = []string{"circuitId", "forward", "reverse", "timeout"}
	hopKeys    = []string{"router", "xgress"}
	xgressKeys = []string{"binding", "address", "initiatorId", "e2ee", "serviceId", "serviceName"}
)

func (d *decoder) hop(h *Hop) bool {
	return d.object(hopKeys, func(k int) bool {
		if k == 0 {
			return d.str(&h.Router)
		}
		x := new(Xgress)
		h.Xgress = x
		return d.object(xgressKeys, func(k int) bool {
			if k == 3 {
				return d.e2ee(&x.E2EE)
			}
			return d.str([]*string{&x.Binding, &x.Address, &x.InitiatorID, nil, &x.ServiceID, &x.ServiceName}[k])
		})
	})
}

func (m *Route) decodeJSON(d *decoder) bool {
	return d.object(routeKeys, func(k int) bool {
		switch k {
		case 0:
			return d.uint(&m.CircuitID)
		case 1:
			return d.hop(&m.Forward)
		case 2:
			return d.hop(&m.Reverse)
		default:
			var t int64
			ok := d.int(&t)
			m.Timeout = time.Duration(t)
			return ok
		}
	})
}

var routeReplyKeys = []string{"circuitId", "hostZitiKey", "hostHello", "errorCode", "errorMessage"}

func (m *RouteReply) decodeJSON(d *decoder) bool {
	return d.object(routeReplyKeys, func(k int) bool {
		switch k {
		case 0:
			return d.uint(&m.CircuitID)
		case 1:
			return d.base64(&m.HostZitiKey)
		case 2:
			return d.base64(&m.HostHello)
		default:
			return d.outcome(&m.Outcome, k-3)
		}
	})
}

var faultKeys = []string{"circuitId", "reason", "unrouted", "clean"}

func (m *Fault) decodeJSON(d *decoder) bool {
	return d.object(faultKeys, func(k int) bool {
		switch k {
		case 0:
			return d.uint(&m.CircuitID)
		case 1:
			return d.str(&m.Reason)
		case 2:
			return d.bool(&m.Unrouted)
		default:
			return d.bool(&m.Clean)
		}
	})
}

var unrouteKeys = []string{"circuitId", "reason"}

func (m *Unroute) decodeJSON(d *decoder) bool {
	return d.object(unrouteKeys, func(k int) bool {
		if k == 0 {
			return d.uint(&m.CircuitID)
		}
		return d.str(&m.Reason)
	})
}
