package api

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// FabricBase is the base path of the fabric management API.
const FabricBase = "/fabric/v1"

// Fabric is the controller's live view of the mesh, for the fabric management API.
type Fabric interface {
	// Hello returns what a connected router announced, and since when it is connected.
	Hello(routerID string) (hello ctrlproto.Hello, since time.Time, ok bool)
	// Links are the links circuits are routed over.
	Links() []FabricLink
	// Circuits are the circuits the controller knows.
	Circuits() []FabricCircuit
	// RemoveCircuit ends a circuit on every router of its path; false: no such circuit.
	RemoveCircuit(id uint64, reason string) bool
}

// FabricLink is a link between two routers, up at both ends.
type FabricLink struct {
	ID       string
	A, B     string        // router ids; links carry traffic both ways
	Protocol string        // tls or quic; "" when the routers' listeners do not tell
	Latency  time.Duration // the larger of the round trips the two routers measured
}

// FabricCircuit is a circuit the controller made or adopted.
type FabricCircuit struct {
	ID         uint64
	ServiceID  string
	Terminator string
	Initiator  string   // the identity that dialed
	Path       []string // router ids, ingress first
	Created    time.Time
	// Adopted: made by an earlier run of the controller; Path holds the routers that reported
	// it, in no particular order.
	Adopted bool
}

// registerFabric declares the fabric management API: routers, links, circuits, services and
// terminators as OpenZiti's fabric API shows them (ziti fabric list ...), and the deletion of
// circuits. Administrators only, with the same API session as the edge APIs.
func (s *Server) registerFabric() {
	s.handle(fabric, "GET", "/routers", adminOnly, "Lists the routers with their control channel state", s.fabricRouters)
	s.handle(fabric, "GET", "/routers/{id}", adminOnly, "Returns one router", s.fabricRouter)
	s.handle(fabric, "GET", "/routers/{id}/terminators", adminOnly, "Lists a router's terminators", s.fabricRouterTerminators)
	s.handle(fabric, "GET", "/links", adminOnly, "Lists the links between routers", s.fabricLinks)
	s.handle(fabric, "GET", "/links/{id}", adminOnly, "Returns one link", s.fabricLink)
	s.handle(fabric, "GET", "/circuits", adminOnly, "Lists the circuits", s.fabricCircuits)
	s.handle(fabric, "GET", "/circuits/{id}", adminOnly, "Returns one circuit", s.fabricCircuit)
	s.handle(fabric, "DELETE", "/circuits/{id}", adminOnly, "Ends a circuit on every router of its path", s.fabricDeleteCircuit)
	s.handle(fabric, "GET", "/services", adminOnly, "Lists the services", s.fabricServices)
	s.handle(fabric, "GET", "/services/{id}", adminOnly, "Returns one service", s.fabricService)
	s.handle(fabric, "GET", "/services/{id}/terminators", adminOnly, "Lists a service's terminators", s.fabricServiceTerminators)
	s.handle(fabric, "GET", "/terminators", adminOnly, "Lists the terminators", s.fabricTerminators)
	s.handle(fabric, "GET", "/terminators/{id}", adminOnly, "Returns one terminator", s.fabricTerminator)
}

// --- routers ---

func fabricRouterFields() []field[*model.EdgeRouter] {
	type v = *model.EdgeRouter
	return []field[v]{
		str("id", func(r v) string { return r.ID }),
		str("name", func(r v) string { return r.Name }),
		str("fingerprint", func(r v) string { return r.Fingerprint }),
		number("cost", func(r v) float64 { return float64(r.Cost) }),
		boolean("noTraversal", func(r v) bool { return r.NoTraversal }),
		boolean("disabled", func(r v) bool { return r.Disabled }),
		timeField("createdAt", func(r v) time.Time { return r.CreatedAt }),
		timeField("updatedAt", func(r v) time.Time { return r.UpdatedAt }),
	}
}

// hello is what a connected router announced; ok false when it is not connected.
func (s *Server) hello(id string) (ctrlproto.Hello, bool) {
	if s.info.Fabric == nil {
		return ctrlproto.Hello{}, false
	}
	h, _, ok := s.info.Fabric.Hello(id)
	return h, ok
}

// renderFabricRouter is a routerDetail of the fabric API: connected, the version the router
// announced and its link listeners while it is connected.
func (s *Server) renderFabricRouter(r *model.EdgeRouter) map[string]any {
	h, connected := s.hello(r.ID)
	listeners := []map[string]string{}
	var version any
	if connected {
		for _, l := range h.LinkListeners {
			listeners = append(listeners, map[string]string{"address": l.Address, "protocol": l.Transport})
		}
		version = map[string]string{"version": h.Version, "revision": "", "buildDate": "", "os": "", "arch": ""}
	}
	return map[string]any{
		"id": r.ID, "_links": links("routers", r.ID),
		"createdAt": r.CreatedAt, "updatedAt": r.UpdatedAt, "tags": tagsOf(r.Tags),
		"name": r.Name, "fingerprint": r.Fingerprint, "connected": connected,
		"cost": r.Cost, "noTraversal": r.NoTraversal, "disabled": r.Disabled,
		"listenerAddresses": listeners, "versionInfo": version, "interfaces": []any{},
	}
}

func (s *Server) fabricRouters(c *call) error {
	all, err := s.m.EdgeRouters()
	if err != nil {
		return err
	}
	return listOf(c, all, fabricRouterFields(), func(r *model.EdgeRouter) any { return s.renderFabricRouter(r) })
}

func (s *Server) fabricRouter(c *call) error {
	r, err := s.m.EdgeRouter(c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, s.renderFabricRouter(r))
}

// --- links ---

func fabricLinkFields() []field[FabricLink] {
	type v = FabricLink
	return []field[v]{
		str("id", func(l v) string { return l.ID }),
		str("sourceRouter", func(l v) string { return l.A }),
		str("destRouter", func(l v) string { return l.B }),
		number("sourceLatency", func(l v) float64 { return float64(l.Latency) }),
		number("destLatency", func(l v) float64 { return float64(l.Latency) }),
		number("cost", func(l v) float64 { return float64(linkCost(l)) }),
	}
}

// linkCost is the weight paths are chosen by: the latency in microseconds, at least 1.
func linkCost(l FabricLink) int64 { return max(int64(l.Latency/time.Microsecond), 1) }

func (s *Server) fabricLinkList() []FabricLink {
	if s.info.Fabric == nil {
		return nil
	}
	return s.info.Fabric.Links()
}

// renderFabricLink is a linkDetail: a link is listed only while both routers report it up,
// so its state is Connected. sourceRouter and destRouter are its two routers, not
// necessarily the dialer and the acceptor; both latencies are the link's (the larger of its
// routers' measures), in nanoseconds as the reference's.
func (s *Server) renderFabricLink(l FabricLink) map[string]any {
	return map[string]any{
		"id": l.ID, "_links": links("links", l.ID), "protocol": l.Protocol,
		"sourceRouter": s.routerRef(l.A), "destRouter": s.routerRef(l.B),
		"state": "Connected", "down": false, "staticCost": 1,
		"sourceLatency": int64(l.Latency), "destLatency": int64(l.Latency),
		"cost": linkCost(l), "iteration": 1, "connections": []any{},
	}
}

func (s *Server) fabricLinks(c *call) error {
	return listOf(c, s.fabricLinkList(), fabricLinkFields(), func(l FabricLink) any { return s.renderFabricLink(l) })
}

func (s *Server) fabricLink(c *call) error {
	for _, l := range s.fabricLinkList() {
		if l.ID == c.path("id") {
			return c.data(http.StatusOK, s.renderFabricLink(l))
		}
	}
	return newErr(codeNotFound, "no link %q", c.path("id"))
}

// --- circuits ---

func fabricCircuitFields() []field[FabricCircuit] {
	type v = FabricCircuit
	return []field[v]{
		str("id", func(x v) string { return strconv.FormatUint(x.ID, 10) }),
		str("clientId", func(x v) string { return x.Initiator }),
		str("service", func(x v) string { return x.ServiceID }),
		str("terminator", func(x v) string { return x.Terminator }),
		timeField("createdAt", func(x v) time.Time { return x.Created }),
	}
}

func (s *Server) fabricCircuitList() []FabricCircuit {
	if s.info.Fabric == nil {
		return nil
	}
	return s.info.Fabric.Circuits()
}

// renderFabricCircuit is a circuitDetail: clientId is the identity that dialed; the path
// names the routers, ingress first, and between each two the link the controller routes
// over (its id is empty when the link is gone, or for a circuit adopted after a restart of
// the controller, whose path holds the routers that reported it).
func (s *Server) renderFabricCircuit(x FabricCircuit, mesh []FabricLink) map[string]any {
	id := strconv.FormatUint(x.ID, 10)
	svcName := ""
	if sv, err := s.m.Service(x.ServiceID); err == nil {
		svcName = sv.Name
	}
	nodes := make([]any, 0, len(x.Path))
	hops := make([]any, 0, len(x.Path))
	for i, r := range x.Path {
		nodes = append(nodes, s.routerRef(r))
		if i == 0 {
			continue
		}
		linkID := ""
		if !x.Adopted {
			linkID = linkBetween(mesh, x.Path[i-1], r)
		}
		hops = append(hops, map[string]any{"_links": links("links", linkID), "entity": "links", "id": linkID, "name": linkID})
	}
	return map[string]any{
		"id": id, "_links": links("circuits", id),
		"createdAt": x.Created, "updatedAt": x.Created, "tags": map[string]any{},
		"clientId":   x.Initiator,
		"service":    map[string]any{"_links": links("services", x.ServiceID), "entity": "services", "id": x.ServiceID, "name": svcName},
		"terminator": map[string]any{"_links": links("terminators", x.Terminator), "entity": "terminators", "id": x.Terminator, "name": x.Terminator},
		"path":       map[string]any{"nodes": nodes, "links": hops},
	}
}

// linkBetween is the id of the link between two routers, the cheapest if several, or "".
func linkBetween(links []FabricLink, a, b string) string {
	best := -1
	for i, l := range links {
		if (l.A == a && l.B == b) || (l.A == b && l.B == a) {
			if best < 0 || l.Latency < links[best].Latency {
				best = i
			}
		}
	}
	if best < 0 {
		return ""
	}
	return links[best].ID
}

func (s *Server) fabricCircuits(c *call) error {
	mesh := s.fabricLinkList()
	return listOf(c, s.fabricCircuitList(), fabricCircuitFields(), func(x FabricCircuit) any { return s.renderFabricCircuit(x, mesh) })
}

// circuitID parses the {id} of a circuit route: the decimal id zmesh gives circuits.
func circuitID(c *call) (uint64, error) {
	id, err := strconv.ParseUint(c.path("id"), 10, 64)
	if err != nil || id == 0 {
		return 0, newErr(codeNotFound, "no circuit %q; circuit ids are decimal numbers", c.path("id"))
	}
	return id, nil
}

func (s *Server) fabricCircuit(c *call) error {
	id, err := circuitID(c)
	if err != nil {
		return err
	}
	for _, x := range s.fabricCircuitList() {
		if x.ID == id {
			return c.data(http.StatusOK, s.renderFabricCircuit(x, s.fabricLinkList()))
		}
	}
	return newErr(codeNotFound, "no circuit %q", c.path("id"))
}

// circuitDelete is the reference's circuitDelete body. zmesh ends a circuit at once either
// way: the routers of its path remove it and close its ends.
type circuitDelete struct {
	Immediate *bool `json:"immediate"`
}

// fabricDeleteCircuit ends a circuit on every router of its path; the body is optional.
func (s *Server) fabricDeleteCircuit(c *call) error {
	data, err := readBody(c.w, c.r)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		var b circuitDelete
		if err := decodeJSONBytes(data, &b); err != nil {
			return err
		}
	}
	id, err := circuitID(c)
	if err != nil {
		return err
	}
	if s.info.Fabric == nil || !s.info.Fabric.RemoveCircuit(id, "deleted by administrator "+c.identity.Name) {
		return newErr(codeNotFound, "no circuit %q", c.path("id"))
	}
	s.log.Info("circuit deleted through the fabric API", "circuit", id, "identity", c.identity.ID)
	return c.empty()
}

// --- services and terminators ---

func (s *Server) renderFabricService(sv *model.Service) map[string]any {
	return map[string]any{
		"id": sv.ID, "_links": links("services", sv.ID),
		"createdAt": sv.CreatedAt, "updatedAt": sv.UpdatedAt, "tags": tagsOf(sv.Tags),
		"name": sv.Name, "terminatorStrategy": sv.TerminatorStrategy,
	}
}

func (s *Server) fabricServices(c *call) error {
	all, err := s.m.Services()
	if err != nil {
		return err
	}
	fields := slices.DeleteFunc(serviceFields(), func(f field[*model.Service]) bool {
		return f.name != "id" && f.name != "name" && f.name != "terminatorStrategy" && f.name != "createdAt" && f.name != "updatedAt"
	})
	return listOf(c, all, fields, func(sv *model.Service) any { return s.renderFabricService(sv) })
}

func (s *Server) fabricService(c *call) error {
	sv, err := s.m.Service(c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, s.renderFabricService(sv))
}

// renderFabricTerminator is a terminatorDetail of the fabric API: the edge view with the
// router as a fabric router and the fields the fabric adds.
func (s *Server) renderFabricTerminator(t *model.Terminator) map[string]any {
	out := s.renderTerminator(t)
	svcName := ""
	if sv, err := s.m.Service(t.ServiceID); err == nil {
		svcName = sv.Name
	}
	out["service"] = map[string]any{"_links": links("services", t.ServiceID), "entity": "services", "id": t.ServiceID, "name": svcName}
	out["router"] = s.routerRef(t.RouterID)
	out["_links"] = links("terminators", t.ID)
	out["instanceId"] = ""
	out["hostId"] = t.HostID
	return out
}

func (s *Server) fabricTerminators(c *call) error {
	all, err := s.m.Terminators()
	if err != nil {
		return err
	}
	return listOf(c, all, s.terminatorFields(), func(t *model.Terminator) any { return s.renderFabricTerminator(t) })
}

func (s *Server) fabricTerminator(c *call) error {
	t, err := s.m.Terminator(c.path("id"))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, s.renderFabricTerminator(t))
}

func (s *Server) fabricServiceTerminators(c *call) error {
	if _, err := s.m.Service(c.path("id")); err != nil {
		return err
	}
	list, err := s.m.TerminatorsOf(c.path("id"))
	if err != nil {
		return err
	}
	return listOf(c, list, s.terminatorFields(), func(t *model.Terminator) any { return s.renderFabricTerminator(t) })
}

func (s *Server) fabricRouterTerminators(c *call) error {
	if _, err := s.m.EdgeRouter(c.path("id")); err != nil {
		return err
	}
	all, err := s.m.Terminators()
	if err != nil {
		return err
	}
	mine := slices.DeleteFunc(all, func(t *model.Terminator) bool { return t.RouterID != c.path("id") })
	return listOf(c, mine, s.terminatorFields(), func(t *model.Terminator) any { return s.renderFabricTerminator(t) })
}

// --- references ---

// routerRef is an entityRef to a fabric router, named when the router exists.
func (s *Server) routerRef(id string) map[string]any {
	name := ""
	if r, err := s.m.EdgeRouter(id); err == nil {
		name = r.Name
	}
	return map[string]any{"_links": links("routers", id), "entity": "routers", "id": id, "name": name}
}
