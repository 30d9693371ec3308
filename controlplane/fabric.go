package controlplane

import (
	"time"

	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// fabricView is the live mesh the fabric API shows: connected routers, links and circuits.
type fabricView struct{ c *Controller }

var _ api.Fabric = fabricView{}

func (f fabricView) Hello(routerID string) (ctrlproto.Hello, time.Time, bool) {
	rt, ok := f.c.routers.Lookup(routerID)
	if !ok {
		return ctrlproto.Hello{}, time.Time{}, false
	}
	return rt.Hello, rt.Since, true
}

func (f fabricView) Links() []api.FabricLink {
	links := f.c.mesh.Links()
	out := make([]api.FabricLink, 0, len(links))
	for _, l := range links {
		out = append(out, api.FabricLink{ID: l.ID, A: l.A, B: l.B, Protocol: f.transport(l.A, l.B), Latency: l.Latency})
	}
	return out
}

// transport is the one transport the link listeners of two connected routers share, or ""
// when they announce several or none: the link's own transport is not reported.
func (f fabricView) transport(a, b string) string {
	seen := ""
	for _, id := range []string{a, b} {
		rt, ok := f.c.routers.Lookup(id)
		if !ok {
			continue
		}
		for _, l := range rt.Hello.LinkListeners {
			switch {
			case seen == "":
				seen = l.Transport
			case seen != l.Transport:
				return ""
			}
		}
	}
	return seen
}

func (f fabricView) Circuits() []api.FabricCircuit {
	cs := f.c.circuits.Circuits()
	out := make([]api.FabricCircuit, 0, len(cs))
	for _, c := range cs {
		out = append(out, api.FabricCircuit{
			ID: c.ID, ServiceID: c.ServiceID, Terminator: c.Terminator, Initiator: c.Initiator,
			Path: append([]string(nil), c.Path...), Created: c.Created, Adopted: c.Adopted,
		})
	}
	return out
}

func (f fabricView) RemoveCircuit(id uint64, reason string) bool {
	return f.c.circuits.Remove(id, reason)
}
