package dataplane

import (
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/link"
	"github.com/zmesh/zmesh/xgress"
)

// recorder is a hop that keeps what it is sent.
type recorder struct {
	mu     sync.Mutex
	frames []*xgress.Frame
}

func (r *recorder) Forward(f *xgress.Frame) {
	r.mu.Lock()
	r.frames = append(r.frames, f)
	r.mu.Unlock()
}

func TestForwarderRoutesByOrigin(t *testing.T) {
	t.Parallel()
	fw := NewForwarder()
	pool := xgress.NewPool()
	toI, toT := &recorder{}, &recorder{}
	fw.Route(1<<50, toI, toT)
	send := func(o xgress.Origin, typ xgress.Type) {
		f := pool.Get(0)
		f.Type, f.Origin, f.Circuit = typ, o, 1<<50
		fw.Forward(f)
	}
	send(xgress.Initiator, xgress.Payload)
	send(xgress.Initiator, xgress.Payload)
	send(xgress.Terminator, xgress.Ack)
	if len(toT.frames) != 2 || len(toI.frames) != 1 || toI.frames[0].Type != xgress.Ack {
		t.Fatalf("toward terminator %d, toward initiator %d", len(toT.frames), len(toI.frames))
	}
	if !fw.Unroute(1<<50) || fw.Unroute(1<<50) {
		t.Fatal("unroute")
	}
	send(xgress.Initiator, xgress.Payload)
	if fw.Dropped.Load() != 1 || len(toT.frames) != 2 {
		t.Fatalf("a frame of an unrouted circuit was not dropped: %d", fw.Dropped.Load())
	}
}

func TestForwarderIdle(t *testing.T) {
	t.Parallel()
	fw := NewForwarder()
	clock := time.Unix(1000, 0)
	fw.now = func() time.Time { return clock }
	fw.Route(1, &recorder{}, &recorder{})
	fw.Route(2, &recorder{}, &recorder{})
	clock = clock.Add(time.Minute)
	f := xgress.NewPool().Get(0)
	f.Type, f.Circuit = xgress.Payload, 2
	fw.Forward(f)
	idle := fw.IdleSince(clock.Add(-time.Second))
	if len(idle) != 1 || idle[0] != 1 {
		t.Fatalf("idle: %v", idle)
	}
}

// discard is a hop that releases frames at once.
type discard struct{}

func (discard) Forward(f *xgress.Frame) { f.Release() }

// BenchmarkForward forwards payloads of one of 10,000 circuits: no allocation per payload.
func BenchmarkForward(b *testing.B) {
	fw := NewForwarder()
	for i := range uint64(10000) {
		fw.Route(1<<40+i, discard{}, discard{})
	}
	pool := xgress.NewPool()
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		f := pool.Get(1024)
		f.Type, f.Circuit = xgress.Payload, 1<<40+i%10000
		f.Extend(1024)
		fw.Forward(f)
		i++
	}
}

// BenchmarkForwardFromLink hands payloads of one of 10,000 circuits to HandleFrame, as a
// link's reader does: no allocation per payload.
func BenchmarkForwardFromLink(b *testing.B) {
	r := &Router{id: "bench", fw: NewForwarder(), pool: xgress.NewPool()}
	l := new(link.Link) // only compared: every circuit is routed, so nothing is sent on it
	for i := range uint64(10000) {
		r.fw.Route(1<<40+i, linkHop{l}, discard{})
	}
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		f := r.pool.Get(1024)
		f.Type, f.Origin, f.Circuit = xgress.Payload, xgress.Initiator, 1<<40+i%10000
		f.Extend(1024)
		r.HandleFrame(l, f)
		i++
	}
}

// ForwardFrom drops a frame that does not come from the circuit's hop toward its origin.
func TestForwardFromChecksTheHop(t *testing.T) {
	t.Parallel()
	fw := NewForwarder()
	pool := xgress.NewPool()
	toI, toT := &recorder{}, &recorder{}
	fw.Route(9, toI, toT)
	send := func(from xgress.Hop) {
		f := pool.Get(0)
		f.Type, f.Origin, f.Circuit = xgress.Payload, xgress.Initiator, 9
		fw.ForwardFrom(f, from)
	}
	send(toI) // from the initiator's side: forwarded toward the terminator
	send(toT) // from the terminator's side claiming to be the initiator: dropped
	send(&recorder{})
	if len(toT.frames) != 1 || fw.Dropped.Load() != 2 {
		t.Fatalf("forwarded %d, dropped %d", len(toT.frames), fw.Dropped.Load())
	}
}
