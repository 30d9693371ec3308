// Package intercept is the Linux transparent-proxy machinery of the router's tproxy tunnel:
// it installs the nftables rules, the policy route and the transparent listeners that divert
// the traffic of intercepted services to the tunnel, and hands the tunnel the intercepted TCP
// connections and UDP datagrams together with their original destinations.
//
// # What Open installs
//
// In the network namespace of the thread that calls Open:
//
//   - an nftables table of family inet named Options.Table (DefaultTable, "zmesh") with a
//     prerouting chain (type filter, hook prerouting, priority mangle) and an output chain
//     (type route, hook output, priority mangle), laid out as below. Each interception
//     becomes one rule in each chain per prefix, protocol and port range, all tagged with the
//     interception's id in the rule's user data (shown by nft as the comment); that is how
//     Remove and a re-Add find them.
//   - the policy rule "ip rule add fwmark <mark> lookup <table> pref <priority>" and the route
//     "ip route add local 0.0.0.0/0 dev lo table <table>", so that packets carrying the mark
//     are delivered locally, where the tproxy rule has already assigned them to the listener.
//   - a TCP listener and a UDP socket with IP_TRANSPARENT on Options.Listen (127.0.0.1:0 by
//     default: an ephemeral port each, which the tproxy rules then name).
//
// The ruleset, as nft would list it:
//
//	table inet zmesh {
//		chain prerouting {
//			type filter hook prerouting priority mangle; policy accept;
//			meta mark <bypass> accept
//			meta nfproto ipv4 meta l4proto tcp ip daddr 10.77.0.0/24 tcp dport 80-81 tproxy ip to 127.0.0.1:<tcp port> meta mark set <mark> accept comment "<id>"
//			meta nfproto ipv4 meta l4proto udp ip daddr 10.77.0.0/24 udp dport 5300 tproxy ip to 127.0.0.1:<udp port> meta mark set <mark> accept comment "<id>"
//		}
//		chain output {
//			type route hook output priority mangle; policy accept;
//			meta mark <bypass> accept
//			meta nfproto ipv4 meta l4proto tcp ip daddr 10.77.0.0/24 tcp dport 80-81 meta mark set <mark> accept comment "<id>"
//			meta nfproto ipv4 meta l4proto udp ip daddr 10.77.0.0/24 udp dport 5300 meta mark set <mark> accept comment "<id>"
//		}
//	}
//
// Traffic routed through the host from elsewhere hits the prerouting chain directly. Traffic
// from processes on the host itself is marked in the output chain; the route chain type makes
// the kernel route the packet again, the mark selects the local route, the packet loops
// through lo and meets the prerouting chain like any other. Note that the kernel routes a
// local connection's first packet before the output chain sees it, so the host needs an
// ordinary route towards intercepted addresses (a default route suffices) for its own
// processes' connections to be intercepted.
//
// # Loops
//
// Packets the tunnel itself sends must not be intercepted again: replies from the transparent
// sockets (they come from the original destination and go to the client, whose port may well
// lie in an intercepted range when a whole subnet is intercepted on all ports) and the
// tunnel's own egress (connections to the overlay, or to a hosted service whose address is
// also intercepted). All of these come from sockets carrying a second mark, the bypass mark
// (Options.BypassMark) set with SO_MARK: the interceptor sets it on its listeners (accepted
// TCP connections and SYN-ACKs inherit it) and on the sockets ReplyConn makes, and the tunnel
// sets it on its egress sockets with BypassControl. The first rule of both chains accepts
// bypass-marked packets before any interception rule sees them. The bypass mark must differ
// from the interception mark: a socket marked with the interception mark would have all its
// packets, replies included, routed to lo by the policy rule.
//
// Open first removes state left by a crashed run with the same table name, mark and route
// table (see Cleanup); Close removes everything it installed.
package intercept

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
)

// Defaults of Options.
const (
	// DefaultTable is the name of the nftables table (family inet).
	DefaultTable = "zmesh"
	// DefaultMark is the firewall mark of intercepted packets ("zm" in ASCII).
	DefaultMark uint32 = 0x7a6d
	// DefaultBypassMark is the firewall mark of the tunnel's own packets, never intercepted.
	DefaultBypassMark uint32 = 0x7a6e
	// DefaultRouteTable is the routing table holding the local default route.
	DefaultRouteTable = 0x7a6d // 31341
	// DefaultRulePriority is the preference of the "fwmark <mark> lookup <table>" rule; it
	// precedes the main table (32766).
	DefaultRulePriority = 9000
	// DefaultListen is where the transparent listeners listen: ephemeral ports on loopback.
	DefaultListen = "127.0.0.1:0"
)

// maxIDLen bounds an interception id: it is stored in each rule's user data, a TLV with a
// one-byte length, and nft shows it as the rule's comment (at most 128 bytes).
const maxIDLen = 128

// Options configure an Interceptor. The zero value means all defaults.
type Options struct {
	// Table is the name of the nftables table of family inet (DefaultTable when empty).
	Table string
	// Mark is the firewall mark given to intercepted packets (DefaultMark when 0).
	Mark uint32
	// BypassMark marks the tunnel's own sockets, whose packets are never intercepted
	// (DefaultBypassMark when 0). It must differ from Mark.
	BypassMark uint32
	// RouteTable is the routing table of the local default route (DefaultRouteTable when 0).
	// It must not be one of the kernel's tables local (255), main (254) or default (253).
	RouteTable int
	// RulePriority is the preference of the policy rule (DefaultRulePriority when 0).
	RulePriority int
	// Listen is the IPv4 address and port of the transparent TCP and UDP listeners
	// (DefaultListen when invalid, i.e. unset). Port 0 picks an ephemeral port for each.
	Listen netip.AddrPort
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// withDefaults returns o with its unset fields set to the defaults, or an error naming the
// first invalid field.
func (o Options) withDefaults() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Mark == 0 {
		o.Mark = DefaultMark
	}
	if o.BypassMark == 0 {
		o.BypassMark = DefaultBypassMark
	}
	if o.RouteTable == 0 {
		o.RouteTable = DefaultRouteTable
	}
	if o.RulePriority == 0 {
		o.RulePriority = DefaultRulePriority
	}
	if !o.Listen.IsValid() {
		o.Listen = netip.MustParseAddrPort(DefaultListen)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case len(o.Table) > 255 || strings.ContainsRune(o.Table, 0):
		return o, fmt.Errorf("intercept options: nftables table name %q is not valid", o.Table)
	case o.Mark == o.BypassMark:
		return o, fmt.Errorf("intercept options: mark and bypass mark are both %#x; they must differ", o.Mark)
	case o.RouteTable < 0 || o.RouteTable >= 253 && o.RouteTable <= 255:
		return o, fmt.Errorf("intercept options: route table %d is reserved or invalid", o.RouteTable)
	case o.RulePriority < 0:
		return o, fmt.Errorf("intercept options: rule priority %d is negative", o.RulePriority)
	case !o.Listen.Addr().Unmap().Is4():
		return o, fmt.Errorf("intercept options: listen address %s is not IPv4", o.Listen)
	}
	o.Listen = netip.AddrPortFrom(o.Listen.Addr().Unmap(), o.Listen.Port())
	return o, nil
}

// Protocols an Interception may name.
const (
	TCP = "tcp"
	UDP = "udp"
)

// PortRange is an inclusive range of ports; Low == High names one port.
type PortRange struct {
	Low, High uint16
}

// Interception is what to intercept for one service: packets to any of Prefixes, with any of
// Protocols, to a port in any of Ports.
type Interception struct {
	// Prefixes are the intercepted destination addresses. Only IPv4 is supported.
	Prefixes []netip.Prefix
	// Ports are the intercepted destination ports; write {1, 65535} for all.
	Ports []PortRange
	// Protocols are TCP and/or UDP.
	Protocols []string
}

// normalize validates ic and returns it with prefixes masked and IPv4-mapped addresses
// unmapped, and duplicates removed.
func (ic Interception) normalize() (Interception, error) {
	var out Interception
	if len(ic.Prefixes) == 0 {
		return out, errors.New("no prefixes")
	}
	if len(ic.Ports) == 0 {
		return out, errors.New("no ports (write 1-65535 for all ports)")
	}
	if len(ic.Protocols) == 0 {
		return out, errors.New("no protocols")
	}
	for _, p := range ic.Prefixes {
		if !p.IsValid() {
			return out, fmt.Errorf("prefix %s is not valid", p)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if !p.Addr().Is4() {
			return out, fmt.Errorf("prefix %s: only IPv4 is supported", p)
		}
		if p = p.Masked(); !slices.Contains(out.Prefixes, p) {
			out.Prefixes = append(out.Prefixes, p)
		}
	}
	for _, r := range ic.Ports {
		if r.Low == 0 || r.Low > r.High {
			return out, fmt.Errorf("port range %d-%d is not valid", r.Low, r.High)
		}
		if !slices.Contains(out.Ports, r) {
			out.Ports = append(out.Ports, r)
		}
	}
	for _, p := range ic.Protocols {
		if p != TCP && p != UDP {
			return out, fmt.Errorf("protocol %q is not %q or %q", p, TCP, UDP)
		}
		if !slices.Contains(out.Protocols, p) {
			out.Protocols = append(out.Protocols, p)
		}
	}
	return out, nil
}

// validID reports why id cannot name an interception, or nil.
func validID(id string) error {
	switch {
	case id == "":
		return errors.New("interception id is empty")
	case len(id) > maxIDLen:
		return fmt.Errorf("interception id %.20q... is longer than %d bytes", id, maxIDLen)
	}
	return nil
}

// Stats is a snapshot of an Interceptor's counters.
type Stats struct {
	// Interceptions is the number of interceptions installed now.
	Interceptions int64
	// TCPAccepted counts the TCP connections Accept returned.
	TCPAccepted uint64
	// UDPReceived counts the datagrams ReadUDP returned.
	UDPReceived uint64
}

// ErrNotInstalled is returned by Remove for an id that has no interception.
var ErrNotInstalled = errors.New("interception is not installed")

// ErrTruncated is returned by ReadUDP, with the datagram's first len(b) bytes, when the
// datagram did not fit in b.
var ErrTruncated = errors.New("datagram truncated")
