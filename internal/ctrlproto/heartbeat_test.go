package ctrlproto

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

var fastBeats = Heartbeats{SendInterval: 50 * time.Millisecond, CheckInterval: 20 * time.Millisecond, CloseUnresponsiveTimeout: 300 * time.Millisecond}

func TestHeartbeatLatency(t *testing.T) {
	t.Parallel()
	// The unresponsive timeout is long enough for a loaded machine's stalls, many beats long.
	beats := fastBeats
	beats.CloseUnresponsiveTimeout = time.Second
	router, ctrl := pair(t, Options{Heartbeats: beats}, nil)
	testutil.Eventually(t, "latency measured at both ends", func() bool { return router.Latency() != 0 && ctrl.Latency() != 0 })
	rtt, err := router.Ping(context.Background())
	if err != nil || rtt <= 0 {
		t.Fatalf("Ping = %s, %v", rtt, err)
	}
	// Healthy channels outlive many unresponsive-timeouts.
	time.Sleep(3 * beats.CloseUnresponsiveTimeout)
	if router.Err() != nil || ctrl.Err() != nil {
		t.Fatalf("healthy channel closed: %v / %v", router.Err(), ctrl.Err())
	}
}

func TestHeartbeatClosesUnresponsivePeer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		peer func(t *testing.T, conn io.Writer, stop <-chan struct{})
	}{
		{"silent peer that stops reading", func(*testing.T, io.Writer, <-chan struct{}) {}},
		{"peer that talks but never reads", func(t *testing.T, conn io.Writer, stop <-chan struct{}) {
			for seq := uint32(1); ; seq++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				var h [headerSize]byte
				(&header{typ: TypeMetrics, seq: seq}).put(h[:])
				if _, err := conn.Write(h[:]); err != nil {
					return
				}
			}
		}},
		{"peer that sends pongs of its own making but never reads", func(t *testing.T, conn io.Writer, stop <-chan struct{}) {
			for seq := uint32(1); ; seq++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				// Echoes of no ping sent: too early, too late, and none.
				for _, body := range []string{`{"t":1}`, `{"t":9000000000000000000}`, `{}`} {
					var h [headerSize]byte
					(&header{typ: TypePong, seq: seq, size: uint32(len(body))}).put(h[:])
					if _, err := conn.Write(append(h[:], body...)); err != nil {
						return
					}
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, raw := withRaw(t, Options{Heartbeats: fastBeats})
			stop := make(chan struct{})
			defer close(stop)
			go tt.peer(t, raw, stop)
			start := time.Now()
			if err := waitDone(t, ch, 5*time.Second); !errors.Is(err, ErrUnresponsive) {
				t.Fatalf("Err = %v, want ErrUnresponsive", err)
			}
			if d := time.Since(start); d < fastBeats.CloseUnresponsiveTimeout {
				t.Errorf("closed after %s, before the timeout", d)
			}
		})
	}
}

func TestHeartbeatDefaults(t *testing.T) {
	t.Parallel()
	h := Heartbeats{}.withDefaults()
	if h != (Heartbeats{10 * time.Second, time.Second, 30 * time.Second}) {
		t.Errorf("defaults = %+v", h)
	}
	o := Options{}.withDefaults()
	if o.RequestTimeout != 5*time.Second || o.MaxBodySize != 4<<20 || o.QueueSize != DefaultQueueSize {
		t.Errorf("option defaults = %+v", o)
	}
}
