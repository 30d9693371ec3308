package link

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/xgress"
)

// probeLoop sends a Probe on the ack connection every interval, the first at once, until the
// link closes. A probe's Seq is a random id, remembered with its send time among the last
// probeWindow probes; the peer echoes it in a ProbeReply, and a reply counts only when it
// answers one of them for the first time (see measure). Both routers probe, and each
// measures its own round trip.
func (l *Link) probeLoop(interval time.Duration) {
	defer l.writers.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f := l.reg.opts.Pool.Get(0)
		f.Type = xgress.Probe
		f.Seq = l.probes.sent()
		l.trySend(l.ack, f)
		select {
		case <-t.C:
		case <-l.stop:
			return
		}
	}
}

// probeWindow is how many unanswered probes a link remembers: a reply to an older one is
// ignored.
const probeWindow = 4

// probes remembers the probes a link sent that were not answered yet.
type probes struct {
	mu   sync.Mutex
	ids  [probeWindow]uint64 // 0: free
	at   [probeWindow]time.Time
	last int // index of the latest probe

	ignored atomic.Uint64 // replies that answered no remembered probe
}

// sent returns the id of a new probe, sent now, forgetting the oldest one remembered.
func (p *probes) sent() uint64 {
	id := rand.Uint64() | 1 // never 0
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = (p.last + 1) % probeWindow
	p.ids[p.last], p.at[p.last] = id, time.Now()
	return id
}

// answered forgets the probe id and returns when it was sent; false when no remembered
// probe has that id.
func (p *probes) answered(id uint64) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pid := range p.ids {
		if pid != 0 && pid == id {
			p.ids[i] = 0
			return p.at[i], true
		}
	}
	return time.Time{}, false
}
