package intercept

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/zmesh/zmesh/internal/netnstest"
	"github.com/zmesh/zmesh/internal/testutil"
)

var (
	dst80   = netip.MustParseAddrPort("10.77.0.9:80")
	dst81   = netip.MustParseAddrPort("10.77.0.9:81")
	dst82   = netip.MustParseAddrPort("10.77.0.9:82")
	dst8080 = netip.MustParseAddrPort("10.77.0.9:8080")
	dst5300 = netip.MustParseAddrPort("10.77.0.9:5300")
	dst5301 = netip.MustParseAddrPort("10.77.0.9:5301")

	web = Interception{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24")},
		Ports: []PortRange{{80, 81}}, Protocols: []string{TCP}}
	dns = Interception{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24")},
		Ports: []PortRange{{5300, 5300}}, Protocols: []string{UDP}}
)

// notIntercepted bounds the wait for traffic that must not arrive.
const notIntercepted = 300 * time.Millisecond

func TestComment(t *testing.T) {
	if got, ok := comment(userdata.AppendString(nil, userdata.TypeComment, "svc")); !ok || got != "svc" {
		t.Errorf("got %q %v", got, ok)
	}
	other := userdata.Append(nil, userdata.TypeEbtablesPolicy, []byte{1, 2})
	if got, ok := comment(userdata.AppendString(other, userdata.TypeComment, "x")); !ok || got != "x" {
		t.Errorf("after another TLV: got %q %v", got, ok)
	}
	for _, bad := range [][]byte{nil, {0}, {0, 9, 'a'}, other} {
		if got, ok := comment(bad); ok {
			t.Errorf("%v: got %q", bad, got)
		}
	}
}

// TestLocalProcess intercepts connections and datagrams of a process on the interceptor's own
// host, follows Add, re-Add and Remove, and checks that Close leaves nothing behind.
func TestLocalProcess(t *testing.T) {
	topo := newTopology(t)
	ic := open(t, t.Context(), Options{})
	conns := acceptAll(t, ic)

	if err := ic.Add("web", web); err != nil {
		t.Fatal(err)
	}
	if err := ic.Add("dns", dns); err != nil {
		t.Fatal(err)
	}
	checkTCP(t, topo.gw, dst80, conns)
	checkTCP(t, topo.gw, dst81, conns)
	checkNoTCP(t, topo.gw, dst82, conns)
	checkUDP(t, ic, topo.gw, dst5300)
	checkNoUDP(t, ic, topo.gw, dst5301)
	if got, want := ic.Stats(), (Stats{Interceptions: 2, TCPAccepted: 2, UDPReceived: 1}); got != want {
		t.Errorf("stats: got %+v, want %+v", got, want)
	}
	// One bypass rule, then one rule per interception, prefix, protocol and port range.
	if got := countRules(t, ic.opts.Table); got != 3 {
		t.Errorf("%d rules per chain, want 3", got)
	}

	// Re-adding an id replaces its rules.
	web8080 := web
	web8080.Ports = []PortRange{{8080, 8080}, {8443, 8443}}
	if err := ic.Add("web", web8080); err != nil {
		t.Fatal(err)
	}
	if got := countRules(t, ic.opts.Table); got != 4 {
		t.Errorf("after re-adding web: %d rules per chain, want 4", got)
	}
	checkNoTCP(t, topo.gw, dst80, conns)
	checkTCP(t, topo.gw, dst8080, conns)

	if err := ic.Remove("web"); err != nil {
		t.Fatal(err)
	}
	checkNoTCP(t, topo.gw, dst8080, conns)
	checkUDP(t, ic, topo.gw, dst5300) // the other interception stays
	if err := ic.Remove("dns"); err != nil {
		t.Fatal(err)
	}
	checkNoUDP(t, ic, topo.gw, dst5300)
	if err := ic.Remove("dns"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("removing dns twice: got %v, want ErrNotInstalled", err)
	}
	if got, want := ic.Stats(), (Stats{Interceptions: 0, TCPAccepted: 3, UDPReceived: 2}); got != want {
		t.Errorf("stats: got %+v, want %+v", got, want)
	}
	if got := countRules(t, ic.opts.Table); got != 1 {
		t.Errorf("after removing all: %d rules per chain, want 1", got)
	}

	if err := ic.Close(); err != nil {
		t.Fatal(err)
	}
	checkState(t, Options{}, 0)
	if _, err := ic.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after close: got %v, want net.ErrClosed", err)
	}
	if err := ic.Add("web", web); !errors.Is(err, net.ErrClosed) {
		t.Errorf("add after close: got %v, want net.ErrClosed", err)
	}
	if err := ic.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// TestGateway intercepts connections and datagrams routed through the interceptor's host from
// another host, with listeners on loopback (tproxy to 127.0.0.1:<port>) and on the wildcard
// address (tproxy to <address of the incoming interface>:<port>).
func TestGateway(t *testing.T) {
	for _, listen := range []string{DefaultListen, "0.0.0.0:0"} {
		t.Run(listen, func(t *testing.T) {
			testGateway(t, Options{Listen: netip.MustParseAddrPort(listen)})
		})
	}
}

func testGateway(t *testing.T, opts Options) {
	topo := newTopology(t)
	ic := open(t, t.Context(), opts)
	if got := ic.TCPAddr().Addr(); got != opts.Listen.Addr() {
		t.Errorf("TCP listener on %s, want %s", got, opts.Listen.Addr())
	}
	conns := acceptAll(t, ic)
	if err := ic.Add("web", web); err != nil {
		t.Fatal(err)
	}
	if err := ic.Add("dns", dns); err != nil {
		t.Fatal(err)
	}
	// Intercepting the clients' own subnet on all ports puts the replies to the clients in
	// range: only the bypass mark of the listeners and reply sockets keeps them from looping.
	all := Interception{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")},
		Ports: []PortRange{{1, 65535}}, Protocols: []string{TCP, UDP}}
	if err := ic.Add("clients", all); err != nil {
		t.Fatal(err)
	}
	client := checkTCP(t, topo.client, dst80, conns)
	if !client.Addr().Is4() || client.Addr() != netip.MustParseAddr("10.99.0.2") {
		t.Errorf("client address %s, want 10.99.0.2", client)
	}
	checkNoTCP(t, topo.client, dst82, conns)
	checkUDP(t, ic, topo.client, dst5300)
	checkNoUDP(t, ic, topo.client, dst5301)

	// The tunnel's own connections, marked with the bypass mark, go where they are addressed
	// (here to the client host, which drops them), not to the listener.
	d := net.Dialer{Timeout: notIntercepted, Control: ic.BypassControl}
	if c, err := d.Dial("tcp4", dst81.String()); err == nil {
		c.Close()
		t.Errorf("bypass-marked dial to %s connected", dst81)
	}
	select {
	case c := <-conns:
		t.Errorf("bypass-marked dial intercepted: %s -> %s", c.RemoteAddr(), c.LocalAddr())
	default:
	}
	if err := ic.Close(); err != nil {
		t.Fatal(err)
	}
	checkState(t, opts, 0)
}

// TestStaleState opens, abandons the interceptor as a crash would, and opens again.
func TestStaleState(t *testing.T) {
	skipUnlessRoot(t)
	netnstest.Enter(t, "interceptor")
	opts := Options{Table: "zmesh-test", Mark: 0x100, BypassMark: 0x200, RouteTable: 1000}

	crashed := func() {
		ic := open(t, context.Background(), opts)
		if err := ic.Add("web", web); err != nil {
			t.Fatal(err)
		}
		// What a crash leaves: the kernel state, without the process's sockets.
		ic.mu.Lock()
		ic.closed = true // for the Close at the end of the test
		ic.mu.Unlock()
		ic.stop()
		ic.closeListeners()
		ic.sys.close()
	}
	crashed()
	checkState(t, opts, 1)
	ic := open(t, t.Context(), opts)
	checkState(t, opts, 1)
	if got := countRules(t, opts.Table); got != 1 {
		t.Errorf("%d rules per chain after reopening, want 1", got)
	}
	if err := ic.Close(); err != nil {
		t.Fatal(err)
	}
	checkState(t, opts, 0)

	crashed()
	if err := Cleanup(opts); err != nil {
		t.Fatal(err)
	}
	checkState(t, opts, 0)
	if err := Cleanup(opts); err != nil {
		t.Errorf("cleanup with nothing to clean: %v", err)
	}

	// The end of Open's context closes the interceptor.
	ctx, cancel := context.WithCancel(t.Context())
	ic = open(t, ctx, opts)
	cancel()
	testutil.Eventually(t, "the table goes once the context ended", func() bool { return tables(t, opts.Table) == 0 })
	// The table goes first; Close finishes under the lock, so taking it waits for Close.
	ic.mu.Lock()
	closed := ic.closed
	ic.mu.Unlock()
	if !closed {
		t.Fatal("the interceptor is not closed after its context ended and its table went")
	}
	checkState(t, opts, 0)
}

// skipUnlessRoot skips the tests of this file elsewhere than as root.
func skipUnlessRoot(t *testing.T) {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces, nftables tables, rules and routes")
}

// topology is two network namespaces joined by a veth pair: client (10.99.0.2/24, default
// route via the gateway) and gw (10.99.0.1/24, default route via the client, so that its own
// processes have a route to 10.77.0.0/24; the client, not forwarding, drops what it gets).
type topology struct {
	client, gw netns.NsHandle
}

// newTopology builds the topology and leaves the test's thread in gw, where the interceptor
// the test opens works.
func newTopology(t *testing.T) topology {
	t.Helper()
	skipUnlessRoot(t)
	client := netnstest.New(t, "client")
	gw := netnstest.Enter(t, "gw")
	netnstest.Veth(t,
		netnstest.End{NS: gw, Dev: "gw0", Addr: netip.MustParsePrefix("10.99.0.1/24")},
		netnstest.End{NS: client, Dev: "client0", Addr: netip.MustParsePrefix("10.99.0.2/24")})
	netnstest.DefaultRoute(t, gw, netip.MustParseAddr("10.99.0.2"))
	netnstest.DefaultRoute(t, client, netip.MustParseAddr("10.99.0.1"))
	return topology{client: client, gw: gw}
}

// open opens an interceptor with a test logger and closes it at the end of the test.
func open(t *testing.T, ctx context.Context, opts Options) *Interceptor {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	ic, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ic.Close(); err != nil {
			t.Error(err)
		}
	})
	return ic
}

// acceptAll accepts intercepted connections until the interceptor is closed.
func acceptAll(t *testing.T, ic *Interceptor) <-chan net.Conn {
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ic.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	return conns
}

// checkTCP connects from namespace ns to dst, expects the connection to be intercepted with
// its original destination and bytes to flow both ways, and returns the client's address.
func checkTCP(t *testing.T, ns netns.NsHandle, dst netip.AddrPort, conns <-chan net.Conn) netip.AddrPort {
	t.Helper()
	c, err := netnstest.DialTimeout(t, ns, "tcp4", dst.String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	defer c.Close()
	var s net.Conn
	select {
	case s = <-conns:
	case <-time.After(2 * time.Second):
		t.Fatalf("dial %s: not intercepted", dst)
	}
	defer s.Close()
	if got := s.LocalAddr().(*net.TCPAddr).AddrPort(); unmap(got) != dst {
		t.Errorf("intercepted connection's local address %s, want %s", got, dst)
	}
	if got, want := s.RemoteAddr().String(), c.LocalAddr().String(); got != want {
		t.Errorf("intercepted connection's remote address %s, want %s", got, want)
	}
	exchange(t, c, s, "hello")
	exchange(t, s, c, "world")
	return unmap(c.LocalAddr().(*net.TCPAddr).AddrPort())
}

func exchange(t *testing.T, from, to net.Conn, msg string) {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	to.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(to, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

// checkNoTCP expects a connection from namespace ns to dst to fail and not to be intercepted.
func checkNoTCP(t *testing.T, ns netns.NsHandle, dst netip.AddrPort, conns <-chan net.Conn) {
	t.Helper()
	c, err := netnstest.DialTimeout(t, ns, "tcp4", dst.String(), notIntercepted)
	if err == nil {
		c.Close()
		t.Errorf("dial %s: connected, want no connection", dst)
	}
	select {
	case s := <-conns:
		s.Close()
		t.Errorf("dial %s: intercepted", dst)
	default:
	}
}

// checkUDP sends a datagram from namespace ns to dst, expects it to be intercepted with its
// original destination, and a reply through ReplyConn to reach the client from dst.
func checkUDP(t *testing.T, ic *Interceptor, ns netns.NsHandle, dst netip.AddrPort) {
	t.Helper()
	c := netnstest.ListenUDP(t, ns, "udp4", nil)
	defer c.Close()
	if _, err := c.WriteToUDPAddrPort([]byte("ping"), dst); err != nil {
		t.Fatal(err)
	}
	ic.udp.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 65535)
	n, client, orig, err := ic.ReadUDP(buf)
	if err != nil {
		t.Fatalf("datagram to %s: %v", dst, err)
	}
	if string(buf[:n]) != "ping" || orig != dst || client.Port() != unmap(c.LocalAddr().(*net.UDPAddr).AddrPort()).Port() {
		t.Fatalf("got %q from %s to %s; want \"ping\" from port %s to %s", buf[:n], client, orig, c.LocalAddr(), dst)
	}
	reply, err := ic.ReplyConn(orig)
	if err != nil {
		t.Fatal(err)
	}
	defer reply.Close()
	if _, err := reply.WriteToUDPAddrPort([]byte("pong"), client); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("reply from %s: %v", dst, err)
	}
	if string(buf[:n]) != "pong" || unmap(from) != dst {
		t.Fatalf("reply %q from %s, want \"pong\" from %s", buf[:n], from, dst)
	}
}

// checkNoUDP expects a datagram from namespace ns to dst not to be intercepted.
func checkNoUDP(t *testing.T, ic *Interceptor, ns netns.NsHandle, dst netip.AddrPort) {
	t.Helper()
	c := netnstest.ListenUDP(t, ns, "udp4", nil)
	defer c.Close()
	if _, err := c.WriteToUDPAddrPort([]byte("ping"), dst); err != nil {
		t.Fatal(err)
	}
	ic.udp.SetReadDeadline(time.Now().Add(notIntercepted))
	n, client, orig, err := ic.ReadUDP(make([]byte, 100))
	if err == nil {
		t.Errorf("datagram to %s intercepted: %d bytes from %s to %s", dst, n, client, orig)
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("datagram to %s: %v", dst, err)
	}
}

// tables counts the inet tables named name in the test thread's namespace.
func tables(t *testing.T, name string) int {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range list {
		if x.Name == name {
			n++
		}
	}
	return n
}

// countRules returns the number of rules in the prerouting chain of table name, after
// checking that the output chain has as many.
func countRules(t *testing.T, name string) int {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
	pre, err := c.GetRules(table, &nftables.Chain{Name: preroutingChain})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.GetRules(table, &nftables.Chain{Name: outputChain})
	if err != nil {
		t.Fatal(err)
	}
	if len(pre) != len(out) {
		t.Errorf("%d prerouting rules, %d output rules", len(pre), len(out))
	}
	return len(pre)
}

// checkState expects n each of the nftables table, the policy rule and the local route of
// opts in the test thread's namespace.
func checkState(t *testing.T, opts Options, n int) {
	t.Helper()
	o, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := tables(t, o.Table); got != n {
		t.Errorf("%d nftables tables %s, want %d", got, o.Table, n)
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, r := range rules {
		if r.Mark == o.Mark && r.Table == o.RouteTable {
			got++
			if r.Priority != o.RulePriority {
				t.Errorf("rule %v: priority %d, want %d", r, r.Priority, o.RulePriority)
			}
		}
	}
	if got != n {
		t.Errorf("%d ip rules fwmark %#x lookup %d, want %d", got, o.Mark, o.RouteTable, n)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: o.RouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != n {
		t.Errorf("%d routes in table %d (%v), want %d", len(routes), o.RouteTable, routes, n)
	}
}
