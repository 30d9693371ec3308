package link

import (
	"errors"
	"fmt"
	"testing"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/xgress"
)

// framesSent is what the payload connections, or the ack connection, of l have written.
func framesSent(l *Link, role Role) uint64 {
	var n uint64
	for _, c := range l.Stats() {
		if c.Role == role || c.Role == RoleSingle {
			n += c.FramesSent
		}
	}
	return n
}

// idle reports whether nothing is queued or being written on any connection of l.
func idle(l *Link) bool {
	for _, c := range l.conns {
		if c.pending.Load() != 0 || !c.wmu.TryLock() {
			return false
		}
		c.wmu.Unlock()
	}
	return true
}

// TestSendNowWritesOnIdleLink: on a link with nothing queued, SendNow writes a small payload
// or ack before it returns, on one connection, several striped ones, or QUIC; a Close and a
// large payload are left to the writers; each arrives.
func TestSendNowWritesOnIdleLink(t *testing.T) {
	t.Parallel()
	cases := []struct {
		tr    string
		conns int // payload connections; 0 for a link that is not split
	}{{config.TransportTLS, 0}, {config.TransportTLS, 1}, {config.TransportTLS, 2}, {config.TransportQUIC, 2}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.tr, tc.conns), func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			got := newCollector()
			a := newNode(t, ca, "router-a", releaseAll, func(o *Options) {
				noProbes(o)
				o.PayloadConns = max(tc.conns, 1)
			})
			b := newNode(t, ca, "router-b", got, noProbes)
			la, lb := connect(t, a, b, b.listen(t, tc.tr, 0), tc.conns > 0)
			testutil.Eventually(t, "each end's first probe is answered, and a's writers are idle", func() bool {
				return la.Latency() > 0 && lb.Latency() > 0 && idle(la)
			})
			pool := a.reg.opts.Pool
			payloadRole := RolePayload
			if tc.conns == 0 {
				payloadRole = RoleSingle
			}

			sent := framesSent(la, payloadRole)
			for i := range 10 {
				if err := la.SendNow(frame(pool, xgress.Payload, 1, uint64(i), make([]byte, maxNowData))); err != nil {
					t.Fatal(err)
				}
				if n := framesSent(la, payloadRole); n != sent+1 {
					t.Fatalf("payload %d: %d frames written when SendNow returned, want %d", i, n, sent+1)
				}
				sent++
			}
			acks := framesSent(la, RoleAck)
			if err := la.SendNow(frame(pool, xgress.Ack, 1, 10, nil)); err != nil {
				t.Fatal(err)
			}
			if n := framesSent(la, RoleAck); n != acks+1 {
				t.Fatalf("ack: %d frames written when SendNow returned, want %d", n, acks+1)
			}
			// Left to the writers, and in order behind the rest.
			if err := la.SendNow(frame(pool, xgress.Payload, 1, 11, make([]byte, maxNowData+1))); err != nil {
				t.Fatal(err)
			}
			if err := la.SendNow(frame(pool, xgress.Close, 1, 12, []byte("done"))); err != nil {
				t.Fatal(err)
			}
			frames := got.wait(t, 13)
			var seqs []uint64
			for _, f := range frames {
				if f.Type != xgress.Ack {
					seqs = append(seqs, f.Seq)
				}
			}
			for i, s := range seqs {
				if want := map[bool]uint64{true: uint64(i), false: uint64(i + 1)}[i < 10]; s != want {
					t.Fatalf("payload-connection frames arrived as %v, want 0-9, 11, 12", seqs)
				}
			}
		})
	}
}

// TestSendNowOnClosedLink: SendNow on a closed link refuses, with ErrLinkClosed, and releases
// the frame.
func TestSendNowOnClosedLink(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, noProbes)
	b := newNode(t, ca, "router-b", releaseAll, noProbes)
	la, _ := connect(t, a, b, b.listen(t, config.TransportTLS, 0), true)
	la.Close()
	<-la.Done()
	pool := a.reg.opts.Pool
	for _, typ := range []xgress.Type{xgress.Payload, xgress.Ack} {
		f := frame(pool, typ, 1, 0, []byte("x"))
		if err := la.SendNow(f); !errors.Is(err, ErrLinkClosed) {
			t.Fatalf("%s: SendNow on a closed link: %v, want ErrLinkClosed", typ, err)
		}
		before := pool.DoubleReleases()
		f.Release()
		if pool.DoubleReleases() != before+1 {
			t.Fatalf("%s: SendNow on a closed link kept the frame", typ)
		}
	}
}
