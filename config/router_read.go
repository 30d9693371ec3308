package config

import (
	"net/mail"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The readers below follow the sections of docs/router-config.md in order. Each reads one
// section, fills in its defaults and records what is wrong with it.

const day = 24 * time.Hour

func (r *reader) ctrl(top *mapping, dir string) Ctrl {
	present := top.require("ctrl", "the controller's address (ctrl.endpoint or ctrl.endpoints)")
	m := top.child("ctrl")
	c := Ctrl{
		DefaultRequestTimeout: m.duration("defaultRequestTimeout", 5*time.Second, 100*time.Millisecond, 10*time.Minute),
		EndpointsFile:         m.filePath("endpointsFile", "endpoints", dir),
	}
	if n := m.get("endpoint"); n != nil {
		if a, ok := r.address(n, m.keyPath("endpoint"), TransportTLS); ok {
			c.Endpoint = &a
		}
	}
	endpoints := m.list("endpoints")
	switch {
	case c.Endpoint != nil && m.has("endpoints"):
		r.warnf(m.lineOfKey("endpoints"), m.keyPath("endpoints"), "ignored because ctrl.endpoint is set")
	case c.Endpoint == nil && m.get("endpoint") == nil:
		for i, n := range endpoints {
			if a, ok := r.address(n, index(m.keyPath("endpoints"), i), TransportTLS); ok {
				c.Endpoints = append(c.Endpoints, a)
			}
		}
		if len(endpoints) == 0 && present {
			r.errorf(m.line, "ctrl", "one of ctrl.endpoint or ctrl.endpoints is required")
			m.required["endpoint"], m.required["endpoints"] = true, true
		}
	}
	if n := m.get("bind"); n != nil {
		c.Bind, _ = r.localBind(n, m.keyPath("bind"))
	}
	hb := m.child("heartbeats")
	c.Heartbeats = Heartbeats{
		SendInterval:             hb.duration("sendInterval", 10*time.Second, 100*time.Millisecond, time.Hour),
		CheckInterval:            hb.duration("checkInterval", time.Second, 100*time.Millisecond, time.Hour),
		CloseUnresponsiveTimeout: hb.duration("closeUnresponsiveTimeout", 30*time.Second, time.Second, day),
	}
	hb.finish()
	opts := m.options("options")
	c.Options.ConnectTimeout = opts.millis("connectTimeoutMs", 5000, 100, 600_000)
	opts.finish()
	m.finish()
	return c
}

func (r *reader) identity(top *mapping, dir string) Identity {
	id := Identity{AltServerCerts: []AltServerCert{}}
	if !top.require("identity", "the router's certificate, key and CA files") {
		return id
	}
	m := top.child("identity")
	id.line = m.line
	if m.require("cert", "path of the client certificate the router presents to the controller and to other routers") {
		id.Cert = m.filePath("cert", "", dir)
	}
	if m.require("key", "path of the router's private key") {
		id.Key = m.filePath("key", "", dir)
	}
	if m.require("ca", "path of the CA bundle the router trusts") {
		id.CA = m.filePath("ca", "", dir)
	}
	errs := len(r.errs)
	id.ServerCert = m.filePath("server_cert", "", dir)
	id.serverCertBad = len(r.errs) > errs
	id.ServerKey = m.filePath("server_key", "", dir)
	for i, n := range m.list("alt_server_certs") {
		path := index(m.keyPath("alt_server_certs"), i)
		alt := r.mapping(n, path, n.Line)
		var a AltServerCert
		if alt.require("server_cert", "path of the alternate server certificate") {
			a.ServerCert = alt.filePath("server_cert", "", dir)
		}
		if alt.require("server_key", "path of the alternate server certificate's key") {
			a.ServerKey = alt.filePath("server_key", "", dir)
		}
		alt.finish()
		id.AltServerCerts = append(id.AltServerCerts, a)
	}
	id.RenewAt = m.number("renew_at", DefaultRenewAt, MinRenewAt, MaxRenewAt)
	m.finish()
	return id
}

func (r *reader) edge(top *mapping, file, dir string) *Edge {
	if !top.has("edge") {
		return nil
	}
	m := top.child("edge")
	e := &Edge{
		DB:             m.filePath("db", file+".proto.gzip", dir),
		DBSaveInterval: m.seconds("dbSaveIntervalSeconds", 30, 1, 86_400),
	}
	if m.has("csr") {
		csr := m.child("csr")
		e.CSR = r.csr(csr)
		e.CSR.line = csr.line
	} else {
		r.warnf(m.line, "edge.csr", "absent: the router cannot enroll or extend its certificates")
	}
	m.finish()
	return e
}

func (r *reader) csr(m *mapping) *CSR {
	c := &CSR{
		Country:            m.str("country", ""),
		Province:           m.str("province", ""),
		Locality:           m.str("locality", ""),
		Organization:       m.str("organization", ""),
		OrganizationalUnit: m.str("organizationalUnit", ""),
	}
	if c.Country != "" && !isCountryCode(c.Country) {
		r.errorf(m.lineOfKey("country"), m.keyPath("country"), "%q is not a two-letter ISO 3166 country code such as US or DE", c.Country)
	}
	s := m.child("sans")
	c.SANs = SANs{DNS: []string{}, IP: []netip.Addr{}, URI: []string{}, Email: []string{}}
	for i, v := range s.strList("dns") {
		if err := checkHost(strings.TrimPrefix(v, "*.")); err != nil {
			r.errorf(s.lineOfKey("dns"), index(s.keyPath("dns"), i), "%v", err)
			continue
		}
		c.SANs.DNS = append(c.SANs.DNS, v)
	}
	for i, v := range s.strList("ip") {
		ip, err := netip.ParseAddr(v)
		if err != nil {
			r.errorf(s.lineOfKey("ip"), index(s.keyPath("ip"), i), "%q is not an IP address", v)
			continue
		}
		c.SANs.IP = append(c.SANs.IP, ip)
	}
	for i, v := range s.strList("uri") {
		if u, err := url.Parse(v); err != nil || u.Scheme == "" {
			r.errorf(s.lineOfKey("uri"), index(s.keyPath("uri"), i), "%q is not an absolute URI such as spiffe://example.org/router", v)
			continue
		}
		c.SANs.URI = append(c.SANs.URI, v)
	}
	for i, v := range s.strList("email") {
		if a, err := mail.ParseAddress(v); err != nil || a.Address != v {
			r.errorf(s.lineOfKey("email"), index(s.keyPath("email"), i), "%q is not an e-mail address", v)
			continue
		}
		c.SANs.Email = append(c.SANs.Email, v)
	}
	s.finish()
	m.finish()
	return c
}

func isCountryCode(s string) bool {
	return len(s) == 2 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z'
}

func (r *reader) link(top *mapping) Link {
	m := top.child("link")
	l := Link{Listeners: []LinkListener{}, Dialers: []LinkDialer{}}
	for i, n := range m.list("listeners") {
		path := index(m.keyPath("listeners"), i)
		lm := r.mapping(n, path, n.Line)
		ll := LinkListener{Binding: lm.oneOf("binding", "", BindingTransport), line: n.Line}
		lm.require("binding", "the subsystem that creates the listener; allowed: transport")
		if lm.require("bind", "the address to listen on, e.g. tls:0.0.0.0:6000") {
			ll.Bind, _ = r.address(lm.get("bind"), lm.keyPath("bind"), TransportTLS, TransportQUIC)
		}
		if lm.require("advertise", "the <host>:<port> other routers use to reach this listener") && ll.Bind.Transport != "" {
			ll.Advertise, _ = r.advertise(lm.get("advertise"), lm.keyPath("advertise"), ll.Bind)
		}
		ll.Groups = groups(lm)
		r.componentOptions(lm)
		lm.finish()
		l.Listeners = append(l.Listeners, ll)
	}
	for i, n := range m.list("dialers") {
		path := index(m.keyPath("dialers"), i)
		dm := r.mapping(n, path, n.Line)
		d := LinkDialer{
			Binding: dm.oneOf("binding", "", BindingTransport),
			Split:   dm.boolean("split", true),
			Groups:  groups(dm),
		}
		dm.require("binding", "the subsystem that dials; allowed: transport")
		if n := dm.get("bind"); n != nil {
			d.Bind, _ = r.localBind(n, dm.keyPath("bind"))
		}
		d.HealthyDialBackoff = r.backoff(dm, "healthyDialBackoff", Backoff{5 * time.Second, 5 * time.Minute, 1.5})
		d.UnhealthyDialBackoff = r.backoff(dm, "unhealthyDialBackoff", Backoff{time.Minute, time.Hour, 10})
		r.componentOptions(dm)
		dm.finish()
		l.Dialers = append(l.Dialers, d)
	}
	m.finish()
	return l
}

func groups(m *mapping) []string {
	g := m.strList("groups")
	if len(g) == 0 {
		return []string{"default"}
	}
	return g
}

// componentOptions reads the options of a component that has none zmesh knows: each key is
// reported as ignored.
func (r *reader) componentOptions(m *mapping) {
	if m.has("options") {
		m.options("options").finish()
	}
}

func (r *reader) backoff(m *mapping, key string, def Backoff) Backoff {
	bm := m.child(key)
	b := Backoff{
		MinRetryInterval:   bm.duration("minRetryInterval", def.MinRetryInterval, 10*time.Millisecond, day),
		MaxRetryInterval:   bm.duration("maxRetryInterval", def.MaxRetryInterval, 10*time.Millisecond, day),
		RetryBackoffFactor: bm.number("retryBackoffFactor", def.RetryBackoffFactor, 1, 100),
	}
	if b.MinRetryInterval > b.MaxRetryInterval {
		r.errorf(bm.lineOfKey("minRetryInterval"), bm.keyPath("minRetryInterval"), "%s is above maxRetryInterval %s", duration(b.MinRetryInterval), duration(b.MaxRetryInterval))
	}
	bm.finish()
	return b
}

func (r *reader) listeners(top *mapping) []Listener {
	out := []Listener{}
	for i, n := range top.list("listeners") {
		path := index("listeners", i)
		m := r.mapping(n, path, n.Line)
		l := Listener{Binding: m.oneOf("binding", "", BindingEdge, BindingTransport, BindingTunnel), line: n.Line}
		m.require("binding", "the component that serves the listener; allowed: edge, transport, tunnel")
		opts := m.options("options")
		switch l.Binding {
		case BindingEdge, BindingTransport:
			l.Bind, l.Advertise = r.listenerAddresses(m, opts)
		case BindingTunnel:
			for _, k := range []string{"bind", "address", "advertise"} {
				if m.has(k) {
					m.ignore(k)
					r.warnf(m.lineOfKey(k), m.keyPath(k), "ignored: the tunnel listener takes its addresses from its mode and services")
				}
			}
			l.Tunnel = r.tunnelOptions(opts)
		default: // no binding, or a wrong one, reported above: its keys are not checked
			for _, k := range []string{"bind", "address", "advertise"} {
				m.ignore(k)
			}
		}
		opts.finish()
		m.finish()
		out = append(out, l)
	}
	return out
}

// listenerAddresses reads bind (or its alias address) and advertise (or its alias
// options.advertise) of an edge or transport listener.
func (r *reader) listenerAddresses(m, opts *mapping) (*Address, *Address) {
	key := "bind"
	bindSet, addressSet := m.get("bind") != nil, m.get("address") != nil
	if !bindSet && addressSet {
		key = "address"
	} else if bindSet && addressSet {
		r.warnf(m.lineOfKey("address"), m.keyPath("address"), "ignored because bind is set (address is an alias of bind)")
	}
	var bind *Address
	if m.require(key, "the address to listen on, e.g. tls:0.0.0.0:3022") {
		if a, ok := r.address(m.get(key), m.keyPath(key), TransportTLS); ok {
			bind = &a
		}
	}
	adv := m
	advertiseSet, aliasSet := m.get("advertise") != nil, opts.get("advertise") != nil
	switch {
	case !advertiseSet && aliasSet:
		adv = opts
	case advertiseSet && aliasSet:
		r.warnf(opts.lineOfKey("advertise"), opts.keyPath("advertise"), "ignored because advertise is set (options.advertise is an alias of advertise)")
	case !advertiseSet:
		r.errorf(m.lineOfKey("advertise"), m.keyPath("advertise"), "is required: the <host>:<port> clients use to reach this listener (advertise or options.advertise)")
		return bind, nil
	}
	if bind == nil {
		return nil, nil
	}
	a, ok := r.advertise(adv.get("advertise"), adv.keyPath("advertise"), *bind)
	if !ok {
		return bind, nil
	}
	return bind, &a
}

func (r *reader) tunnelOptions(m *mapping) *TunnelOptions {
	t := &TunnelOptions{Mode: m.oneOf("mode", TunnelHost, TunnelHost, TunnelTProxy, TunnelProxy)}
	m.whenAbsent("mode", "not set, using the default mode host")
	onlyIn := func(key, mode string) {
		if m.has(key) && t.Mode != mode {
			m.ignore(key)
			r.warnf(m.lineOfKey(key), m.keyPath(key), "ignored: it applies to mode %s only, and the mode is %s", mode, t.Mode)
		}
	}
	onlyIn("resolver", TunnelTProxy)
	onlyIn("dnsSvcIpRange", TunnelTProxy)
	onlyIn("upstreams", TunnelTProxy)
	onlyIn("services", TunnelProxy)
	// Every mode hosts services, and UDP flows of hosted and intercepted services idle out.
	t.UDPIdleTimeout = m.duration("udpIdleTimeout", 5*time.Minute, time.Second, 24*time.Hour)
	switch t.Mode {
	case TunnelTProxy:
		res := DefaultResolver()
		if n := m.get("resolver"); n != nil {
			if v, ok := r.resolver(n, m.keyPath("resolver")); ok {
				res = v
			}
		}
		t.Resolver = &res
		p := DefaultDNSSvcIPRange()
		if n := m.get("dnsSvcIpRange"); n != nil {
			if s, ok := r.scalar(n, m.keyPath("dnsSvcIpRange")); ok {
				if v, err := netip.ParsePrefix(s); err != nil {
					r.errorf(n.Line, m.keyPath("dnsSvcIpRange"), "%q is not a CIDR range such as 100.64.0.1/10", s)
				} else if v.Bits() == v.Addr().BitLen() {
					r.errorf(n.Line, m.keyPath("dnsSvcIpRange"), "%q holds a single address; give a range such as 100.64.0.1/10", s)
				} else {
					p = v
				}
			}
		}
		t.DNSSvcIPRange = &p
		t.Upstreams = r.upstreams(m)
	case TunnelProxy:
		t.Services = r.tunnelServices(m)
	}
	return t
}

// upstreams reads the tproxy resolver's upstream servers: IP addresses, with a port
// (ip:port, [ipv6]:port) or without (port 53).
func (r *reader) upstreams(m *mapping) []netip.AddrPort {
	var out []netip.AddrPort
	for i, n := range m.list("upstreams") {
		path := index(m.keyPath("upstreams"), i)
		s, ok := r.scalar(n, path)
		if !ok {
			continue
		}
		if ap, err := netip.ParseAddrPort(s); err == nil && ap.Port() != 0 {
			out = append(out, ap)
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.AddrPortFrom(a, 53))
		} else {
			r.errorf(n.Line, path, "%q is not an upstream resolver; write an IP address with an optional port, e.g. 192.0.2.53 or 192.0.2.53:5353", s)
		}
	}
	return out
}

func (r *reader) resolver(n *yaml.Node, path string) (Resolver, bool) {
	s, ok := r.scalar(n, path)
	if !ok {
		return Resolver{}, false
	}
	rest, found := strings.CutPrefix(s, "udp://")
	if !found {
		r.errorf(n.Line, path, "%q is not a resolver address; write udp://<host>:<port>, e.g. udp://127.0.0.1:53", s)
		return Resolver{}, false
	}
	host, port, err := parseHostPort(rest)
	if err != nil {
		r.errorf(n.Line, path, "%q: %v", s, err)
		return Resolver{}, false
	}
	if _, err := netip.ParseAddr(host); err != nil {
		r.errorf(n.Line, path, "%q: the resolver listens on an IP address, not a name", s)
		return Resolver{}, false
	}
	return Resolver{Host: host, Port: port}, true
}

func (r *reader) tunnelServices(m *mapping) []TunnelService {
	items := m.list("services")
	if len(items) == 0 {
		r.errorf(m.lineOfKey("services"), m.keyPath("services"), "is required in mode proxy: a list of <service>:<port>")
		return nil
	}
	out := make([]TunnelService, 0, len(items))
	ports := map[int]int{}
	for i, n := range items {
		path := index(m.keyPath("services"), i)
		s, ok := r.scalar(n, path)
		if !ok {
			continue
		}
		cut := strings.LastIndexByte(s, ':')
		if cut <= 0 {
			r.errorf(n.Line, path, "%q is not <service>:<port>", s)
			continue
		}
		name, portText := strings.TrimSpace(s[:cut]), s[cut+1:]
		port, err := strconv.Atoi(portText)
		if err != nil || port < 1 || port > 65535 {
			r.errorf(n.Line, path, "%q: port %q is not a number from 1 to 65535", s, portText)
			continue
		}
		if name == "" {
			r.errorf(n.Line, path, "%q: the service name is empty", s)
			continue
		}
		if first, dup := ports[port]; dup {
			r.errorf(n.Line, path, "port %d is already used by services[%d]", port, first)
			continue
		}
		ports[port] = i
		out = append(out, TunnelService{Service: name, Port: port})
	}
	return out
}

func (r *reader) dialers(top *mapping) []Dialer {
	out := []Dialer{}
	seen := map[string]int{}
	for i, n := range top.list("dialers") {
		path := index("dialers", i)
		m := r.mapping(n, path, n.Line)
		d := Dialer{Binding: m.oneOf("binding", "", DialerProxy, DialerProxyUDP, DialerTransport, DialerTransportUDP)}
		m.require("binding", "allowed: proxy, proxy_udp, transport, transport_udp")
		if first, dup := seen[d.Binding]; dup && d.Binding != "" {
			r.errorf(m.lineOfKey("binding"), m.keyPath("binding"), "%s is already configured by dialers[%d]", d.Binding, first)
		} else {
			seen[d.Binding] = i
		}
		opts := m.options("options")
		d.Options.MTU = opts.integer("mtu", defaultMTU, minMTU, maxMTU)
		opts.finish()
		m.finish()
		out = append(out, d)
	}
	return out
}

func (r *reader) forwarder(m *mapping) Forwarder {
	f := Forwarder{
		FaultTxInterval:          m.millis("faultTxInterval", 15_000, 0, maxMillis),
		IdleCircuitTimeout:       m.millis("idleCircuitTimeout", 60_000, 1, maxMillis),
		IdleTxInterval:           m.millis("idleTxInterval", 60_000, 0, maxMillis),
		LatencyProbeInterval:     m.millis("latencyProbeInterval", 10_000, 0, 3_600_000),
		LinkDialQueueLength:      m.integer("linkDialQueueLength", 1000, 1, 10_000),
		LinkDialWorkerCount:      m.integer("linkDialWorkerCount", 32, 1, 10_000),
		RateLimitedQueueLength:   m.integer("rateLimitedQueueLength", 5000, 1, 50_000),
		RateLimitedWorkerCount:   m.integer("rateLimitedWorkerCount", 5, 1, 10_000),
		XgressCloseCheckInterval: m.millis("xgressCloseCheckInterval", 5000, 0, maxMillis),
		XgressDialDwellTime:      m.millis("xgressDialDwellTime", 0, 0, maxMillis),
		XgressDialQueueLength:    m.integer("xgressDialQueueLength", 1000, 1, 10_000),
		XgressDialWorkerCount:    m.integer("xgressDialWorkerCount", 128, 1, 10_000),
	}
	m.finish()
	return f
}

func (r *reader) healthChecks(m *mapping) HealthChecks {
	p := m.child("ctrlPingCheck")
	l := m.child("linkCheck")
	h := HealthChecks{
		CtrlPingCheck: CtrlPingCheck{
			Interval:     p.duration("interval", 30*time.Second, 100*time.Millisecond, day),
			Timeout:      p.duration("timeout", 15*time.Second, 100*time.Millisecond, day),
			InitialDelay: p.duration("initialDelay", 15*time.Second, 0, day),
		},
		LinkCheck: LinkCheck{
			Interval:     l.duration("interval", 5*time.Second, 100*time.Millisecond, day),
			InitialDelay: l.duration("initialDelay", time.Second, 0, day),
			MinLinks:     l.integer("minLinks", 0, 0, 10_000),
		},
	}
	p.finish()
	l.finish()
	m.finish()
	return h
}

func (r *reader) metrics(m *mapping) Metrics {
	mt := Metrics{
		ReportInterval:       m.duration("reportInterval", time.Minute, time.Second, day),
		MessageQueueSize:     m.integer("messageQueueSize", 10, 1, 10_000),
		IntervalAgeThreshold: m.duration("intervalAgeThreshold", 80*time.Second, 0, day),
		CircuitEvents:        m.boolean("circuitEvents", false),
		ServiceLabelLimit:    m.integer("serviceLabelLimit", 100, 0, 10_000),
	}
	m.finish()
	return mt
}

// web reads the router's web listeners; the controller's file reads its own the same way
// (webListeners, controller_web.go).
func (r *reader) web(top *mapping) []WebListener {
	listeners, _ := r.webListeners(top, WebAPIs()...)
	return listeners
}

func (r *reader) bindPoint(n *yaml.Node, path string) (BindPoint, bool) {
	m := r.mapping(n, path, n.Line)
	defer m.finish()
	if !m.require("interface", "the <host>:<port> to listen on, e.g. 0.0.0.0:8081") {
		m.ignore("address")
		return BindPoint{}, false
	}
	bp := BindPoint{Interface: r.hostPort(m, "interface", ""), Address: r.hostPort(m, "address", "")}
	if bp.Interface == "" {
		return BindPoint{}, false
	}
	if m.get("address") == nil {
		if unspecifiedHost(bp.Interface) {
			r.errorf(m.lineOfKey("address"), m.keyPath("address"), "is required when interface %s listens on every address: the <host>:<port> clients use", bp.Interface)
			return BindPoint{}, false
		}
		bp.Address = bp.Interface
	}
	return bp, bp.Address != ""
}

func (r *reader) profile(top *mapping, dir string) Profile {
	m := top.child("profile")
	var p Profile
	if m.has("cpu") {
		c := m.child("cpu")
		p.CPU = &ProfileCPU{}
		if c.require("path", "the file the CPU profile is written to") {
			p.CPU.Path = c.filePath("path", "", dir)
		}
		c.finish()
	}
	if m.has("memory") {
		mm := m.child("memory")
		p.Memory = &ProfileMemory{Interval: mm.millis("intervalMs", 15_000, 100, maxMillis)}
		if mm.require("path", "the file the heap profile is written to") {
			p.Memory.Path = mm.filePath("path", "", dir)
		}
		mm.finish()
	}
	m.finish()
	return p
}

func (r *reader) trace(top *mapping, dir string) *Trace {
	if !top.has("trace") {
		return nil
	}
	m := top.child("trace")
	t := &Trace{}
	if m.require("path", "the file decoded messages are written to") {
		t.Path = m.filePath("path", "", dir)
	}
	m.finish()
	return t
}

func (r *reader) transport(top *mapping) *Transport {
	if !top.has("transport") {
		return nil
	}
	m := top.child("transport")
	t := &Transport{}
	if m.has("westworld3") {
		w := m.child("westworld3")
		r.warnf(m.lineOfKey("westworld3"), "transport.westworld3", "accepted for compatibility; zmesh has no westworld3 underlay, so it has no effect")
		t.Westworld3 = &Westworld3{
			ProfileVersion: w.integer("profile_version", 0, 0, 1<<31-1),
			TxPortalMinSz:  w.integer("tx_portal_min_sz", 0, 0, 1<<31-1),
			TxPortalMaxSz:  w.integer("tx_portal_max_sz", 0, 0, 1<<31-1),
		}
		if w.has("instrument") {
			in := w.child("instrument")
			t.Westworld3.Instrument = &Instrument{
				Name:       in.str("name", ""),
				Path:       in.str("path", ""),
				SnapshotMs: in.integer("snapshot_ms", 0, 0, maxMillis),
				Enabled:    in.boolean("enabled", false),
			}
			in.finish()
		}
		w.finish()
	}
	m.finish()
	return t
}

// crossChecks are the rules that tie sections together.
func (r *reader) crossChecks(cfg *Router) {
	bound := map[string]string{}
	claim := func(a *Address, path string, line int) {
		if a == nil || a.Transport == "" {
			return
		}
		network := "tcp"
		if a.Transport == TransportQUIC || a.Transport == TransportUDP {
			network = "udp"
		}
		key := network + "/" + a.HostPort()
		if first, dup := bound[key]; dup {
			r.errorf(line, path, "%s is already bound by %s", a, first)
			return
		}
		bound[key] = path
	}
	listensFor, tunnels, acceptors := "", 0, 0
	for i, l := range cfg.Listeners {
		path := index("listeners", i)
		claim(l.Bind, path+".bind", l.line)
		switch l.Binding {
		case BindingEdge:
			listensFor = path
			acceptors++
		case BindingTransport:
			listensFor = path
		case BindingTunnel:
			if tunnels++; tunnels > 1 {
				r.errorf(l.line, path+".binding", "only one tunnel listener is allowed")
			}
		}
		if cfg.Edge == nil && (l.Binding == BindingEdge || l.Binding == BindingTunnel) {
			r.errorf(l.line, path+".binding", "the %s listener needs the edge section, which turns edge functionality on", l.Binding)
		}
	}
	for i, l := range cfg.Link.Listeners {
		path := index("link.listeners", i)
		claim(&l.Bind, path+".bind", l.line)
		listensFor = path
		acceptors++
	}
	if listensFor != "" && cfg.Identity.ServerCert == "" && !cfg.Identity.serverCertBad && cfg.Identity.line > 0 {
		r.errorf(cfg.Identity.line, "identity.server_cert", "is required because the router listens (%s): path of the server certificate", listensFor)
	}
	if cfg.Edge != nil && cfg.Edge.CSR != nil && cfg.Edge.CSR.SANs.empty() && acceptors > 0 {
		r.errorf(cfg.Edge.CSR.line, "edge.csr.sans", "at least one SAN (dns, ip, uri or email) is required to accept connections from SDKs or other routers")
	}
}
