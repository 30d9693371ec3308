package dataplane

import (
	"context"
	"time"

	"github.com/zmesh/zmesh/controlplane/channel"
)

// Metrics reports: every metrics.reportInterval the router takes a snapshot of its counters
// into a queue of at most metrics.messageQueueSize reports (the oldest is dropped when it is
// full), and sends the queued reports that are at least metrics.intervalAgeThreshold old to
// the controller, oldest first, whenever it is connected.

// snapshot returns the router's current metrics.
func (r *Router) snapshot(now time.Time) *channel.Metrics {
	queued, busy := r.dials.Load()
	links := r.links.Links()
	r.mu.Lock()
	ends, faults := len(r.ends), len(r.faults)
	r.mu.Unlock()
	m := &channel.Metrics{Timestamp: now, Values: map[string]float64{
		"forwarder.circuits":            float64(r.fw.Circuits()),
		"forwarder.forwarded":           float64(r.fw.Forwarded.Load()),
		"forwarder.dropped":             float64(r.fw.Dropped.Load()),
		"xgress.dial.queued":            float64(queued),
		"xgress.dial.busy":              float64(busy),
		"xgress.circuit_ends":           float64(ends),
		"ctrl.pending_faults":           float64(faults),
		"ctrl.rate_limited.queued":      float64(len(r.ctrlOps)),
		"ctrl.rate_limited.busy":        float64(r.ctrlOpsBusy.Load()),
		"link.count":                    float64(len(links)),
		"xgress.frames.double_releases": float64(r.pool.DoubleReleases()),
	}}
	for _, l := range links {
		m.Values["link."+l.PeerID()+".latency_seconds"] = l.Latency().Seconds()
	}
	r.tunnelMetrics(m.Values)
	return m
}

// metricsLoop takes and sends the reports until ctx ends.
func (r *Router) metricsLoop(ctx context.Context) {
	mc := r.cfg.Metrics
	interval := mc.ReportInterval.Std()
	if interval <= 0 {
		return
	}
	size := max(mc.MessageQueueSize, 1)
	var queue []*channel.Metrics
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
			for len(queue) > 0 && now.Sub(queue[0].Timestamp) >= mc.IntervalAgeThreshold.Std() {
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
