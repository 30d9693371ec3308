package link

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/xgress"
)

// BenchmarkLinkSend measures payload frames going Send → writer → loopback connection →
// reader → HandleFrame over a real split link, with allocations counted in every goroutine.
func BenchmarkLinkSend(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{1 << 10, 16 << 10, xgress.MaxData} {
			b.Run(fmt.Sprintf("%s/%dKiB", tr, size>>10), func(b *testing.B) { benchmarkLink(b, tr, size) })
		}
	}
}

func benchmarkLink(b *testing.B, transport string, size int) {
	ca := newCA(b)
	var (
		got, want atomic.Int64
		once      sync.Once
		done      = make(chan struct{})
	)
	want.Store(-1)
	recv := handlerFunc(func(_ *Link, f *xgress.Frame) {
		f.Release()
		if got.Add(1) == want.Load() {
			once.Do(func() { close(done) })
		}
	})
	a := newNode(b, ca, "router-a", releaseAll, nil)
	r := newNode(b, ca, "router-b", recv, nil)
	la, _ := connect(b, a, r, r.listen(b, transport, 0), true)
	pool := a.reg.opts.Pool
	send := func() {
		f := pool.Get(size)
		f.Type, f.Circuit = xgress.Payload, 1
		f.Extend(size)
		if err := la.Send(f); err != nil {
			b.Fatal(err)
		}
	}
	// Warm the pools, buffers and connection windows up.
	const warm = 2000
	for range warm {
		send()
	}
	testutil.Eventually(b, "the warm-up frames arrive", func() bool { return got.Load() >= warm })
	got.Store(0)

	b.SetBytes(int64(size))
	b.ReportAllocs()
	n := int64(0)
	for b.Loop() {
		send()
		n++
	}
	b.StartTimer() // the frames still in flight count too
	want.Store(n)
	if got.Load() >= n {
		once.Do(func() { close(done) })
	}
	<-done
	b.StopTimer()
}
