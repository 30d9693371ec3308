package tunnel

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/zmesh/zmesh/internal/netnstest"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/tunnel/intercept"
)

// TestTProxy runs a TProxy, with host mode, in a gateway namespace: a client namespace routes
// through it, and the services are hosted, through the fake overlay, by echo servers in a
// third namespace. It resolves intercepted names, carries TCP (exact hostname, wildcard) and
// UDP (CIDR) to the echo servers, follows a service's removal, and checks that the end of
// Run leaves no nftables table, rule or route behind.
func TestTProxy(t *testing.T) {
	topo := newTopology(t)
	var tcpWeb, tcpWild net.Listener
	var udpEchoConn net.PacketConn
	if err := netnstest.Run(topo.srv, func() (err error) {
		if tcpWeb, err = net.Listen("tcp4", "127.0.0.1:7"); err != nil {
			return err
		}
		if tcpWild, err = net.Listen("tcp4", "127.0.0.1:8080"); err != nil {
			return err
		}
		udpEchoConn, err = net.ListenPacket("udp4", "127.0.0.1:5300")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tcpEcho(t, tcpWeb)
	tcpEcho(t, tcpWild)
	udpEcho(t, udpEchoConn)

	web := service("web", true, true, map[string]string{
		InterceptV1: `{"protocols":["tcp"],"addresses":["web.zmesh.test"],"portRanges":[{"low":80,"high":80}]}`,
		HostV1:      `{"protocol":"tcp","address":"127.0.0.1","port":7}`})
	wild := service("wild", true, true, map[string]string{
		InterceptV1: `{"protocols":["tcp"],"addresses":["*.wild.test"],"portRanges":[{"low":8000,"high":8999}]}`,
		HostV1:      `{"protocol":"tcp","address":"127.0.0.1","forwardPort":true,"allowedPortRanges":[{"low":8080,"high":8080}]}`})
	udp := service("udp", true, true, map[string]string{
		InterceptV1: `{"protocols":["udp"],"addresses":["10.77.0.0/24"],"portRanges":[{"low":5300,"high":5300}]}`,
		HostV1:      `{"forwardProtocol":true,"allowedProtocols":["udp"],"address":"127.0.0.1","port":5300}`})
	f := newFakeOverlay()
	f.setServices(web, wild, udp)

	resolvConf := filepath.Join(t.TempDir(), "resolv.conf") // no upstream: nothing leaves the namespaces
	if err := os.WriteFile(resolvConf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resolverAddr := netip.MustParseAddrPort("10.99.0.1:53")
	dnsRange := netip.MustParsePrefix("100.80.0.0/24")
	const idle = 500 * time.Millisecond
	tp := &TProxy{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- netnstest.Run(topo.gw, func() error {
			return tp.Run(ctx, f, TProxyOptions{
				Resolver:       resolverAddr,
				DNSSvcIPRange:  dnsRange,
				ResolvConf:     resolvConf,
				UDPIdleTimeout: idle,
				Host:           &HostOptions{Dialer: netnstest.Dialer{NS: topo.srv}, UDPIdleTimeout: time.Minute},
				Logger:         testLogger(t),
			})
		})
	}()

	// An exact hostname: resolved in the range, intercepted, carried to the web echo.
	var webIP netip.Addr
	testutil.Eventually(t, "web.zmesh.test resolved", func() bool {
		var rcode int
		webIP, rcode = query(t, topo.client, resolverAddr, "web.zmesh.test", time.Second)
		return rcode == dns.RcodeSuccess && webIP.IsValid()
	})
	if !dnsRange.Contains(webIP) {
		t.Fatalf("web.zmesh.test resolved to %s, outside %s", webIP, dnsRange)
	}
	testutil.Eventually(t, "services hosted", func() bool { return tp.Stats().Host.Bound == 3 })
	echoTCP(t, topo.client, netip.AddrPortFrom(webIP, 80))
	if d := f.lastDial(); d.service != "web" || d.app.Protocol != "tcp" || d.app.DstHostname != "web.zmesh.test" ||
		d.app.DstIP != webIP.String() || d.app.DstPort != "80" || d.app.SrcIP != "10.99.0.2" || d.app.SrcPort == "" {
		t.Errorf("dial to web: %+v", d)
	}

	// A name under a wildcard gets its address on its first query; the port follows to the
	// host (forwardPort).
	fooIP, rcode := query(t, topo.client, resolverAddr, "Foo.Wild.Test", time.Second)
	if rcode != dns.RcodeSuccess || !dnsRange.Contains(fooIP) || fooIP == webIP {
		t.Fatalf("foo.wild.test: %s, rcode %d", fooIP, rcode)
	}
	echoTCP(t, topo.client, netip.AddrPortFrom(fooIP, 8080))
	if d := f.lastDial(); d.service != "wild" || d.app.DstHostname != "foo.wild.test" || d.app.DstPort != "8080" {
		t.Errorf("dial to wild: %+v", d)
	}
	if again, _ := query(t, topo.client, resolverAddr, "foo.wild.test", time.Second); again != fooIP {
		t.Errorf("foo.wild.test resolved again to %s, first to %s", again, fooIP)
	}
	// Outside the wildcard's ports: not intercepted.
	noTCP(t, topo.client, netip.AddrPortFrom(fooIP, 9000))

	// UDP to a CIDR: datagrams keep their boundaries both ways and come back from the
	// original destination; the flow ends after the idle timeout.
	dst := netip.MustParseAddrPort("10.77.0.5:5300")
	echoUDP(t, topo.client, dst, "ping", "a longer datagram", "")
	if d := f.lastDial(); d.service != "udp" || d.app.Protocol != "udp" || d.app.DstIP != "10.77.0.5" || d.app.DstHostname != "" {
		t.Errorf("dial to udp: %+v", d)
	}
	s := tp.Stats()
	if s.UDPFlows != 1 || s.TCPIntercepted != 2 || s.Unmatched != 0 || s.DialFailures != 0 {
		t.Errorf("stats after the exchanges: %+v", s)
	}
	testutil.Eventually(t, "idle flow ended", func() bool { return tp.Stats().Active == 0 && tp.Stats().Host.Active == 0 })
	echoUDP(t, topo.client, dst, "again")
	if s := tp.Stats(); s.UDPFlows != 2 {
		t.Errorf("%d UDP flows after the first idled out, want 2", s.UDPFlows)
	}
	// One interception each: the CIDR of udp, the address of web.zmesh.test, that of foo.wild.test.
	if s := tp.Stats(); s.Interceptions != 3 || s.Services != 3 || s.Resolver.Assignments != 2 || s.Resolver.Intercepted < 3 {
		t.Errorf("stats: %+v", s)
	}

	// web goes away: its name is no longer intercepted (no upstream: refused), nor its address.
	f.setServices(wild, udp)
	testutil.Eventually(t, "web.zmesh.test gone", func() bool {
		_, rcode := query(t, topo.client, resolverAddr, "web.zmesh.test", time.Second)
		return rcode == dns.RcodeRefused
	})
	testutil.Eventually(t, "web's interception removed", func() bool {
		s := tp.Stats()
		return s.Interceptions == 2 && s.Services == 2 && s.Resolver.Assignments == 1
	})
	noTCP(t, topo.client, netip.AddrPortFrom(webIP, 80))
	echoTCP(t, topo.client, netip.AddrPortFrom(fooIP, 8080)) // the others stay
	testutil.Eventually(t, "web unbound", func() bool { return !f.bound("web") && tp.Stats().Host.Bound == 2 })

	// wild's ports change: its assigned name keeps its address, now intercepted on port 9000
	// too (which the hosting end refuses: its allowedPortRanges stay 8080).
	wild = service("wild", true, true, map[string]string{
		InterceptV1: `{"protocols":["tcp"],"addresses":["*.wild.test"],"portRanges":[{"low":8000,"high":9000}]}`,
		HostV1:      `{"protocol":"tcp","address":"127.0.0.1","forwardPort":true,"allowedPortRanges":[{"low":8080,"high":8080}]}`})
	f.setServices(wild, udp)
	testutil.Eventually(t, "port 9000 intercepted", func() bool {
		c, err := netnstest.DialTimeout(t, topo.client, "tcp4", netip.AddrPortFrom(fooIP, 9000).String(), 300*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection to a port the host refuses: read %d bytes, %v; want EOF", n, err)
		}
		return true
	})
	if ip, _ := query(t, topo.client, resolverAddr, "foo.wild.test", time.Second); ip != fooIP {
		t.Errorf("foo.wild.test moved from %s to %s when its service changed", fooIP, ip)
	}
	testutil.Eventually(t, "the circuit refused", func() bool { return tp.Stats().Host.Refused == 1 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	checkNoState(t)
	if _, rcode := query(t, topo.client, resolverAddr, "foo.wild.test", 300*time.Millisecond); rcode != -1 {
		t.Errorf("the resolver still answers after Run returned: rcode %d", rcode)
	}
	if s := tp.Stats(); s.Active != 0 || s.Services != 0 || s.Host.Bound != 0 {
		t.Errorf("stats after Run: %+v", s)
	}
}

// query asks the resolver at server, from namespace ns, for the A record of name. It
// returns the address and the reply's rcode, or -1 when no reply came.
func query(t *testing.T, ns netns.NsHandle, server netip.AddrPort, name string, timeout time.Duration) (netip.Addr, int) {
	t.Helper()
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: timeout}
	var reply *dns.Msg
	var err error
	netnstest.Do(t, ns, func() { reply, _, err = c.Exchange(m, server.String()) })
	if err != nil {
		return netip.Addr{}, -1
	}
	for _, rr := range reply.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(a.A)
			return ip.Unmap(), reply.Rcode
		}
	}
	return netip.Addr{}, reply.Rcode
}

// echoTCP connects from namespace ns to dst and expects its bytes echoed, with half-close.
func echoTCP(t *testing.T, ns netns.NsHandle, dst netip.AddrPort) {
	t.Helper()
	c, err := netnstest.DialTimeout(t, ns, "tcp4", dst.String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte(dst.String()+" "), 10000)
	go func() {
		c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through %s: %d bytes, %v; want %d bytes", dst, len(got), err, len(msg))
	}
}

// noTCP expects a connection from namespace ns to dst to fail.
func noTCP(t *testing.T, ns netns.NsHandle, dst netip.AddrPort) {
	t.Helper()
	c, err := netnstest.DialTimeout(t, ns, "tcp4", dst.String(), 300*time.Millisecond)
	if err == nil {
		c.Close()
		t.Errorf("dial %s: connected, want no connection", dst)
	}
}

// echoUDP sends datagrams from one socket in namespace ns to dst and expects each echoed,
// whole, from dst.
func echoUDP(t *testing.T, ns netns.NsHandle, dst netip.AddrPort, msgs ...string) {
	t.Helper()
	c := netnstest.ListenUDP(t, ns, "udp4", nil)
	defer c.Close()
	for _, m := range msgs {
		if _, err := c.WriteToUDPAddrPort([]byte(m), dst); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, MaxDatagram)
	for _, m := range msgs {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("echo of %q from %s: %v", m, dst, err)
		}
		if string(buf[:n]) != m || netip.AddrPortFrom(from.Addr().Unmap(), from.Port()) != dst {
			t.Fatalf("got %q from %s, want %q from %s", buf[:n], from, m, dst)
		}
	}
}

// checkNoState expects none of the default interceptor's nftables table, policy rule and
// route in the test thread's namespace.
func checkNoState(t *testing.T) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == intercept.DefaultTable {
			t.Errorf("nftables table %s left behind", tb.Name)
		}
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Mark == intercept.DefaultMark || r.Table == intercept.DefaultRouteTable {
			t.Errorf("ip rule left behind: %v", r)
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: intercept.DefaultRouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 0 {
		t.Errorf("routes left behind in table %d: %v", intercept.DefaultRouteTable, routes)
	}
}

// topology is three network namespaces: srv, with the services on its loopback; client
// (10.99.0.2/24, default route via the gateway); gw (10.99.0.1/24, default route via the
// client), joined to client by a veth pair.
type topology struct {
	srv, client, gw netns.NsHandle
}

// newTopology builds the topology and leaves the test's thread in gw, the namespace whose
// interceptor state checkNoState reads.
func newTopology(t *testing.T) topology {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces, nftables tables, rules and routes")
	srv := netnstest.New(t, "srv")
	client := netnstest.New(t, "client")
	gw := netnstest.Enter(t, "gw")
	netnstest.Veth(t,
		netnstest.End{NS: gw, Dev: "gw0", Addr: netip.MustParsePrefix("10.99.0.1/24")},
		netnstest.End{NS: client, Dev: "client0", Addr: netip.MustParsePrefix("10.99.0.2/24")})
	netnstest.DefaultRoute(t, gw, netip.MustParseAddr("10.99.0.2"))
	netnstest.DefaultRoute(t, client, netip.MustParseAddr("10.99.0.1"))
	return topology{srv: srv, client: client, gw: gw}
}
