package tunnel

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/tunnel/intercept"
	"github.com/zmesh/zmesh/tunnel/resolver"
)

// DefaultResolverAddr is where the tproxy tunnel's DNS server listens by default.
var DefaultResolverAddr = netip.MustParseAddrPort("127.0.0.1:53")

// TProxyOptions configure TProxy.Run. The zero value means all defaults.
type TProxyOptions struct {
	// Intercept configures the interceptor (nftables table, marks, route table, listeners).
	// Its Logger is Logger when nil.
	Intercept intercept.Options
	// Resolver is where the DNS server listens, UDP and TCP (DefaultResolverAddr when
	// invalid, i.e. unset).
	Resolver netip.AddrPort
	// DNSSvcIPRange is the range intercepted names get their addresses from
	// (resolver.DefaultRange when invalid).
	DNSSvcIPRange netip.Prefix
	// Upstreams are the resolvers other names are forwarded to (ip:port); when empty, the
	// nameservers of ResolvConf (resolver.DefaultResolvConf when empty).
	Upstreams  []string
	ResolvConf string
	// UDPIdleTimeout ends an intercepted UDP flow that carried no datagram either way for so
	// long (DefaultUDPIdleTimeout when zero).
	UDPIdleTimeout time.Duration
	// Host, when set, also runs host mode (see Host) with these options: the tproxy mode
	// includes the host mode's features. Its Dialer, when nil, gives the sockets to targets
	// the interceptor's bypass mark; its Logger is Logger when nil.
	Host *HostOptions
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

func (o TProxyOptions) withDefaults() TProxyOptions {
	if !o.Resolver.IsValid() {
		o.Resolver = DefaultResolverAddr
	}
	if o.UDPIdleTimeout <= 0 {
		o.UDPIdleTimeout = DefaultUDPIdleTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Intercept.Logger == nil {
		o.Intercept.Logger = o.Logger
	}
	return o
}

// TProxy is the tunnel's tproxy mode: it transparently intercepts the traffic to the
// services its identity may dial that have an intercept.v1 config, answers DNS queries for
// their hostnames and wildcard domains, and carries each intercepted TCP connection, and
// each UDP flow, as a circuit to its service.
//
// # Interceptions
//
// A service's IP addresses and CIDRs (IPv4; IPv6 ones are logged and skipped) are intercepted
// directly, with the config's protocols and port ranges, as one interception. Its hostnames
// and wildcard domains go to the resolver, which assigns addresses from the dnsSvcIpRange:
// a hostname at once, a name under a wildcard on its first A query. Each assigned address
// is intercepted as a /32 for the protocols and ports of every service whose hostname or
// wildcard covers the name (one interception per protocol, each with the union of those
// services' port ranges for it), from the moment the address is assigned until it is
// released. Interceptions and names follow the overlay's list of services while running: a
// service that goes away, loses the Dial permission or its intercept config loses them.
// A name a changed service keeps keeps its address.
//
// # Matching
//
// An intercepted connection or datagram goes to the service that claims its protocol and
// destination port and matches its original destination most specifically: a name match
// (the destination is an address the resolver assigned to a name) beats an address match;
// among names, an exact hostname beats a wildcard, and a longer wildcard a shorter one;
// among addresses, a longer prefix beats a shorter one. Ties go to the service with the
// narrowest port range holding the port, then to the first by name. A name match tells the
// hosting end the name (AppData.DstHostname).
//
// # Circuits
//
// An accepted TCP connection is carried over overlay.Dial, with half-close, until both
// directions end. UDP goes by flow: the datagrams from one client address to one original
// destination share one circuit, opened on the flow's first datagram (later ones wait, up to
// 64, for the dial; more are dropped), framed as in DatagramConn; replies are sent to the
// client from the original destination. A flow ends after UDPIdleTimeout without a datagram
// either way, or when the circuit ends.
//
// dialOptions.identity is not honored: Overlay.Dial cannot choose a terminator by identity.
// The overlay's own sockets must carry the interceptor's bypass mark, or traffic to the
// overlay that matches an interception would loop into the tunnel; that is the overlay's
// concern (intercept.Interceptor.BypassControl).
//
// The zero TProxy is ready for Run; Stats may be called at any time.
type TProxy struct {
	running atomic.Bool
	ic      atomic.Pointer[intercept.Interceptor]
	res     atomic.Pointer[resolver.Resolver]
	host    Host

	services     atomic.Int64
	tcp          atomic.Uint64
	udpFlows     atomic.Uint64
	udpDropped   atomic.Uint64
	unmatched    atomic.Uint64
	dialFailures atomic.Uint64
	active       atomic.Int64

	relay Relay
}

// TProxyStats is a snapshot of a TProxy's counters.
type TProxyStats struct {
	Services       int64  // services intercepted now
	Interceptions  int64  // interceptions installed now (Intercept.Interceptions)
	TCPIntercepted uint64 // intercepted TCP connections claimed by a service
	UDPFlows       uint64 // UDP flows opened
	UDPDropped     uint64 // datagrams dropped while their flow's queue was full
	Unmatched      uint64 // intercepted connections and datagrams no service claimed, dropped
	DialFailures   uint64 // connections and flows whose circuit could not be dialed
	Active         int64  // TCP connections and UDP flows carried now

	Intercept intercept.Stats
	Resolver  resolver.Stats
	Host      HostStats // when host mode runs too
}

// Stats returns a snapshot of the counters.
func (t *TProxy) Stats() TProxyStats {
	s := TProxyStats{
		Services:       t.services.Load(),
		TCPIntercepted: t.tcp.Load(),
		UDPFlows:       t.udpFlows.Load(),
		UDPDropped:     t.udpDropped.Load(),
		Unmatched:      t.unmatched.Load(),
		DialFailures:   t.dialFailures.Load(),
		Active:         t.active.Load(),
		Host:           t.host.Stats(),
	}
	if ic := t.ic.Load(); ic != nil {
		s.Intercept = ic.Stats()
		s.Interceptions = s.Intercept.Interceptions
	}
	if res := t.res.Load(); res != nil {
		s.Resolver = res.Stats()
	}
	return s
}

// Run installs the interceptor and starts the DNS server in the network namespace of the
// calling thread, intercepts services until ctx ends, then removes the nftables table, the
// policy rule and the route, stops the DNS server, closes the connections and flows, waits
// for them and returns nil; or returns the error that stopped it. A TProxy runs once.
func (t *TProxy) Run(ctx context.Context, overlay Overlay, opts TProxyOptions) error {
	if !t.running.CompareAndSwap(false, true) {
		return errors.New("tunnel tproxy: already run")
	}
	opts = opts.withDefaults()
	r := &tproxyRun{
		t:         t,
		overlay:   overlay,
		opts:      opts,
		log:       opts.Logger.With("tunnel", "tproxy"),
		installed: map[string]intercept.Interception{},
		names:     map[string][]string{},
		dns:       map[netip.Addr]dnsEntry{},
		flows:     map[flowKey]*udpFlow{},
		replies:   map[netip.AddrPort]*replySocket{},
	}
	r.tables.Store(buildTable(nil))

	res, err := resolver.New(resolver.Options{
		Range:      opts.DNSSvcIPRange,
		Upstreams:  opts.Upstreams,
		ResolvConf: opts.ResolvConf,
		OnAssign:   r.onAssign,
		OnRelease:  r.onRelease,
		Logger:     opts.Logger,
	})
	if err != nil {
		return fmt.Errorf("tunnel tproxy: %w", err)
	}
	srv, err := res.Listen(opts.Resolver)
	if err != nil {
		return fmt.Errorf("tunnel tproxy: %w", err)
	}
	// The interceptor is closed below, not by the end of ctx, so that Run reports how it went.
	ic, err := intercept.Open(context.WithoutCancel(ctx), opts.Intercept)
	if err != nil {
		srv.Close()
		return fmt.Errorf("tunnel tproxy: %w", err)
	}
	r.ic, r.res = ic, res
	t.ic.Store(ic)
	t.res.Store(res)
	dnsRange := resolver.DefaultRange
	if opts.DNSSvcIPRange.IsValid() {
		dnsRange = opts.DNSSvcIPRange.String()
	}
	r.log.Info("tunnel tproxy: running", "resolver", srv.Addr(), "dnsSvcIpRange", dnsRange, "upstreams", res.Upstreams())

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.wg.Go(func() {
		if err := srv.Run(runCtx); err != nil {
			cancel(err)
		}
	})
	r.wg.Go(func() { r.acceptTCPLoop(runCtx) })
	r.wg.Go(func() { r.readUDPLoop(runCtx) })
	if opts.Host != nil {
		ho := *opts.Host
		if ho.Dialer == nil {
			ho.Dialer = &net.Dialer{Control: ic.BypassControl}
		}
		if ho.Logger == nil {
			ho.Logger = opts.Logger
		}
		r.wg.Go(func() {
			if err := t.host.Run(runCtx, overlay, ho); err != nil {
				cancel(err)
			}
		})
	}

	err = overlay.WatchServices(runCtx, r.update)
	if runCtx.Err() == nil {
		cancel(fmt.Errorf("watching services: %w", err))
	}
	cause := context.Cause(runCtx)
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	closeErr := ic.Close()
	r.wg.Wait()
	t.services.Store(0)

	var errs []error
	if ctx.Err() == nil {
		errs = append(errs, cause)
	}
	if closeErr != nil {
		errs = append(errs, closeErr)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tunnel tproxy: %w", err)
	}
	r.log.Info("tunnel tproxy: stopped")
	return nil
}

// tproxyRun is the state of one Run.
type tproxyRun struct {
	t       *TProxy
	overlay Overlay
	opts    TProxyOptions
	log     *slog.Logger
	ic      *intercept.Interceptor
	res     *resolver.Resolver
	wg      sync.WaitGroup // every goroutine of the run

	// tables is what the hooks and the data path read; update replaces it.
	tables atomic.Pointer[interceptTable]

	// mu serializes update and the end of Run; it guards the fields below.
	mu        sync.Mutex
	stopped   bool
	installed map[string]intercept.Interception // address interception installed, by service key
	names     map[string][]string               // names added to the resolver, by service key

	// dnsMu guards dns, the interceptions of assigned addresses; taken in the resolver's
	// hooks (which hold the resolver's change lock) and by refreshDNS.
	dnsMu sync.Mutex
	dns   map[netip.Addr]dnsEntry

	flowMu sync.Mutex
	flows  map[flowKey]*udpFlow

	replyMu sync.Mutex
	replies map[netip.AddrPort]*replySocket
}

// interceptedService is a service with its parsed intercept config.
type interceptedService struct {
	key      string
	svc      Service
	raw      []byte
	cfg      InterceptConfig
	id       string         // of its address interception
	prefixes []netip.Prefix // its IPv4 addresses and CIDRs
	names    []string       // its hostnames and wildcards, as the resolver takes them
}

func newInterceptedService(key string, svc Service, raw []byte, cfg InterceptConfig) (*interceptedService, []string) {
	is := &interceptedService{key: key, svc: svc, raw: raw, cfg: cfg, id: interceptionID("svc:", key)}
	var skipped []string
	for _, a := range cfg.Addresses {
		switch {
		case a.Kind != AddressPrefix:
			if n := a.String(); !slices.Contains(is.names, n) {
				is.names = append(is.names, n)
			}
		case a.Prefix.Addr().Is4():
			is.prefixes = append(is.prefixes, a.Prefix)
		default:
			skipped = append(skipped, a.String())
		}
	}
	return is, skipped
}

// interception is the service's address interception; nil Prefixes when it has none.
func (is *interceptedService) interception() intercept.Interception {
	if len(is.prefixes) == 0 {
		return intercept.Interception{}
	}
	return intercept.Interception{Prefixes: is.prefixes, Ports: is.cfg.PortRanges, Protocols: is.cfg.Protocols}
}

// interceptionID returns prefix+key, or prefix and a hash of key when that is too long to
// name an interception.
func interceptionID(prefix, key string) string {
	if len(prefix)+len(key) <= 128 {
		return prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return prefix + hex.EncodeToString(sum[:16])
}

// interceptTable indexes the intercepted services. It is not changed once published.
type interceptTable struct {
	byKey    map[string]*interceptedService
	byHost   map[string][]*interceptedService // by hostname
	byWild   map[string][]*interceptedService // by wildcard domain (example.com for *.example.com)
	byPrefix []*interceptedService            // those with addresses
}

func buildTable(services map[string]*interceptedService) *interceptTable {
	tb := &interceptTable{byKey: services, byHost: map[string][]*interceptedService{},
		byWild: map[string][]*interceptedService{}}
	if tb.byKey == nil {
		tb.byKey = map[string]*interceptedService{}
	}
	for _, is := range services {
		for _, a := range is.cfg.Addresses {
			switch a.Kind {
			case AddressHostname:
				tb.byHost[a.Name] = append(tb.byHost[a.Name], is)
			case AddressWildcard:
				tb.byWild[a.Name] = append(tb.byWild[a.Name], is)
			}
		}
		if len(is.prefixes) > 0 {
			tb.byPrefix = append(tb.byPrefix, is)
		}
	}
	return tb
}

// forName calls f for each service whose hostname or wildcard covers name, with the
// specificity of the match: 0 for a hostname, else the length of the wildcard's domain.
func (tb *interceptTable) forName(name string, f func(is *interceptedService, exact bool, domainLen int)) {
	for _, is := range tb.byHost[name] {
		f(is, true, 0)
	}
	for d := name; ; {
		for _, is := range tb.byWild[d] {
			f(is, false, len(d))
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			return
		}
		d = d[i+1:]
	}
}

// match returns the service claiming a connection or datagram of proto to dst (see TProxy),
// and the name it matched by, if any. name is the resolver's name of dst's address; named
// tells whether it has one.
func (tb *interceptTable) match(proto string, dst netip.AddrPort, name string, named bool) (*interceptedService, string) {
	type score struct{ class, spec, width int } // higher class and spec, lower width win
	var best *interceptedService
	var bs score
	consider := func(is *interceptedService, s score) {
		if !slices.Contains(is.cfg.Protocols, proto) {
			return
		}
		if s.width = rangeWidth(is.cfg.PortRanges, dst.Port()); s.width == 0 {
			return
		}
		if best != nil {
			c := cmp.Or(cmp.Compare(s.class, bs.class), cmp.Compare(s.spec, bs.spec), cmp.Compare(bs.width, s.width),
				strings.Compare(best.svc.Name, is.svc.Name), strings.Compare(best.key, is.key))
			if c <= 0 {
				return
			}
		}
		best, bs = is, s
	}
	if named {
		tb.forName(name, func(is *interceptedService, exact bool, domainLen int) {
			if exact {
				consider(is, score{class: 3})
			} else {
				consider(is, score{class: 2, spec: domainLen})
			}
		})
	}
	ip := dst.Addr().Unmap()
	for _, is := range tb.byPrefix {
		for _, p := range is.prefixes {
			if p.Contains(ip) {
				consider(is, score{class: 1, spec: p.Bits()})
			}
		}
	}
	if best != nil && bs.class >= 2 {
		return best, name
	}
	return best, ""
}

// dnsSpec is what an assigned address is intercepted for: ports by protocol.
type dnsSpec map[string][]intercept.PortRange

// dnsSpec returns the union of the protocols and ports of the services covering name.
func (tb *interceptTable) dnsSpec(name string) dnsSpec {
	spec := dnsSpec{}
	tb.forName(name, func(is *interceptedService, _ bool, _ int) {
		for _, p := range is.cfg.Protocols {
			spec[p] = append(spec[p], is.cfg.PortRanges...)
		}
	})
	for p, rs := range spec {
		spec[p] = mergeRanges(rs)
	}
	return spec
}

// mergeRanges sorts port ranges and merges those that overlap or touch.
func mergeRanges(rs []intercept.PortRange) []intercept.PortRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b intercept.PortRange) int { return cmp.Compare(a.Low, b.Low) })
	var out []intercept.PortRange
	for _, r := range rs {
		if n := len(out); n > 0 && int(r.Low) <= int(out[n-1].High)+1 {
			out[n-1].High = max(out[n-1].High, r.High)
			continue
		}
		out = append(out, r)
	}
	return out
}

// update follows the overlay's list of services: it publishes the new table, installs the
// address interceptions of new and changed services, adds their new names to the resolver,
// then removes what services no longer have, and brings the interceptions of assigned
// addresses up to date.
func (r *tproxyRun) update(list []Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	old := r.tables.Load()
	next := map[string]*interceptedService{}
	for _, svc := range list {
		key := serviceKey(svc)
		if !svc.Dial || next[key] != nil {
			continue
		}
		raw, ok := svc.Configs[InterceptV1]
		if !ok {
			continue
		}
		if prev := old.byKey[key]; prev != nil && bytes.Equal(prev.raw, raw) && prev.svc.Name == svc.Name {
			is := *prev
			is.svc = svc
			next[key] = &is
			continue
		}
		cfg, err := ParseInterceptConfig(svc.Name, raw)
		if err != nil {
			r.log.Error("tunnel tproxy: service not intercepted: its intercept config is not valid", "service", svc.Name, "error", err)
			continue
		}
		is, skipped := newInterceptedService(key, svc, raw, cfg)
		next[key] = is
		r.log.Info("tunnel tproxy: intercepting service", "service", svc.Name, "protocols", cfg.Protocols,
			"addresses", cfg.Addresses, "portRanges", cfg.PortRanges)
		if len(skipped) > 0 {
			r.log.Warn("tunnel tproxy: IPv6 addresses are not intercepted", "service", svc.Name, "addresses", skipped)
		}
		if len(cfg.Ignored) > 0 {
			r.log.Warn("tunnel tproxy: intercept config fields not supported; ignored", "service", svc.Name, "fields", cfg.Ignored)
		}
	}
	r.tables.Store(buildTable(next))
	r.t.services.Store(int64(len(next)))

	for key, is := range next {
		want := is.interception()
		have, had := r.installed[key]
		switch {
		case len(want.Prefixes) == 0 && had:
			r.removeInterception(is.svc.Name, key, is.id)
		case len(want.Prefixes) == 0, had && interceptionsEqual(have, want):
		default:
			if err := r.ic.Add(is.id, want); err != nil {
				r.log.Error("tunnel tproxy: cannot intercept service addresses", "service", is.svc.Name, "error", err)
				continue
			}
			r.installed[key] = want
		}
	}
	// Names first added, then removed, so that a name a service keeps keeps its address.
	added := map[string][]string{} // by service key: the names the resolver holds for it
	for key, is := range next {
		for _, n := range is.names {
			if !slices.Contains(r.names[key], n) {
				if _, err := r.res.Add(n); err != nil {
					r.log.Error("tunnel tproxy: cannot intercept name", "service", is.svc.Name, "name", n, "error", err)
					continue
				}
			}
			added[key] = append(added[key], n)
		}
	}
	for key, have := range r.names {
		for _, n := range have {
			if !slices.Contains(added[key], n) {
				r.res.Remove(n)
			}
		}
	}
	r.names = added
	for key := range r.installed {
		if next[key] == nil {
			name := key
			if is := old.byKey[key]; is != nil {
				name = is.svc.Name
			}
			r.removeInterception(name, key, interceptionID("svc:", key))
		}
	}
	r.refreshDNS()
}

func (r *tproxyRun) removeInterception(service, key, id string) {
	if err := r.ic.Remove(id); err != nil && !errors.Is(err, intercept.ErrNotInstalled) {
		r.log.Error("tunnel tproxy: cannot remove interception", "service", service, "error", err)
		return
	}
	delete(r.installed, key)
}

func interceptionsEqual(a, b intercept.Interception) bool {
	return slices.Equal(a.Prefixes, b.Prefixes) && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Protocols, b.Protocols)
}

// dnsEntry is an address assigned to a name and what it is intercepted for.
type dnsEntry struct {
	name string
	spec dnsSpec
}

// onAssign is the resolver's hook: it intercepts ip for the services covering name.
func (r *tproxyRun) onAssign(name, pattern string, ip netip.Addr) error {
	r.dnsMu.Lock()
	defer r.dnsMu.Unlock()
	spec := r.tables.Load().dnsSpec(name) // under dnsMu: refreshDNS sees what this installs
	if len(spec) == 0 {
		return fmt.Errorf("no service intercepts %s", name)
	}
	if err := r.installDNS(ip, dnsEntry{name: name}, spec); err != nil {
		return err
	}
	r.log.Debug("tunnel tproxy: intercepting assigned address", "name", name, "pattern", pattern, "ip", ip)
	return nil
}

// onRelease is the resolver's hook: it stops intercepting ip.
func (r *tproxyRun) onRelease(name string, ip netip.Addr) {
	r.dnsMu.Lock()
	defer r.dnsMu.Unlock()
	e, ok := r.dns[ip]
	if !ok {
		return
	}
	for p := range e.spec {
		if err := r.ic.Remove(dnsID(ip, p)); err != nil && !errors.Is(err, intercept.ErrNotInstalled) && !errors.Is(err, net.ErrClosed) {
			r.log.Error("tunnel tproxy: cannot remove interception of released address", "name", name, "ip", ip, "error", err)
		}
	}
	delete(r.dns, ip)
	r.log.Debug("tunnel tproxy: released address no longer intercepted", "name", name, "ip", ip)
}

func dnsID(ip netip.Addr, proto string) string { return "dns:" + ip.String() + ":" + proto }

// installDNS brings the interceptions of ip from e.spec to spec, one per protocol; on error
// those of ip are removed, and so is the entry. The caller holds dnsMu.
func (r *tproxyRun) installDNS(ip netip.Addr, e dnsEntry, spec dnsSpec) error {
	var err error
	for _, p := range []string{intercept.TCP, intercept.UDP} {
		switch ports := spec[p]; {
		case len(ports) > 0 && !slices.Equal(ports, e.spec[p]):
			err = r.ic.Add(dnsID(ip, p), intercept.Interception{
				Prefixes: []netip.Prefix{netip.PrefixFrom(ip, 32)}, Ports: ports, Protocols: []string{p}})
		case len(ports) == 0 && len(e.spec[p]) > 0:
			if err = r.ic.Remove(dnsID(ip, p)); errors.Is(err, intercept.ErrNotInstalled) {
				err = nil
			}
		}
		if err != nil {
			break
		}
	}
	if err != nil {
		for _, p := range []string{intercept.TCP, intercept.UDP} {
			r.ic.Remove(dnsID(ip, p))
		}
		delete(r.dns, ip)
		return fmt.Errorf("intercept %s for %s: %w", ip, e.name, err)
	}
	r.dns[ip] = dnsEntry{name: e.name, spec: spec}
	return nil
}

// refreshDNS re-installs the interceptions of assigned addresses whose services' protocols
// or ports changed. The caller holds mu.
func (r *tproxyRun) refreshDNS() {
	r.dnsMu.Lock()
	defer r.dnsMu.Unlock()
	tb := r.tables.Load()
	for ip, e := range r.dns {
		spec := tb.dnsSpec(e.name)
		if specsEqual(spec, e.spec) {
			continue
		}
		if err := r.installDNS(ip, e, spec); err != nil {
			r.log.Error("tunnel tproxy: cannot update the interception of an assigned address", "name", e.name, "error", err)
		}
	}
}

func specsEqual(a, b dnsSpec) bool {
	return slices.Equal(a[intercept.TCP], b[intercept.TCP]) && slices.Equal(a[intercept.UDP], b[intercept.UDP])
}

// match returns the service claiming a connection or datagram of proto to dst, and the name
// it matched by.
func (r *tproxyRun) match(proto string, dst netip.AddrPort) (*interceptedService, string) {
	name, _, named := r.res.Lookup(dst.Addr())
	return r.tables.Load().match(proto, dst, name, named)
}

// dial opens the circuit of an intercepted connection or flow.
func (r *tproxyRun) dial(ctx context.Context, is *interceptedService, app AppData) (net.Conn, error) {
	if id := is.cfg.DialIdentityFor(app); id != "" {
		r.log.Debug("tunnel tproxy: dialOptions.identity not supported; dialing any terminator", "service", is.svc.Name, "identity", id)
	}
	ctx, cancel := context.WithTimeout(ctx, is.cfg.ConnectTimeout)
	defer cancel()
	return r.overlay.Dial(ctx, is.svc, app)
}

// appData describes an intercepted destination and its client to the hosting end.
func appData(proto string, src, dst netip.AddrPort, hostname string) AppData {
	return AppData{
		Protocol:    proto,
		DstIP:       dst.Addr().String(),
		DstPort:     strconv.Itoa(int(dst.Port())),
		DstHostname: hostname,
		SrcIP:       src.Addr().String(),
		SrcPort:     strconv.Itoa(int(src.Port())),
	}
}

// acceptTCPLoop hands intercepted connections to carryTCP until the interceptor is closed.
func (r *tproxyRun) acceptTCPLoop(ctx context.Context) {
	var wait time.Duration // after a failed accept (e.g. out of file descriptors)
	for {
		c, err := r.ic.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			r.log.Warn("tunnel tproxy: accept", "error", err)
			sleep(ctx, wait)
			continue
		}
		wait = 0
		r.wg.Go(func() { r.carryTCP(ctx, c) })
	}
}

// carryTCP carries an intercepted connection over a circuit to its service.
func (r *tproxyRun) carryTCP(ctx context.Context, c net.Conn) {
	dst := addrPort(c.LocalAddr())
	src := addrPort(c.RemoteAddr())
	is, hostname := r.match(intercept.TCP, dst)
	if is == nil {
		r.t.unmatched.Add(1)
		r.log.Debug("tunnel tproxy: no service for intercepted connection", "src", src, "dst", dst)
		c.Close()
		return
	}
	r.t.tcp.Add(1)
	r.t.active.Add(1)
	defer r.t.active.Add(-1)
	app := appData(intercept.TCP, src, dst, hostname)
	circuit, err := r.dial(ctx, is, app)
	if err != nil {
		c.Close()
		if ctx.Err() == nil {
			r.t.dialFailures.Add(1)
			r.log.Warn("tunnel tproxy: cannot dial service", "service", is.svc.Name, "src", src, "dst", dst, "hostname", hostname, "error", err)
		}
		return
	}
	r.log.Debug("tunnel tproxy: carrying connection", "service", is.svc.Name, "src", src, "dst", dst, "hostname", hostname)
	r.t.relay.Join(ctx, c, circuit)
}

func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// flowKey identifies a UDP flow.
type flowKey struct{ client, dst netip.AddrPort }

// udpFlow is the datagrams of one client to one original destination, and their replies.
type udpFlow struct {
	key    flowKey
	in     chan []byte // datagrams from the client, waiting for the circuit
	ctx    context.Context
	cancel context.CancelFunc
	idle   *idleTimer
}

// flowQueue is how many datagrams of a flow wait for its circuit; more are dropped.
const flowQueue = 64

// readUDPLoop hands intercepted datagrams to their flows until the interceptor is closed.
func (r *tproxyRun) readUDPLoop(ctx context.Context) {
	buf := make([]byte, MaxDatagram)
	for {
		n, client, dst, err := r.ic.ReadUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			r.log.Debug("tunnel tproxy: intercepted datagram dropped", "error", err)
			continue
		}
		f := r.flow(ctx, flowKey{client, dst})
		if f == nil {
			continue
		}
		f.idle.touch()
		select {
		case f.in <- bytes.Clone(buf[:n]):
		default:
			r.t.udpDropped.Add(1)
		}
	}
}

// flow returns the flow of key, starting it if there is none, or nil when no service claims
// it.
func (r *tproxyRun) flow(ctx context.Context, key flowKey) *udpFlow {
	r.flowMu.Lock()
	defer r.flowMu.Unlock()
	if f := r.flows[key]; f != nil {
		return f
	}
	is, hostname := r.match(intercept.UDP, key.dst)
	if is == nil {
		r.t.unmatched.Add(1)
		r.log.Debug("tunnel tproxy: no service for intercepted datagram", "src", key.client, "dst", key.dst)
		return nil
	}
	fctx, cancel := context.WithCancel(ctx)
	f := &udpFlow{key: key, in: make(chan []byte, flowQueue), ctx: fctx, cancel: cancel}
	f.idle = startIdleTimer(r.opts.UDPIdleTimeout, cancel)
	r.flows[key] = f
	context.AfterFunc(fctx, func() { // new datagrams of key start a new flow
		r.flowMu.Lock()
		if r.flows[key] == f {
			delete(r.flows, key)
		}
		r.flowMu.Unlock()
	})
	r.t.udpFlows.Add(1)
	r.t.active.Add(1)
	r.wg.Go(func() {
		defer r.t.active.Add(-1)
		defer f.idle.stop()
		defer cancel()
		r.carryFlow(f, is, hostname)
	})
	return f
}

// carryFlow dials the flow's circuit and carries its datagrams both ways until the flow
// ends.
func (r *tproxyRun) carryFlow(f *udpFlow, is *interceptedService, hostname string) {
	log := r.log.With("service", is.svc.Name, "src", f.key.client, "dst", f.key.dst)
	circuit, err := r.dial(f.ctx, is, appData(intercept.UDP, f.key.client, f.key.dst, hostname))
	if err != nil {
		if f.ctx.Err() == nil {
			r.t.dialFailures.Add(1)
			log.Warn("tunnel tproxy: cannot dial service", "hostname", hostname, "error", err)
		}
		return
	}
	defer circuit.Close()
	stop := context.AfterFunc(f.ctx, func() { circuit.Close() })
	defer stop()
	reply, err := r.replyConn(f.key.dst)
	if err != nil {
		log.Error("tunnel tproxy: no socket to reply from", "error", err)
		return
	}
	defer r.releaseReplyConn(f.key.dst)
	log.Debug("tunnel tproxy: carrying UDP flow", "hostname", hostname)

	dc := NewDatagramConn(circuit)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer f.cancel()
		buf := make([]byte, MaxDatagram)
		for {
			n, err := dc.ReadDatagram(buf)
			if err != nil {
				return
			}
			f.idle.touch()
			if _, err := reply.WriteToUDPAddrPort(buf[:n], f.key.client); err != nil {
				log.Debug("tunnel tproxy: reply to client", "error", err)
			}
		}
	})
	for done := false; !done; {
		select {
		case p := <-f.in:
			if err := dc.WriteDatagram(p); err != nil {
				f.cancel()
				done = true
			}
		case <-f.ctx.Done():
			done = true
		}
	}
	wg.Wait()
	log.Debug("tunnel tproxy: UDP flow ended")
}

// replySocket is a socket replies to clients of one original destination come from.
type replySocket struct {
	conn *net.UDPConn
	refs int
}

// replyConn returns the reply socket of dst, shared by its flows.
func (r *tproxyRun) replyConn(dst netip.AddrPort) (*net.UDPConn, error) {
	r.replyMu.Lock()
	defer r.replyMu.Unlock()
	if s := r.replies[dst]; s != nil {
		s.refs++
		return s.conn, nil
	}
	c, err := r.ic.ReplyConn(dst)
	if err != nil {
		return nil, err
	}
	r.replies[dst] = &replySocket{conn: c, refs: 1}
	return c, nil
}

// releaseReplyConn closes the reply socket of dst once no flow uses it.
func (r *tproxyRun) releaseReplyConn(dst netip.AddrPort) {
	r.replyMu.Lock()
	defer r.replyMu.Unlock()
	s := r.replies[dst]
	if s.refs--; s.refs == 0 {
		s.conn.Close()
		delete(r.replies, dst)
	}
}
