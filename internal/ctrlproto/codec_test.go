package ctrlproto

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// fastTypes are the message types with their own encoder and decoder.
var fastTypes = []Type{TypeCircuitRequest, TypeCircuitReply, TypeRoute, TypeRouteReply, TypeFault, TypeUnroute}

// sampleStrings hold what needs no escaping and what does, for encoding/json to write.
var sampleStrings = []string{"", "web", "0b4f6f1e-8c53-4a57-9d4e-1c3f2b9a7e10", "127.0.0.1:8080", "tls:host:443",
	`quote"d`, `back\slash`, "tab\there", "<html>", "a&b", "ünïcødé", "\u2028", "\x7f", "bad\xffutf8", "nul\x00"}

var sampleRaw = []json.RawMessage{nil, json.RawMessage(`{"dst":"10.0.0.1:80"}`), json.RawMessage(" { \"a\" : [1, 2.5, null, true] } "),
	json.RawMessage(`"<tag>"`), json.RawMessage(`{"k":"é"}`), json.RawMessage(`42`), json.RawMessage(`{invalid`)}

func randomMessage(tb testing.TB, r *rand.Rand, t Type) Message {
	s := func() string { return sampleStrings[r.IntN(len(sampleStrings))] }
	u := func() uint64 {
		switch r.IntN(3) {
		case 0:
			return 0
		case 1:
			return r.Uint64()
		}
		return uint64(r.IntN(1000))
	}
	outcome := func() Outcome { return Outcome{ErrorCode: s(), ErrorMessage: s()} }
	raw := func() json.RawMessage { return sampleRaw[r.IntN(len(sampleRaw))] }
	key := func() []byte {
		if r.IntN(2) == 0 {
			return nil
		}
		k := make([]byte, r.IntN(ZitiKeySize+1))
		for i := range k {
			k[i] = byte(r.Uint32())
		}
		return k
	}
	offer := func() *E2EEOffer {
		if r.IntN(2) == 0 {
			return nil
		}
		return &E2EEOffer{Zmesh: r.IntN(2) == 0, ZitiKey: key(), ZmeshHello: key()}
	}
	xgress := func() *Xgress {
		if r.IntN(2) == 0 {
			return nil
		}
		return &Xgress{Binding: s(), Address: s(), InitiatorID: s(), AppData: raw(), E2EE: offer()}
	}
	switch t {
	case TypeCircuitRequest:
		m := &CircuitRequest{RequestID: s(), SessionToken: s(), ServiceID: s(), ServiceName: s(), IngressIdentityID: s(),
			TerminatorIdentity: s(), AppData: raw(), E2EE: offer()}
		if r.IntN(2) == 0 {
			m.ClientCert = []byte(s())
		}
		return m
	case TypeCircuitReply:
		m := &CircuitReply{RequestID: s(), CircuitID: u(), Outcome: outcome(), ServiceID: s(), EncryptionRequired: r.IntN(2) == 0,
			HostAnswer: HostAnswer{HostZitiKey: key(), HostHello: key()},
			Terminator: TerminatorRef{ID: s(), RouterID: s(), Binding: s(), Address: s(), HostID: s()}}
		for range r.IntN(3) {
			m.Path = append(m.Path, s())
		}
		return m
	case TypeRoute:
		return &Route{CircuitID: u(), Forward: Hop{Router: s(), Xgress: xgress()}, Reverse: Hop{Router: s(), Xgress: xgress()},
			Timeout: time.Duration(int64(u()))}
	case TypeRouteReply:
		return &RouteReply{CircuitID: u(), HostAnswer: HostAnswer{HostZitiKey: key(), HostHello: key()}, Outcome: outcome()}
	case TypeFault:
		return &Fault{CircuitID: u(), Reason: s(), Unrouted: r.IntN(2) == 0, Clean: r.IntN(2) == 0}
	case TypeUnroute:
		return &Unroute{CircuitID: u(), Reason: s()}
	}
	tb.Fatalf("%s is not a fast type", t)
	return nil
}

// TestFastCodecMatchesJSON checks that the fast encoders write what encoding/json writes,
// byte for byte, and that the fast decoders read it back as encoding/json does.
func TestFastCodecMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 20000 {
		typ := fastTypes[i%len(fastTypes)]
		m := randomMessage(t, r, typ)
		want, wantErr := json.Marshal(m)
		got, err := encodeBody(m)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("%s %+v: encoded %s (%v), encoding/json %s (%v)", typ, m, got, err, want, wantErr)
		}
		if _, ok := m.(fastMessage).appendJSON(nil); ok {
			fast++
		}
		if err != nil {
			continue
		}
		checkDecode(t, typ, got)
	}
	if fast < 2000 {
		t.Errorf("only %d of the messages took the fast encoder", fast)
	}
}

// checkDecode checks that decodeBody reads body as encoding/json does.
func checkDecode(t *testing.T, typ Type, body []byte) {
	t.Helper()
	want := newMessage(typ)
	wantErr := json.Unmarshal(body, want)
	got, err := decodeBody(typ, body)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s %q: error %v, encoding/json %v", typ, body, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %q: decoded %+v, encoding/json %+v", typ, body, got, want)
	}
}

// TestFastDecodeOtherShapes feeds the decoders JSON the encoders never write, and JSON that
// is not valid: every body decodes as encoding/json decodes it.
func TestFastDecodeOtherShapes(t *testing.T) {
	bodies := map[Type][]string{
		TypeCircuitRequest: {
			`{"requestId":"1","serviceName":"web"}`,
			` { "requestId" : "1" , "serviceName" : "web" } `,
			`{"RequestID":"1","SERVICENAME":"web"}`,
			`{"requestId":"1","unknown":{"a":[1,2]},"serviceName":"web"}`,
			`{"requestId":"1","requestId":"2"}`,
			`{"requestId":"\u0031","serviceName":"w\"eb"}`,
			`{"requestId":null,"serviceName":"web"}`,
			`{"requestId":"1","clientCert":"aGVsbG8="}`,
			`{"requestId":"1","clientCert":"aGVs\nbG8="}`,
			`{"requestId":"1","clientCert":""}`,
			`{"requestId":"1","clientCert":"!!"}`,
			`{"requestId":"1","appData":{"dst":"x"}}`,
			`{"requestId":"1","e2ee":{"zmesh":true,"zitiKey":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}}`,
			`{"requestId":"1","e2ee":{}}`,
			`{"requestId":"1","e2ee":null}`,
			`{"requestId":"1","e2ee":{"zmesh":false,"zitiKey":""}}`,
			`{"requestId":"1","e2ee":{"zitiKey":"AAEC","zitiKey":"AAEC"}}`,
			`{"requestId":"1","e2ee":{"zmesh":"yes"}}`,
			`{"requestId":"1","e2ee":true}`,
			`{"requestId":"1","serviceName":"bad` + "\xff" + `"}`,
			`{"requestId":"1","serviceName":"ctl` + "\x01" + `"}`,
			`{"requestId":"1"} x`,
			`{"requestId":"1",}`,
			`{"requestId":1}`,
			`{}`, `null`, `[]`, `{`, `"x"`,
		},
		TypeCircuitReply: {
			`{"requestId":"1","circuitId":18446744073709551615,"path":["a","b"],"terminator":{"id":"t","address":"x"}}`,
			`{"requestId":"1","circuitId":18446744073709551616}`,
			`{"requestId":"1","circuitId":-1}`,
			`{"requestId":"1","circuitId":1.0}`,
			`{"requestId":"1","circuitId":1e3}`,
			`{"requestId":"1","circuitId":01}`,
			`{"requestId":"1","path":[]}`,
			`{"requestId":"1","path":null}`,
			`{"requestId":"1","path":["a",]}`,
			`{"requestId":"1","terminator":{}}`,
			`{"requestId":"1","terminator":null}`,
			`{"requestId":"1","terminator":{"id":"a","ID":"b"}}`,
			`{"requestId":"1","errorCode":"NO_PATH","errorMessage":"none"}`,
			`{"requestId":"1","hostZitiKey":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}`,
			`{"requestId":"1","hostZitiKey":null}`,
		},
		TypeRoute: {
			`{"circuitId":5,"forward":{"xgress":{"binding":"proxy","address":"tcp:x:1"}},"reverse":{"router":"r2"},"timeout":1000}`,
			`{"circuitId":5,"forward":{"xgress":null},"reverse":{},"timeout":-9223372036854775808}`,
			`{"circuitId":5,"timeout":-9223372036854775809}`,
			`{"circuitId":5,"timeout":9223372036854775807}`,
			`{"circuitId":5,"timeout":9223372036854775808}`,
			`{"circuitId":5,"timeout":-0}`,
			`{"circuitId":5,"timeout":- 1}`,
			`{"circuitId":5,"timeout":--1}`,
			`{"circuitId":5,"forward":{"router":"a","router":"b"}}`,
			`{"circuitId":5,"forward":{"xgress":{"binding":"edge","appData":{"a":1}}}}`,
			`{"circuitId":5,"forward":{"xgress":{"binding":"edge","e2ee":{"zmesh":true}}}}`,
			`{"circuitId":5,"forward":{"xgress":{"binding":"edge","e2ee":{"zitiKey":"AAEC"},"address":"x"}}}`,
			`{"circuitId":5,"forward":{"xgress":{"binding":"edge","e2ee":[]}}}`,
		},
		TypeRouteReply: {`{"circuitId":5}`, `{"circuitId":5,"errorCode":"DIAL_FAILED"}`, `{"circuitId":"5"}`,
			`{"circuitId":5,"hostZitiKey":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}`, `{"circuitId":5,"hostZitiKey":"AA=A"}`},
		TypeFault: {
			`{"circuitId":5,"reason":"closed","unrouted":true}`,
			`{"circuitId":5,"reason":"closed","unrouted":false}`,
			`{"circuitId":5,"reason":"closed","unrouted":true,"clean":true}`,
			`{"circuitId":5,"clean":1}`,
			`{"circuitId":5,"unrouted":truex}`,
			`{"circuitId":5,"unrouted":tru}`,
			`{"circuitId":5,"unrouted":1}`,
		},
		TypeUnroute: {`{"circuitId":5,"reason":"x"}`, `{"circuitId":5,"reason":"x","extra":1}`},
	}
	for typ, list := range bodies {
		for _, b := range list {
			checkDecode(t, typ, []byte(b))
		}
	}
}

// TestCodecsCurrent: every codec writes every field of its types. (A field added to a message
// and not to its codec makes the message go through encoding/json, slower but whole.)
func TestCodecsCurrent(t *testing.T) {
	for typ, types := range codecTypes {
		for _, rt := range types {
			if !slices.Equal(jsonFields(rt), codecFields[rt]) {
				t.Errorf("%s: the codec writes %v; encoding/json writes %v", rt, codecFields[rt], jsonFields(rt))
			}
		}
		if !currentCodecs[typ] {
			t.Errorf("%s goes through encoding/json", typ)
		}
	}
}

// fill sets every field of v, recursively, to a value that is not empty.
func fill(tb testing.TB, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(tb, v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(tb, v.Elem())
	case reflect.String:
		v.SetString("value")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint64:
		v.SetUint(7)
	case reflect.Slice:
		switch {
		case v.Type() == reflect.TypeFor[json.RawMessage]():
			v.SetBytes([]byte(`{"k":[1,"x"]}`))
		case v.Type().Elem().Kind() == reflect.Uint8:
			v.SetBytes([]byte("bytes"))
		default:
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			fill(tb, v.Index(0))
			fill(tb, v.Index(1))
		}
	default:
		tb.Fatalf("fill: no value for %s", v.Type())
	}
}

// TestFastCodecEveryField encodes and decodes messages with every field set.
func TestFastCodecEveryField(t *testing.T) {
	for _, typ := range fastTypes {
		m := newMessage(typ)
		fill(t, reflect.ValueOf(m).Elem())
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := m.(fastMessage).appendJSON(nil)
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("%s: fast encoder (ok %v) wrote %s; encoding/json %s", typ, ok, got, want)
		}
		checkDecode(t, typ, want)
	}
}

// FuzzFastDecode checks that the fast decoders read any body as encoding/json does.
func FuzzFastDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 60 {
		typ := fastTypes[i%len(fastTypes)]
		if b, err := encodeBody(randomMessage(f, r, typ)); err == nil {
			f.Add(uint8(i), b)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		checkDecode(t, fastTypes[int(which)%len(fastTypes)], body)
	})
}

func BenchmarkCodec(b *testing.B) {
	route := &Route{CircuitID: 1234567890123, Forward: Hop{Xgress: &Xgress{Binding: "proxy", Address: "127.0.0.1:40000", InitiatorID: "a1B2c3D4e5"}},
		Reverse: Hop{Router: "f6G7h8I9j0"}, Timeout: 10 * time.Second}
	body, _ := json.Marshal(route)
	b.Run("encode/fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeBody(route)
		}
	})
	b.Run("encode/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(route)
		}
	})
	b.Run("decode/fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decodeBody(TypeRoute, body)
		}
	})
	b.Run("decode/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Unmarshal(body, new(Route))
		}
	})
}
