package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// start runs a Resolver configured by opts on 127.0.0.1:0 until the test ends and returns
// it with its address. Without upstreams it reads an empty resolv.conf, never the host's.
func start(t *testing.T, opts Options) (*Resolver, string) {
	t.Helper()
	if len(opts.Upstreams) == 0 && opts.ResolvConf == "" {
		opts.ResolvConf = writeFile(t, "resolv.conf", "search example.invalid\n")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := r.Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r, srv.Addr().String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// query sends one question over network ("udp" or "tcp") and returns the reply.
func query(t testing.TB, addr, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m, err := exchange(addr, network, name, qtype)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", dns.TypeToString[qtype], name, network, err)
	}
	return m
}

func exchange(addr, network, name string, qtype uint16) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	m, _, err := c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype), addr)
	return m, err
}

// answerA returns the address of a NOERROR reply holding one A record, checking its TTL.
func answerA(t testing.TB, m *dns.Msg) netip.Addr {
	t.Helper()
	a := soleA(t, m)
	if a.Hdr.Ttl != TTL {
		t.Fatalf("answer %s: want TTL %d", a, TTL)
	}
	ip, _ := netip.AddrFromSlice(a.A)
	return ip.Unmap()
}

// wantUpstreamA checks that m is the reply of a server started by upstream.
func wantUpstreamA(t testing.TB, m *dns.Msg) {
	t.Helper()
	if a := soleA(t, m); !a.A.Equal(net.IPv4(192, 0, 2, 7)) || a.Hdr.Ttl != 300 {
		t.Fatalf("answer %s: want the upstream's 192.0.2.7 with TTL 300", a)
	}
}

func soleA(t testing.TB, m *dns.Msg) *dns.A {
	t.Helper()
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("reply for %s: want one A record, got %s", m.Question[0].Name, m)
	}
	a, ok := m.Answer[0].(*dns.A)
	if !ok || a.Hdr.Name != m.Question[0].Name {
		t.Fatalf("reply for %s: answer %s is not A for the name", m.Question[0].Name, m.Answer[0])
	}
	return a
}

func wantRcode(t testing.TB, m *dns.Msg, rcode int) {
	t.Helper()
	if m.Rcode != rcode || len(m.Answer) != 0 {
		t.Fatalf("reply for %s: want %s without answer, got %s", m.Question[0].Name, dns.RcodeToString[rcode], m)
	}
}

// upstream runs a DNS server on 127.0.0.1:0 (UDP and TCP) answering every A query with
// 192.0.2.7 and returns its address and the number of queries it received.
func upstream(t *testing.T) (string, *atomic.Int64) { return upstreamRcode(t, dns.RcodeSuccess) }

// upstreamRcode is upstream answering with rcode, records only with RcodeSuccess.
func upstreamRcode(t *testing.T, rcode int) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		n.Add(1)
		m := new(dns.Msg).SetRcode(req, rcode)
		if rcode == dns.RcodeSuccess && req.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(req.Question[0].Name + " 300 IN A 192.0.2.7")
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})
	var pc net.PacketConn
	var ln net.Listener
	for attempt := 1; ln == nil; attempt++ { // until UDP and TCP get the same port
		var err error
		if pc, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp4", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if attempt == 10 {
				t.Fatal(err)
			}
		}
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		up := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(up) }
		go srv.ActivateAndServe()
		<-up
		t.Cleanup(func() { srv.Shutdown() })
	}
	return pc.LocalAddr().String(), &n
}

// silentUpstream returns the address of a UDP socket that reads queries and never replies.
func silentUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().String()
}

func TestExactHostname(t *testing.T) {
	var assigned []Assignment
	r, addr := start(t, Options{OnAssign: func(name, pattern string, ip netip.Addr) error {
		assigned = append(assigned, Assignment{name, pattern, ip})
		return nil
	}})
	ip, err := r.Add("web.zmesh.test")
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddr("100.64.0.1"); ip != want {
		t.Errorf("first address of the default range: got %s, want %s", ip, want)
	}
	if want := []Assignment{{"web.zmesh.test", "", ip}}; !slices.Equal(assigned, want) {
		t.Errorf("OnAssign calls: got %v, want %v", assigned, want)
	}
	m := query(t, addr, "udp", "web.zmesh.test", dns.TypeA)
	if got := answerA(t, m); got != ip {
		t.Errorf("answer: got %s, want %s", got, ip)
	}
	if !m.Authoritative {
		t.Error("answer for an intercepted name is not authoritative")
	}
	if name, pattern, ok := r.Lookup(ip); name != "web.zmesh.test" || pattern != "" || !ok {
		t.Errorf("Lookup(%s) = %q, %q, %v", ip, name, pattern, ok)
	}
	if _, _, ok := r.Lookup(ip.Next()); ok {
		t.Errorf("Lookup(%s) of an unassigned address succeeded", ip.Next())
	}
	if s := r.Stats(); s.Intercepted != 1 || s.Assignments != 1 || s.Queries() != 1 {
		t.Errorf("stats: %+v", s)
	}
}

func TestNameCaseAndTrailingDot(t *testing.T) {
	r, addr := start(t, Options{})
	ip, err := r.Add("Web.ZMesh.Test.")
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.Add("web.zmesh.test")
	if err != nil || again != ip {
		t.Fatalf("adding the name again: got %s, %v; want %s", again, err, ip)
	}
	for _, name := range []string{"web.zmesh.test.", "WEB.zmesh.TEST", "wEb.ZmEsH.tEsT."} {
		if got := answerA(t, query(t, addr, "udp", name, dns.TypeA)); got != ip {
			t.Errorf("%s: got %s, want %s", name, got, ip)
		}
	}
	if as := r.Assignments(); len(as) != 1 || as[0].Name != "web.zmesh.test" {
		t.Errorf("assignments: %v", as)
	}
	// Added twice, so intercepted until removed twice.
	if !r.Remove("WEB.zmesh.test.") {
		t.Fatal("Remove: not added")
	}
	answerA(t, query(t, addr, "udp", "web.zmesh.test", dns.TypeA))
	if !r.Remove("web.zmesh.test") {
		t.Fatal("Remove: not added")
	}
	if r.Remove("web.zmesh.test") {
		t.Error("Remove of a removed name reported it added")
	}
	wantRcode(t, query(t, addr, "udp", "web.zmesh.test", dns.TypeA), dns.RcodeRefused)
}

func TestWildcard(t *testing.T) {
	up, upQueries := upstream(t)
	var mu sync.Mutex
	var assigned []Assignment
	r, addr := start(t, Options{
		Upstreams: []string{up},
		OnAssign: func(name, pattern string, ip netip.Addr) error {
			mu.Lock()
			defer mu.Unlock()
			assigned = append(assigned, Assignment{name, pattern, ip})
			return nil
		},
	})
	if ip, err := r.Add("*.ZMesh.test"); err != nil || ip.IsValid() {
		t.Fatalf("Add wildcard: %s, %v", ip, err)
	}
	if len(r.Assignments()) != 0 {
		t.Fatal("a wildcard got addresses before any query")
	}
	a := answerA(t, query(t, addr, "udp", "a.zmesh.test", dns.TypeA))
	if again := answerA(t, query(t, addr, "udp", "A.zmesh.test", dns.TypeA)); again != a {
		t.Errorf("second query for a.zmesh.test: got %s, want %s", again, a)
	}
	deep := answerA(t, query(t, addr, "udp", "b.c.zmesh.test", dns.TypeA))
	bare := answerA(t, query(t, addr, "udp", "zmesh.test", dns.TypeA))
	if a == deep || a == bare || deep == bare {
		t.Errorf("names share addresses: %s %s %s", a, deep, bare)
	}
	want := []Assignment{
		{"a.zmesh.test", "*.zmesh.test", a},
		{"b.c.zmesh.test", "*.zmesh.test", deep},
		{"zmesh.test", "*.zmesh.test", bare},
	}
	mu.Lock()
	if !slices.Equal(assigned, want) {
		t.Errorf("OnAssign calls: got %v, want %v", assigned, want)
	}
	mu.Unlock()
	if got := r.Assignments(); !slices.Equal(got, want) {
		t.Errorf("Assignments: got %v, want %v", got, want)
	}
	if name, pattern, ok := r.Lookup(deep); name != "b.c.zmesh.test" || pattern != "*.zmesh.test" || !ok {
		t.Errorf("Lookup(%s) = %q, %q, %v", deep, name, pattern, ok)
	}

	// Other types for names in the domain are answered here, never forwarded, and assign nothing.
	wantRcode(t, query(t, addr, "udp", "other.zmesh.test", dns.TypeAAAA), dns.RcodeSuccess)
	wantRcode(t, query(t, addr, "udp", "other.zmesh.test", dns.TypeTXT), dns.RcodeSuccess)
	if n := upQueries.Load(); n != 0 {
		t.Errorf("upstream got %d queries for intercepted names", n)
	}
	if n := len(r.Assignments()); n != 3 {
		t.Errorf("%d assignments after AAAA and TXT queries, want 3", n)
	}
	// A name that merely ends like the domain is not in it.
	wantUpstreamA(t, query(t, addr, "udp", "notzmesh.test", dns.TypeA))
}

func TestPrecedence(t *testing.T) {
	var mu sync.Mutex
	var released []string
	r, addr := start(t, Options{OnRelease: func(name string, ip netip.Addr) {
		mu.Lock()
		defer mu.Unlock()
		released = append(released, name)
	}})
	lookup := func(name string) Assignment {
		t.Helper()
		ip := answerA(t, query(t, addr, "udp", name, dns.TypeA))
		n, p, ok := r.Lookup(ip)
		if !ok || n != name {
			t.Fatalf("Lookup(%s) = %q, %q, %v; want %s", ip, n, p, ok, name)
		}
		return Assignment{n, p, ip}
	}
	for _, n := range []string{"*.zmesh.test", "*.svc.zmesh.test"} {
		if _, err := r.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	web, err := r.Add("web.svc.zmesh.test")
	if err != nil {
		t.Fatal(err)
	}
	if got := lookup("web.svc.zmesh.test"); got != (Assignment{"web.svc.zmesh.test", "", web}) {
		t.Errorf("exact name: got %v", got)
	}
	if got := lookup("x.svc.zmesh.test"); got.Pattern != "*.svc.zmesh.test" {
		t.Errorf("x.svc.zmesh.test matched %q, want the longer wildcard", got.Pattern)
	}
	if got := lookup("y.zmesh.test"); got.Pattern != "*.zmesh.test" {
		t.Errorf("y.zmesh.test matched %q", got.Pattern)
	}

	// Names assigned under a wildcard move to what now beats it: a longer wildcard, an
	// exact name.
	old := lookup("z.in.zmesh.test")
	api := lookup("api.in.zmesh.test")
	if old.Pattern != "*.zmesh.test" || api.Pattern != "*.zmesh.test" {
		t.Fatalf("before *.in.zmesh.test: %v, %v", old, api)
	}
	if _, err := r.Add("*.in.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.Lookup(old.IP); ok {
		t.Errorf("%s still assigned after a longer wildcard was added", old.IP)
	}
	if got := lookup("z.in.zmesh.test"); got.Pattern != "*.in.zmesh.test" || got.IP == old.IP {
		t.Errorf("z.in.zmesh.test: got %v, want a new address under *.in.zmesh.test", got)
	}
	if api = lookup("api.in.zmesh.test"); api.Pattern != "*.in.zmesh.test" {
		t.Errorf("api.in.zmesh.test: got %v, want it under *.in.zmesh.test", api)
	}
	exact, err := r.Add("api.in.zmesh.test")
	if err != nil {
		t.Fatal(err)
	}
	if got := lookup("api.in.zmesh.test"); got != (Assignment{"api.in.zmesh.test", "", exact}) || exact == api.IP {
		t.Errorf("api.in.zmesh.test: got %v, want the exact name with a new address", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"z.in.zmesh.test", "api.in.zmesh.test", "api.in.zmesh.test"}; !slices.Equal(released, want) {
		t.Errorf("released %v, want %v", released, want)
	}
	// The wildcard assignment of api.in.zmesh.test was released, not kept alongside.
	for _, a := range r.Assignments() {
		if a.Name == "api.in.zmesh.test" && a.Pattern != "" {
			t.Errorf("stale assignment %v", a)
		}
	}
}

func TestEmptyAnswers(t *testing.T) {
	r, addr := start(t, Options{})
	if _, err := r.Add("web.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	for _, qtype := range []uint16{dns.TypeAAAA, dns.TypeMX, dns.TypeHTTPS} {
		m := query(t, addr, "udp", "web.zmesh.test", qtype)
		wantRcode(t, m, dns.RcodeSuccess)
		if len(m.Ns) != 0 || len(m.Extra) != 0 {
			t.Errorf("%s: records in the reply: %s", dns.TypeToString[qtype], m)
		}
	}
	if s := r.Stats(); s.EmptyAAAA != 1 || s.EmptyOther != 2 || s.Forwarded+s.Refused != 0 {
		t.Errorf("stats: %+v", s)
	}
}

func TestForward(t *testing.T) {
	up, upQueries := upstream(t)
	r, addr := start(t, Options{Upstreams: []string{up}})
	for _, network := range []string{"udp", "tcp"} {
		req := new(dns.Msg).SetQuestion("example.org.", dns.TypeA)
		req.Id = 4242
		m, _, err := (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(req, addr)
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if m.Id != 4242 {
			t.Errorf("%s: reply id %d, want the query's 4242", network, m.Id)
		}
		wantUpstreamA(t, m)
	}
	if s := r.Stats(); s.Forwarded != 2 || upQueries.Load() != 2 {
		t.Errorf("stats: %+v; upstream queries: %d", s, upQueries.Load())
	}
}

func TestForwardTriesUpstreamsInOrder(t *testing.T) {
	up, _ := upstream(t)
	_, addr := start(t, Options{Upstreams: []string{silentUpstream(t), up}, ForwardTimeout: time.Second})
	begin := time.Now()
	wantUpstreamA(t, query(t, addr, "udp", "example.org", dns.TypeA))
	// The silent upstream gets half the budget, then the second answers at once (the upper
	// bound leaves a loaded machine its stalls).
	if d := time.Since(begin); d < 400*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("answered after %s, want about 500ms", d)
	}
}

func TestForwardServFailFallsThrough(t *testing.T) {
	failing, failed := upstreamRcode(t, dns.RcodeServerFailure)
	up, _ := upstream(t)
	_, addr := start(t, Options{Upstreams: []string{failing, up}})
	wantUpstreamA(t, query(t, addr, "udp", "example.org", dns.TypeA))

	// With no better reply, the failing upstream's is the answer.
	r, addr := start(t, Options{Upstreams: []string{failing}})
	wantRcode(t, query(t, addr, "udp", "example.org", dns.TypeA), dns.RcodeServerFailure)
	if s := r.Stats(); s.Forwarded != 1 || failed.Load() != 2 {
		t.Errorf("stats: %+v; queries to the failing upstream: %d", s, failed.Load())
	}
}

func TestRejected(t *testing.T) {
	r, addr := start(t, Options{})
	req := new(dns.Msg).SetQuestion("web.zmesh.test.", dns.TypeSOA)
	req.Opcode = dns.OpcodeNotify
	m, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(req, addr)
	if err != nil {
		t.Fatal(err)
	}
	wantRcode(t, m, dns.RcodeNotImplemented)
	if s := r.Stats(); s.Rejected != 1 || s.Queries() != 1 {
		t.Errorf("stats: %+v", s)
	}
}

func TestRefused(t *testing.T) {
	t.Run("silent upstream", func(t *testing.T) {
		r, addr := start(t, Options{Upstreams: []string{silentUpstream(t)}, ForwardTimeout: 300 * time.Millisecond})
		begin := time.Now()
		wantRcode(t, query(t, addr, "udp", "example.org", dns.TypeA), dns.RcodeRefused)
		if d := time.Since(begin); d < 250*time.Millisecond || d > 2*time.Second {
			t.Errorf("refused after %s, want about the 300ms timeout", d)
		}
		if s := r.Stats(); s.Refused != 1 {
			t.Errorf("stats: %+v", s)
		}
	})
	t.Run("no upstream", func(t *testing.T) {
		r, addr := start(t, Options{})
		if ups := r.Upstreams(); len(ups) != 0 {
			t.Fatalf("upstreams %v", ups)
		}
		wantRcode(t, query(t, addr, "tcp", "example.org", dns.TypeA), dns.RcodeRefused)
	})
}

func TestRemoveFreesAddresses(t *testing.T) {
	var mu sync.Mutex
	released := map[string]netip.Addr{}
	r, addr := start(t, Options{
		Range: netip.MustParsePrefix("10.9.0.0/29"), // 10.9.0.1-6
		OnRelease: func(name string, ip netip.Addr) {
			mu.Lock()
			defer mu.Unlock()
			released[name] = ip
		},
	})
	web, err := r.Add("web.zmesh.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add("*.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	a := answerA(t, query(t, addr, "udp", "a.zmesh.test", dns.TypeA))
	b := answerA(t, query(t, addr, "udp", "b.zmesh.test", dns.TypeA))

	if !r.Remove("*.zmesh.test.") {
		t.Fatal("Remove: not added")
	}
	mu.Lock()
	if want := map[string]netip.Addr{"a.zmesh.test": a, "b.zmesh.test": b}; !mapsEqual(released, want) {
		t.Errorf("released %v, want %v", released, want)
	}
	mu.Unlock()
	for _, ip := range []netip.Addr{a, b} {
		if _, _, ok := r.Lookup(ip); ok {
			t.Errorf("%s still assigned", ip)
		}
	}
	wantRcode(t, query(t, addr, "udp", "a.zmesh.test", dns.TypeA), dns.RcodeRefused)
	if got := r.Assignments(); !slices.Equal(got, []Assignment{{"web.zmesh.test", "", web}}) {
		t.Errorf("assignments: %v", got)
	}

	// Fresh addresses come first, then the freed ones, oldest first.
	var got []netip.Addr
	for i := range 5 {
		ip, err := r.Add(fmt.Sprintf("h%d.zmesh.test", i))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip)
	}
	want := []netip.Addr{
		netip.MustParseAddr("10.9.0.4"), netip.MustParseAddr("10.9.0.5"), netip.MustParseAddr("10.9.0.6"), a, b,
	}
	if !slices.Equal(got, want) {
		t.Errorf("addresses after removal: got %v, want %v", got, want)
	}
	if s := r.Stats(); s.Assignments != 6 {
		t.Errorf("stats: %+v", s)
	}
}

func mapsEqual(a, b map[string]netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestOnAssignError(t *testing.T) {
	refuse := errors.New("no interception for you")
	var releases atomic.Int64
	r, addr := start(t, Options{
		Range: netip.MustParsePrefix("10.9.0.0/30"), // 10.9.0.1-2
		OnAssign: func(name, pattern string, ip netip.Addr) error {
			if strings.HasPrefix(name, "bad.") {
				return refuse
			}
			return nil
		},
		OnRelease: func(string, netip.Addr) { releases.Add(1) },
	})
	if _, err := r.Add("bad.exact.test"); !errors.Is(err, refuse) {
		t.Errorf("Add with a failing OnAssign: got %v, want %v", err, refuse)
	}
	if _, err := r.Add("*.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	wantRcode(t, query(t, addr, "udp", "bad.zmesh.test", dns.TypeA), dns.RcodeServerFailure)
	if as := r.Assignments(); len(as) != 0 {
		t.Errorf("assignments after failed OnAssign: %v", as)
	}
	// Both addresses went back to the pool: two names still fit.
	for _, name := range []string{"good.zmesh.test", "fine.zmesh.test"} {
		answerA(t, query(t, addr, "udp", name, dns.TypeA))
	}
	if s := r.Stats(); s.ServFail != 1 || s.Intercepted != 2 || releases.Load() != 0 {
		t.Errorf("stats: %+v; releases: %d", s, releases.Load())
	}
}

func TestRangeExhausted(t *testing.T) {
	r, addr := start(t, Options{Range: netip.MustParsePrefix("10.9.0.0/30")})
	for _, name := range []string{"a.test", "b.test"} {
		if _, err := r.Add(name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Add("c.test"); !errors.Is(err, ErrRangeExhausted) {
		t.Errorf("Add beyond the range: got %v, want ErrRangeExhausted", err)
	}
	if _, err := r.Add("*.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	wantRcode(t, query(t, addr, "udp", "x.zmesh.test", dns.TypeA), dns.RcodeServerFailure)
	if s := r.Stats(); s.ServFail != 1 || s.Assignments != 2 {
		t.Errorf("stats: %+v", s)
	}
	r.Remove("a.test")
	if got := answerA(t, query(t, addr, "udp", "x.zmesh.test", dns.TypeA)); got != netip.MustParseAddr("10.9.0.1") {
		t.Errorf("after a removal: got %s, want the freed 10.9.0.1", got)
	}
}

func TestTCP(t *testing.T) {
	r, addr := start(t, Options{})
	ip, err := r.Add("web.zmesh.test")
	if err != nil {
		t.Fatal(err)
	}
	if got := answerA(t, query(t, addr, "tcp", "web.zmesh.test", dns.TypeA)); got != ip {
		t.Errorf("got %s, want %s", got, ip)
	}
	wantRcode(t, query(t, addr, "tcp", "web.zmesh.test", dns.TypeAAAA), dns.RcodeSuccess)
}

func TestConcurrentQueries(t *testing.T) {
	r, addr := start(t, Options{})
	if _, err := r.Add("*.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 30 {
		names = append(names, fmt.Sprintf("n%d.zmesh.test", i))
	}
	stop := make(chan struct{})
	churned := make(chan error, 1)
	go func() { // adds and removes other names meanwhile
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("churn%d.other.test", i%5)
			if _, err := r.Add(name); err != nil {
				churned <- err
				return
			}
			r.Lookup(netip.MustParseAddr("100.64.0.1"))
			r.Remove(name)
		}
	}()

	var mu sync.Mutex
	seen := map[string]netip.Addr{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				name := names[(g*7+i)%len(names)]
				network := []string{"udp", "tcp"}[i%2]
				m, err := exchange(addr, network, name, dns.TypeA)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
					t.Errorf("%s: %s", name, m)
					return
				}
				ip, _ := netip.AddrFromSlice(m.Answer[0].(*dns.A).A)
				mu.Lock()
				if prev, ok := seen[name]; ok && prev != ip.Unmap() {
					t.Errorf("%s: got %s, earlier %s", name, ip, prev)
				}
				seen[name] = ip.Unmap()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-churned; err != nil {
		t.Fatal(err)
	}
	byIP := map[netip.Addr]string{}
	for name, ip := range seen {
		if other, ok := byIP[ip]; ok {
			t.Errorf("%s and %s share %s", name, other, ip)
		}
		byIP[ip] = name
		if n, p, ok := r.Lookup(ip); n != name || p != "*.zmesh.test" || !ok {
			t.Errorf("Lookup(%s) = %q, %q, %v; want %s", ip, n, p, ok, name)
		}
	}
	if s := r.Stats(); s.Intercepted != 16*40 || s.Assignments != len(names) {
		t.Errorf("stats: %+v", s)
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Range: netip.MustParsePrefix("fd00::1/64")}, "only IPv4"},
		{Options{Range: netip.MustParsePrefix("10.0.0.0/31")}, "no assignable address"},
		{Options{Range: netip.MustParsePrefix("10.0.0.3/30")}, "no assignable address"},
		{Options{Upstreams: []string{"dns.example:53"}}, `upstream "dns.example:53"`},
		{Options{Upstreams: []string{"127.0.0.1"}}, `upstream "127.0.0.1"`},
	} {
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): got %v, want an error with %q", tc.opts, err, tc.want)
		}
	}
}

func TestRangeStart(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"10.0.0.0/30", []string{"10.0.0.1", "10.0.0.2"}},
		{"10.0.0.1/30", []string{"10.0.0.1", "10.0.0.2"}},
		{"10.0.0.2/30", []string{"10.0.0.2"}},
		{"10.0.0.250/24", []string{"10.0.0.250", "10.0.0.251", "10.0.0.252", "10.0.0.253", "10.0.0.254"}},
		{"255.255.255.252/30", []string{"255.255.255.253", "255.255.255.254"}},
	} {
		p, err := newPool(netip.MustParsePrefix(tc.prefix))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			ip, err := p.take()
			if errors.Is(err, ErrRangeExhausted) {
				break
			}
			got = append(got, ip.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

func TestAddErrors(t *testing.T) {
	r, err := New(Options{ResolvConf: writeFile(t, "resolv.conf", "")})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "*.", "*", "a.*.b", "*x.example.com", "10.1.2.3", "a..b"} {
		if _, err := r.Add(name); err == nil {
			t.Errorf("Add(%q) succeeded", name)
		}
	}
}

func TestResolvConf(t *testing.T) {
	path := writeFile(t, "resolv.conf", "# comment\nnameserver 127.0.0.9\nnameserver ::1\nsearch example.invalid\n")
	r, err := New(Options{ResolvConf: path})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.9:53"), netip.MustParseAddrPort("[::1]:53")}
	if got := r.Upstreams(); !slices.Equal(got, want) {
		t.Errorf("upstreams: got %v, want %v", got, want)
	}
	// A missing file leaves no upstream.
	r, err = New(Options{ResolvConf: filepath.Join(t.TempDir(), "missing"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil || len(r.Upstreams()) != 0 {
		t.Errorf("missing resolv.conf: %v, upstreams %v", err, r.Upstreams())
	}
}

func TestListen(t *testing.T) {
	r, err := New(Options{Upstreams: []string{"127.0.0.1:5353"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := r.Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Addr().Port() == 0 || srv.Addr().Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("Addr() = %s", srv.Addr())
	}

	// The address is taken in UDP and TCP: a second Listen fails naming it.
	_, err = r.Listen(srv.Addr())
	if err == nil || !strings.Contains(err.Error(), srv.Addr().String()) {
		t.Errorf("second Listen on %s: got %v, want an error naming the address", srv.Addr(), err)
	}
	if ln, err := net.Listen("tcp4", srv.Addr().String()); err == nil {
		ln.Close()
		t.Errorf("TCP port %s is free while listening", srv.Addr())
	}

	// An upstream that is the resolver itself is dropped.
	self, err := New(Options{Upstreams: []string{"127.0.0.1:5353", srv.Addr().String()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	again, err := self.Listen(srv.Addr())
	if err != nil {
		t.Fatalf("Listen on %s after Close: %v", srv.Addr(), err)
	}
	defer again.Close()
	if want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:5353")}; !slices.Equal(again.upstreams, want) {
		t.Errorf("upstreams of the server: got %v, want %v", again.upstreams, want)
	}
}

func TestRunStops(t *testing.T) {
	r, err := New(Options{ResolvConf: writeFile(t, "resolv.conf", "")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add("web.zmesh.test"); err != nil {
		t.Fatal(err)
	}
	srv, err := r.Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	answerA(t, query(t, srv.Addr().String(), "udp", "web.zmesh.test", dns.TypeA))
	if err := srv.Run(ctx); err == nil {
		t.Error("second Run succeeded")
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	// Both sockets are closed: the address can be bound again.
	again, err := r.Listen(srv.Addr())
	if err != nil {
		t.Fatalf("Listen on %s after Run returned: %v", srv.Addr(), err)
	}
	again.Close()
}

func TestRunStopsRightAway(t *testing.T) {
	r, err := New(Options{ResolvConf: writeFile(t, "resolv.conf", "")})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		srv, err := r.Listen(netip.MustParseAddrPort("127.0.0.1:0"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run with an ended context did not return")
		}
	}
}
