package config

import (
	"net/netip"
	"strings"
)

// webPoint is a bind point as read, with where it stands in the file.
type webPoint struct {
	path string // web[i].bindPoints[j]
	line int
	bp   BindPoint
}

// webListeners reads a `web` section: a list of named web listeners, each with its bind points
// and the APIs it serves, whose bindings must be among allowed. It is the router's web
// section with the set of bindings as a parameter, so that both files read it alike. It also
// returns the valid bind points with their lines, for checks against other listeners.
func (r *reader) webListeners(top *mapping, allowed ...string) ([]WebListener, []webPoint) {
	out := []WebListener{}
	var points []webPoint
	names := map[string]int{}
	allowedText := strings.Join(allowed, ", ")
	for i, n := range top.list("web") {
		path := index("web", i)
		m := r.mapping(n, path, n.Line)
		w := WebListener{Name: m.str("name", ""), BindPoints: []BindPoint{}, APIs: []WebAPI{}}
		if m.require("name", "a name for the web listener") {
			if first, dup := names[w.Name]; dup {
				r.errorf(m.lineOfKey("name"), m.keyPath("name"), "%q is already the name of web[%d]", w.Name, first)
			}
			names[w.Name] = i
		}
		bps := m.list("bindPoints")
		if len(bps) == 0 {
			r.errorf(m.lineOfKey("bindPoints"), m.keyPath("bindPoints"), "is required: at least one {interface, address}")
		}
		for j, pn := range bps {
			bpPath := index(m.keyPath("bindPoints"), j)
			if bp, ok := r.bindPoint(pn, bpPath); ok {
				w.BindPoints = append(w.BindPoints, bp)
				points = append(points, webPoint{path: bpPath, line: pn.Line, bp: bp})
			}
		}
		apis := m.list("apis")
		if len(apis) == 0 {
			r.errorf(m.lineOfKey("apis"), m.keyPath("apis"), "is required: at least one {binding}; allowed bindings: %s", allowedText)
		}
		served := map[string]int{}
		for j, an := range apis {
			am := r.mapping(an, index(m.keyPath("apis"), j), an.Line)
			api := WebAPI{Binding: am.oneOf("binding", "", allowed...)}
			am.require("binding", "the API to serve; allowed: "+allowedText)
			if first, dup := served[api.Binding]; dup && api.Binding != "" {
				// One listener cannot mount two handlers on one path.
				r.errorf(am.lineOfKey("binding"), am.keyPath("binding"), "%q is already served by %s", api.Binding, index(m.keyPath("apis"), first))
			} else {
				served[api.Binding] = j
			}
			r.componentOptions(am)
			am.finish()
			w.APIs = append(w.APIs, api)
		}
		m.finish()
		out = append(out, w)
	}
	return out, points
}

// controllerWebChecks refuses web bind points that listen where another listener of the
// controller already does (api.listen, ctrl.listen, cluster.listen, an earlier bind point): the controller
// would otherwise fail at start with an error that names no line of the file.
func (r *reader) controllerWebChecks(cfg *Controller, points []webPoint) {
	type claim struct {
		host string
		port int
		what string
	}
	var claims []claim
	take := func(hostPort, what string) string {
		host, port, err := parseHostPort(hostPort)
		if err != nil {
			return ""
		}
		for _, c := range claims {
			if c.port == port && (strings.EqualFold(c.host, host) || isUnspecified(c.host) || isUnspecified(host)) {
				return c.what
			}
		}
		claims = append(claims, claim{host, port, what})
		return ""
	}
	take(cfg.API.Listen, "api.listen")
	take(cfg.Ctrl.Listen.HostPort(), "ctrl.listen")
	if cfg.Cluster != nil && cfg.Cluster.Listen != "" {
		if first := take(cfg.Cluster.Listen, "cluster.listen"); first != "" {
			r.errorf(cfg.Cluster.line, "cluster.listen", "%s is already bound by %s", cfg.Cluster.Listen, first)
		}
	}
	for _, p := range points {
		if first := take(p.bp.Interface, p.path+".interface"); first != "" {
			r.errorf(p.line, p.path+".interface", "%s is already bound by %s", p.bp.Interface, first)
		}
	}
}

// isUnspecified tells whether host is the every-address IP (0.0.0.0, ::), which a listener
// shares with no other listener on the same port.
func isUnspecified(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}
