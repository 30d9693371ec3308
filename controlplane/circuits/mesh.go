package circuits

import (
	"context"
	"log/slog"
	"time"

	"github.com/zmesh/zmesh/controlplane/channel"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/controlplane/routers"
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
}

// NewMesh returns the mesh manager.
func NewMesh(graph *paths.Graph, rs interface{ All() []*routers.Router }, log *slog.Logger) *Mesh {
	return &Mesh{graph: graph, routers: rs, log: log}
}

// Connected tells the other routers that a router is online and which certificates are its
// own, tells it the same of them, and tells it and them to dial each other.
func (m *Mesh) Connected(rt *routers.Router) {
	for _, other := range m.routers.All() {
		if other.ID == rt.ID {
			continue
		}
		m.tell(other, &channel.PeerState{RouterID: rt.ID, Online: true, Fingerprints: rt.Fingerprints()})
		m.tell(rt, &channel.PeerState{RouterID: other.ID, Online: true, Fingerprints: other.Fingerprints()})
		m.dial(rt, other)
		m.dial(other, rt)
	}
}

// tell sends a router a one-way message.
func (m *Mesh) tell(to *routers.Router, msg channel.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := to.Channel.Send(ctx, msg); err != nil {
		m.log.Debug("message to a router not sent", "router", to.ID, "type", msg.MessageType(), "err", err)
	}
}

// dial tells router from to dial each link listener of router to.
func (m *Mesh) dial(from, to *routers.Router) {
	for _, l := range to.Hello.LinkListeners {
		m.tell(from, &channel.LinkDial{PeerRouterID: to.ID, Address: l.Address, Groups: l.Groups})
	}
}

// Disconnected drops the links of a router that left, and tells the others it is offline.
func (m *Mesh) Disconnected(rt *routers.Router) {
	m.graph.RouterGone(rt.ID)
	for _, other := range m.routers.All() {
		if other.ID != rt.ID {
			m.tell(other, &channel.PeerState{RouterID: rt.ID, Online: false, Revoked: rt.Revoked()})
		}
	}
}

// LinkState records a router's report about one of its links.
func (m *Mesh) LinkState(router string, st *channel.LinkState) {
	if !st.Up {
		m.graph.Down(st.LinkID)
		return
	}
	m.graph.Up(paths.Link{ID: st.LinkID, A: router, B: st.PeerRouterID, Latency: st.Latency, Reported: time.Now()})
}
