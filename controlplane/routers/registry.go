package routers

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Router is a connected router.
type Router struct {
	ID, Name string
	Hello    ctrlproto.Hello // what the router announced
	Since    time.Time       // when its Hello was accepted
	Channel  *ctrlproto.Channel

	certs     atomic.Pointer[[2]string] // fingerprints of its current client and server certificates
	revoked   bool                      // its certificates stopped being its own (deleted, re-enrolled)
	protocols map[string]string         // its SDK listeners, e.g. "tls" → "tls://host:3022"
	metrics   atomic.Pointer[ctrlproto.Metrics]
}

// Fingerprints returns the fingerprints of the router's current client and server
// certificates.
func (rt *Router) Fingerprints() []string {
	fps := rt.certs.Load()
	return []string{fps[0], fps[1]}
}

// fingerprint is that of the router's current client certificate: the one it connected with,
// or the one it extended it to since.
func (rt *Router) fingerprint() string { return rt.certs.Load()[0] }

// Revoked reports whether the router was disconnected because the certificates it
// connected with stopped being its own.
func (rt *Router) Revoked() bool { return rt.revoked }

// Metrics returns the router's latest metrics report, if it sent one on this connection
// (Server.LatestMetrics keeps reports across connections).
func (rt *Router) Metrics() *ctrlproto.Metrics { return rt.metrics.Load() }

// registry maps router ids to their current connection.
type registry struct {
	mu    sync.Mutex
	conns map[string]*Router
}

// add registers rt and returns the connection it replaces, if any.
func (r *registry) add(rt *Router) *Router {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.conns[rt.ID]
	r.conns[rt.ID] = rt
	return old
}

// remove unregisters rt unless a newer connection replaced it; it reports whether rt
// was registered.
func (r *registry) remove(rt *Router) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns[rt.ID] != rt {
		return false
	}
	delete(r.conns, rt.ID)
	return true
}

func (r *registry) get(id string) *Router {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[id]
}

// All returns the connected routers.
func (s *Server) All() []*Router {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	out := make([]*Router, 0, len(s.reg.conns))
	for _, rt := range s.reg.conns {
		out = append(out, rt)
	}
	return out
}

// Channel returns the control channel of a connected router.
func (s *Server) Channel(id string) (*ctrlproto.Channel, bool) {
	if rt := s.reg.get(id); rt != nil {
		return rt.Channel, true
	}
	return nil, false
}

// Lookup returns the connected router with this id.
func (s *Server) Lookup(id string) (*Router, bool) {
	rt := s.reg.get(id)
	return rt, rt != nil
}

// Online tells whether the router is connected, with the hostname and edge protocols it
// announced; the API renders them as isOnline, hostname and supportedProtocols.
func (s *Server) Online(id string) (online bool, hostname string, protocols map[string]string) {
	rt := s.reg.get(id)
	if rt == nil {
		return false, "", nil
	}
	return true, rt.Hello.Hostname, maps.Clone(rt.protocols)
}

// edgeProtocols maps the transports of the SDK listeners to their URLs, as SDK clients
// use them: "tls:host:3022" becomes "tls" → "tls://host:3022".
func edgeProtocols(listeners []ctrlproto.Listener) map[string]string {
	out := map[string]string{}
	for _, l := range listeners {
		if l.Binding != "edge" {
			continue
		}
		if transport, hostPort, ok := strings.Cut(l.Address, ":"); ok && transport != "" && hostPort != "" {
			if _, seen := out[transport]; !seen {
				out[transport] = transport + "://" + hostPort
			}
		}
	}
	return out
}

// Connected returns how many routers have their control channel connected.
func (s *Server) Connected() int {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return len(s.reg.conns)
}

// LatestMetrics returns the latest metrics report the router sent, on its current
// connection or an earlier one; reports are kept until the router is deleted.
func (s *Server) LatestMetrics(id string) (*ctrlproto.Metrics, bool) {
	return s.reports.get(id)
}

// reports holds the latest metrics report of each router.
type reports struct {
	mu     sync.Mutex
	latest map[string]*ctrlproto.Metrics
}

// put keeps m as the router's latest report.
func (r *reports) put(id string, m *ctrlproto.Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latest[id] = m
}

func (r *reports) get(id string) (*ctrlproto.Metrics, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.latest[id]
	return m, m != nil
}

func (r *reports) drop(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.latest, id)
}
