package tunnel

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"

	"github.com/zmesh/zmesh/tunnel/intercept"
)

// table builds the intercept table of services given as name → intercept.v1 JSON.
func table(t *testing.T, configs map[string]string) *interceptTable {
	t.Helper()
	services := map[string]*interceptedService{}
	for name, raw := range configs {
		cfg, err := ParseInterceptConfig(name, json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		services[name], _ = newInterceptedService(name, Service{ID: name, Name: name}, []byte(raw), cfg)
	}
	return buildTable(services)
}

// TestMatchPrecedence: names beat addresses, exact names beat wildcards, longer wildcards
// and prefixes beat shorter ones, narrower port ranges break ties, and the protocol and
// port must be claimed.
func TestMatchPrecedence(t *testing.T) {
	t.Parallel()
	tb := table(t, map[string]string{
		"host":    `{"protocols":["tcp"],"addresses":["web.zmesh.test"],"portRanges":[{"low":80,"high":80}]}`,
		"wild":    `{"protocols":["tcp","udp"],"addresses":["*.zmesh.test"],"portRanges":[{"low":1,"high":65535}]}`,
		"deeper":  `{"protocols":["tcp"],"addresses":["*.a.zmesh.test"],"portRanges":[{"low":1,"high":65535}]}`,
		"net16":   `{"protocols":["tcp"],"addresses":["10.1.0.0/16"],"portRanges":[{"low":1,"high":65535}]}`,
		"net24":   `{"protocols":["tcp"],"addresses":["10.1.2.0/24"],"portRanges":[{"low":1,"high":65535}]}`,
		"narrow":  `{"protocols":["tcp"],"addresses":["10.1.2.0/24"],"portRanges":[{"low":443,"high":443}]}`,
		"udponly": `{"protocols":["udp"],"addresses":["10.1.2.3"],"portRanges":[{"low":53,"high":53}]}`,
		"range":   `{"protocols":["tcp"],"addresses":["100.64.0.0/10"],"portRanges":[{"low":1,"high":65535}]}`,
	})
	for _, tc := range []struct {
		proto, dst, name  string
		service, hostname string
	}{
		{"tcp", "100.64.0.1:80", "web.zmesh.test", "host", "web.zmesh.test"},
		{"tcp", "100.64.0.1:81", "web.zmesh.test", "wild", "web.zmesh.test"},   // host claims port 80 only
		{"udp", "100.64.0.1:80", "web.zmesh.test", "wild", "web.zmesh.test"},   // host claims tcp only
		{"tcp", "100.64.0.2:80", "x.a.zmesh.test", "deeper", "x.a.zmesh.test"}, // longer wildcard
		{"tcp", "100.64.0.2:80", "a.zmesh.test", "deeper", "a.zmesh.test"},     // *.a.zmesh.test covers a.zmesh.test
		{"tcp", "100.64.0.3:80", "other.test", "range", ""},                    // no name match: address
		{"tcp", "100.64.0.3:80", "", "range", ""},
		{"tcp", "10.1.2.3:80", "", "net24", ""},
		{"tcp", "10.1.2.3:443", "", "narrow", ""},
		{"tcp", "10.1.3.3:443", "", "net16", ""},
		{"udp", "10.1.2.3:53", "", "udponly", ""},
		{"udp", "10.1.2.3:54", "", "", ""},
		{"tcp", "10.2.0.1:80", "", "", ""},
	} {
		is, hostname := tb.match(tc.proto, netip.MustParseAddrPort(tc.dst), tc.name, tc.name != "")
		got := ""
		if is != nil {
			got = is.svc.Name
		}
		if got != tc.service || hostname != tc.hostname {
			t.Errorf("%s %s (%q): got %q %q, want %q %q", tc.proto, tc.dst, tc.name, got, hostname, tc.service, tc.hostname)
		}
	}

	// The interception of an assigned address unites the services covering its name.
	want := dnsSpec{"tcp": {{Low: 1, High: 65535}}, "udp": {{Low: 1, High: 65535}}}
	if got := tb.dnsSpec("web.zmesh.test"); !reflect.DeepEqual(got, want) {
		t.Errorf("dnsSpec(web.zmesh.test) = %v, want %v", got, want)
	}
	tb = table(t, map[string]string{
		"a": `{"protocols":["tcp"],"addresses":["db.test"],"portRanges":[{"low":5432,"high":5432},{"low":80,"high":81}]}`,
		"b": `{"protocols":["tcp","udp"],"addresses":["*.test"],"portRanges":[{"low":82,"high":90},{"low":100,"high":100}]}`,
	})
	want = dnsSpec{"tcp": {{Low: 80, High: 90}, {Low: 100, High: 100}, {Low: 5432, High: 5432}},
		"udp": {{Low: 82, High: 90}, {Low: 100, High: 100}}}
	if got := tb.dnsSpec("db.test"); !reflect.DeepEqual(got, want) {
		t.Errorf("dnsSpec(db.test) = %v, want %v", got, want)
	}
	if got := tb.dnsSpec("nothing.example"); len(got) != 0 {
		t.Errorf("dnsSpec of a name no service covers: %v", got)
	}
}

func TestMergeRanges(t *testing.T) {
	t.Parallel()
	got := mergeRanges([]intercept.PortRange{{Low: 10, High: 20}, {Low: 65000, High: 65535}, {Low: 1, High: 5},
		{Low: 21, High: 22}, {Low: 15, High: 16}, {Low: 65535, High: 65535}})
	want := []intercept.PortRange{{Low: 1, High: 5}, {Low: 10, High: 22}, {Low: 65000, High: 65535}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
