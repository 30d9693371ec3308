package link

import (
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// probe sends a Probe on the ack connection every interval, the first at once, until the
// link closes. A probe's Seq is its send time in nanoseconds since the link was made; the
// peer echoes it in a ProbeReply, so the reply carries its own round trip and no probe state
// is kept. Both routers probe, and each measures its own round trip.
func (l *Link) probe(interval time.Duration) {
	defer l.writers.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f := l.reg.opts.Pool.Get(0)
		f.Type = xgress.Probe
		f.Seq = uint64(time.Since(l.created))
		l.trySend(l.ack, f)
		select {
		case <-t.C:
		case <-l.stop:
			return
		}
	}
}
