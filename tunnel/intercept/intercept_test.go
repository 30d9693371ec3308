package intercept

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Table != DefaultTable || o.Mark != DefaultMark || o.BypassMark != DefaultBypassMark ||
		o.RouteTable != DefaultRouteTable || o.RulePriority != DefaultRulePriority ||
		o.Listen != netip.MustParseAddrPort(DefaultListen) || o.Logger == nil {
		t.Errorf("defaults: got %+v", o)
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Mark: 7, BypassMark: 7}, "they must differ"},
		{Options{Mark: DefaultBypassMark}, "they must differ"},
		{Options{RouteTable: 254}, "route table 254 is reserved"},
		{Options{RouteTable: -1}, "route table -1"},
		{Options{RulePriority: -5}, "rule priority -5"},
		{Options{Listen: netip.MustParseAddrPort("[::1]:0")}, "listen address [::1]:0 is not IPv4"},
		{Options{Table: "a\x00b"}, "table name"},
	} {
		_, err := c.opts.withDefaults()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got error %v, want one containing %q", c.opts, err, c.want)
		}
	}
}

func TestInterceptionNormalize(t *testing.T) {
	ic, err := Interception{
		Prefixes:  []netip.Prefix{netip.MustParsePrefix("10.77.0.9/24"), netip.MustParsePrefix("::ffff:10.1.2.3/128"), netip.MustParsePrefix("10.77.0.0/24")},
		Ports:     []PortRange{{80, 81}, {5300, 5300}, {80, 81}},
		Protocols: []string{TCP, UDP, TCP},
	}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := Interception{
		Prefixes:  []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24"), netip.MustParsePrefix("10.1.2.3/32")},
		Ports:     []PortRange{{80, 81}, {5300, 5300}},
		Protocols: []string{TCP, UDP},
	}
	if !reflect.DeepEqual(ic, want) {
		t.Errorf("got %+v, want %+v", ic, want)
	}

	v4 := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, c := range []struct {
		ic   Interception
		want string
	}{
		{Interception{Ports: []PortRange{{1, 2}}, Protocols: []string{TCP}}, "no prefixes"},
		{Interception{Prefixes: v4, Protocols: []string{TCP}}, "no ports"},
		{Interception{Prefixes: v4, Ports: []PortRange{{1, 2}}}, "no protocols"},
		{Interception{Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}, Ports: []PortRange{{1, 2}}, Protocols: []string{TCP}}, "prefix fd00::/64: only IPv4 is supported"},
		{Interception{Prefixes: []netip.Prefix{{}}, Ports: []PortRange{{1, 2}}, Protocols: []string{TCP}}, "not valid"},
		{Interception{Prefixes: v4, Ports: []PortRange{{0, 2}}, Protocols: []string{TCP}}, "port range 0-2 is not valid"},
		{Interception{Prefixes: v4, Ports: []PortRange{{9, 8}}, Protocols: []string{TCP}}, "port range 9-8 is not valid"},
		{Interception{Prefixes: v4, Ports: []PortRange{{1, 2}}, Protocols: []string{"sctp"}}, `protocol "sctp"`},
	} {
		_, err := c.ic.normalize()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got error %v, want one containing %q", c.ic, err, c.want)
		}
	}
}

func TestValidID(t *testing.T) {
	if err := validID("svc-1"); err != nil {
		t.Error(err)
	}
	if err := validID(""); err == nil {
		t.Error("empty id accepted")
	}
	if err := validID(strings.Repeat("x", maxIDLen+1)); err == nil {
		t.Error("long id accepted")
	}
}
