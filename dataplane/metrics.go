package dataplane

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ops/health"
)

// The router's metrics live in one Prometheus registry per Router, the only place they are
// counted or read: the web listener's `metrics` API serves it, and the metrics reports to the
// controller are gathered from it. What the forwarding path counts stays where it is counted
// (atomic counters of the forwarder, the links, the tunnel), and the registry reads it at
// each scrape, so a frame costs no more than it did; what only metrics need (circuits created
// and failed, link latency) is a Prometheus counter or histogram, bumped outside the
// per-frame path.
//
// Names follow Prometheus conventions: prefix zmesh_, base units (seconds, bytes), _total on
// counters. docs/router-config.md lists them.

// Stages at which the setup of a circuit fails, the label of zmesh_circuits_failed_total.
const (
	failRequest = "request" // the controller refused this router's circuit request, or did not answer
	failIngress = "ingress" // the controller made the circuit, but its end here could not start
	failRoute   = "route"   // a Route named a link this router does not have
	failEgress  = "egress"  // the egress could not dial the service
)

// routerMetrics holds the registry and the metrics only it counts.
type routerMetrics struct {
	reg *prometheus.Registry

	circuitsCreated prometheus.Counter
	circuitsFailed  map[string]prometheus.Counter // by stage; the map is never written after newRouterMetrics
	linkLatency     *prometheus.HistogramVec      // by peer router
	ctrlConnections prometheus.Counter
}

// newRouterMetrics builds r's registry. Its functions read r's parts at each scrape; those
// made by Run (links, dial pool, control channel) read as zero until then.
func newRouterMetrics(r *Router) *routerMetrics {
	m := &routerMetrics{reg: prometheus.NewRegistry(), circuitsFailed: map[string]prometheus.Counter{}}
	m.circuitsCreated = prometheus.NewCounter(prometheus.CounterOpts{Name: "zmesh_circuits_created_total",
		Help: "Circuits this router set up as their ingress or egress end (a circuit with both ends here counts once)."})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zmesh_circuits_failed_total",
		Help: "Circuit setups that failed here, by stage: request (refused or unanswered by the controller), ingress (the end here could not start), route (no link to the next router), egress (the service could not be dialed)."},
		[]string{"stage"})
	for _, stage := range []string{failRequest, failIngress, failRoute, failEgress} {
		m.circuitsFailed[stage] = failed.WithLabelValues(stage)
	}
	// Link latency ranges from tens of microseconds on a host to seconds across the world.
	m.linkLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zmesh_link_latency_seconds",
		Help:    "Round trips measured by the links' latency probes, by peer router.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17)}, []string{"peer"})
	m.ctrlConnections = prometheus.NewCounter(prometheus.CounterOpts{Name: "zmesh_ctrl_connections_total",
		Help: "Control channels to the controller accepted (Hello answered), the first and every reconnection."})

	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	const (
		edgeClientsHelp = "Clients connected to the edge listeners now, by protocol: zmesh (zmesh's SDK) or openziti (OpenZiti's SDKs and tunnelers)."
		edgeBindsHelp   = "Services the edge listeners' clients host now (one terminator each), by protocol."
	)
	edgeGauge := func(name, help, protocol string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"protocol": protocol}}, f)
	}
	dialLoad := func(busy bool) func() float64 {
		return func() float64 {
			if r.dials == nil {
				return 0
			}
			q, b := r.dials.Load()
			if busy {
				return float64(b)
			}
			return float64(q)
		}
	}
	m.reg.MustRegister(r.certMetrics()...)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.circuitsCreated, failed, m.linkLatency, m.ctrlConnections,
		gauge("zmesh_circuits_active", "Circuits routed through this router now, whatever its place on their path.",
			func() float64 { return float64(r.fw.CircuitCount()) }),
		gauge("zmesh_xgress_circuit_ends", "Circuit ends (ingress and egress) on this router now.", func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return float64(len(r.ends))
		}),
		counter("zmesh_forwarder_frames_forwarded_total", "Frames (payloads, acks, closes) the forwarder passed on.",
			func() float64 { return float64(r.fw.Forwarded.Load()) }),
		counter("zmesh_forwarder_spliced_bytes_total", "Bytes of one-router circuits moved from socket to socket without frames.",
			func() float64 { return float64(r.fw.SplicedBytes.Load()) }),
		counter("zmesh_forwarder_frames_dropped_total", "Frames dropped because their circuit has no route here, or came from a hop not on its route.",
			func() float64 { return float64(r.fw.Dropped.Load()) }),
		counter("zmesh_xgress_frame_double_releases_total", "Frames released twice to the frame pool: a bug, counted rather than corrupting circuits.",
			func() float64 { return float64(r.pool.DoubleReleases()) }),
		gauge("zmesh_xgress_dial_queue_depth", "Service dials waiting for their turn (forwarder.xgressDialQueueLength bounds it).", dialLoad(false)),
		gauge("zmesh_xgress_dial_workers_busy", "Service dials running now (forwarder.xgressDialWorkerCount at most).", dialLoad(true)),
		gauge("zmesh_ctrl_members_connected", "Controllers (cluster members) the router has a control channel to now.", func() float64 {
			if r.ctrl == nil {
				return 0
			}
			return float64(len(r.ctrl.channels()))
		}),
		ctrlMembersCollector{r: r, desc: prometheus.NewDesc("zmesh_ctrl_member_connected",
			"1 for each controller (cluster member) the router has a control channel to now, by its id.", []string{"controller"}, nil)},
		gauge("zmesh_ctrl_connected", "1 while a control channel to a controller is up, 0 otherwise.", func() float64 {
			if r.ctrl != nil && r.ctrl.isConnected() {
				return 1
			}
			return 0
		}),
		gauge("zmesh_ctrl_latency_seconds", "Round trip of the last answered heartbeat of the control channel requests go to; 0 while disconnected.", func() float64 {
			if r.ctrl == nil {
				return 0
			}
			if ch := r.ctrl.current(); ch != nil {
				return ch.Latency().Seconds()
			}
			return 0
		}),
		gauge("zmesh_ctrl_pending_faults", "Circuit faults waiting to be told to the controller.", func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return float64(len(r.faults))
		}),
		gauge("zmesh_ctrl_rate_limited_queue_depth", "Requests to the controller (terminator changes) waiting in the rate-limited queue.",
			func() float64 { return float64(len(r.ctrlOps)) }),
		gauge("zmesh_ctrl_rate_limited_workers_busy", "Rate-limited workers running a request to the controller now.",
			func() float64 { return float64(r.ctrlOpsBusy.Load()) }),
		gauge("zmesh_links", "Links to other routers now.", func() float64 {
			if r.links == nil {
				return 0
			}
			return float64(len(r.links.Links()))
		}),
		edgeGauge("zmesh_edge_clients", edgeClientsHelp, "zmesh", func() float64 { return float64(r.sdk.clientCount()) }),
		edgeGauge("zmesh_edge_clients", edgeClientsHelp, "openziti", func() float64 { return float64(r.ziti.clientCount()) }),
		edgeGauge("zmesh_edge_binds", edgeBindsHelp, "zmesh", func() float64 { return float64(len(r.sdk.terminators())) }),
		edgeGauge("zmesh_edge_binds", edgeBindsHelp, "openziti", func() float64 { return float64(len(r.ziti.terminators())) }),
		newLinkCollector(r),
		newTunnelCollector(r),
		r.book,
		health.NewCollector(r.checks),
	)
	return m
}

// circuitFailed counts a failed circuit setup.
func (m *routerMetrics) circuitFailed(stage string) { m.circuitsFailed[stage].Inc() }

// ctrlMembersCollector lists the connected members at scrape time.
type ctrlMembersCollector struct {
	r    *Router
	desc *prometheus.Desc
}

func (c ctrlMembersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c ctrlMembersCollector) Collect(ch chan<- prometheus.Metric) {
	if c.r.ctrl == nil {
		return
	}
	for id := range c.r.ctrl.channels() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, id)
	}
}

// linkCollector reads each link's counters at scrape time: links come and go, and their
// counters are the links' own atomics.
type linkCollector struct {
	r                                                *Router
	sentBytes, receivedBytes, sentMsgs, receivedMsgs *prometheus.Desc
	lastLatency, retransmits                         *prometheus.Desc
}

func newLinkCollector(r *Router) linkCollector {
	labels := []string{"link", "peer"}
	return linkCollector{r: r,
		sentBytes:     prometheus.NewDesc("zmesh_link_sent_bytes_total", "Bytes written to the link, frame headers included, all its connections together.", labels, nil),
		receivedBytes: prometheus.NewDesc("zmesh_link_received_bytes_total", "Bytes read from the link, frame headers included, all its connections together.", labels, nil),
		sentMsgs:      prometheus.NewDesc("zmesh_link_sent_messages_total", "Frames written to the link (payloads, acks, closes, probes).", labels, nil),
		receivedMsgs:  prometheus.NewDesc("zmesh_link_received_messages_total", "Frames read from the link.", labels, nil),
		lastLatency:   prometheus.NewDesc("zmesh_link_last_latency_seconds", "The link's latest measured round trip: its cost when the controller chooses paths.", labels, nil),
		retransmits:   prometheus.NewDesc("zmesh_link_retransmits_total", "What the link's transport resent, all its connections together: TCP segments retransmitted (tls:), QUIC packets declared lost (quic:). Frames themselves are never resent.", labels, nil),
	}
}

func (c linkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sentBytes, c.receivedBytes, c.sentMsgs, c.receivedMsgs, c.lastLatency, c.retransmits} {
		ch <- d
	}
}

func (c linkCollector) Collect(ch chan<- prometheus.Metric) {
	if c.r.links == nil {
		return
	}
	for _, l := range c.r.links.Links() {
		var bytesOut, bytesIn, framesOut, framesIn, resent uint64
		for _, cs := range l.Stats() {
			bytesOut += cs.BytesSent
			bytesIn += cs.BytesReceived
			framesOut += cs.FramesSent
			framesIn += cs.FramesReceived
			resent += cs.Retransmits
		}
		id, peer := l.ID(), l.PeerID()
		ch <- prometheus.MustNewConstMetric(c.sentBytes, prometheus.CounterValue, float64(bytesOut), id, peer)
		ch <- prometheus.MustNewConstMetric(c.receivedBytes, prometheus.CounterValue, float64(bytesIn), id, peer)
		ch <- prometheus.MustNewConstMetric(c.sentMsgs, prometheus.CounterValue, float64(framesOut), id, peer)
		ch <- prometheus.MustNewConstMetric(c.receivedMsgs, prometheus.CounterValue, float64(framesIn), id, peer)
		ch <- prometheus.MustNewConstMetric(c.lastLatency, prometheus.GaugeValue, l.Latency().Seconds(), id, peer)
		ch <- prometheus.MustNewConstMetric(c.retransmits, prometheus.CounterValue, float64(resent), id, peer)
	}
}

// snapshot gathers the registry into a metrics report for the controller: one value per
// sample, keyed by the metric's name and its labels as the Prometheus text format writes
// them (zmesh_link_sent_bytes_total{link="…",peer="…"}). Histograms and summaries are
// reported by their _sum and _count; values that are not finite (which JSON cannot carry)
// are left out.
func (r *Router) snapshot(now time.Time) *ctrlproto.Metrics {
	families, err := r.metrics.reg.Gather()
	if err != nil {
		// Gather returns what it could collect along with the error.
		r.log.Warn("metrics: some collectors failed", "err", err)
	}
	m := &ctrlproto.Metrics{Timestamp: now, Values: map[string]float64{}}
	put := func(name string, labels []*dto.LabelPair, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		m.Values[sampleKey(name, labels)] = v
	}
	for _, f := range families {
		name := f.GetName()
		for _, s := range f.GetMetric() {
			labels := s.GetLabel()
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				put(name, labels, s.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				put(name, labels, s.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				put(name, labels, s.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				put(name+"_sum", labels, s.GetHistogram().GetSampleSum())
				put(name+"_count", labels, float64(s.GetHistogram().GetSampleCount()))
			case dto.MetricType_SUMMARY:
				put(name+"_sum", labels, s.GetSummary().GetSampleSum())
				put(name+"_count", labels, float64(s.GetSummary().GetSampleCount()))
			}
		}
	}
	return m
}

// sampleKey writes a sample's name and labels as the Prometheus text format does.
func sampleKey(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteString(`="`)
		for _, c := range l.GetValue() {
			switch c {
			case '\\':
				b.WriteString(`\\`)
			case '"':
				b.WriteString(`\"`)
			case '\n':
				b.WriteString(`\n`)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// Metrics reports: every metrics.reportInterval the router takes a snapshot of its registry
// into a queue of at most metrics.messageQueueSize reports (the oldest is dropped when it is
// full), and sends the queued reports that are at least metrics.intervalAgeThreshold old to
// the controller, oldest first, whenever it is connected.

// metricsLoop takes and sends the reports until ctx ends.
func (r *Router) metricsLoop(ctx context.Context) {
	mc := r.cfg.Metrics
	interval := mc.ReportInterval
	if interval <= 0 {
		return
	}
	size := max(mc.MessageQueueSize, 1)
	var queue []*ctrlproto.Metrics
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if len(queue) == size {
				queue = queue[1:]
			}
			queue = append(queue, r.snapshot(now))
			for len(queue) > 0 && now.Sub(queue[0].Timestamp) >= mc.IntervalAgeThreshold {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				err := r.ctrl.send(sctx, queue[0])
				cancel()
				if err != nil {
					break
				}
				queue = queue[1:]
			}
		}
	}
}
