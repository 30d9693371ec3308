// Package resolver is the DNS server of the router's tproxy tunnel. It answers A queries for
// the hostnames and wildcard domains that services intercept with addresses assigned from
// the dnsSvcIpRange, so that the tunnel can intercept connections to those addresses, and
// forwards every other query to the upstream resolvers.
//
// Exact hostnames get their address when added. A wildcard domain *.example.com matches
// example.com and every name below it at any depth; such a name gets an address on its
// first A query and keeps it until the wildcard is removed. An exact hostname wins over a
// wildcard, and a longer wildcard over a shorter one. Each name holds at most one address,
// always under the entry that currently wins for it. Intercepted names are never forwarded:
// queries of other types than A get an empty NOERROR answer.
//
// Addresses are reused as late as possible: fresh addresses are handed out first in
// ascending order, and once the range has been walked, freed addresses are reused
// oldest-freed first.
package resolver

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Defaults of Options.
const (
	DefaultRange          = "100.64.0.1/10"
	DefaultResolvConf     = "/etc/resolv.conf"
	DefaultForwardTimeout = 2 * time.Second
)

// TTL is the time to live, in seconds, of the A records of intercepted names.
const TTL = 60

// Options configure a Resolver.
type Options struct {
	// Range is the dnsSvcIpRange addresses are assigned from (IPv4 only); the zero Prefix
	// means DefaultRange.
	Range netip.Prefix
	// Upstreams are the resolvers queries for other names are forwarded to, in order, as
	// ip:port. When empty they are the nameserver lines of ResolvConf, on port 53.
	Upstreams []string
	// ResolvConf is the file read when Upstreams is empty; DefaultResolvConf when empty.
	ResolvConf string
	// ForwardTimeout is the time budget of forwarding one query, shared by the upstreams
	// tried in turn; DefaultForwardTimeout when zero.
	ForwardTimeout time.Duration
	// OnAssign, when set, is called when ip is assigned to name, before any client can
	// learn it: from Add for an exact hostname (pattern is empty), before the answer for a
	// name matching the wildcard pattern (such as *.example.com). When it returns an error
	// the address is freed, and Add fails or the query is answered SERVFAIL; OnRelease is
	// not called for it.
	OnAssign func(name, pattern string, ip netip.Addr) error
	// OnRelease, when set, is called when the address of name is freed.
	//
	// Hooks are called one at a time, in the order of the changes; they may call Lookup,
	// Assignments and Stats but not Add or Remove.
	OnRelease func(name string, ip netip.Addr)
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// Assignment is an address assigned to an intercepted name.
type Assignment struct {
	Name    string     // lower case, without trailing dot
	Pattern string     // the wildcard, such as *.example.com, the name matched; empty for an exact hostname
	IP      netip.Addr // from the range
}

// Resolver assigns addresses to intercepted names and answers DNS queries; see Listen.
// Its methods are safe for concurrent use.
type Resolver struct {
	upstreams []netip.AddrPort
	timeout   time.Duration
	onAssign  func(name, pattern string, ip netip.Addr) error
	onRelease func(name string, ip netip.Addr)
	log       *slog.Logger
	counters  counters

	// changeMu serializes changes (Add, Remove, assignments under wildcards) and the hooks
	// they call. The tables below are written with both changeMu and mu held, so either
	// lock suffices to read them.
	changeMu  sync.Mutex
	pool      *pool          // guarded by changeMu
	hostRefs  map[string]int // exact hostname → number of Adds not yet removed; guarded by changeMu
	wildRefs  map[string]int // wildcard domain (example.com for *.example.com) → same
	mu        sync.RWMutex
	byName    map[string]Assignment
	byIP      map[netip.Addr]Assignment
	wildcards map[string]map[string]struct{} // wildcard domain → names assigned under it
}

// New returns a Resolver configured by opts. It reads ResolvConf when Upstreams is empty; a
// missing file, or one without nameserver, is logged and leaves no upstream, so that queries
// not intercepted are refused.
func New(opts Options) (*Resolver, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	prefix := opts.Range
	if !prefix.IsValid() {
		prefix = netip.MustParsePrefix(DefaultRange)
	}
	p, err := newPool(prefix)
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	upstreams, err := parseUpstreams(opts.Upstreams)
	if err != nil {
		return nil, err
	}
	if len(opts.Upstreams) == 0 {
		path := cmp.Or(opts.ResolvConf, DefaultResolvConf)
		upstreams, err = readResolvConf(path)
		switch {
		case err != nil:
			log.Warn("resolver: no upstream resolver; queries for names not intercepted will be refused", "error", err)
		case len(upstreams) == 0:
			log.Warn("resolver: no upstream resolver; queries for names not intercepted will be refused", "resolvConf", path)
		}
	}
	return &Resolver{
		upstreams: upstreams,
		timeout:   cmp.Or(opts.ForwardTimeout, DefaultForwardTimeout),
		onAssign:  opts.OnAssign,
		onRelease: opts.OnRelease,
		log:       log,
		pool:      p,
		hostRefs:  map[string]int{},
		wildRefs:  map[string]int{},
		byName:    map[string]Assignment{},
		byIP:      map[netip.Addr]Assignment{},
		wildcards: map[string]map[string]struct{}{},
	}, nil
}

func parseUpstreams(list []string) ([]netip.AddrPort, error) {
	var ups []netip.AddrPort
	for _, s := range list {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("resolver: upstream %q is not ip:port: %w", s, err)
		}
		ups = append(ups, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	return ups, nil
}

func readResolvConf(path string) ([]netip.AddrPort, error) {
	conf, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	port, err := strconv.ParseUint(conf.Port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%s: port %q: %w", path, conf.Port, err)
	}
	var ups []netip.AddrPort
	for _, s := range conf.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s: nameserver %q: %w", path, s, err)
		}
		ups = append(ups, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return ups, nil
}

// Upstreams returns the resolvers queries not intercepted are forwarded to, in order.
func (r *Resolver) Upstreams() []netip.AddrPort { return slices.Clone(r.upstreams) }

// Add intercepts name: an exact hostname such as web.example.com, or a wildcard domain such
// as *.example.com, in any case and with or without trailing dot. For a hostname it returns
// the address assigned to it (an error wrapping ErrRangeExhausted when none is left); for a
// wildcard the zero Addr, names below it getting theirs when queried. Adding a name already
// added returns its address again; it stays intercepted until removed as many times.
func (r *Resolver) Add(name string) (netip.Addr, error) {
	host, domain, err := parseName(name)
	if err != nil {
		return netip.Addr{}, err
	}
	r.changeMu.Lock()
	defer r.changeMu.Unlock()
	if domain != "" {
		r.addWildcard(domain)
		return netip.Addr{}, nil
	}
	if r.hostRefs[host] > 0 {
		r.hostRefs[host]++
		return r.byName[host].IP, nil
	}
	if a, ok := r.byName[host]; ok { // assigned under a wildcard, which the hostname now beats
		r.release([]Assignment{a})
	}
	ip, err := r.pool.take()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolver: hostname %s: %w", host, err)
	}
	if err := r.assign(Assignment{Name: host, IP: ip}); err != nil {
		return netip.Addr{}, err
	}
	r.hostRefs[host] = 1
	return ip, nil
}

// addWildcard registers domain, releasing the names assigned under shorter wildcards that
// the new one now beats. The caller holds changeMu.
func (r *Resolver) addWildcard(domain string) {
	if r.wildRefs[domain] > 0 {
		r.wildRefs[domain]++
		return
	}
	r.wildRefs[domain] = 1
	var beaten []Assignment
	for parent := domain; ; {
		i := strings.IndexByte(parent, '.')
		if i < 0 {
			break
		}
		parent = parent[i+1:]
		for n := range r.wildcards[parent] {
			if matches(n, domain) {
				beaten = append(beaten, r.byName[n])
			}
		}
	}
	r.release(beaten) // first, so that no query sees them while the new wildcard is there
	r.mu.Lock()
	r.wildcards[domain] = map[string]struct{}{}
	r.mu.Unlock()
}

// Remove undoes one Add of name. When no Add is left the name is no longer intercepted and
// its addresses (for a wildcard, those of every name assigned under it) are freed. It
// reports whether name was added.
func (r *Resolver) Remove(name string) bool {
	host, domain, err := parseName(name)
	if err != nil {
		return false
	}
	r.changeMu.Lock()
	defer r.changeMu.Unlock()
	refs, key := r.hostRefs, host
	if domain != "" {
		refs, key = r.wildRefs, domain
	}
	switch refs[key] {
	case 0:
		return false
	case 1:
		delete(refs, key)
	default:
		refs[key]--
		return true
	}
	if host != "" {
		r.release([]Assignment{r.byName[host]})
		return true
	}
	var freed []Assignment
	for n := range r.wildcards[domain] {
		freed = append(freed, r.byName[n])
	}
	r.release(freed) // first, so that no query gets an address being freed
	r.mu.Lock()
	delete(r.wildcards, domain)
	r.mu.Unlock()
	return true
}

// parseName returns the canonical form of a hostname, or the domain of a wildcard.
func parseName(name string) (host, domain string, err error) {
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	d, wild := strings.CutPrefix(n, "*.")
	if _, ok := dns.IsDomainName(d); !ok || d == "" || strings.Contains(d, "*") {
		return "", "", fmt.Errorf("resolver: %q is neither a hostname nor a wildcard domain such as *.example.com", name)
	}
	if _, err := netip.ParseAddr(d); err == nil {
		return "", "", fmt.Errorf("resolver: %q is an IP address, not a hostname", name)
	}
	if wild {
		return "", d, nil
	}
	return d, "", nil
}

// canonical returns a queried name in the form of the tables.
func canonical(qname string) string { return strings.ToLower(strings.TrimSuffix(qname, ".")) }

// matches reports whether name is domain or below it.
func matches(name, domain string) bool {
	return name == domain || strings.HasSuffix(name, "."+domain)
}

// wildcardFor returns the domain of the longest wildcard matching name, or "". The caller
// holds mu or changeMu.
func (r *Resolver) wildcardFor(name string) string {
	for d := name; ; {
		if _, ok := r.wildcards[d]; ok {
			return d
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			return ""
		}
		d = d[i+1:]
	}
}

// resolve reports whether name is intercepted and, if want, its address, assigning one
// under the winning wildcard on first use.
func (r *Resolver) resolve(name string, want bool) (ip netip.Addr, intercepted bool, err error) {
	r.mu.RLock()
	a, assigned := r.byName[name]
	domain := r.wildcardFor(name)
	r.mu.RUnlock()
	switch {
	case assigned:
		return a.IP, true, nil
	case domain == "":
		return netip.Addr{}, false, nil
	case !want:
		return netip.Addr{}, true, nil
	}

	r.changeMu.Lock()
	defer r.changeMu.Unlock()
	if a, ok := r.byName[name]; ok { // assigned meanwhile by a concurrent query
		return a.IP, true, nil
	}
	if domain = r.wildcardFor(name); domain == "" { // removed meanwhile
		return netip.Addr{}, false, nil
	}
	if ip, err = r.pool.take(); err != nil {
		return netip.Addr{}, true, fmt.Errorf("resolver: %s under *.%s: %w", name, domain, err)
	}
	if err := r.assign(Assignment{Name: name, Pattern: "*." + domain, IP: ip}); err != nil {
		return netip.Addr{}, true, err
	}
	return ip, true, nil
}

// assign calls OnAssign and then publishes a, or frees its address if OnAssign fails. The
// caller holds changeMu.
func (r *Resolver) assign(a Assignment) error {
	if r.onAssign != nil {
		if err := r.onAssign(a.Name, a.Pattern, a.IP); err != nil {
			r.pool.put(a.IP)
			return fmt.Errorf("resolver: assigning %s to %s: %w", a.IP, a.Name, err)
		}
	}
	r.mu.Lock()
	r.byName[a.Name] = a
	r.byIP[a.IP] = a
	if a.Pattern != "" {
		r.wildcards[strings.TrimPrefix(a.Pattern, "*.")][a.Name] = struct{}{}
	}
	r.mu.Unlock()
	r.log.Debug("resolver: assigned", "name", a.Name, "pattern", a.Pattern, "ip", a.IP)
	return nil
}

// release unpublishes the assignments, calls OnRelease for each and frees their addresses.
// The caller holds changeMu.
func (r *Resolver) release(as []Assignment) {
	if len(as) == 0 {
		return
	}
	slices.SortFunc(as, func(a, b Assignment) int { return a.IP.Compare(b.IP) })
	r.mu.Lock()
	for _, a := range as {
		delete(r.byName, a.Name)
		delete(r.byIP, a.IP)
		if names := r.wildcards[strings.TrimPrefix(a.Pattern, "*.")]; a.Pattern != "" && names != nil {
			delete(names, a.Name)
		}
	}
	r.mu.Unlock()
	for _, a := range as {
		if r.onRelease != nil {
			r.onRelease(a.Name, a.IP)
		}
		r.pool.put(a.IP)
		r.log.Debug("resolver: released", "name", a.Name, "pattern", a.Pattern, "ip", a.IP)
	}
}

// Lookup returns the name an address is assigned to and the wildcard it matched (empty for
// an exact hostname), so that an intercepted destination maps back to its service.
func (r *Resolver) Lookup(ip netip.Addr) (name, pattern string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a, ok := r.byIP[ip.Unmap()]
	return a.Name, a.Pattern, ok
}

// Assignments returns the current assignments, by address.
func (r *Resolver) Assignments() []Assignment {
	r.mu.RLock()
	as := make([]Assignment, 0, len(r.byIP))
	for _, a := range r.byIP {
		as = append(as, a)
	}
	r.mu.RUnlock()
	slices.SortFunc(as, func(a, b Assignment) int { return a.IP.Compare(b.IP) })
	return as
}
