package link

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/xgress"
)

// collector is a handler that keeps a copy of every frame it gets.
type collector struct {
	mu     sync.Mutex
	frames []xgress.Frame // header fields and a copy of the data
	n      chan struct{}  // one token per frame
}

func newCollector() *collector { return &collector{n: make(chan struct{}, 1<<16)} }

func (c *collector) HandleFrame(_ *Link, f *xgress.Frame) {
	c.mu.Lock()
	c.frames = append(c.frames, xgress.Frame{Type: f.Type, Circuit: f.Circuit, Seq: f.Seq, Data: bytes.Clone(f.Data)})
	c.mu.Unlock()
	f.Release()
	c.n <- struct{}{}
}

func (c *collector) wait(t *testing.T, n int) []xgress.Frame {
	t.Helper()
	for range n {
		select {
		case <-c.n:
		case <-time.After(10 * time.Second):
			t.Fatalf("frames did not arrive")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// noProbes keeps the prober to its first probe, so that tests can count frames.
func noProbes(o *Options) { o.ProbeInterval = time.Hour }

func TestSplitCarriesPayloadsAndAcksOnTheirOwnConnections(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		for _, conns := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/%d", tr, conns), func(t *testing.T) {
				t.Parallel()
				testSplit(t, tr, conns)
			})
		}
	}
}

// testSplit sends payloads and acks of one circuit over a split link with conns payload
// connections and checks what each connection carried.
func testSplit(t *testing.T, tr string, conns int) {
	ca := newCA(t)
	got := newCollector()
	a := newNode(t, ca, "router-a", releaseAll, func(o *Options) { noProbes(o); o.PayloadConns = conns })
	b := newNode(t, ca, "router-b", got, noProbes)
	la, lb := connect(t, a, b, b.listen(t, tr, 0), true)
	if la.PayloadConns() != conns || lb.PayloadConns() != conns {
		t.Fatalf("payload connections: %d dialed, %d accepted; want %d", la.PayloadConns(), lb.PayloadConns(), conns)
	}

	pool := a.reg.opts.Pool
	const payloads, acks = 500, 30
	var payloadBytes uint64
	for i := range payloads + acks {
		var f *xgress.Frame
		if i%8 == 7 && i/8 < acks {
			f = frame(pool, xgress.Ack, 1, uint64(i), nil)
		} else {
			f = frame(pool, xgress.Payload, 1, uint64(i), bytes.Repeat([]byte{byte(i)}, 100+i))
			payloadBytes += uint64(xgress.HeaderSize + 100 + i)
		}
		if err := la.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := la.Send(frame(pool, xgress.Close, 1, 0, []byte("done"))); err != nil {
		t.Fatal(err)
	}
	frames := got.wait(t, payloads+acks+1)

	// Payloads arrive in the order sent, and the Close last.
	var types []xgress.Type
	last := -1
	for _, f := range frames {
		if f.Type == xgress.Ack {
			continue
		}
		types = append(types, f.Type)
		if f.Type == xgress.Payload {
			if int(f.Seq) <= last {
				t.Fatalf("payload %d after payload %d", f.Seq, last)
			}
			last = int(f.Seq)
		}
	}
	if last := types[len(types)-1]; last != xgress.Close {
		t.Errorf("the last payload-connection frame is %s, want close", last)
	}
	nAcks := len(frames) - len(types)

	// The payload connections carried exactly the payloads and the Close (behind batch
	// headers when there are several); the ack connection the acks plus at most a probe and
	// a probe reply.
	st, sent := lb.Stats(), la.Stats()
	if len(st) != conns+1 {
		t.Fatalf("%d connections, want %d", len(st), conns+1)
	}
	var framesIn, bytesIn, framesOut uint64
	for i, c := range st[:conns] {
		if c.Role != RolePayload || c.Index != i {
			t.Fatalf("connection %d: %s connection %d", i, c.Role, c.Index)
		}
		framesIn += c.FramesReceived
		bytesIn += c.BytesReceived
		framesOut += sent[i].FramesSent
	}
	if want := uint64(len(types)); framesIn != want || framesOut != want {
		t.Errorf("the payload connections carried %d frames (%d sent), want %d", framesIn, framesOut, want)
	}
	framing := bytesIn - (payloadBytes + xgress.HeaderSize + 4)
	if conns == 1 && framing != 0 || framing%stripeHeaderSize != 0 {
		t.Errorf("the payload connections carried %d bytes besides the frames", framing)
	}
	ackConn := st[conns]
	if ackConn.Role != RoleAck {
		t.Fatalf("the last connection is a %s connection", ackConn.Role)
	}
	if n := ackConn.FramesReceived; n < uint64(nAcks) || n > uint64(nAcks)+2 {
		t.Errorf("ack connection received %d frames, want %d acks and at most 2 probe frames", n, nAcks)
	}
}

func TestSingleConnectionCarriesEverything(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	got := newCollector()
	a := newNode(t, ca, "router-a", releaseAll, noProbes)
	b := newNode(t, ca, "router-b", got, noProbes)
	la, lb := connect(t, a, b, b.listen(t, config.TransportTLS, 0), false)

	pool := a.reg.opts.Pool
	want := []xgress.Type{xgress.Payload, xgress.Ack, xgress.Payload, xgress.Ack, xgress.Close}
	for i, typ := range want {
		if err := la.Send(frame(pool, typ, 7, uint64(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	frames := got.wait(t, len(want))
	for i, f := range frames {
		if f.Type != want[i] || f.Seq != uint64(i) || f.Circuit != 7 {
			t.Errorf("frame %d: %s circuit %d seq %d; want %s circuit 7 seq %d", i, f.Type, f.Circuit, f.Seq, want[i], i)
		}
	}
	st := lb.Stats()
	if len(st) != 1 || st[0].Role != RoleSingle || st[0].FramesReceived < uint64(len(want)) {
		t.Fatalf("stats %+v", st)
	}
}

// TestBulkTransferInOrder sends 64 MiB of payload frames of random sizes and checks they
// arrive in order and byte-identical. One frame in two is small and sent with SendNow, which
// writes it itself whenever the writers have caught up: it must never overtake the frames
// queued before it.
func TestBulkTransferInOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		tr    string
		split bool
	}{{config.TransportTLS, true}, {config.TransportTLS, false}, {config.TransportQUIC, true}}
	for _, tc := range cases {
		name := tc.tr + "/split"
		if !tc.split {
			name = tc.tr + "/single"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const total = 64 << 20
			ca := newCA(t)
			var (
				hash     = sha256.New()
				received int
				nextSeq  uint64
				orderErr error
				done     = make(chan struct{})
			)
			recv := handlerFunc(func(_ *Link, f *xgress.Frame) {
				if f.Seq != nextSeq && orderErr == nil {
					orderErr = errors.New("frames out of order")
				}
				nextSeq = f.Seq + uint64(len(f.Data))
				hash.Write(f.Data)
				received += len(f.Data)
				f.Release()
				if received == total {
					close(done)
				}
			})
			a := newNode(t, ca, "router-a", releaseAll, nil)
			b := newNode(t, ca, "router-b", recv, nil)
			la, _ := connect(t, a, b, b.listen(t, tc.tr, 0), tc.split)

			src := rand.NewChaCha8([32]byte{1})
			sent := sha256.New()
			pool := a.reg.opts.Pool
			rng := rand.New(rand.NewPCG(1, 2))
			for off := 0; off < total; {
				small := rng.IntN(2) == 0
				n := 1 + rng.IntN(xgress.MaxData)
				if small {
					n = 1 + rng.IntN(maxNowData)
				}
				n = min(n, total-off)
				f := pool.Get(n)
				f.Type, f.Circuit, f.Seq = xgress.Payload, 9, uint64(off)
				io.ReadFull(src, f.Room()[:n])
				f.Extend(n)
				sent.Write(f.Data)
				send := la.Send
				if small {
					send = la.SendNow
				}
				if err := send(f); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("received %d of %d bytes", received, total)
			}
			if orderErr != nil {
				t.Fatal(orderErr)
			}
			if !bytes.Equal(hash.Sum(nil), sent.Sum(nil)) {
				t.Fatal("sha256 of the received bytes differs from the sent")
			}
		})
	}
}

func TestProbesMeasureLatency(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			rtts := make(chan time.Duration, 100)
			fast := func(o *Options) {
				o.ProbeInterval = 20 * time.Millisecond
				o.Events.Latency = func(_ *Link, rtt time.Duration) {
					select {
					case rtts <- rtt:
					default:
					}
				}
			}
			a := newNode(t, ca, "router-a", releaseAll, fast)
			b := newNode(t, ca, "router-b", releaseAll, nil)
			la, _ := connect(t, a, b, b.listen(t, tr, 0), true)
			for range 3 { // the first at once, then every 20 ms
				select {
				case rtt := <-rtts:
					if rtt <= 0 || rtt > time.Second {
						t.Errorf("round trip %s on loopback", rtt)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("no probe reply")
				}
			}
			if la.Latency() <= 0 {
				t.Errorf("Latency() = %s after replies", la.Latency())
			}
		})
	}
}

func TestKilledConnectionTakesTheLinkDown(t *testing.T) {
	t.Parallel()
	for i, name := range []string{"payload-0", "payload-1", "ack"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			a := newNode(t, ca, "router-a", releaseAll, nil)
			b := newNode(t, ca, "router-b", releaseAll, nil)
			la, lb := connect(t, a, b, b.listen(t, config.TransportTLS, 0), true)

			c := tcpOf(t, lb, i)
			c.SetLinger(0) // a reset, as when the process dies
			c.Close()

			for _, n := range []*node{a, b} {
				ev := n.waitDown(t)
				if ev.l != map[*node]*Link{a: la, b: lb}[n] || ev.err == nil {
					t.Errorf("%s: Down(%v, %v)", n.id, ev.l, ev.err)
				}
				t.Logf("%s: link down: %v", n.id, ev.err)
				if n.reg.Get(map[*node]string{a: "router-b", b: "router-a"}[n]) != nil {
					t.Errorf("%s still holds the link", n.id)
				}
			}
			<-la.Done()
			<-lb.Done()
			if err := la.Send(frame(a.reg.opts.Pool, xgress.Payload, 1, 0, nil)); !errors.Is(err, ErrLinkClosed) {
				t.Errorf("Send on a down link: %v", err)
			}
			if la.Err() == nil || lb.Err() == nil {
				t.Errorf("Err() after Done: %v, %v", la.Err(), lb.Err())
			}
		})
	}
}

func TestCloseSendsQueuedFramesFirst(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			got := newCollector()
			a := newNode(t, ca, "router-a", releaseAll, nil)
			b := newNode(t, ca, "router-b", got, nil)
			la, _ := connect(t, a, b, b.listen(t, tr, 0), true)
			const n = 100
			for i := range n {
				if err := la.Send(frame(a.reg.opts.Pool, xgress.Payload, 1, uint64(i), make([]byte, 1000))); err != nil {
					t.Fatal(err)
				}
			}
			la.Close()
			got.wait(t, n)
			if ev := a.waitDown(t); !errors.Is(ev.err, ErrLinkClosed) {
				t.Errorf("a: Down reason %v; want ErrLinkClosed", ev.err)
			}
			b.waitDown(t)
		})
	}
}

// TestStalledPeerTakesTheLinkDown: a peer that stops reading makes the sender's writes stop;
// after the write timeout the link goes down instead of blocking its senders for good.
func TestStalledPeerTakesTheLinkDown(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	a := newNode(t, ca, "router-a", releaseAll, func(o *Options) { o.WriteTimeout = 300 * time.Millisecond })
	b := newNode(t, ca, "router-b", handlerFunc(func(l *Link, f *xgress.Frame) { <-stall; f.Release() }), nil)
	la, _ := connect(t, a, b, b.listen(t, config.TransportTLS, 0), true)
	data := make([]byte, xgress.MaxData)
	go func() {
		for {
			if la.Send(frame(a.reg.opts.Pool, xgress.Payload, 1, 0, data)) != nil {
				return
			}
		}
	}()
	ev := a.waitDown(t)
	if ev.l != la || !errors.Is(ev.err, os.ErrDeadlineExceeded) {
		t.Fatalf("Down(%v, %v), want the stalled link down by its write timeout", ev.l, ev.err)
	}
}

// TestRetransmitsReadable: the retransmission count of a tls: link's connections comes from
// the kernel (TCP_INFO), as Stats reports it. (Loopback loses nothing, but a loaded machine
// can still see a tail loss probe, so the count is bracketed by two kernel reads rather than
// expected to be 0.)
func TestRetransmitsReadable(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, noProbes)
	b := newNode(t, ca, "router-b", releaseAll, noProbes)
	la, _ := connect(t, a, b, b.listen(t, config.TransportTLS, 0), true)
	for i := range la.Stats() {
		before, err := tcpRetransmits(tcpOf(t, la, i))
		if err != nil {
			t.Fatalf("connection %d: TCP_INFO: %v", i, err)
		}
		got := la.Stats()[i].Retransmits
		after, err := tcpRetransmits(tcpOf(t, la, i))
		if err != nil {
			t.Fatalf("connection %d: TCP_INFO: %v", i, err)
		}
		if got < before || got > after {
			t.Errorf("connection %d: %d retransmits in Stats, the kernel counted %d then %d", i, got, before, after)
		}
	}
}
