package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// duration prints a time.Duration the way an operator writes it: "5m" rather than "5m0s".
// The keys the file writes with a unit suffix ("5s", "1m", "24h", "10ms") load as
// time.Duration; the effective configuration and the messages write them back through this
// type. Durations the file gives as whole milliseconds or seconds are written back as those
// integers.
type duration time.Duration

func (d duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (d duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return 0, fmt.Errorf("%q has no unit; write a duration with a unit suffix (ms, s, m, h), e.g. 5s", s)
		}
		return 0, fmt.Errorf("%q is not a duration; write a number with a unit suffix (ms, s, m, h), e.g. 5s or 1m30s", s)
	}
	return d, nil
}

// Transports an address may name.
const (
	TransportTLS  = "tls"  // TLS 1.3 over TCP
	TransportTCP  = "tcp"  // plain TCP
	TransportQUIC = "quic" // QUIC over UDP
	TransportUDP  = "udp"  // plain UDP
)

var allTransports = []string{TransportTLS, TransportTCP, TransportQUIC, TransportUDP}

// Address is a network address of the form <transport>:<host>:<port>, with IPv6 hosts in
// brackets: "tls:0.0.0.0:6262", "quic:[::1]:6000".
type Address struct {
	Transport string
	Host      string
	Port      int
}

// HostPort returns the host:port part, as net.Dial takes it.
func (a Address) HostPort() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

func (a Address) String() string { return a.Transport + ":" + a.HostPort() }

func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// ParseAddress parses s as <transport>:<host>:<port> where transport is one of transports.
func ParseAddress(s string, transports ...string) (Address, error) {
	transport, rest, ok := strings.Cut(s, ":")
	if !ok || transport == "" {
		return Address{}, fmt.Errorf("%q is not an address; write <transport>:<host>:<port> with transport %s, e.g. %s:127.0.0.1:6262", s, orList(transports), transports[0])
	}
	if !contains(transports, transport) {
		return Address{}, fmt.Errorf("%q: transport %q is not allowed here; allowed: %s", s, transport, strings.Join(transports, ", "))
	}
	host, port, err := parseHostPort(rest)
	if err != nil {
		return Address{}, fmt.Errorf("%q: %w", s, err)
	}
	return Address{Transport: transport, Host: host, Port: port}, nil
}

// parseHostPort parses host:port with a port from 1 to 65535.
func parseHostPort(s string) (string, int, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
			return "", 0, errors.New("an IPv6 host must be written in brackets, e.g. [::1]:6262")
		}
		return "", 0, errors.New("not <host>:<port>, e.g. 127.0.0.1:1280")
	}
	if err := checkHost(host); err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", portText)
	}
	return host, port, nil
}

// checkHost accepts an IP address or a DNS name.
func checkHost(host string) error {
	if host == "" {
		return errors.New("the host is empty")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if len(host) > 253 {
		return fmt.Errorf("host %q is longer than 253 characters", host)
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c == '-' || c == '_' || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')) {
				return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func orList(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// address reads an address node.
func (r *reader) address(n *yaml.Node, path string, transports ...string) (Address, bool) {
	s, ok := r.scalar(n, path)
	if !ok {
		return Address{}, false
	}
	a, err := ParseAddress(s, transports...)
	if err != nil {
		r.errorf(n.Line, path, "%v", err)
		return Address{}, false
	}
	return a, true
}

// advertise reads an advertised address: either <host>:<port>, which takes the transport of
// the address bound, or a full <transport>:<host>:<port> whose transport must match it.
func (r *reader) advertise(n *yaml.Node, path string, bind Address) (Address, bool) {
	s, ok := r.scalar(n, path)
	if !ok {
		return Address{}, false
	}
	if rest, full := strings.CutPrefix(s, bind.Transport+":"); full {
		if host, port, err := parseHostPort(rest); err == nil {
			return Address{Transport: bind.Transport, Host: host, Port: port}, true
		}
	}
	if t, _, _ := strings.Cut(s, ":"); contains(allTransports, t) {
		r.errorf(n.Line, path, "%q: transport %s does not match the bind address's %s", s, t, bind.Transport)
		return Address{}, false
	}
	host, port, err := parseHostPort(s)
	if err != nil {
		r.errorf(n.Line, path, "%q: %v; write <host>:<port> or %s:<host>:<port>", s, err, bind.Transport)
		return Address{}, false
	}
	return Address{Transport: bind.Transport, Host: host, Port: port}, true
}

// localBind reads the local side of an outbound connection: an IP address, a network
// interface name, or an address whose host is a local IP and whose port may be 0.
func (r *reader) localBind(n *yaml.Node, path string) (string, bool) {
	s, ok := r.scalar(n, path)
	if !ok {
		return "", false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return s, true
	}
	if isInterfaceName(s) && !looksNumeric(s) {
		return s, true
	}
	if transport, rest, ok := strings.Cut(s, ":"); ok && transport != "" {
		if host, port, err := net.SplitHostPort(rest); err == nil {
			if _, err := netip.ParseAddr(host); err == nil {
				if p, err := strconv.Atoi(port); err == nil && p >= 0 && p <= 65535 {
					return s, true
				}
			}
		}
	}
	r.errorf(n.Line, path, "%q is neither a local IP address, an interface name, nor <transport>:<ip>:<port>", s)
	return "", false
}

// looksNumeric reports whether s is made of digits and dots only: a mistyped IPv4 address
// rather than an interface name.
func looksNumeric(s string) bool {
	return strings.Trim(s, "0123456789.") == ""
}

// isInterfaceName accepts what Linux accepts as a network interface name.
func isInterfaceName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '/' || c == ':' || c >= 0x7f {
			return false
		}
	}
	return true
}
