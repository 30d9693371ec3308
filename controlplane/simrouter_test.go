package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// The simulated routers of the controller benchmarks (TestScaleController in the external
// test package, TestClusterThroughput here), exported for the external package.

// SimRouter is a simulated edge router's control channel to one controller: a client with the
// router's enrolled certificate that says Hello, takes the session state (counting its
// entries) and answers every Route at once. A router simulated against a cluster has one per
// member, as a real router keeps a channel to every member.
type SimRouter struct {
	ID   string
	Cert tls.Certificate
	Ch   *ctrlproto.Channel

	helloAt  time.Time     // when the Hello was sent
	complete chan struct{} // closed on the snapshot's Complete
	doneAt   time.Time     // when it arrived; read after complete is closed

	// entries and Messages count the snapshot in progress (on the channel's reader).
	entries, Messages atomic.Int64
	counting          bool
	Routes            atomic.Int64 // Routes answered
}

// Connect dials the controller's control channel, says Hello and checks the answer; the
// snapshot follows on its own.
func (r *SimRouter) Connect(ctx context.Context, addr string, roots *x509.CertPool) error {
	conn, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{r.Cert}, RootCAs: roots,
		ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err != nil {
		return fmt.Errorf("router %s: dial the control channel: %w", r.ID, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A request waits as long as the controller takes under the load of a burst.
	ch := ctrlproto.New(context.Background(), conn, log, ctrlproto.Options{RequestTimeout: time.Minute})
	r.Ch = ch
	r.complete = make(chan struct{})
	r.entries.Store(0)
	r.Messages.Store(0)
	r.counting = false
	ch.Handle(ctrlproto.TypeSessionState, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		st := msg.(*ctrlproto.SessionState)
		if st.Reset {
			r.counting = true
			r.entries.Store(0)
			r.Messages.Store(0)
		}
		if !r.counting {
			return nil, nil // an update after the snapshot
		}
		r.entries.Add(int64(len(st.APISessions) + len(st.Sessions)))
		r.Messages.Add(1)
		if st.Complete {
			r.counting = false
			select {
			case <-r.complete: // a full state sent again (a member's content replaced): the first counts
			default:
				r.doneAt = time.Now()
				close(r.complete)
			}
		}
		return nil, nil
	})
	ch.Handle(ctrlproto.TypeRoute, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		r.Routes.Add(1)
		return &ctrlproto.RouteReply{CircuitID: msg.(*ctrlproto.Route).CircuitID}, nil
	})
	ignore := func(context.Context, ctrlproto.Message) (ctrlproto.Message, error) { return nil, nil }
	for _, typ := range []ctrlproto.Type{ctrlproto.TypePeerState, ctrlproto.TypeLinkDial, ctrlproto.TypeUnroute, ctrlproto.TypeEndpointsUpdate} {
		ch.Handle(typ, ignore)
	}
	ch.Start()
	r.helloAt = time.Now()
	reply, err := ctrlproto.Call[*ctrlproto.HelloReply](ctx, ch, &ctrlproto.Hello{
		RouterID: r.ID, Version: "scale", Protocol: ctrlproto.ProtocolVersion, Hostname: r.ID + ".scale.test",
		Listeners: []ctrlproto.Listener{{Binding: "edge", Address: "tls:" + r.ID + ".scale.test:3022"}},
	})
	if err != nil {
		ch.Close()
		return fmt.Errorf("router %s: Hello: %w", r.ID, err)
	}
	if !reply.Accepted {
		ch.Close()
		return fmt.Errorf("router %s: Hello refused: %s", r.ID, reply.Reason)
	}
	return nil
}

// WaitSnapshot waits for the snapshot's Complete and checks that it held want entries.
func (r *SimRouter) WaitSnapshot(ctx context.Context, want int64) error {
	select {
	case <-r.complete:
	case <-r.Ch.Done():
		return fmt.Errorf("router %s: the channel closed before the snapshot was complete: %v", r.ID, r.Ch.Err())
	case <-ctx.Done():
		return ctx.Err()
	}
	if got := r.entries.Load(); got != want {
		return fmt.Errorf("router %s: a snapshot of %d entries; the store holds %d", r.ID, got, want)
	}
	return nil
}

// SnapshotTime is the time from the Hello to the snapshot's Complete.
func (r *SimRouter) SnapshotTime() time.Duration { return r.doneAt.Sub(r.helloAt) }

// Close closes the channel and waits until it is done.
func (r *SimRouter) Close() {
	r.Ch.Close()
	<-r.Ch.Done()
}

// CircuitPair is what a circuit request names: a Dial session's token and its service.
type CircuitPair struct{ Token, ServiceID string }

// CircuitResult is what a closed loop of circuit setups did.
type CircuitResult struct {
	Latencies []time.Duration // of the circuits made
	Failed    int
	Err       error // the first failure
	Elapsed   time.Duration
}

// SetupCircuits has workers request circuits for d, worker w on the channel
// ingress[w%len(ingress)] (the ingress router's channels to the controllers that are to
// answer), each waiting for its answer before the next, cycling through pairs; each circuit
// made is ended at once, on the channel that made it, with the clean fault a router sends
// when the circuit's ends are done.
func SetupCircuits(ctx context.Context, ingress []*SimRouter, pairs []CircuitPair, workers int, d time.Duration) CircuitResult {
	var mu sync.Mutex
	var res CircuitResult
	failed := func(err error) {
		mu.Lock()
		res.Failed++
		if res.Err == nil {
			res.Err = err
		}
		mu.Unlock()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		ch := ingress[w%len(ingress)].Ch
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				res.Latencies = append(res.Latencies, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				n := next.Add(1)
				p := pairs[int(n)%len(pairs)]
				t0 := time.Now()
				reply, err := ctrlproto.Call[*ctrlproto.CircuitReply](ctx, ch, &ctrlproto.CircuitRequest{
					RequestID: strconv.FormatInt(n, 10), SessionToken: p.Token, ServiceID: p.ServiceID})
				if err == nil {
					err = reply.Err()
				}
				if err != nil {
					failed(err)
					continue
				}
				mine = append(mine, time.Since(t0))
				if err := ch.Send(ctx, &ctrlproto.Fault{CircuitID: reply.CircuitID, Reason: "finished", Clean: true}); err != nil {
					failed(err)
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}
