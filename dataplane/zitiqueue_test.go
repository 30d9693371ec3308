package dataplane

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// An OpenZiti client that sends large Data messages toward a host that never reads fills its
// circuit's queue at router E up to the byte budget, no more: the channel's reader waits.
func TestZitiQueueByteBudget(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 3*testutil.Patience)
	n, svc, ctx, ln, e, cl := s.n, s.svc, s.ctx, s.ln, s.e, s.cl
	go func() {
		c, _, err := ln.Accept()
		if err != nil {
			return
		}
		<-ctx.Done() // never reads
		c.Close()
	}()
	zc, _, err := cl.connect(n.zitiSession(cl, e.r, svc.ID, "Dial"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	go func() {
		body := make([]byte, 2<<20)
		for i := 0; i < 200 && zc.write(body, 0) == nil; i++ {
			sent.Add(int64(len(body)))
		}
	}()
	last, since := int64(-1), time.Now()
	testutil.Eventually(t, "the client's writes to stop", func() bool {
		if s := sent.Load(); s != last {
			last, since = s, time.Now()
			return false
		}
		return last > 0 && time.Since(since) > time.Second
	})
	var c *zitiCircuit
	for _, ch := range e.r.ziti.clients() {
		ch.mu.Lock()
		if ch.circuits[zc.id] != nil {
			c = ch.circuits[zc.id]
		}
		ch.mu.Unlock()
	}
	if c == nil {
		t.Fatal("no circuit at router E")
	}
	if q := queuedBytes(c); q > zitiQueueBytes || q == 0 {
		t.Fatalf("%d bytes queued toward the circuit after %d MiB sent; the budget is %d", q, last>>20, zitiQueueBytes)
	}
}

// queuedBytes returns the bytes queued toward c.
func queuedBytes(c *zitiCircuit) int {
	c.zc.qmu.Lock()
	defer c.zc.qmu.Unlock()
	return c.qbytes
}
