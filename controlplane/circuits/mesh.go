package circuits

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/controlplane/routers"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Mesh keeps the routers linked: when a router connects, it is told to dial the link
// listeners of every connected router, and every connected router to dial its listeners
// (each dialer dials only listeners that share one of its groups, and the two routers
// resolve duplicate links between them). The links routers report make the graph that
// paths are chosen on.
type Mesh struct {
	graph   *paths.Graph
	routers interface{ All() []*routers.Router }
	log     *slog.Logger

	// announce orders what the routers are told of each other (online, offline, their
	// certificates): a router's certificates read before an extension are never told after
	// the extended ones.
	announce sync.Mutex

	mu sync.Mutex
	// reports holds the up reports of links by link id and reporting router: a link enters
	// the graph only once both of its routers reported it, so that one router cannot add
	// edges to routers it has no link with.
	reports map[string]map[string]paths.Link
}

// maxLinkReports bounds the link reports kept.
const maxLinkReports = 100_000

// NewMesh returns the mesh manager.
func NewMesh(graph *paths.Graph, rs interface{ All() []*routers.Router }, log *slog.Logger) *Mesh {
	return &Mesh{graph: graph, routers: rs, log: log, reports: map[string]map[string]paths.Link{}}
}

// Connected tells the other routers that a router is online and which certificates are its
// own, tells it the same of them, and tells it and them to dial each other.
func (m *Mesh) Connected(rt *routers.Router) {
	m.announce.Lock()
	defer m.announce.Unlock()
	for _, other := range m.routers.All() {
		if other.ID == rt.ID {
			continue
		}
		m.tell(other, &ctrlproto.PeerState{RouterID: rt.ID, Online: true, Fingerprints: rt.Fingerprints()})
		m.tell(rt, &ctrlproto.PeerState{RouterID: other.ID, Online: true, Fingerprints: other.Fingerprints()})
		m.dial(rt, other)
		m.dial(other, rt)
	}
}

// Extended tells the other routers the new certificates of a router that extended them, so
// that its next links are made with those.
func (m *Mesh) Extended(rt *routers.Router) {
	m.announce.Lock()
	defer m.announce.Unlock()
	all := m.routers.All()
	if !slices.Contains(all, rt) {
		return // gone since: Disconnected told the others
	}
	for _, other := range all {
		if other.ID != rt.ID {
			m.tell(other, &ctrlproto.PeerState{RouterID: rt.ID, Online: true, Fingerprints: rt.Fingerprints()})
		}
	}
}

// tell sends a router a one-way message.
func (m *Mesh) tell(to *routers.Router, msg ctrlproto.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := to.Channel.Send(ctx, msg); err != nil {
		m.log.Debug("message to a router not sent", "router", to.ID, "type", msg.MessageType(), "err", err)
	}
}

// dial tells router from to dial each link listener of router to.
func (m *Mesh) dial(from, to *routers.Router) {
	for _, l := range to.Hello.LinkListeners {
		m.tell(from, &ctrlproto.LinkDial{PeerRouterID: to.ID, Address: l.Address, Groups: l.Groups})
	}
}

// Disconnected drops the links of a router that left, and tells the others it is offline.
func (m *Mesh) Disconnected(rt *routers.Router) {
	m.graph.RouterGone(rt.ID)
	m.mu.Lock()
	for id, byRouter := range m.reports {
		// The other routers' reports stay: when this one is back and reports its links again,
		// they count at once.
		delete(byRouter, rt.ID)
		if len(byRouter) == 0 {
			delete(m.reports, id)
		}
	}
	m.mu.Unlock()
	m.announce.Lock()
	defer m.announce.Unlock()
	for _, other := range m.routers.All() {
		if other.ID != rt.ID {
			m.tell(other, &ctrlproto.PeerState{RouterID: rt.ID, Online: false, Revoked: rt.Revoked()})
		}
	}
}

// Links returns the links circuits are routed over: those both of their routers reported up.
func (m *Mesh) Links() []paths.Link { return m.graph.Links() }

// LinkState records a router's report about one of its links. A link counts once both of its
// routers reported it up, at the larger of their latencies; a down report from either takes
// it out.
func (m *Mesh) LinkState(router string, st *ctrlproto.LinkState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !st.Up {
		delete(m.reports, st.LinkID)
		m.graph.Down(st.LinkID)
		return
	}
	byRouter := m.reports[st.LinkID]
	if byRouter == nil {
		if len(m.reports) >= maxLinkReports {
			m.log.Warn("link report ignored: too many links reported", "router", router, "link", st.LinkID)
			return
		}
		byRouter = map[string]paths.Link{}
		m.reports[st.LinkID] = byRouter
	}
	l := paths.Link{ID: st.LinkID, A: router, B: st.PeerRouterID, Latency: st.Latency, Reported: time.Now()}
	byRouter[router] = l
	if other, ok := byRouter[st.PeerRouterID]; ok && other.B == router {
		l.Latency = max(l.Latency, other.Latency)
		m.graph.Up(l)
	}
}
