package dataplane

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/xgress"
)

// The circuit book follows the circuit ends on this router for operators: the circuit events
// of metrics.circuitEvents (one log line per end created, ended or refused) and the
// per-service metrics. It sees a circuit only where it starts or ends (a transit router has
// no end, so no events and no per-service counts), and only at setup and at the end of each
// end: nothing on the forwarding path. Bytes are the ends' own counters (xgress.Stats), read
// when an end finishes and, for the circuits still running, at each scrape, so that a long
// circuit's bytes show while it runs.
//
// Bytes are counted from the client's side of the circuit, whatever this router's role:
// sent is what the client (the initiator) sent toward the service, received what it got
// back. At the initiator's end that is what the end read from the client and what it wrote
// to it; at the terminator's end, what it wrote to the service and what it read from it.

// Circuit event kinds, the value of the event attribute.
const (
	eventCreated = "created"
	eventEnded   = "ended"
	eventRefused = "refused"
)

// circuitEventMsg is the message of every circuit event line; the event attribute tells
// the kind.
const circuitEventMsg = "circuit event"

// circuitInfo names a circuit for its events and its service label.
type circuitInfo struct {
	service   string // the service's name, when known
	serviceID string
	identity  string // the identity that dialed the circuit
}

// serviceTally is one service label's counters: the circuits counted, and the bytes of the
// circuits that ended (those of running circuits are read at each scrape).
type serviceTally struct {
	label          string
	circuits       uint64
	sent, received uint64
}

// circuitRecord is a circuit with at least one end on this router.
type circuitRecord struct {
	info    circuitInfo
	tally   *serviceTally
	counted bool                // counted in tally.circuits
	ends    [2]*xgress.Endpoint // by xgress.Origin
	started [2]time.Time        // when each end was added
	final   [2]*xgress.Stats    // each end's counters once it finished
}

// running reports whether the circuit's end of origin is recorded and has not finished.
func (rec *circuitRecord) running(origin xgress.Origin) bool {
	return rec.ends[origin] != nil && rec.final[origin] == nil
}

// circuitBook holds the circuit records and the service tallies.
type circuitBook struct {
	log    *slog.Logger
	events bool // metrics.circuitEvents
	limit  int  // metrics.serviceLabelLimit

	circuitsDesc, sentDesc, receivedDesc *prometheus.Desc

	mu       sync.Mutex
	circuits map[uint64]*circuitRecord
	services map[string]*serviceTally // by label, at most limit of them besides other
	other    *serviceTally
}

func newCircuitBook(cfg config.Metrics, log *slog.Logger) *circuitBook {
	labels := []string{"service"}
	return &circuitBook{log: log, events: cfg.CircuitEvents, limit: cfg.ServiceLabelLimit,
		circuits: map[uint64]*circuitRecord{}, services: map[string]*serviceTally{},
		other: &serviceTally{label: config.ServiceOther},
		circuitsDesc: prometheus.NewDesc("zmesh_service_circuits_total",
			"Circuits of each service with an end on this router (a circuit with both ends here counts once); services beyond metrics.serviceLabelLimit are counted under service=\"_other\".", labels, nil),
		sentDesc: prometheus.NewDesc("zmesh_service_sent_bytes_total",
			"Bytes the clients of each service sent toward it, over the circuits with an end on this router, running circuits included.", labels, nil),
		receivedDesc: prometheus.NewDesc("zmesh_service_received_bytes_total",
			"Bytes the clients of each service received from it, over the circuits with an end on this router, running circuits included.", labels, nil),
	}
}

// tally returns the counters of a service's label, with mu held: its name (its id when the
// controller sent no name), unless limit labels are taken already.
func (b *circuitBook) tally(info circuitInfo) *serviceTally {
	label := info.service
	if label == "" {
		label = info.serviceID
	}
	if label == "" || label == config.ServiceOther {
		return b.other
	}
	if t := b.services[label]; t != nil {
		return t
	}
	if len(b.services) >= b.limit {
		return b.other
	}
	t := &serviceTally{label: label}
	b.services[label] = t
	return t
}

// add records end e of circuit id before it is routed or started, so that however soon it
// finishes, ended finds it. The end counts once opened says it was set up; abandon forgets
// it when it was not.
func (b *circuitBook) add(id uint64, origin xgress.Origin, e *xgress.Endpoint, info circuitInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.circuits[id]
	if rec == nil {
		rec = &circuitRecord{info: info, tally: b.tally(info)}
		b.circuits[id] = rec
	}
	rec.ends[origin], rec.started[origin] = e, time.Now()
}

// opened counts the circuit of an end that add recorded, once per circuit, and logs its
// created event.
func (b *circuitBook) opened(id uint64, origin xgress.Origin) {
	b.mu.Lock()
	rec := b.circuits[id]
	if rec != nil && !rec.counted {
		rec.counted = true
		rec.tally.circuits++
	}
	b.mu.Unlock()
	if rec != nil && b.events {
		b.event(eventCreated, id, origin, rec.info)
	}
}

// abandon forgets an end that add recorded and that could not be set up.
func (b *circuitBook) abandon(id uint64, origin xgress.Origin) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.circuits[id]
	if rec == nil {
		return
	}
	rec.ends[origin] = nil
	if rec.ends[origin.Other()] == nil {
		delete(b.circuits, id)
	}
}

// ended takes the final counters of an end that finished (err nil: cleanly) and logs its
// ended event; once no end of the circuit runs here, its bytes join its service's.
func (b *circuitBook) ended(id uint64, origin xgress.Origin, err error) {
	b.mu.Lock()
	rec := b.circuits[id]
	if rec == nil || !rec.running(origin) {
		b.mu.Unlock()
		return
	}
	st := rec.ends[origin].Stats()
	rec.final[origin] = &st
	duration := time.Since(rec.started[origin])
	if !rec.running(origin.Other()) {
		sent, received := rec.bytes()
		rec.tally.sent += sent
		rec.tally.received += received
		delete(b.circuits, id)
	}
	b.mu.Unlock()
	if !b.events {
		return
	}
	sent, received := endBytes(origin, st)
	reason := "closed"
	if err != nil {
		reason = err.Error()
	}
	b.log.LogAttrs(context.Background(), slog.LevelInfo, circuitEventMsg, append(eventAttrs(eventEnded, id, origin, rec.info),
		slog.Uint64("sentBytes", sent), slog.Uint64("receivedBytes", received),
		slog.Duration("duration", duration), slog.String("reason", reason))...)
}

// refused logs the refused event of a circuit that could not be set up at an end here; id
// is 0 when the controller made no circuit.
func (b *circuitBook) refused(id uint64, origin xgress.Origin, info circuitInfo, reason string) {
	if !b.events {
		return
	}
	b.log.LogAttrs(context.Background(), slog.LevelInfo, circuitEventMsg,
		append(eventAttrs(eventRefused, id, origin, info), slog.String("reason", reason))...)
}

func (b *circuitBook) event(kind string, id uint64, origin xgress.Origin, info circuitInfo) {
	b.log.LogAttrs(context.Background(), slog.LevelInfo, circuitEventMsg, eventAttrs(kind, id, origin, info)...)
}

// eventAttrs are the attributes every circuit event has; circuit is left out when the
// controller made no circuit.
func eventAttrs(kind string, id uint64, origin xgress.Origin, info circuitInfo) []slog.Attr {
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs, slog.String("event", kind))
	if id != 0 {
		// In decimal as the fabric API shows it, and as a string, which JSON readers that
		// hold numbers as float64 do not round.
		attrs = append(attrs, slog.String("circuit", strconv.FormatUint(id, 10)))
	}
	return append(attrs, slog.String("service", info.service), slog.String("serviceId", info.serviceID),
		slog.String("identity", info.identity), slog.String("role", origin.String()))
}

// endBytes turns an end's counters into the client's sent and received bytes.
func endBytes(origin xgress.Origin, st xgress.Stats) (sent, received uint64) {
	if origin == xgress.Initiator {
		return st.Read, st.Delivered
	}
	return st.Delivered, st.Read
}

// bytes returns the circuit's sent and received bytes as this router saw them: through its
// initiator's end when it has one (a circuit with both ends here counts once), else through
// its terminator's; final counters for an end that finished, current ones otherwise. With
// the book's mu held.
func (rec *circuitRecord) bytes() (sent, received uint64) {
	return rec.counter().bytes()
}

// counter is where a circuit's bytes are read: bytes reads them. With the book's mu held.
func (rec *circuitRecord) counter() endCounter {
	origin := xgress.Initiator
	if rec.ends[origin] == nil {
		origin = xgress.Terminator
	}
	return endCounter{origin: origin, end: rec.ends[origin], final: rec.final[origin]}
}

// endCounter is the end whose counters give a circuit's bytes, and its final counters once it
// finished.
type endCounter struct {
	origin xgress.Origin
	end    *xgress.Endpoint
	final  *xgress.Stats
}

func (c endCounter) bytes() (sent, received uint64) {
	if c.final != nil {
		return endBytes(c.origin, *c.final)
	}
	return endBytes(c.origin, c.end.Stats())
}

func (b *circuitBook) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.circuitsDesc
	ch <- b.sentDesc
	ch <- b.receivedDesc
}

// Collect adds the running circuits' bytes to those of the ended ones, label by label. The
// services never seen have no samples; _other has them always. The running ends' counters
// are read after the book's lock is released: each takes locks its circuit's payloads take,
// and circuits set up or ending meanwhile need not wait for a scrape.
func (b *circuitBook) Collect(ch chan<- prometheus.Metric) {
	type running struct {
		tally   *serviceTally
		counter endCounter
	}
	b.mu.Lock()
	totals := make(map[*serviceTally]serviceTally, len(b.services)+1)
	for _, t := range b.services {
		totals[t] = *t
	}
	totals[b.other] = *b.other
	runs := make([]running, 0, len(b.circuits))
	for _, rec := range b.circuits {
		runs = append(runs, running{rec.tally, rec.counter()})
	}
	b.mu.Unlock()
	for _, r := range runs {
		sent, received := r.counter.bytes()
		t := totals[r.tally]
		t.sent, t.received = t.sent+sent, t.received+received
		totals[r.tally] = t
	}
	for _, t := range totals {
		ch <- prometheus.MustNewConstMetric(b.circuitsDesc, prometheus.CounterValue, float64(t.circuits), t.label)
		ch <- prometheus.MustNewConstMetric(b.sentDesc, prometheus.CounterValue, float64(t.sent), t.label)
		ch <- prometheus.MustNewConstMetric(b.receivedDesc, prometheus.CounterValue, float64(t.received), t.label)
	}
}

// requestInfo names the circuit a request asks for, as this router knows it before the
// controller answers: the identity is the router's own (tunnel) or the dial session's; a
// transport listener's client is known by its certificate, which only the controller maps
// to an identity, so it is left empty.
func (r *Router) requestInfo(req *ctrlproto.CircuitRequest) circuitInfo {
	info := circuitInfo{service: req.ServiceName, serviceID: req.ServiceID, identity: req.IngressIdentityID}
	if info.identity == "" && req.SessionToken != "" {
		if se, ok := r.sessionCache.session(req.SessionToken); ok {
			info.identity = se.IdentityID
		}
	}
	return info
}

// replyInfo names the circuit of a controller's reply at its ingress.
func replyInfo(reply *ctrlproto.CircuitReply) circuitInfo {
	return circuitInfo{service: reply.ServiceName, serviceID: reply.ServiceID, identity: reply.InitiatorID}
}

// routeInfo names the circuit of a Route at its egress.
func routeInfo(x *ctrlproto.Xgress) circuitInfo {
	return circuitInfo{service: x.ServiceName, serviceID: x.ServiceID, identity: x.InitiatorID}
}
