package dataplane

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// The forwarder moves frames along circuits. A circuit's route on this router names two hops
// (xgress.Hop): where frames travelling toward the initiator go, and where frames travelling
// toward the terminator go. A hop is a link to the next router or an endpoint on this router.
// A frame's Origin says which end sent it, so it goes to the hop toward the other end. The
// route table is read without locks on the forwarding path; only routing and unrouting write
// it.

// route is one circuit's entry in the table. Only lastSeen changes once it is stored; a new
// route replaces it otherwise.
type route struct {
	toward   [2]xgress.Hop // indexed by the end the frame travels to
	lastSeen atomic.Int64  // unix nanoseconds of the last payload, for idle detection
	// tap is the forwarder's tap when the route was made: read with the route, so that
	// frames from links cost no load of their own for it.
	tap func(*xgress.Frame)
}

// Forwarder holds the circuit table of a router.
type Forwarder struct {
	routes sync.Map // circuit id → *route
	now    func() time.Time
	// tap, when set (by tests), sees every frame that arrives from a link, on the circuits
	// routed after it was set, before it is forwarded, and may change it.
	tap atomic.Pointer[func(*xgress.Frame)]

	// Counters, read by metrics.
	Forwarded    atomic.Uint64 // frames forwarded
	SplicedBytes atomic.Uint64 // bytes of spliced one-router circuits, moved socket to socket
	Dropped      atomic.Uint64 // frames of circuits without a route here
}

// NewForwarder returns an empty forwarder.
func NewForwarder() *Forwarder { return &Forwarder{now: time.Now} }

// Forward sends a frame from an endpoint on this router to the next hop of its circuit,
// toward the other end. Frames of circuits without a route are dropped and counted; the
// caller learns of the fault through Dropped and the link handler's reply. A frame for a
// link may be written on the caller's goroutine (link.Link.SendNow): endpoints may wait
// on the network, links' readers may not, and they forward with ForwardFrom.
func (fw *Forwarder) Forward(f *xgress.Frame) {
	v, ok := fw.routes.Load(f.Circuit)
	if !ok {
		fw.Dropped.Add(1)
		f.Release()
		return
	}
	r := v.(*route)
	hop := fw.next(r, f)
	if lh, ok := hop.(linkHop); ok {
		lh.l.SendNow(f)
	} else if hop != nil {
		hop.Forward(f)
	}
}

// next returns the hop of route r toward the end f travels to, and counts f; it releases f
// and returns nil when the route has no such hop.
func (fw *Forwarder) next(r *route, f *xgress.Frame) xgress.Hop {
	if f.Type == xgress.Payload {
		r.lastSeen.Store(fw.now().UnixNano())
	}
	hop := r.toward[f.Origin.Other()]
	if hop == nil {
		fw.Dropped.Add(1)
		f.Release()
		return nil
	}
	fw.Forwarded.Add(1)
	return hop
}

// ForwardFrom is Forward for a frame that arrived from hop from (a link): it is dropped
// unless from is the circuit's hop toward the frame's origin, so that a peer cannot inject
// frames into circuits that do not pass through it. It reports whether the circuit has a
// route here; f is the forwarder's either way. One table lookup per frame.
func (fw *Forwarder) ForwardFrom(f *xgress.Frame, from xgress.Hop) (routed bool) {
	v, ok := fw.routes.Load(f.Circuit)
	if !ok {
		fw.Dropped.Add(1)
		f.Release()
		return false
	}
	r := v.(*route)
	if r.toward[f.Origin] != from {
		fw.Dropped.Add(1)
		f.Release()
		return true
	}
	if r.tap != nil {
		r.tap(f)
	}
	if hop := fw.next(r, f); hop != nil {
		hop.Forward(f)
	}
	return true
}

// CountSpliced counts n bytes a spliced one-router circuit moved without frames, and records
// the activity for idle detection.
func (fw *Forwarder) CountSpliced(circuit uint64, n int64) {
	fw.SplicedBytes.Add(uint64(n))
	if v, ok := fw.routes.Load(circuit); ok {
		v.(*route).lastSeen.Store(fw.now().UnixNano())
	}
}

// Route installs or replaces the route of a circuit: frames travelling toward the initiator go
// to toInitiator, those travelling toward the terminator to toTerminator.
func (fw *Forwarder) Route(circuit uint64, toInitiator, toTerminator xgress.Hop) {
	r := &route{tap: fw.tapNow()}
	r.toward[xgress.Initiator], r.toward[xgress.Terminator] = toInitiator, toTerminator
	r.lastSeen.Store(fw.now().UnixNano())
	fw.routes.Store(circuit, r)
}

// Attach sets the hop toward one end of a routed circuit, keeping the other; it reports
// whether the circuit had a route.
func (fw *Forwarder) Attach(circuit uint64, toward xgress.Origin, hop xgress.Hop) bool {
	v, ok := fw.routes.Load(circuit)
	if !ok {
		return false
	}
	old := v.(*route)
	r := &route{toward: old.toward, tap: fw.tapNow()}
	r.toward[toward] = hop
	r.lastSeen.Store(old.lastSeen.Load())
	fw.routes.Store(circuit, r)
	return true
}

// tapNow returns the tap for a route made now: nil unless a test set one.
func (fw *Forwarder) tapNow() func(*xgress.Frame) {
	if t := fw.tap.Load(); t != nil {
		return *t
	}
	return nil
}

// Hops returns the hops of a circuit, toward the initiator and toward the terminator.
func (fw *Forwarder) Hops(circuit uint64) (toInitiator, toTerminator xgress.Hop, ok bool) {
	v, ok := fw.routes.Load(circuit)
	if !ok {
		return nil, nil, false
	}
	r := v.(*route)
	return r.toward[xgress.Initiator], r.toward[xgress.Terminator], true
}

// Each calls f for every routed circuit with its hops.
func (fw *Forwarder) Each(f func(circuit uint64, toInitiator, toTerminator xgress.Hop)) {
	fw.routes.Range(func(k, v any) bool {
		r := v.(*route)
		f(k.(uint64), r.toward[xgress.Initiator], r.toward[xgress.Terminator])
		return true
	})
}

// Unroute removes a circuit's route; it reports whether there was one.
func (fw *Forwarder) Unroute(circuit uint64) bool {
	_, _, ok := fw.Remove(circuit)
	return ok
}

// Remove removes a circuit's route and returns its hops; ok reports whether there was one.
func (fw *Forwarder) Remove(circuit uint64) (toInitiator, toTerminator xgress.Hop, ok bool) {
	v, ok := fw.routes.LoadAndDelete(circuit)
	if !ok {
		return nil, nil, false
	}
	r := v.(*route)
	return r.toward[xgress.Initiator], r.toward[xgress.Terminator], true
}

// Routed reports whether the circuit has a route here.
func (fw *Forwarder) Routed(circuit uint64) bool {
	_, ok := fw.routes.Load(circuit)
	return ok
}

// CircuitCount returns the number of routed circuits.
func (fw *Forwarder) CircuitCount() int {
	n := 0
	fw.routes.Range(func(any, any) bool { n++; return true })
	return n
}

// IdleSince returns the circuits that carried no payload since before.
func (fw *Forwarder) IdleSince(before time.Time) []uint64 {
	var idle []uint64
	limit := before.UnixNano()
	fw.routes.Range(func(k, v any) bool {
		if v.(*route).lastSeen.Load() < limit {
			idle = append(idle, k.(uint64))
		}
		return true
	})
	return idle
}

// EndpointHop delivers frames to an endpoint on this router.
type EndpointHop struct{ E *xgress.Endpoint }

// Forward hands the frame to the endpoint.
func (h EndpointHop) Forward(f *xgress.Frame) { h.E.Receive(f) }
