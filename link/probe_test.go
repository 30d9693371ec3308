package link

import (
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/xgress"
)

// TestProbeReplyMustAnswerAProbe has the peer send probe replies that answer no probe —
// an id never sent, and the id of a probe already answered — and checks that they change
// neither the latency nor the latency events, and are counted.
func TestProbeReplyMustAnswerAProbe(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	rtts := make(chan time.Duration, 16)
	got := newCollector()
	a := newNode(t, ca, "router-a", got, func(o *Options) {
		noProbes(o)
		o.Events.Latency = func(_ *Link, rtt time.Duration) { rtts <- rtt }
	})
	b := newNode(t, ca, "router-b", releaseAll, noProbes)
	la, lb := connect(t, a, b, b.listen(t, config.TransportTLS, 0), true)

	// a's first probe goes out at once and b answers it.
	var first time.Duration
	select {
	case first = <-rtts:
	case <-time.After(5 * time.Second):
		t.Fatal("no probe reply")
	}
	if la.Latency() != first || la.IgnoredProbeReplies() != 0 {
		t.Fatalf("Latency %s, ignored %d after the first reply (%s)", la.Latency(), la.IgnoredProbeReplies(), first)
	}
	// A probe a sends by hand, so that the test knows its id: b answers it, late, twice, and
	// only the first answer counts.
	id := la.probes.sent()
	time.Sleep(50 * time.Millisecond)
	// Replies to ids a never sent: routers used to take any Seq as a send time, so 1 claimed
	// the link's age.
	bogus := []uint64{1, 0, 1 << 40}
	for _, seq := range append(bogus, id, id) {
		lb.trySend(lb.ack, frame(b.reg.opts.Pool, xgress.ProbeReply, 0, seq, nil))
	}
	// An ack behind them on the same connection tells when a has read them.
	if err := lb.Send(frame(b.reg.opts.Pool, xgress.Ack, 9, 0, nil)); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 1)
	select {
	case rtt := <-rtts:
		if la.Latency() != rtt || rtt < 50*time.Millisecond {
			t.Errorf("the answer to the probe sent by hand measured %s, Latency %s", rtt, la.Latency())
		}
	default:
		t.Fatal("the answer to the probe sent by hand was not measured")
	}
	select {
	case rtt := <-rtts:
		t.Fatalf("a bogus reply was measured: %s", rtt)
	default:
	}
	if n := la.IgnoredProbeReplies(); n != uint64(len(bogus)+1) {
		t.Errorf("%d replies ignored, want %d", n, len(bogus)+1)
	}
}

func TestProbesRememberTheLastUnanswered(t *testing.T) {
	t.Parallel()
	var p probes
	var ids []uint64
	for range probeWindow + 2 {
		ids = append(ids, p.sent())
	}
	// The two oldest are forgotten; the others are answered once each.
	for i, id := range ids {
		_, ok := p.answered(id)
		if want := i >= 2; ok != want {
			t.Errorf("probe %d answered: %v, want %v", i, ok, want)
		}
		if _, ok := p.answered(id); ok {
			t.Errorf("probe %d answered twice", i)
		}
	}
	if _, ok := p.answered(0); ok {
		t.Error("id 0 answered")
	}
}
