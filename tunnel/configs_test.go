package tunnel

import (
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/tunnel/intercept"
)

func TestParseInterceptConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseInterceptConfig("web", json.RawMessage(`{
		"protocols": ["tcp", "UDP"],
		"addresses": ["10.1.2.3", "10.9.0.7/16", "Web.Example.COM.", "*.zmesh.test", "::ffff:10.1.2.3", "fd00::/8"],
		"portRanges": [{"low": 80, "high": 80}, {"low": 0, "high": 1024}],
		"dialOptions": {"identity": "$dst_protocol-$dst_ip-$dst_port", "connectTimeoutSeconds": 3},
		"sourceIp": "$src_ip",
		"allowedSourceAddresses": ["192.168.0.0/16"]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := InterceptConfig{
		Protocols: []string{"tcp", "udp"},
		Addresses: []Address{
			{Kind: AddressPrefix, Prefix: netip.MustParsePrefix("10.1.2.3/32")},
			{Kind: AddressPrefix, Prefix: netip.MustParsePrefix("10.9.0.0/16")},
			{Kind: AddressHostname, Name: "web.example.com"},
			{Kind: AddressWildcard, Name: "zmesh.test"},
			{Kind: AddressPrefix, Prefix: netip.MustParsePrefix("fd00::/8")},
		},
		PortRanges:     []intercept.PortRange{{Low: 80, High: 80}, {Low: 1, High: 1024}},
		DialIdentity:   "$dst_protocol-$dst_ip-$dst_port",
		ConnectTimeout: 3 * time.Second,
		Ignored:        []string{"sourceIp", "allowedSourceAddresses"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	if got := c.DialIdentityFor(AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: "80"}); got != "tcp-10.1.2.3-80" {
		t.Errorf("dial identity %q", got)
	}
	if !c.HandlesPort("udp", 1024) || c.HandlesPort("udp", 1025) {
		t.Error("HandlesPort disagrees with the port ranges")
	}
	for _, tc := range []struct {
		addr     string
		name, ip string
		match    bool
	}{
		{"*.zmesh.test", "a.b.zmesh.test", "", true},
		{"*.zmesh.test", "ZMESH.test.", "", true},
		{"*.zmesh.test", "xzmesh.test", "", false},
		{"web.example.com", "web.example.com", "", true},
		{"web.example.com", "a.web.example.com", "", false},
		{"10.9.0.0/16", "", "10.9.255.1", true},
		{"10.9.0.0/16", "", "10.10.0.1", false},
	} {
		a, err := parseAddress(tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		got := a.MatchName(tc.name)
		if tc.ip != "" {
			got = a.MatchIP(netip.MustParseAddr(tc.ip))
		}
		if got != tc.match || a.String() != strings.ToLower(tc.addr) {
			t.Errorf("%s (%s) matching %q%q: %v, want %v", tc.addr, a, tc.name, tc.ip, got, tc.match)
		}
	}

	// Without dialOptions the connect timeout is 5 s; with dialOptions but no timeout, 15 s.
	for raw, want := range map[string]time.Duration{
		`{"protocols":["tcp"],"addresses":["a"],"portRanges":[{"low":1,"high":2}]}`:                                           5 * time.Second,
		`{"protocols":["tcp"],"addresses":["a"],"portRanges":[{"low":1,"high":2}],"dialOptions":{}}`:                          15 * time.Second,
		`{"protocols":["tcp"],"addresses":["a"],"portRanges":[{"low":1,"high":2}],"dialOptions":{"connectTimeoutSeconds":0}}`: 15 * time.Second,
	} {
		c, err := ParseInterceptConfig("x", json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		if c.ConnectTimeout != want {
			t.Errorf("%s: connect timeout %v, want %v", raw, c.ConnectTimeout, want)
		}
	}
}

func TestParseInterceptConfigErrors(t *testing.T) {
	t.Parallel()
	const ok = `"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":2}]`
	for _, tc := range []struct{ raw, field string }{
		{`{"addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":2}]}`, "protocols"},
		{`{"protocols":[],"addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":2}]}`, "protocols"},
		{`{"protocols":["tcp","icmp"],"addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":2}]}`, "protocols[1]"},
		{`{"protocols":"tcp","addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":2}]}`, "protocols"},
		{`{"protocols":["tcp"],"portRanges":[{"low":1,"high":2}]}`, "addresses"},
		{`{"protocols":["tcp"],"addresses":["ok.com","bad name"],"portRanges":[{"low":1,"high":2}]}`, "addresses[1]"},
		{`{"protocols":["tcp"],"addresses":["1.2.3.4/56"],"portRanges":[{"low":1,"high":2}]}`, "addresses[0]"},
		{`{"protocols":["tcp"],"addresses":["*.*.com"],"portRanges":[{"low":1,"high":2}]}`, "addresses[0]"},
		{`{"protocols":["tcp"],"addresses":["a.*.com"],"portRanges":[{"low":1,"high":2}]}`, "addresses[0]"},
		{`{"protocols":["tcp"],"addresses":["-a.com"],"portRanges":[{"low":1,"high":2}]}`, "addresses[0]"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"]}`, "portRanges"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"high":2}]}`, "portRanges[0].low"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":2},{"low":1}]}`, "portRanges[1].high"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":9,"high":2}]}`, "portRanges[0]"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":-1,"high":2}]}`, "portRanges[0].low"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":0,"high":0}]}`, "portRanges[0].high"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":1,"high":65536}]}`, "portRanges[0].high"},
		{`{"protocols":["tcp"],"addresses":["10.0.0.1"],"portRanges":[{"low":"1","high":2}]}`, "portRanges.low"},
		{`{` + ok + `,"dialOptions":{"connectTimeoutSeconds":-1}}`, "dialOptions.connectTimeoutSeconds"},
		{`{` + ok + `,"dialOptions":{"identity":7}}`, "dialOptions.identity"},
		{`[]`, ""},
		{``, ""},
	} {
		_, err := ParseInterceptConfig("web", json.RawMessage(tc.raw))
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a ConfigError", tc.raw, err)
			continue
		}
		if ce.Field != tc.field || ce.Service != "web" || ce.ConfigType != InterceptV1 ||
			!strings.Contains(err.Error(), `service "web"`) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q names field %q, want %q", tc.raw, err, ce.Field, tc.field)
		}
	}
}

func TestParseHostConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseHostConfig("db", HostV1, json.RawMessage(`{"protocol":"tcp","address":"DB.Internal","port":5432,
		"listenOptions":{"connectTimeoutSeconds":2,"maxConnections":3},"httpChecks":[],"proxy":{"type":"http","address":"p:1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := HostConfig{Terminators: []HostTerminator{{Protocol: "tcp", Address: "db.internal", Port: 5432,
		ConnectTimeout: 2 * time.Second, Precedence: PrecedenceDefault,
		Ignored: []string{"httpChecks", "listenOptions.maxConnections", "proxy"}}}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("host.v1: got %+v\nwant %+v", c, want)
	}

	c, err = ParseHostConfig("web", HostV2, json.RawMessage(`{"terminators":[
		{"forwardProtocol":true,"allowedProtocols":["tcp","udp"],
		 "forwardAddress":true,"allowedAddresses":["10.0.0.0/8","*.zmesh.test","db.zmesh.test"],
		 "forwardPort":true,"allowedPortRanges":[{"low":80,"high":90}],
		 "listenOptions":{"precedence":"required","cost":7,"connectTimeout":"250ms","connectTimeoutSeconds":9}},
		{"protocol":"udp","address":"10.0.0.1","port":53}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want = HostConfig{Terminators: []HostTerminator{
		{ForwardProtocol: true, AllowedProtocols: []string{"tcp", "udp"},
			ForwardAddress: true, AllowedAddresses: []Address{
				{Kind: AddressPrefix, Prefix: netip.MustParsePrefix("10.0.0.0/8")},
				{Kind: AddressWildcard, Name: "zmesh.test"},
				{Kind: AddressHostname, Name: "db.zmesh.test"}},
			ForwardPort: true, AllowedPortRanges: []intercept.PortRange{{Low: 80, High: 90}},
			ConnectTimeout: 250 * time.Millisecond, Precedence: PrecedenceRequired, Cost: 7},
		{Protocol: "udp", Address: "10.0.0.1", Port: 53, ConnectTimeout: DefaultHostConnectTimeout, Precedence: PrecedenceDefault},
	}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("host.v2: got %+v\nwant %+v", c, want)
	}

	fwd := c.Terminators[0]
	for _, tc := range []struct {
		app     AppData
		want    Target
		allowed bool
	}{
		{AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: "80"}, Target{"tcp", "10.1.2.3", 80}, true},
		{AppData{Protocol: "UDP", DstIP: "10.1.2.3", DstHostname: "A.zmesh.test", DstPort: "90"}, Target{"udp", "a.zmesh.test", 90}, true},
		{AppData{Protocol: "tcp", DstHostname: "zmesh.test", DstPort: "85"}, Target{"tcp", "zmesh.test", 85}, true},
		{AppData{Protocol: "tcp", DstHostname: "db.zmesh.test", DstPort: "85"}, Target{"tcp", "db.zmesh.test", 85}, true},
		{AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: "91"}, Target{}, false},            // port
		{AppData{Protocol: "tcp", DstIP: "11.1.2.3", DstPort: "80"}, Target{}, false},            // address
		{AppData{Protocol: "tcp", DstHostname: "a.example.com", DstPort: "80"}, Target{}, false}, // hostname
		{AppData{Protocol: "sctp", DstIP: "10.1.2.3", DstPort: "80"}, Target{}, false},           // protocol
		{AppData{DstIP: "10.1.2.3", DstPort: "80"}, Target{}, false},                             // no protocol
		{AppData{Protocol: "tcp", DstPort: "80"}, Target{}, false},                               // no address
		{AppData{Protocol: "tcp", DstIP: "10.1.2.3"}, Target{}, false},                           // no port
		{AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: "http"}, Target{}, false},          // bad port
		{AppData{Protocol: "tcp", DstIP: "10.1.2.x", DstPort: "80"}, Target{}, false},            // bad address
	} {
		got, err := fwd.Target(tc.app)
		if tc.allowed && (err != nil || got != tc.want) {
			t.Errorf("%+v: got %v, %v; want %v", tc.app, got, err, tc.want)
		}
		if !tc.allowed && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%+v: got %v, %v; want ErrNotAllowed", tc.app, got, err)
		}
	}
	fixed := c.Terminators[1]
	if got, err := fixed.Target(AppData{}); err != nil || got.String() != "udp:10.0.0.1:53" {
		t.Errorf("fixed terminator without app data: %v, %v", got, err)
	}
	if _, err := fixed.Target(AppData{Protocol: "tcp"}); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("a tcp circuit to a udp terminator: %v, want ErrNotAllowed", err)
	}

	// host.v2 wins over host.v1 on the same service.
	svc := service("s", false, true, map[string]string{
		HostV1: `{"protocol":"tcp","address":"a","port":1}`,
		HostV2: `{"terminators":[{"protocol":"tcp","address":"b","port":2}]}`})
	if c, ok, err := HostConfigOf(svc); !ok || err != nil || c.Terminators[0].Address != "b" {
		t.Errorf("HostConfigOf: %+v %v %v", c, ok, err)
	}
	if _, ok, _ := HostConfigOf(service("s", true, false, nil)); ok {
		t.Error("HostConfigOf found a config on a service without one")
	}
}

func TestParseHostConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ typ, raw, field string }{
		{HostV1, `{"address":"a","port":1}`, "protocol"},
		{HostV1, `{"protocol":"icmp","address":"a","port":1}`, "protocol"},
		{HostV1, `{"protocol":"tcp","forwardProtocol":true,"allowedProtocols":["tcp"],"address":"a","port":1}`, "protocol"},
		{HostV1, `{"forwardProtocol":true,"address":"a","port":1}`, "allowedProtocols"},
		{HostV1, `{"forwardProtocol":true,"allowedProtocols":["tcp","x"],"address":"a","port":1}`, "allowedProtocols[1]"},
		{HostV1, `{"protocol":"tcp","port":1}`, "address"},
		{HostV1, `{"protocol":"tcp","address":"10.0.0.0/8","port":1}`, "address"},
		{HostV1, `{"protocol":"tcp","address":"*.a.com","port":1}`, "address"},
		{HostV1, `{"protocol":"tcp","address":"a","forwardAddress":true,"allowedAddresses":["a"],"port":1}`, "address"},
		{HostV1, `{"protocol":"tcp","forwardAddress":true,"port":1}`, "allowedAddresses"},
		{HostV1, `{"protocol":"tcp","forwardAddress":true,"allowedAddresses":["a","b c"],"port":1}`, "allowedAddresses[1]"},
		{HostV1, `{"protocol":"tcp","address":"a"}`, "port"},
		{HostV1, `{"protocol":"tcp","address":"a","port":0}`, "port"},
		{HostV1, `{"protocol":"tcp","address":"a","port":70000}`, "port"},
		{HostV1, `{"protocol":"tcp","address":"a","port":"80"}`, "port"},
		{HostV1, `{"protocol":"tcp","address":"a","port":1,"forwardPort":true,"allowedPortRanges":[{"low":1,"high":2}]}`, "port"},
		{HostV1, `{"protocol":"tcp","address":"a","forwardPort":true}`, "allowedPortRanges"},
		{HostV1, `{"protocol":"tcp","address":"a","forwardPort":true,"allowedPortRanges":[{"low":5,"high":2}]}`, "allowedPortRanges[0]"},
		{HostV1, `{"protocol":"tcp","address":"a","port":1,"listenOptions":{"precedence":"first"}}`, "listenOptions.precedence"},
		{HostV1, `{"protocol":"tcp","address":"a","port":1,"listenOptions":{"cost":65536}}`, "listenOptions.cost"},
		{HostV1, `{"protocol":"tcp","address":"a","port":1,"listenOptions":{"connectTimeout":"soon"}}`, "listenOptions.connectTimeout"},
		{HostV1, `{"protocol":"tcp","address":"a","port":1,"listenOptions":{"connectTimeoutSeconds":-5}}`, "listenOptions.connectTimeoutSeconds"},
		{HostV2, `{}`, "terminators"},
		{HostV2, `{"terminators":[]}`, "terminators"},
		{HostV2, `{"terminators":{}}`, "terminators"},
		{HostV2, `{"terminators":[{"protocol":"tcp","address":"a","port":1},{"protocol":"tcp","address":"a"}]}`, "terminators[1].port"},
		{HostV2, `{"terminators":[{"protocol":"tcp","address":"a","port":1},{"protocol":"tcp","address":"a","port":true}]}`, "terminators[1].port"},
		{"proxy.v1", `{}`, ""},
	} {
		_, err := ParseHostConfig("db", tc.typ, json.RawMessage(tc.raw))
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s %s: got %v, want a ConfigError", tc.typ, tc.raw, err)
			continue
		}
		if ce.Field != tc.field || ce.Service != "db" || ce.ConfigType != tc.typ || !strings.Contains(err.Error(), `service "db"`) {
			t.Errorf("%s %s: error %q names field %q, want %q", tc.typ, tc.raw, err, ce.Field, tc.field)
		}
	}
}

func TestDatagramConn(t *testing.T) {
	t.Parallel()
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	da, db := NewDatagramConn(a), NewDatagramConn(b)
	go func() {
		for _, n := range []int{3, 0, MaxDatagram, 10} {
			da.WriteDatagram(make([]byte, n))
		}
		a.Write([]byte{0, 5, 'x'}) // a frame cut short
		a.(closeWriter).CloseWrite()
	}()
	if err := da.WriteDatagram(make([]byte, MaxDatagram+1)); !errors.Is(err, ErrDatagramTooLong) {
		t.Errorf("writing a datagram too long: %v", err)
	}
	buf := make([]byte, MaxDatagram)
	for _, want := range []int{3, 0, MaxDatagram} {
		if n, err := db.ReadDatagram(buf); n != want || err != nil {
			t.Fatalf("read %d, %v; want %d", n, err, want)
		}
	}
	if _, err := db.ReadDatagram(buf[:5]); !errors.Is(err, ErrDatagramTooLong) {
		t.Fatalf("10 bytes into 5: %v", err)
	}
	if _, err := db.ReadDatagram(buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
}
