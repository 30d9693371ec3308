package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/netnstest"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/tunnel/intercept"
)

// The addresses of the test's network. Everything lives in namespaces the test creates.
var (
	clientAddr    = netip.MustParsePrefix("10.200.1.2/24") // client, towards the gateway
	gwClientAddr  = netip.MustParsePrefix("10.200.1.1/24") // gateway, towards the client: its resolver
	gwServerAddr  = netip.MustParsePrefix("10.200.2.1/24") // gateway, towards the server: controller, and the gateway router's link listener
	serverAddr    = netip.MustParsePrefix("10.200.2.2/24") // server, towards the gateway: DNS upstream
	dnsSvcIPRange = netip.MustParsePrefix("100.80.0.0/24")
	udpCIDR       = "10.201.0.0/24" // intercepted for UDP port 5353
	udpDst        = netip.MustParseAddrPort("10.201.0.7:5353")
	resolverAddr  = netip.AddrPortFrom(gwClientAddr.Addr(), 53)
	upstreamAddr  = netip.AddrPortFrom(serverAddr.Addr(), 53)
	upstreamName  = "other.example.test"
	upstreamIP    = netip.MustParseAddr("192.0.2.80")
)

// Where the services listen in the server namespace.
const (
	webPort      = 8080 // web.zmesh.test:80
	wildcardPort = 8081 // *.zmesh.test:80
	udpEchoPort  = 5353 // 10.201.0.0/24:5353 (udp)
	bigSize      = 1 << 20
)

const adminPassword = "e2e-admin-pass"

// TestTProxyGateway checks the tproxy tunnel end to end, with every zmesh part a process of
// the built binary:
//
//	client ns                 gateway ns                              server ns
//	10.200.1.2  ──veth──  10.200.1.1  controller  10.200.2.1  ──veth──  10.200.2.2
//	default via gateway    router "gateway": tproxy, resolver on     router "server": host mode,
//	                       10.200.1.1:53, link listener on the       link dialer,
//	                       controller's 10.200.2.1:6000 (its         HTTP 127.0.0.1:8080, :8081
//	                       certificate names 10.200.2.1)             UDP echo 127.0.0.1:5353
//	                                                                  DNS upstream 10.200.2.2:53
//
// The gateway router's identity may dial, the server router's identity may bind, three
// services (all with end-to-end encryption): web (web.zmesh.test:80/tcp, an exact name),
// wildcard (*.zmesh.test:80/tcp, which also covers web.zmesh.test, so the exact name must
// win) and udp-echo (10.201.0.0/24:5353/udp). From the client it resolves names through the
// gateway's resolver, fetches pages over HTTP, round-trips datagrams, and resolves names no
// service intercepts through the upstream of the tunnel's options.upstreams, a DNS server of
// the test in the server namespace. Then it reloads the gateway router with SIGHUP after
// setting log.level to debug in its file, and checks that debug lines follow and that its
// interception state is unchanged. Last it stops the gateway router with SIGTERM and checks
// that it exited with status 0, logged no error, and left no nftables table, policy rule or
// route behind. The gateway router shares the controller's address, and its certificate
// names it: the controller's clients tell them apart by the controller's certificate policy.
func TestTProxyGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veth pairs and nftables rules, and runs routers in them")
	}
	ctx := t.Context()
	dir := t.TempDir()
	building := time.Now()
	bin := buildZmesh(t, dir)
	t.Logf("built zmesh in %v", time.Since(building).Round(time.Millisecond))
	began := time.Now()

	// The network.
	client, gw, srv := netnstest.New(t, "client"), netnstest.New(t, "gateway"), netnstest.New(t, "server")
	netnstest.Veth(t, netnstest.End{NS: gw, Dev: "gw-client", Addr: gwClientAddr}, netnstest.End{NS: client, Dev: "client-gw", Addr: clientAddr})
	netnstest.Veth(t, netnstest.End{NS: gw, Dev: "gw-server", Addr: gwServerAddr}, netnstest.End{NS: srv, Dev: "server-gw", Addr: serverAddr})
	netnstest.DefaultRoute(t, client, gwClientAddr.Addr())

	// The server namespace's services and the DNS upstream.
	serveHTTP(t, srv, webPort, "web")
	serveHTTP(t, srv, wildcardPort, "wildcard")
	serveUDPEcho(t, srv, udpEchoPort)
	upstream := serveUpstreamDNS(t, srv)

	// The controller, in the gateway namespace.
	ctrlDir := filepath.Join(dir, "controller")
	ctrlFile := writeFile(t, filepath.Join(ctrlDir, "controller.yml"), fmt.Sprintf(`v: 1
dataDir: %s
api:
  listen: %s:1280
ctrl:
  listen: tls:%s:6262
admin:
  username: admin
  password: ${ZMESH_ADMIN_PASSWORD}
`, filepath.Join(ctrlDir, "data"), gwServerAddr.Addr(), gwServerAddr.Addr()))
	ctrl := start(t, gw, "controller", procOptions{env: []string{"ZMESH_ADMIN_PASSWORD=" + adminPassword}},
		bin, "controller", "run", "--config", ctrlFile)
	ctrl.waitOutput(t, "controller API at")
	api := newManagement(t, ctx, gw, fmt.Sprintf("https://%s:1280", gwServerAddr.Addr()), filepath.Join(ctrlDir, "data", "pki", "ca.cert"))

	// The routers: created, then enrolled with `zmesh router enroll` from their namespaces.
	gwID, gwJWT := api.router("gateway")
	srvID, srvJWT := api.router("server")
	// The gateway router shares the controller's address: its server certificate names it,
	// and it listens there for the link, which the server router dials. The controller's
	// clients tell the two apart by the controller's certificate policy, not by names.
	gwCfg := routerConfig(t, filepath.Join(dir, "gateway"), "gateway", gwServerAddr.Addr(), fmt.Sprintf(`link:
  listeners:
    - binding: transport
      bind: tls:%[1]s:6000
      advertise: tls:%[1]s:6000
listeners:
  - binding: tunnel
    options:
      mode: tproxy
      resolver: udp://%[2]s
      dnsSvcIpRange: %[3]s
      upstreams: [%[4]s]
`, gwServerAddr.Addr(), resolverAddr, dnsSvcIPRange, upstreamAddr.Addr()))
	srvCfg := routerConfig(t, filepath.Join(dir, "server"), "server", serverAddr.Addr(), `link:
  dialers:
    - binding: transport
      healthyDialBackoff: {minRetryInterval: 100ms, maxRetryInterval: 1s}
      unhealthyDialBackoff: {minRetryInterval: 100ms, maxRetryInterval: 1s}
listeners:
  - binding: tunnel
    options:
      mode: host
`)
	enroll := func(ns netns.NsHandle, cfg, jwt string) {
		t.Helper()
		jwtFile := writeFile(t, filepath.Join(filepath.Dir(cfg), "router.jwt"), jwt)
		if out := run(t, ns, 20*time.Second, bin, "router", "enroll", cfg, "--jwt", jwtFile); !strings.Contains(out, "enrolled") {
			t.Fatalf("zmesh router enroll %s: %q", cfg, out)
		}
	}
	enroll(gw, gwCfg, gwJWT)
	enroll(srv, srvCfg, srvJWT)

	// Configs, services and policies. Service policies name the routers' identities, which
	// have the routers' ids.
	api.create("/edge-router-policies", map[string]any{"name": "all-routers", "semantic": "AnyOf",
		"identityRoles": []string{"#all"}, "edgeRouterRoles": []string{"#all"}})
	api.create("/service-edge-router-policies", map[string]any{"name": "all-services", "semantic": "AnyOf",
		"serviceRoles": []string{"#all"}, "edgeRouterRoles": []string{"#all"}})
	for _, s := range []struct {
		name      string
		intercept map[string]any
		host      map[string]any
	}{
		{"web",
			map[string]any{"protocols": []string{"tcp"}, "addresses": []string{"web.zmesh.test"}, "portRanges": []map[string]int{{"low": 80, "high": 80}}},
			map[string]any{"protocol": "tcp", "address": "127.0.0.1", "port": webPort}},
		{"wildcard",
			map[string]any{"protocols": []string{"tcp"}, "addresses": []string{"*.zmesh.test"}, "portRanges": []map[string]int{{"low": 80, "high": 80}}},
			map[string]any{"protocol": "tcp", "address": "127.0.0.1", "port": wildcardPort}},
		{"udp-echo",
			map[string]any{"protocols": []string{"udp"}, "addresses": []string{udpCIDR}, "portRanges": []map[string]int{{"low": 5353, "high": 5353}}},
			map[string]any{"protocol": "udp", "address": "127.0.0.1", "port": udpEchoPort}},
	} {
		ic := api.create("/configs", map[string]any{"name": s.name + "-intercept", "configTypeId": "intercept.v1", "data": s.intercept})
		hc := api.create("/configs", map[string]any{"name": s.name + "-host", "configTypeId": "host.v1", "data": s.host})
		api.create("/services", map[string]any{"name": s.name, "roleAttributes": []string{"e2e"}, "configs": []string{ic, hc},
			"encryptionRequired": true})
	}
	api.create("/service-policies", map[string]any{"name": "gateway-dials", "type": "Dial", "semantic": "AnyOf",
		"identityRoles": []string{"@" + gwID}, "serviceRoles": []string{"#e2e"}})
	api.create("/service-policies", map[string]any{"name": "server-binds", "type": "Bind", "semantic": "AnyOf",
		"identityRoles": []string{"@" + srvID}, "serviceRoles": []string{"#e2e"}})

	t.Run("the gateway namespace holds no zmesh state before the router runs", func(t *testing.T) {
		if st := interceptState(t, gw); !st.empty() {
			t.Fatalf("gateway namespace before the router runs: %s", st)
		}
	})

	// Run the routers.
	srvRouter := start(t, srv, "server router", procOptions{}, bin, "router", "run", srvCfg, "--log-level", "debug")
	// The gateway router runs as the systemd unit runs it: not root, with CAP_NET_ADMIN and
	// CAP_NET_BIND_SERVICE only (nftables, routes, IP_TRANSPARENT, the resolver on port 53).
	giveTo(t, nobody, dir, filepath.Dir(gwCfg))
	// Its file decides its log level (info, until the reload below): no --log-level.
	gwRouter := start(t, gw, "gateway router", procOptions{unprivileged: true}, bin, "router", "run", gwCfg)

	gwRouter.waitOutput(t, "tunnel tproxy: running")
	t.Run("the gateway router runs with CAP_NET_ADMIN and CAP_NET_BIND_SERVICE only", func(t *testing.T) {
		if caps := capabilities(t, gwRouter); caps != 1<<unix.CAP_NET_ADMIN|1<<unix.CAP_NET_BIND_SERVICE {
			t.Fatalf("the gateway router runs with capabilities %#x, want CAP_NET_ADMIN and CAP_NET_BIND_SERVICE only", caps)
		}
	})
	t.Run("the gateway's tproxy uses the upstreams of its options", func(t *testing.T) {
		if want := fmt.Sprintf("upstreams=[%s]", upstreamAddr); !strings.Contains(gwRouter.out.String(), want) {
			t.Errorf("the gateway's tproxy does not list the upstream of options.upstreams (%s)", want)
		}
	})
	for _, r := range []struct {
		id string
		p  *proc
	}{{gwID, gwRouter}, {srvID, srvRouter}} {
		testutil.EventuallyNil(t, r.p.name+" online", func() error { return api.online(r.id) })
		r.p.waitOutput(t, "link up")
	}
	testutil.EventuallyNil(t, "the server router's terminators", func() error {
		if n := api.terminators(srvID); n != 3 {
			return fmt.Errorf("%d terminators on the server router, want 3", n)
		}
		return nil
	})
	t.Logf("network ready after %v", time.Since(began).Round(time.Millisecond))

	t.Run("the gateway namespace holds the interceptor's state while the router runs", func(t *testing.T) {
		if st := interceptState(t, gw); !st.table || len(st.rules) == 0 || len(st.routes) == 0 {
			t.Errorf("gateway namespace while the router runs: %s; want the table, the rule and the route", st)
		}
	})

	t.Run("DNS: an exact name and a name under the wildcard get addresses from dnsSvcIpRange", func(t *testing.T) {
		var webIP netip.Addr
		testutil.EventuallyNil(t, "web.zmesh.test resolved by the gateway", func() error {
			var err error
			webIP, err = lookupA(client, "web.zmesh.test")
			return err
		})
		fooIP, err := lookupA(client, "foo.zmesh.test")
		if err != nil {
			t.Fatalf("foo.zmesh.test: %v", err)
		}
		for name, ip := range map[string]netip.Addr{"web.zmesh.test": webIP, "foo.zmesh.test": fooIP} {
			if !dnsSvcIPRange.Contains(ip) {
				t.Errorf("%s resolved to %s, outside dnsSvcIpRange %s", name, ip, dnsSvcIPRange)
			}
		}
		if webIP == fooIP {
			t.Errorf("web.zmesh.test and foo.zmesh.test both resolved to %s", webIP)
		}
	})

	t.Run("HTTP crosses the interception, the circuit over the link and the server's tunnel", func(t *testing.T) {
		var err error
		hc := clientHTTP(client)
		var page string
		testutil.EventuallyNil(t, "GET http://web.zmesh.test/", func() error {
			page, err = get(ctx, hc, "http://web.zmesh.test/")
			return err
		})
		if want := "zmesh e2e web: host web.zmesh.test path /\n"; page != want {
			t.Errorf("GET http://web.zmesh.test/: %q, want %q", page, want)
		}
		big, err := get(ctx, hc, "http://web.zmesh.test/big")
		if err != nil || len(big) != bigSize || sha256.Sum256([]byte(big)) != sha256.Sum256(bigBody()) {
			t.Errorf("GET http://web.zmesh.test/big: %d bytes, %v; want the %d bytes of the server", len(big), err, bigSize)
		}
		if page, err := get(ctx, hc, "http://foo.zmesh.test/x"); err != nil || page != "zmesh e2e wildcard: host foo.zmesh.test path /x\n" {
			t.Errorf("GET http://foo.zmesh.test/x: %q, %v; want the wildcard service's page", page, err)
		}
	})

	t.Run("UDP to an intercepted CIDR comes back whole, from where it was sent", func(t *testing.T) {
		for _, msg := range []string{"ping", strings.Repeat("datagram ", 100)} {
			if got, err := udpRoundTrip(client, udpDst, msg); err != nil || got != "echo: "+msg {
				t.Errorf("UDP %q to %s: %q, %v", msg[:min(len(msg), 20)], udpDst, got, err)
			}
		}
	})

	t.Run("a name no service intercepts is forwarded to the upstream", func(t *testing.T) {
		if ip, err := lookupA(client, upstreamName); err != nil || ip != upstreamIP {
			t.Errorf("%s through the gateway: %s, %v; want %s from the upstream", upstreamName, ip, err, upstreamIP)
		}
		if from := upstream.queried(upstreamName); len(from) == 0 || from[0] != gwServerAddr.Addr() {
			t.Errorf("the upstream saw queries for %s from %v; want from the gateway %s", upstreamName, from, gwServerAddr.Addr())
		}
		if rcode := lookupRcode(client, "missing.example.test"); rcode != dns.RcodeNameError {
			t.Errorf("missing.example.test through the gateway: rcode %s, want the upstream's NXDOMAIN", dns.RcodeToString[rcode])
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("SIGHUP changes the gateway router's log level and leaves its rules in place", func(t *testing.T) {
		before := interceptState(t, gw)
		if strings.Contains(gwRouter.out.String(), "level=DEBUG") {
			t.Fatal("the gateway router logged debug lines at the level info")
		}
		cfg, err := os.ReadFile(gwCfg)
		if err != nil {
			t.Fatal(err)
		}
		// WriteFile keeps the file's owner and mode: the router (nobody) reads it again.
		if err := os.WriteFile(gwCfg, append(cfg, "log:\n  level: debug\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := gwRouter.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		gwRouter.waitOutput(t, `msg="log level changed" level=debug`)
		reloaded := len(gwRouter.out.String())
		// A connection through the interception logs at debug ("carrying connection").
		hc := clientHTTP(client)
		testutil.EventuallyNil(t, "a debug line after the reload", func() error {
			if strings.Contains(gwRouter.out.String()[reloaded:], "level=DEBUG") {
				return nil
			}
			if done, err := gwRouter.exited(); done {
				t.Fatalf("the gateway router ended (%v) after SIGHUP", err)
			}
			_, err := get(ctx, hc, "http://web.zmesh.test/")
			return errors.Join(errors.New("no debug line yet"), err)
		})
		if after := interceptState(t, gw); after.String() != before.String() {
			t.Errorf("the interception state changed at the reload:\nbefore %s\nafter  %s", before, after)
		}
		if page, err := get(ctx, hc, "http://web.zmesh.test/"); err != nil || page != "zmesh e2e web: host web.zmesh.test path /\n" {
			t.Errorf("GET http://web.zmesh.test/ after the reload: %q, %v", page, err)
		}
	})

	t.Run("the gateway router stops cleanly and leaves nothing behind", func(t *testing.T) {
		stopped := time.Now()
		if err := gwRouter.stop(syscall.SIGTERM, 15*time.Second); err != nil {
			t.Errorf("gateway router after SIGTERM: %v; want exit status 0", err)
		}
		t.Logf("gateway router stopped in %v", time.Since(stopped).Round(time.Millisecond))
		gwLog := gwRouter.out.String()
		for _, s := range []string{`msg="stopping on SIGTERM"`, "tunnel tproxy: stopped", "router stopped"} {
			if !strings.Contains(gwLog, s) {
				t.Errorf("gateway router's log lacks %q", s)
			}
		}
		for line := range strings.Lines(gwLog) {
			if strings.Contains(line, "level=ERROR") {
				t.Errorf("gateway router logged an error: %s", strings.TrimSpace(line))
			}
		}
		if st := interceptState(t, gw); !st.empty() {
			t.Errorf("gateway namespace after the router stopped: %s", st)
		}
	})
	t.Logf("done in %v", time.Since(began).Round(time.Millisecond))
}

// management is an administrator's client of the controller's management API, reached from
// the controller's namespace.
type management struct {
	t   *testing.T
	ctx context.Context
	c   *apiclient.Client
}

func newManagement(t *testing.T, ctx context.Context, ns netns.NsHandle, url, caFile string) *management {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(readFile(t, caFile)) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	c := apiclient.New(url, pool, nil)
	tr, ok := c.HTTP.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("edgeclient transport is a %T, not an *http.Transport", c.HTTP.Transport)
	}
	tr.DialContext = netnstest.Dialer{NS: ns}.DialContext
	if _, err := c.AuthenticatePassword(ctx, "admin", adminPassword); err != nil {
		t.Fatalf("admin login: %v", err)
	}
	return &management{t: t, ctx: ctx, c: c}
}

// create POSTs an entity and returns its id.
func (m *management) create(path string, body any) string {
	m.t.Helper()
	var out struct {
		ID string `json:"id"`
	}
	if _, err := m.c.Do(m.ctx, "POST", apiclient.ManagementAPI+path, body, &out); err != nil {
		m.t.Fatalf("POST %s %v: %v", path, body, err)
	}
	return out.ID
}

// router creates a tunneler-enabled edge router and returns its id and enrollment token.
func (m *management) router(name string) (string, string) {
	m.t.Helper()
	id := m.create("/edge-routers", map[string]any{"name": name, "roleAttributes": []string{"e2e"}, "isTunnelerEnabled": true})
	var detail struct {
		EnrollmentJWT string `json:"enrollmentJwt"`
	}
	if _, err := m.c.Do(m.ctx, "GET", apiclient.ManagementAPI+"/edge-routers/"+id, nil, &detail); err != nil || detail.EnrollmentJWT == "" {
		m.t.Fatalf("edge router %s: %v, %+v", name, err, detail)
	}
	return id, detail.EnrollmentJWT
}

// online returns nil when the controller says the router is online.
func (m *management) online(id string) error {
	var detail struct {
		IsOnline bool `json:"isOnline"`
	}
	if _, err := m.c.Do(m.ctx, "GET", apiclient.ManagementAPI+"/edge-routers/"+id, nil, &detail); err != nil {
		return err
	}
	if !detail.IsOnline {
		return errors.New("not online")
	}
	return nil
}

// terminators returns the number of terminators on router id.
func (m *management) terminators(id string) int {
	var list []struct {
		RouterID string `json:"routerId"`
	}
	if _, err := m.c.Do(m.ctx, "GET", apiclient.ManagementAPI+"/terminators?limit=500", nil, &list); err != nil {
		m.t.Logf("list terminators: %v", err)
		return -1
	}
	n := 0
	for _, tm := range list {
		if tm.RouterID == id {
			n++
		}
	}
	return n
}

// routerConfig writes the configuration of router name into dir and returns its path: the
// identity files in dir/certs, the controller in the gateway namespace, the CSR's SANs
// naming <name>.zmesh.e2e and addr (when valid), and the sections of extra.
func routerConfig(t *testing.T, dir, name string, addr netip.Addr, extra string) string {
	t.Helper()
	ips := "[]"
	if addr.IsValid() {
		ips = "[" + addr.String() + "]"
	}
	return writeFile(t, filepath.Join(dir, "router.yml"), fmt.Sprintf(`v: 3
identity:
  cert: certs/client.cert
  server_cert: certs/server.cert
  key: certs/router.key
  ca: certs/ca.cert
ctrl:
  endpoint: tls:%s:6262
edge:
  csr:
    organization: zmesh-e2e
    sans:
      dns: [%s.zmesh.e2e]
      ip: %s
%s`, gwServerAddr.Addr(), name, ips, extra))
}

// serveHTTP serves, on 127.0.0.1:port in namespace ns, a page naming the service, the Host
// header and the path, and bigSize bytes on /big.
func serveHTTP(t *testing.T, ns netns.NsHandle, port int, name string) {
	t.Helper()
	var ln net.Listener
	if err := netnstest.Run(ns, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(bigBody()) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "zmesh e2e %s: host %s path %s\n", name, r.Host, r.URL.Path)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// bigBody is the body of /big.
func bigBody() []byte {
	b := make([]byte, bigSize)
	for i := range b {
		b[i] = byte(i*7 + i>>11)
	}
	return b
}

// serveUDPEcho answers each datagram to 127.0.0.1:port in namespace ns with "echo: " and it.
func serveUDPEcho(t *testing.T, ns netns.NsHandle, port int) {
	t.Helper()
	var pc net.PacketConn
	if err := netnstest.Run(ns, func() (err error) {
		pc, err = net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo: "), buf[:n]...), from)
		}
	}()
}

// upstreamDNS is the test's DNS server behind the gateway's resolver: it answers
// upstreamName with upstreamIP and NXDOMAIN for everything else, and remembers who asked.
type upstreamDNS struct {
	mu   sync.Mutex
	seen map[string][]netip.Addr
}

func serveUpstreamDNS(t *testing.T, ns netns.NsHandle) *upstreamDNS {
	t.Helper()
	u := &upstreamDNS{seen: map[string][]netip.Addr{}}
	var pc net.PacketConn
	if err := netnstest.Run(ns, func() (err error) {
		pc, err = net.ListenPacket("udp4", upstreamAddr.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg).SetReply(q)
		if len(q.Question) == 1 {
			name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
			from, _ := netip.ParseAddrPort(w.RemoteAddr().String())
			u.mu.Lock()
			u.seen[name] = append(u.seen[name], from.Addr().Unmap())
			u.mu.Unlock()
			switch {
			case name == upstreamName && q.Question[0].Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
					A: upstreamIP.AsSlice()})
			case name != upstreamName:
				m.Rcode = dns.RcodeNameError
			}
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return u
}

// queried returns the addresses the queries for name came from.
func (u *upstreamDNS) queried(name string) []netip.Addr {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]netip.Addr(nil), u.seen[name]...)
}

// exchange asks the gateway's resolver, from namespace ns, for the A record of name.
func exchange(ns netns.NsHandle, name string) (*dns.Msg, error) {
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	var reply *dns.Msg
	err := netnstest.Run(ns, func() (err error) {
		reply, _, err = c.Exchange(m, resolverAddr.String())
		return err
	})
	return reply, err
}

// lookupA resolves name through the gateway's resolver from namespace ns.
func lookupA(ns netns.NsHandle, name string) (netip.Addr, error) {
	reply, err := exchange(ns, name)
	if err != nil {
		return netip.Addr{}, err
	}
	if reply.Rcode != dns.RcodeSuccess {
		return netip.Addr{}, fmt.Errorf("%s: rcode %s", name, dns.RcodeToString[reply.Rcode])
	}
	for _, rr := range reply.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(a.A)
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s: no A record in %v", name, reply.Answer)
}

// lookupRcode returns the rcode of the gateway resolver's answer for name, or -1.
func lookupRcode(ns netns.NsHandle, name string) int {
	reply, err := exchange(ns, name)
	if err != nil {
		return -1
	}
	return reply.Rcode
}

// clientHTTP is an HTTP client in namespace ns that resolves names through the gateway's
// resolver, with a new connection (so a new circuit) per request.
func clientHTTP(ns netns.NsHandle) *http.Client {
	dial := netnstest.Dialer{NS: ns}.DialContext
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			ip, err := lookupA(ns, host)
			if err != nil {
				return nil, err
			}
			return dial(ctx, "tcp4", net.JoinHostPort(ip.String(), port))
		},
	}}
}

// get returns the body of a GET of url, which must answer 200.
func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return string(body), err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("status %s", resp.Status)
	}
	return string(body), nil
}

// udpRoundTrip sends msg from namespace ns to dst and returns the answer, which must come
// from dst.
func udpRoundTrip(ns netns.NsHandle, dst netip.AddrPort, msg string) (string, error) {
	var c *net.UDPConn
	if err := netnstest.Run(ns, func() (err error) {
		c, err = net.ListenUDP("udp4", nil)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	buf := make([]byte, 65535)
	var lastErr error
	for range 3 { // a datagram is not retransmitted: allow for one lost while the flow opens
		if _, err := c.WriteToUDPAddrPort([]byte(msg), dst); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			lastErr = err
			continue
		}
		if from := netip.AddrPortFrom(from.Addr().Unmap(), from.Port()); from != dst {
			return "", fmt.Errorf("answer from %s, want from %s", from, dst)
		}
		return string(buf[:n]), nil
	}
	return "", lastErr
}

// state is what the tproxy interceptor installs in a namespace, found there.
type state struct {
	table  bool
	rules  []netlink.Rule
	routes []netlink.Route
}

func (s state) empty() bool { return !s.table && len(s.rules) == 0 && len(s.routes) == 0 }

func (s state) String() string {
	return fmt.Sprintf("nftables table %q: %v; policy rules with mark %#x or table %d: %v; routes in table %d: %v",
		intercept.DefaultTable, s.table, intercept.DefaultMark, intercept.DefaultRouteTable, s.rules, intercept.DefaultRouteTable, s.routes)
}

// interceptState reads, in namespace ns, the nftables table, policy rules and routes of the
// tproxy interceptor (default options, as the router uses them).
func interceptState(t *testing.T, ns netns.NsHandle) state {
	t.Helper()
	var s state
	nft, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	tables, err := nft.ListTables()
	if err != nil {
		t.Fatalf("list nftables tables: %v", err)
	}
	for _, tb := range tables {
		if tb.Name == intercept.DefaultTable {
			s.table = true
		}
	}
	h := netnstest.Handle(t, ns)
	rules, err := h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("list rules: %v", err)
	}
	for _, r := range rules {
		if r.Mark == intercept.DefaultMark || r.Table == intercept.DefaultRouteTable {
			s.rules = append(s.rules, r)
		}
	}
	s.routes, err = h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: intercept.DefaultRouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("list routes: %v", err)
	}
	return s
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// giveTo lets uid run a router from dir: the test's directories up to dir become traversable,
// and everything under routerDir becomes uid's.
func giveTo(t *testing.T, uid int, dir, routerDir string) {
	t.Helper()
	for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(routerDir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// capabilities returns the effective capability set of a running process.
func capabilities(t *testing.T, p *proc) uint64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps
		}
	}
	t.Fatal("no CapEff in /proc/<pid>/status")
	return 0
}
