package tunnel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zmesh/zmesh/tunnel/intercept"
)

// The service config types the tunnel reads (OpenZiti's schemas). Fields of the schemas that
// the tunnel does not honor are listed in InterceptConfig.Ignored and HostTerminator.Ignored
// when a config sets them; fields the schemas do not know are ignored silently, the
// controller having validated the configs against the schemas already.
const (
	InterceptV1 = "intercept.v1"
	HostV1      = "host.v1"
	HostV2      = "host.v2"
)

// Defaults of the configs' timeouts.
const (
	// DefaultInterceptConnectTimeout bounds the overlay dial of an intercepted connection when
	// the intercept.v1 config has no dialOptions.
	DefaultInterceptConnectTimeout = 5 * time.Second
	// DefaultDialOptionsConnectTimeout bounds it when dialOptions are given without
	// connectTimeoutSeconds.
	DefaultDialOptionsConnectTimeout = 15 * time.Second
	// DefaultHostConnectTimeout bounds the dial of a hosted service's target.
	DefaultHostConnectTimeout = 5 * time.Second
)

// Precedences a host config's listenOptions may give.
const (
	PrecedenceDefault  = "default"
	PrecedenceRequired = "required"
	PrecedenceFailed   = "failed"
)

// ConfigError is a config that cannot be used, naming the service, the config type and the
// offending field (such as addresses[2] or terminators[0].allowedPortRanges[1].low).
type ConfigError struct {
	Service    string
	ConfigType string
	Field      string
	Problem    string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("service %q: %s: %s", e.Service, e.ConfigType, e.Problem)
	}
	return fmt.Sprintf("service %q: %s %s: %s", e.Service, e.ConfigType, e.Field, e.Problem)
}

// AddressKind tells what an Address holds.
type AddressKind int

const (
	// AddressPrefix is an IP address (a prefix of full length) or a CIDR range.
	AddressPrefix AddressKind = iota
	// AddressHostname is an exact DNS name.
	AddressHostname
	// AddressWildcard is *.domain: the domain and every name below it, at any depth.
	AddressWildcard
)

// Address is an entry of intercept.v1 addresses or of host allowedAddresses.
type Address struct {
	Kind AddressKind
	// Prefix is the IP address or range of an AddressPrefix (masked, IPv4 unmapped).
	Prefix netip.Prefix
	// Name is the hostname of an AddressHostname, or the domain (without "*.") of an
	// AddressWildcard; lower case without trailing dot.
	Name string
}

// String returns the address as a config writes it.
func (a Address) String() string {
	switch a.Kind {
	case AddressHostname:
		return a.Name
	case AddressWildcard:
		return "*." + a.Name
	}
	if a.Prefix.IsSingleIP() {
		return a.Prefix.Addr().String()
	}
	return a.Prefix.String()
}

// MatchIP reports whether ip lies in an AddressPrefix.
func (a Address) MatchIP(ip netip.Addr) bool {
	return a.Kind == AddressPrefix && a.Prefix.Contains(ip.Unmap())
}

// MatchName reports whether name is an AddressHostname's name or lies under an
// AddressWildcard (the domain itself included). Case and a trailing dot do not matter.
func (a Address) MatchName(name string) bool {
	name = canonicalName(name)
	switch a.Kind {
	case AddressHostname:
		return name == a.Name
	case AddressWildcard:
		return name == a.Name || strings.HasSuffix(name, "."+a.Name)
	}
	return false
}

// InterceptConfig is a parsed intercept.v1 config: what the tproxy tunnel intercepts for a
// service it may dial.
type InterceptConfig struct {
	Protocols  []string // intercept.TCP and/or intercept.UDP
	Addresses  []Address
	PortRanges []intercept.PortRange // a range from port 0 starts at port 1
	// DialIdentity is dialOptions.identity, a template; see DialIdentityFor.
	DialIdentity string
	// ConnectTimeout bounds the overlay dial (dialOptions.connectTimeoutSeconds; 0 there
	// means the default).
	ConnectTimeout time.Duration
	// Ignored names the fields the config sets that the tunnel does not honor: sourceIp
	// (the hosting end does not spoof source addresses) and allowedSourceAddresses (every
	// source is intercepted).
	Ignored []string
}

// HandlesPort reports whether the config intercepts protocol on port.
func (c InterceptConfig) HandlesPort(protocol string, port uint16) bool {
	return slices.Contains(c.Protocols, protocol) && rangeWidth(c.PortRanges, port) > 0
}

// DialIdentityFor returns DialIdentity with $dst_protocol, $dst_ip and $dst_port replaced by
// the values of app.
func (c InterceptConfig) DialIdentityFor(app AppData) string {
	if c.DialIdentity == "" {
		return ""
	}
	return strings.NewReplacer("$dst_protocol", app.Protocol, "$dst_ip", app.DstIP, "$dst_port", app.DstPort).
		Replace(c.DialIdentity)
}

// rangeWidth returns the number of ports of the narrowest range of rs holding port, or 0
// when none does.
func rangeWidth(rs []intercept.PortRange, port uint16) int {
	w := 0
	for _, r := range rs {
		if r.Low <= port && port <= r.High {
			if n := int(r.High-r.Low) + 1; w == 0 || n < w {
				w = n
			}
		}
	}
	return w
}

// ParseInterceptConfig parses the intercept.v1 config raw of service.
func ParseInterceptConfig(service string, raw json.RawMessage) (InterceptConfig, error) {
	var j struct {
		Protocols   []string        `json:"protocols"`
		Addresses   []string        `json:"addresses"`
		PortRanges  []jsonPortRange `json:"portRanges"`
		DialOptions *struct {
			Identity              string `json:"identity"`
			ConnectTimeoutSeconds *int64 `json:"connectTimeoutSeconds"`
		} `json:"dialOptions"`
		SourceIP               *string         `json:"sourceIp"`
		AllowedSourceAddresses json.RawMessage `json:"allowedSourceAddresses"`
	}
	fail := func(field, format string, args ...any) error {
		return &ConfigError{Service: service, ConfigType: InterceptV1, Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	if err := decode(raw, &j); err != nil {
		return InterceptConfig{}, decodeError(service, InterceptV1, "", err)
	}
	var c InterceptConfig
	var err error
	if c.Protocols, err = parseProtocols(j.Protocols, "protocols", fail); err != nil {
		return InterceptConfig{}, err
	}
	if len(j.Addresses) == 0 {
		return InterceptConfig{}, fail("addresses", "missing or empty; give at least one IP, CIDR, hostname or *.domain")
	}
	for i, s := range j.Addresses {
		a, err := parseAddress(s)
		if err != nil {
			return InterceptConfig{}, fail(fmt.Sprintf("addresses[%d]", i), "%v", err)
		}
		if !slices.Contains(c.Addresses, a) {
			c.Addresses = append(c.Addresses, a)
		}
	}
	if c.PortRanges, err = parsePortRanges(j.PortRanges, "portRanges", fail); err != nil {
		return InterceptConfig{}, err
	}
	c.ConnectTimeout = DefaultInterceptConnectTimeout
	if o := j.DialOptions; o != nil {
		c.DialIdentity = o.Identity
		c.ConnectTimeout = DefaultDialOptionsConnectTimeout
		if s := o.ConnectTimeoutSeconds; s != nil {
			switch {
			case *s < 0 || *s > 1<<31-1:
				return InterceptConfig{}, fail("dialOptions.connectTimeoutSeconds", "%d is not within 0-2147483647", *s)
			case *s > 0:
				c.ConnectTimeout = time.Duration(*s) * time.Second
			}
		}
	}
	if j.SourceIP != nil {
		c.Ignored = append(c.Ignored, "sourceIp")
	}
	if present(j.AllowedSourceAddresses) {
		c.Ignored = append(c.Ignored, "allowedSourceAddresses")
	}
	return c, nil
}

// HostConfig is a parsed host.v1 config (one terminator) or host.v2 config (a list): how the
// hosting tunnel reaches a service it may bind.
type HostConfig struct {
	Terminators []HostTerminator
}

// HostTerminator is one way of reaching a hosted service. Each of protocol, address and port
// is either fixed, or forwarded from the dialing end's AppData and then checked against
// the allowed set.
type HostTerminator struct {
	Protocol         string // when !ForwardProtocol
	ForwardProtocol  bool
	AllowedProtocols []string // when ForwardProtocol

	Address          string // IP or hostname, when !ForwardAddress
	ForwardAddress   bool
	AllowedAddresses []Address // when ForwardAddress

	Port              uint16 // when !ForwardPort
	ForwardPort       bool
	AllowedPortRanges []intercept.PortRange // when ForwardPort

	// ConnectTimeout bounds the dial of the target (listenOptions.connectTimeout, or
	// connectTimeoutSeconds; DefaultHostConnectTimeout when neither).
	ConnectTimeout time.Duration
	// Precedence and Cost are listenOptions.precedence (PrecedenceDefault when unset) and
	// listenOptions.cost (0 when unset).
	Precedence string
	Cost       uint16

	// Ignored names the fields the config sets that the tunnel does not honor:
	// allowedSourceAddresses, forwardAddressTranslations, httpChecks, portChecks, proxy,
	// and listenOptions.identity, bindUsingEdgeIdentity and maxConnections.
	Ignored []string
}

// Target is where a hosted circuit goes.
type Target struct {
	Protocol string // intercept.TCP or intercept.UDP
	Address  string // IP or hostname
	Port     uint16
}

// String returns protocol:host:port.
func (t Target) String() string {
	return t.Protocol + ":" + netJoin(t.Address, t.Port)
}

func netJoin(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// ErrNotAllowed is wrapped by the errors of Target for circuits the terminator refuses.
var ErrNotAllowed = errors.New("not allowed by the host config")

// Target returns where a circuit with app goes, or an error wrapping ErrNotAllowed when a
// forwarded protocol, address or port is missing from app or outside the allowed sets.
// A forwarded address is app's DstHostname when set (it must match a hostname or wildcard of
// AllowedAddresses), else its DstIP (which must lie in an IP or CIDR of them). A fixed
// protocol must agree with app's protocol, when app has one: a circuit carrying UDP
// datagrams (see DatagramConn) cannot feed a TCP target, nor a byte stream a UDP one.
func (t HostTerminator) Target(app AppData) (Target, error) {
	var tg Target
	appProto := strings.ToLower(app.Protocol)
	switch {
	case t.ForwardProtocol && appProto == "":
		return tg, fmt.Errorf("forwardProtocol: the circuit carries no dst_protocol: %w", ErrNotAllowed)
	case t.ForwardProtocol && !slices.Contains(t.AllowedProtocols, appProto):
		return tg, fmt.Errorf("protocol %q is not among allowedProtocols %v: %w", appProto, t.AllowedProtocols, ErrNotAllowed)
	case t.ForwardProtocol:
		tg.Protocol = appProto
	case appProto != "" && appProto != t.Protocol:
		return tg, fmt.Errorf("the circuit carries %s but the terminator dials %s: %w", appProto, t.Protocol, ErrNotAllowed)
	default:
		tg.Protocol = t.Protocol
	}

	switch {
	case !t.ForwardAddress:
		tg.Address = t.Address
	case app.DstHostname != "":
		name := canonicalName(app.DstHostname)
		if !slices.ContainsFunc(t.AllowedAddresses, func(a Address) bool { return a.MatchName(name) }) {
			return tg, fmt.Errorf("hostname %q is not among allowedAddresses: %w", name, ErrNotAllowed)
		}
		tg.Address = name
	case app.DstIP != "":
		ip, err := netip.ParseAddr(app.DstIP)
		if err != nil {
			return tg, fmt.Errorf("forwardAddress: dst_ip %q is not an IP address: %w", app.DstIP, ErrNotAllowed)
		}
		ip = ip.Unmap()
		if !slices.ContainsFunc(t.AllowedAddresses, func(a Address) bool { return a.MatchIP(ip) }) {
			return tg, fmt.Errorf("address %s is not among allowedAddresses: %w", ip, ErrNotAllowed)
		}
		tg.Address = ip.String()
	default:
		return tg, fmt.Errorf("forwardAddress: the circuit carries neither dst_hostname nor dst_ip: %w", ErrNotAllowed)
	}

	if !t.ForwardPort {
		tg.Port = t.Port
		return tg, nil
	}
	if app.DstPort == "" {
		return tg, fmt.Errorf("forwardPort: the circuit carries no dst_port: %w", ErrNotAllowed)
	}
	port, err := strconv.ParseUint(app.DstPort, 10, 16)
	if err != nil || port == 0 {
		return tg, fmt.Errorf("forwardPort: dst_port %q is not a port: %w", app.DstPort, ErrNotAllowed)
	}
	if rangeWidth(t.AllowedPortRanges, uint16(port)) == 0 {
		return tg, fmt.Errorf("port %d is not within allowedPortRanges: %w", port, ErrNotAllowed)
	}
	tg.Port = uint16(port)
	return tg, nil
}

// ParseHostConfig parses config raw of type HostV1 or HostV2 of service.
func ParseHostConfig(service, configType string, raw json.RawMessage) (HostConfig, error) {
	switch configType {
	case HostV1:
		t, err := parseTerminator(service, HostV1, "", raw)
		if err != nil {
			return HostConfig{}, err
		}
		return HostConfig{Terminators: []HostTerminator{t}}, nil
	case HostV2:
		var j struct {
			Terminators []json.RawMessage `json:"terminators"`
		}
		if err := decode(raw, &j); err != nil {
			return HostConfig{}, decodeError(service, HostV2, "", err)
		}
		if len(j.Terminators) == 0 {
			return HostConfig{}, &ConfigError{Service: service, ConfigType: HostV2, Field: "terminators", Problem: "missing or empty"}
		}
		var c HostConfig
		for i, tr := range j.Terminators {
			t, err := parseTerminator(service, HostV2, fmt.Sprintf("terminators[%d].", i), tr)
			if err != nil {
				return HostConfig{}, err
			}
			c.Terminators = append(c.Terminators, t)
		}
		return c, nil
	}
	return HostConfig{}, &ConfigError{Service: service, ConfigType: configType, Problem: "not a host config type"}
}

// parseTerminator parses one host.v1 config or host.v2 terminator; prefix starts its fields'
// names in errors.
func parseTerminator(service, configType, prefix string, raw json.RawMessage) (HostTerminator, error) {
	var j struct {
		Protocol          *string         `json:"protocol"`
		ForwardProtocol   *bool           `json:"forwardProtocol"`
		AllowedProtocols  []string        `json:"allowedProtocols"`
		Address           *string         `json:"address"`
		ForwardAddress    *bool           `json:"forwardAddress"`
		AllowedAddresses  []string        `json:"allowedAddresses"`
		Port              *int64          `json:"port"`
		ForwardPort       *bool           `json:"forwardPort"`
		AllowedPortRanges []jsonPortRange `json:"allowedPortRanges"`
		ListenOptions     *struct {
			Precedence            *string         `json:"precedence"`
			Cost                  *int64          `json:"cost"`
			ConnectTimeout        *string         `json:"connectTimeout"`
			ConnectTimeoutSeconds *int64          `json:"connectTimeoutSeconds"`
			Identity              json.RawMessage `json:"identity"`
			BindUsingEdgeIdentity json.RawMessage `json:"bindUsingEdgeIdentity"`
			MaxConnections        json.RawMessage `json:"maxConnections"`
		} `json:"listenOptions"`
		AllowedSourceAddresses     json.RawMessage `json:"allowedSourceAddresses"`
		ForwardAddressTranslations json.RawMessage `json:"forwardAddressTranslations"`
		HTTPChecks                 json.RawMessage `json:"httpChecks"`
		PortChecks                 json.RawMessage `json:"portChecks"`
		Proxy                      json.RawMessage `json:"proxy"`
	}
	fail := func(field, format string, args ...any) error {
		return &ConfigError{Service: service, ConfigType: configType, Field: prefix + field, Problem: fmt.Sprintf(format, args...)}
	}
	if err := decode(raw, &j); err != nil {
		return HostTerminator{}, decodeError(service, configType, prefix, err)
	}
	var t HostTerminator

	// Protocol, address and port are each either fixed (protocol) or forwarded from the
	// circuit (forwardProtocol) within an allowed set (allowedProtocols).
	for _, f := range []struct {
		name, forwardKey, allowedKey string
		forward                      *bool        // t's forward flag
		forwardGiven                 *bool        // the forward flag as the config gives it
		fixedGiven                   bool         // whether the config gives the fixed value
		allowed                      func() error // parses the allowed set into t, naming the field at fault
		fixed                        func() error // parses the fixed value into t
	}{
		{"protocol", "forwardProtocol", "allowedProtocols", &t.ForwardProtocol, j.ForwardProtocol, j.Protocol != nil,
			func() (err error) {
				t.AllowedProtocols, err = parseProtocols(j.AllowedProtocols, "allowedProtocols", fail)
				return err
			},
			func() (err error) {
				t.Protocol, err = parseProtocol(*j.Protocol)
				return err
			}},
		{"address", "forwardAddress", "allowedAddresses", &t.ForwardAddress, j.ForwardAddress, j.Address != nil,
			func() (err error) {
				t.AllowedAddresses, err = parseAddresses(j.AllowedAddresses, "allowedAddresses", fail)
				return err
			},
			func() (err error) {
				t.Address, err = parseDialAddress(*j.Address)
				return err
			}},
		{"port", "forwardPort", "allowedPortRanges", &t.ForwardPort, j.ForwardPort, j.Port != nil,
			func() (err error) {
				t.AllowedPortRanges, err = parsePortRanges(j.AllowedPortRanges, "allowedPortRanges", fail)
				return err
			},
			func() error {
				if *j.Port < 1 || *j.Port > 65535 {
					return fmt.Errorf("%d is not a port (1-65535)", *j.Port)
				}
				t.Port = uint16(*j.Port)
				return nil
			}},
	} {
		*f.forward = f.forwardGiven != nil && *f.forwardGiven
		switch {
		case *f.forward && f.fixedGiven:
			return t, fail(f.name, "%s and %s are mutually exclusive", f.name, f.forwardKey)
		case *f.forward:
			if err := f.allowed(); err != nil {
				return t, err
			}
		case !f.fixedGiven:
			return t, fail(f.name, "missing; give %s, or %s with %s", f.name, f.forwardKey, f.allowedKey)
		default:
			if err := f.fixed(); err != nil {
				return t, fail(f.name, "%v", err)
			}
		}
	}

	t.ConnectTimeout = DefaultHostConnectTimeout
	t.Precedence = PrecedenceDefault
	if o := j.ListenOptions; o != nil {
		if o.Precedence != nil {
			switch p := *o.Precedence; p {
			case PrecedenceDefault, PrecedenceRequired, PrecedenceFailed:
				t.Precedence = p
			default:
				return t, fail("listenOptions.precedence", "%q is not default, required or failed", p)
			}
		}
		if o.Cost != nil {
			if *o.Cost < 0 || *o.Cost > 65535 {
				return t, fail("listenOptions.cost", "%d is not within 0-65535", *o.Cost)
			}
			t.Cost = uint16(*o.Cost)
		}
		switch {
		case o.ConnectTimeout != nil: // wins over connectTimeoutSeconds
			d, err := time.ParseDuration(*o.ConnectTimeout)
			if err != nil || d <= 0 {
				return t, fail("listenOptions.connectTimeout", "%q is not a positive duration such as 5s or 500ms", *o.ConnectTimeout)
			}
			t.ConnectTimeout = d
		case o.ConnectTimeoutSeconds != nil:
			s := *o.ConnectTimeoutSeconds
			if s < 0 || s > 1<<31-1 {
				return t, fail("listenOptions.connectTimeoutSeconds", "%d is not within 0-2147483647", s)
			}
			if s > 0 {
				t.ConnectTimeout = time.Duration(s) * time.Second
			}
		}
		for name, v := range map[string]json.RawMessage{"identity": o.Identity,
			"bindUsingEdgeIdentity": o.BindUsingEdgeIdentity, "maxConnections": o.MaxConnections} {
			if present(v) {
				t.Ignored = append(t.Ignored, "listenOptions."+name)
			}
		}
	}
	for name, v := range map[string]json.RawMessage{"allowedSourceAddresses": j.AllowedSourceAddresses,
		"forwardAddressTranslations": j.ForwardAddressTranslations, "httpChecks": j.HTTPChecks,
		"portChecks": j.PortChecks, "proxy": j.Proxy} {
		if present(v) {
			t.Ignored = append(t.Ignored, name)
		}
	}
	slices.Sort(t.Ignored)
	return t, nil
}

// InterceptConfigOf returns the intercept.v1 config of svc, and whether it has one.
func InterceptConfigOf(svc Service) (InterceptConfig, bool, error) {
	raw, ok := svc.Configs[InterceptV1]
	if !ok {
		return InterceptConfig{}, false, nil
	}
	c, err := ParseInterceptConfig(svc.Name, raw)
	return c, true, err
}

// HostConfigOf returns the host config of svc (host.v2 when it has both host.v2 and host.v1),
// and whether it has one.
func HostConfigOf(svc Service) (HostConfig, bool, error) {
	for _, typ := range []string{HostV2, HostV1} {
		if raw, ok := svc.Configs[typ]; ok {
			c, err := ParseHostConfig(svc.Name, typ, raw)
			return c, true, err
		}
	}
	return HostConfig{}, false, nil
}

// jsonPortRange is a port range as the schemas write it; the fields are pointers to tell a
// missing bound from port 0.
type jsonPortRange struct {
	Low  *int64 `json:"low"`
	High *int64 `json:"high"`
}

// parsePortRanges checks a non-empty list of ranges. A range starting at 0 starts at 1 (no
// connection goes to port 0); a range of port 0 alone is refused.
func parsePortRanges(list []jsonPortRange, field string, fail func(field, format string, args ...any) error) ([]intercept.PortRange, error) {
	if len(list) == 0 {
		return nil, fail(field, "missing or empty; give at least one {\"low\": ..., \"high\": ...}")
	}
	var out []intercept.PortRange
	for i, r := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case r.Low == nil:
			return nil, fail(f+".low", "missing")
		case r.High == nil:
			return nil, fail(f+".high", "missing")
		case *r.Low < 0 || *r.Low > 65535:
			return nil, fail(f+".low", "%d is not within 0-65535", *r.Low)
		case *r.High < 1 || *r.High > 65535:
			return nil, fail(f+".high", "%d is not within 1-65535", *r.High)
		case *r.Low > *r.High:
			return nil, fail(f, "low %d is above high %d", *r.Low, *r.High)
		}
		pr := intercept.PortRange{Low: uint16(max(*r.Low, 1)), High: uint16(*r.High)}
		if !slices.Contains(out, pr) {
			out = append(out, pr)
		}
	}
	return out, nil
}

// parseProtocols checks a non-empty list of protocol names.
func parseProtocols(list []string, field string, fail func(field, format string, args ...any) error) ([]string, error) {
	if len(list) == 0 {
		return nil, fail(field, "missing or empty; give tcp and/or udp")
	}
	var out []string
	for i, s := range list {
		p, err := parseProtocol(s)
		if err != nil {
			return nil, fail(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func parseProtocol(s string) (string, error) {
	switch p := strings.ToLower(s); p {
	case intercept.TCP, intercept.UDP:
		return p, nil
	}
	return "", fmt.Errorf("%q is not tcp or udp", s)
}

// parseAddresses checks a non-empty list of allowed addresses, dropping repeats.
func parseAddresses(list []string, field string, fail func(field, format string, args ...any) error) ([]Address, error) {
	if len(list) == 0 {
		return nil, fail(field, "missing or empty; forwardAddress needs it")
	}
	var out []Address
	for i, s := range list {
		a, err := parseAddress(s)
		if err != nil {
			return nil, fail(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// parseAddress reads an intercept or allowed address: an IP address, a CIDR, a wildcard
// *.domain or a hostname, tried in this order.
func parseAddress(s string) (Address, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.Zone() != "" {
			return Address{}, fmt.Errorf("%q: addresses with a zone are not supported", s)
		}
		ip = ip.Unmap()
		return Address{Kind: AddressPrefix, Prefix: netip.PrefixFrom(ip, ip.BitLen())}, nil
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return Address{Kind: AddressPrefix, Prefix: p.Masked()}, nil
	}
	name := canonicalName(s)
	if d, ok := strings.CutPrefix(name, "*."); ok {
		if !validHostname(d) {
			return Address{}, fmt.Errorf("%q is not a wildcard such as *.example.com", s)
		}
		return Address{Kind: AddressWildcard, Name: d}, nil
	}
	if !validHostname(name) {
		return Address{}, fmt.Errorf("%q is not an IP address, CIDR, hostname or wildcard such as *.example.com", s)
	}
	return Address{Kind: AddressHostname, Name: name}, nil
}

// parseDialAddress reads a host config's address: an IP address or a hostname.
func parseDialAddress(s string) (string, error) {
	if ip, err := netip.ParseAddr(s); err == nil && ip.Zone() == "" {
		return ip.Unmap().String(), nil
	}
	if name := canonicalName(s); validHostname(name) {
		return name, nil
	}
	return "", fmt.Errorf("%q is not an IP address or hostname", s)
}

// canonicalName returns a DNS name in lower case without trailing dot.
func canonicalName(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

// validHostname reports whether s (canonical) is a DNS name of ASCII letters, digits,
// hyphens and underscores (internationalized names in their punycode form), with labels of
// 1-63 characters not starting or ending with a hyphen, at most 253 characters in all. A
// name that parses as an IP address is not a hostname.
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// decode unmarshals a config object into v.
func decode(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return errors.New("empty config")
	}
	return json.Unmarshal(raw, v)
}

// decodeError turns a JSON error into a ConfigError naming the field when JSON says which.
func decodeError(service, configType, prefix string, err error) error {
	ce := &ConfigError{Service: service, ConfigType: configType, Field: strings.TrimSuffix(prefix, "."),
		Problem: fmt.Sprintf("not a valid config: %v", err)}
	var te *json.UnmarshalTypeError
	switch {
	case !errors.As(err, &te):
	case te.Field == "":
		ce.Problem = fmt.Sprintf("is a JSON %s, not an object", te.Value)
	default:
		ce.Field = prefix + te.Field
		ce.Problem = fmt.Sprintf("is a JSON %s, not %s", te.Value, jsonKind(te.Type.String()))
	}
	return ce
}

func jsonKind(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "int"):
		return "an integer"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	}
	return "an object"
}

// present reports whether a raw field was set to something other than null.
func present(v json.RawMessage) bool {
	return len(v) > 0 && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}
