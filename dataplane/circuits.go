package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/link"
	"github.com/zmesh/zmesh/xgress"
)

// The circuit life cycle on a router, in the order it happens: an on-ramp asks the
// controller for a circuit; the controller routes it on the other routers of the path,
// egress first (route); the ingress attaches its end and starts; frames arrive from links
// (HandleFrame) and from ends, and the forwarder moves them; a circuit ends when an end
// finishes, when the controller unroutes it, or when a link it uses goes down.

// linkHop sends a circuit's frames over a link. Link.Send owns the frame even when it fails
// (it releases it then), so a failed send is only dropped here.
type linkHop struct{ l *link.Link }

func (h linkHop) Forward(f *xgress.Frame) { h.l.Send(f) }

// carry asks the controller for the circuit req describes and, when it is made, carries
// conn as its initiator; otherwise conn is closed.
func (r *Router) carry(ctx context.Context, conn net.Conn, req *ctrlproto.CircuitRequest) {
	reply, err := r.requestCircuit(ctx, req)
	if err != nil {
		r.log.Info("circuit refused", "service", req.ServiceName+req.ServiceID, "err", err)
		conn.Close()
		return
	}
	if err := r.attachIngress(reply, conn); err != nil {
		r.log.Warn("circuit failed at the ingress", "circuit", reply.CircuitID, "err", err)
		conn.Close()
		r.fault(reply.CircuitID, err.Error())
	}
}

// requestCircuit asks the controller for a circuit, waiting for the control channel within
// the request timeout.
func (r *Router) requestCircuit(ctx context.Context, req *ctrlproto.CircuitRequest) (*ctrlproto.CircuitReply, error) {
	req.RequestID = strconv.FormatUint(r.requests.Add(1), 10)
	rctx, cancel := context.WithTimeout(ctx, r.requestTimeout()+15*time.Second)
	defer cancel()
	reply, err := ctrlCall[*ctrlproto.CircuitReply](rctx, r.ctrl, req)
	if err == nil {
		err = reply.Err()
	}
	if err != nil {
		r.metrics.circuitFailed(failRequest)
		r.book.refused(0, xgress.Initiator, r.requestInfo(req), err.Error())
		return nil, err
	}
	return reply, nil
}

// attachIngress installs the ingress end of a circuit the controller made and starts it.
func (r *Router) attachIngress(reply *ctrlproto.CircuitReply, conn net.Conn) error {
	id := reply.CircuitID
	e := xgress.NewEndpoint(id, xgress.Initiator, conn, r.fw, r.pool, func(err error) { r.endDone(id, xgress.Initiator, err) })
	toInitiator := EndpointHop{E: e}
	fail := func(err error) error {
		r.metrics.circuitFailed(failIngress)
		r.book.abandon(id, xgress.Initiator)
		r.book.refused(id, xgress.Initiator, replyInfo(reply), err.Error())
		return err
	}
	// Recorded before it is routed: frames may end it from then on.
	r.book.add(id, xgress.Initiator, e, replyInfo(reply))
	if len(reply.Path) > 1 {
		l := r.links.Get(reply.Path[1])
		if l == nil {
			return fail(fmt.Errorf("no link to router %s, the next on the path", reply.Path[1]))
		}
		r.fw.Route(id, toInitiator, linkHop{l})
		r.metrics.circuitsCreated.Inc()
	} else if !r.fw.Attach(id, xgress.Initiator, toInitiator) {
		return fail(errors.New("the egress side of the circuit is not routed here"))
	}
	r.book.opened(id, xgress.Initiator)
	// A circuit whose path is this router alone was counted when its egress end was routed.
	r.mu.Lock()
	terminator := r.ends[id] // this router's terminator end, on a one-router path
	r.ends[id] = e
	r.mu.Unlock()
	if terminator != nil && len(reply.Path) == 1 && xgress.Splice(e, terminator, func(n int64) { r.fw.CountSpliced(id, n) }) {
		return nil
	}
	e.Start()
	return nil
}

// route installs a circuit's entry as the controller asks, dialing the service when this
// router is the egress.
func (r *Router) route(ctx context.Context, m *ctrlproto.Route) *ctrlproto.RouteReply {
	reply := &ctrlproto.RouteReply{CircuitID: m.CircuitID}
	toInitiator, err := r.hop(m.Reverse)
	if err != nil {
		r.metrics.circuitFailed(failRoute)
		if x := m.Forward.Xgress; x != nil {
			r.book.refused(m.CircuitID, xgress.Terminator, routeInfo(x), err.Error())
		}
		reply.Outcome = ctrlproto.Failed(ctrlproto.ErrCodeRouteFailed, err.Error())
		return reply
	}
	if m.Forward.Xgress == nil {
		toTerminator, err := r.hop(m.Forward)
		if err != nil {
			r.metrics.circuitFailed(failRoute)
			reply.Outcome = ctrlproto.Failed(ctrlproto.ErrCodeRouteFailed, err.Error())
			return reply
		}
		r.fw.Route(m.CircuitID, toInitiator, toTerminator)
		return reply
	}
	conn, host, err := r.dial(ctx, m.Forward.Xgress, m.CircuitID, m.Timeout)
	if err != nil {
		code := ctrlproto.ErrCodeDialFailed
		if errors.Is(err, xgress.ErrDialQueueFull) {
			code = ctrlproto.ErrCodeBusy
		}
		r.metrics.circuitFailed(failEgress)
		r.book.refused(m.CircuitID, xgress.Terminator, routeInfo(m.Forward.Xgress), err.Error())
		reply.Outcome = ctrlproto.Failed(code, err.Error())
		return reply
	}
	reply.HostAnswer = host
	id := m.CircuitID
	e := xgress.NewEndpoint(id, xgress.Terminator, conn, r.fw, r.pool, func(err error) { r.endDone(id, xgress.Terminator, err) })
	r.mu.Lock()
	r.ends[id] = e
	r.mu.Unlock()
	r.book.add(id, xgress.Terminator, e, routeInfo(m.Forward.Xgress))
	r.fw.Route(id, toInitiator, EndpointHop{E: e})
	r.metrics.circuitsCreated.Inc()
	r.book.opened(id, xgress.Terminator)
	// The opening payload follows the controller's answer to the ingress within moments;
	// the terminator reads once it arrives, and is closed when it does not come.
	open := m.Timeout
	if open <= 0 {
		open = 10 * time.Second
	}
	e.StartWithin(open)
	return reply
}

// hop resolves a Route's hop that is not a dial: a link to a peer router, or the ingress
// end on this router (attached when the ingress gets its reply).
func (r *Router) hop(h ctrlproto.Hop) (xgress.Hop, error) {
	switch {
	case h.Router != "":
		l := r.links.Get(h.Router)
		if l == nil {
			return nil, fmt.Errorf("router %s has no link to router %s", r.id, h.Router)
		}
		return linkHop{l}, nil
	case h.Xgress != nil:
		return nil, nil
	}
	return nil, errors.New("the route names no hop")
}

// dial connects to a terminator's address through the dial pool, or to the SDK client that
// hosts it (binding edge), or to the tunnel's host mode. It returns, besides, the hosting
// end's answer to the initiator's end-to-end offer.
func (r *Router) dial(ctx context.Context, x *ctrlproto.Xgress, circuitID uint64, timeout time.Duration) (net.Conn, ctrlproto.HostAnswer, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if x.Binding == BindingEdge {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if isZitiAddress(x.Address) {
			c, key, err := r.ziti.dial(ctx, x, circuitID)
			return c, ctrlproto.HostAnswer{HostZitiKey: key}, err
		}
		return r.sdk.connect(ctx, x, circuitID)
	}
	if x.Binding == BindingTunnel {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return r.overlay.connect(ctx, x, circuitID)
	}
	// The route's timeout bounds the whole: the wait for a turn, the dwell and the dial.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := r.dials.Dial(ctx, xgress.DialRequest{Binding: x.Binding, Address: x.Address})
	return c, ctrlproto.HostAnswer{}, err
}

// HandleFrame takes a frame from a link: the forwarder moves it on. A payload of a circuit
// that has no route here is answered with a Close, so that its sender stops.
func (r *Router) HandleFrame(l *link.Link, f *xgress.Frame) {
	typ, origin, circuit := f.Type, f.Origin, f.Circuit // f is the forwarder's after the call
	if r.fw.ForwardFrom(f, linkHop{l}) || typ != xgress.Payload {
		return
	}
	c := r.pool.Get(0)
	c.Type, c.Origin, c.Circuit = xgress.Close, origin.Other(), circuit
	c.SetData([]byte("no route at router " + r.id))
	l.Send(c) // released by the link when it cannot be sent
}

// endDone is called when a circuit end on this router finished (err nil: cleanly, both
// directions closed and every byte acknowledged). The controller is told once per circuit
// and router: when the route was gone already, whoever removed it (the circuit's other end on
// this router, a link going down, or the controller's Unroute) told the controller, or was
// told by it. A clean end is told once per circuit: by the initiator's router (Fault.Clean),
// for the terminator's too, which ends cleanly as well and tells nothing; two messages less
// per circuit on its control channel.
func (r *Router) endDone(id uint64, origin xgress.Origin, err error) {
	r.mu.Lock()
	delete(r.ends, id)
	r.mu.Unlock()
	r.book.ended(id, origin, err)
	toInitiator, _, ok := r.fw.Remove(id)
	if !ok {
		return
	}
	if _, viaLink := toInitiator.(linkHop); err == nil && origin == xgress.Terminator && viaLink {
		r.log.Debug("circuit end finished", "circuit", id, "reason", "closed")
		return
	}
	reason := "closed"
	if err != nil {
		reason = err.Error()
	}
	r.log.Debug("circuit end finished", "circuit", id, "reason", reason)
	r.tellFault(pendingFault{circuit: id, reason: reason, unrouted: true, clean: err == nil && origin == xgress.Initiator})
}

// endCircuit removes a circuit from this router; its local end, if any, is closed, telling
// the other end when tell is set.
func (r *Router) endCircuit(id uint64, reason string, tell bool) {
	r.log.Debug("circuit ended", "circuit", id, "reason", reason)
	r.mu.Lock()
	e := r.ends[id]
	r.mu.Unlock()
	if e != nil {
		if tell {
			e.Close(reason)
		} else {
			e.Close("")
		}
	}
	r.fw.Unroute(id)
}

// pendingFault is a fault the controller could not be told when it happened.
type pendingFault struct {
	circuit  uint64
	reason   string
	unrouted bool
	clean    bool
}

// maxPendingFaults bounds the faults kept while the controller is unreachable; beyond it the
// controller learns of the rest through idle checks.
const maxPendingFaults = 100_000

// fault tells the controller that a circuit ended here, so that it unroutes it everywhere.
// While the controller cannot be told, the fault is kept and sent on reconnection and every
// forwarder.faultTxInterval.
func (r *Router) fault(id uint64, reason string) {
	r.tellFault(pendingFault{circuit: id, reason: reason})
}

// faultUnrouted is fault for a circuit this router has already removed: its route is gone
// and its end here closed, so the controller need not unroute it here.
func (r *Router) faultUnrouted(id uint64, reason string) {
	r.tellFault(pendingFault{circuit: id, reason: reason, unrouted: true})
}

func (r *Router) tellFault(f pendingFault) {
	if err := r.sendFault(f); err != nil {
		r.log.Debug("fault kept for later", "circuit", f.circuit, "err", err)
		r.mu.Lock()
		if len(r.faults) < maxPendingFaults {
			r.faults = append(r.faults, f)
		}
		r.mu.Unlock()
	}
}

// sendFault tells every member: the one that made the circuit ends it, the others do not
// know it and ignore it.
func (r *Router) sendFault(f pendingFault) error {
	msg := &ctrlproto.Fault{CircuitID: f.circuit, Reason: f.reason, Unrouted: f.unrouted, Clean: f.clean}
	return r.ctrl.sendAll(func(ch *ctrlproto.Channel) error { return ch.SendWithin(time.Second, msg) })
}

// flushFaults sends the kept faults; those that still cannot be sent are kept.
func (r *Router) flushFaults() {
	r.mu.Lock()
	pending := r.faults
	r.faults = nil
	r.mu.Unlock()
	for i, f := range pending {
		if err := r.sendFault(f); err != nil {
			r.mu.Lock()
			r.faults = append(pending[i:], r.faults...)
			r.mu.Unlock()
			return
		}
	}
}

// faultLoop retries kept faults every forwarder.faultTxInterval (0 disables it).
func (r *Router) faultLoop(ctx context.Context) {
	if r.cfg.Forwarder.FaultTxInterval <= 0 {
		return
	}
	t := time.NewTicker(r.cfg.Forwarder.FaultTxInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.flushFaults()
		}
	}
}

// connected runs after each accepted Hello, with its channel: that member learns the links,
// and the faults no member could be told are told.
func (r *Router) connected(ch *ctrlproto.Channel) {
	r.metrics.ctrlConnections.Inc()
	r.reportLinks(ch)
	r.flushFaults()
}

func (r *Router) requestTimeout() time.Duration {
	if d := r.cfg.Ctrl.DefaultRequestTimeout; d > 0 {
		return d
	}
	return 5 * time.Second
}

// Link events: the controller learns of links and their latency; circuits over a link that
// went down end.

func (r *Router) linkUp(l *link.Link) {
	r.mu.Lock()
	r.linksUp++
	r.mu.Unlock()
	r.reportLink(l, true)
	if r.dialer != nil {
		r.dialer.SetPeerOnline(l.PeerID(), true)
	}
}

func (r *Router) linkLatency(l *link.Link, rtt time.Duration) {
	r.metrics.linkLatency.WithLabelValues(l.PeerID()).Observe(rtt.Seconds())
	r.reportLink(l, true)
}

func (r *Router) linkDown(l *link.Link, err error) {
	defer func() {
		r.mu.Lock()
		r.linksUp--
		r.linkGone.Broadcast()
		r.mu.Unlock()
	}()
	r.reportLink(l, false)
	var dead []uint64
	r.fw.Each(func(id uint64, toI, toT xgress.Hop) {
		if h, ok := toI.(linkHop); ok && h.l == l {
			dead = append(dead, id)
		} else if h, ok := toT.(linkHop); ok && h.l == l {
			dead = append(dead, id)
		}
	})
	for _, id := range dead {
		r.endCircuit(id, "the link to router "+l.PeerID()+" went down", true)
		r.faultUnrouted(id, "link to "+l.PeerID()+" down")
	}
	if len(dead) > 0 {
		r.log.Info("circuits ended by a link going down", "peer", l.PeerID(), "count", len(dead), "err", err)
	}
}

// reportLinks tells the member at ch of every link, once its control channel is (again)
// connected: a member that restarted, or that dropped this router's links from its graph
// when the channel went down, otherwise knows them only at their next latency probe, and
// finds no path meanwhile. Reports are serialized, so that a link going down meanwhile is
// never reported up after its down report: the registry forgets a link before its Down event.
func (r *Router) reportLinks(ch *ctrlproto.Channel) {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	for _, l := range r.links.Links() {
		r.sendLinkState(l, true, func(ctx context.Context, m ctrlproto.Message) error { return ch.Send(ctx, m) })
	}
}

// reportLink tells every member of a link's state: each routes over the links it knows.
func (r *Router) reportLink(l *link.Link, up bool) {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	r.sendLinkState(l, up, r.ctrl.send)
}

func (r *Router) sendLinkState(l *link.Link, up bool, send func(context.Context, ctrlproto.Message) error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st := &ctrlproto.LinkState{LinkID: l.ID(), PeerRouterID: l.PeerID(), Up: up, Latency: l.Latency()}
	if err := send(ctx, st); err != nil {
		r.log.Debug("link state not sent", "link", l.ID(), "err", err)
	}
}

// idleLoop asks the controller, every idleTxInterval, whether circuits idle for longer than
// idleCircuitTimeout are still valid, and unroutes those it no longer knows.
func (r *Router) idleLoop(ctx context.Context) {
	fc := r.cfg.Forwarder
	if fc.IdleTxInterval <= 0 || fc.IdleCircuitTimeout <= 0 {
		return
	}
	t := time.NewTicker(fc.IdleTxInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := r.fw.IdleSince(time.Now().Add(-fc.IdleCircuitTimeout))
		if len(idle) == 0 {
			continue
		}
		valid, ok := r.validCircuits(ctx, idle)
		if !ok {
			continue
		}
		var unknown []uint64
		for _, id := range idle {
			if !valid[id] {
				unknown = append(unknown, id)
			}
		}
		if len(unknown) > 0 {
			r.endIdle(ctx, unknown)
		}
	}
}

// validCircuits asks every connected member which of ids it knows: a circuit is valid when
// one of them does (a member knows the circuits it made, and those routers reported to it
// when they connected). ok is false unless every member answered: one that did not may be
// the one that made a circuit, and nothing is ended on a partial answer.
func (r *Router) validCircuits(ctx context.Context, ids []uint64) (valid map[uint64]bool, ok bool) {
	chs := r.ctrl.channels()
	if len(chs) == 0 {
		return nil, false
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	valid, ok = map[uint64]bool{}, true
	for _, ch := range chs {
		wg.Go(func() {
			reply, err := ctrlproto.Call[*ctrlproto.IdleCircuitsReply](ctx, ch, &ctrlproto.IdleCircuitsCheck{CircuitIDs: ids})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ok = false
				return
			}
			for _, id := range reply.Valid {
				valid[id] = true
			}
		})
	}
	wg.Wait()
	return valid, ok
}

// endIdle ends circuits the controller no longer knows after forwarder.xgressCloseCheckInterval,
// unless they carried data meanwhile.
func (r *Router) endIdle(ctx context.Context, ids []uint64) {
	wait := r.cfg.Forwarder.XgressCloseCheckInterval
	checked := time.Now()
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return
	}
	stillIdle := map[uint64]bool{}
	for _, id := range r.fw.IdleSince(checked) {
		stillIdle[id] = true
	}
	for _, id := range ids {
		if stillIdle[id] {
			r.endCircuit(id, "idle and unknown to the controller", true)
		}
	}
}
