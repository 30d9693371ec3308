package ctrlproto

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// circuitReplier answers CircuitRequest with a reply echoing the request.
func circuitReplier(_ context.Context, m Message) (Message, error) {
	req := m.(*CircuitRequest)
	id, _ := strconv.ParseUint(req.RequestID, 10, 64)
	return &CircuitReply{RequestID: req.RequestID, CircuitID: id, Path: []string{"a", "b"},
		Terminator: TerminatorRef{Binding: "proxy", Address: "tcp:" + req.ServiceName + ":80"}}, nil
}

func TestRequestReply(t *testing.T) {
	t.Parallel()
	router, _ := pair(t, Options{}, func(c *Channel) { c.Handle(TypeCircuitRequest, circuitReplier) })
	reply, err := Call[*CircuitReply](context.Background(), router, &CircuitRequest{RequestID: "7", SessionToken: "tok", ServiceName: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.RequestID != "7" || reply.CircuitID != 7 || len(reply.Path) != 2 || reply.Terminator.Address != "tcp:web:80" || reply.Err() != nil {
		t.Fatalf("reply = %+v", reply)
	}
}

func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			t.Parallel()
			router, _ := pair(t, Options{}, func(c *Channel) {
				if async {
					c.HandleAsync(TypeCircuitRequest, circuitReplier)
				} else {
					c.Handle(TypeCircuitRequest, circuitReplier)
				}
			})
			const n = 1000
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() {
					id := strconv.Itoa(i + 1)
					reply, err := Call[*CircuitReply](context.Background(), router, &CircuitRequest{RequestID: id, ServiceName: "s" + id})
					switch {
					case err != nil:
						errs <- err
					case reply.RequestID != id || reply.Terminator.Address != "tcp:s"+id+":80":
						errs <- fmt.Errorf("request %s answered with %+v", id, reply)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestBothDirections(t *testing.T) {
	t.Parallel()
	router, ctrl := pair(t, Options{}, func(c *Channel) {
		c.Handle(TypeHello, func(_ context.Context, m Message) (Message, error) {
			return &HelloReply{Accepted: true, ControllerID: "ctrl1", Endpoints: []string{"tls:127.0.0.1:6262"}}, nil
		})
	})
	router.Handle(TypeRoute, func(_ context.Context, m Message) (Message, error) {
		r := m.(*Route)
		if r.Forward.Xgress == nil || r.Forward.Xgress.Address != "tcp:svc:80" || r.Reverse.Router != "r1" || r.Timeout != time.Second {
			return &RouteReply{CircuitID: r.CircuitID, Outcome: Failed(ErrCodeInvalid, fmt.Sprintf("unexpected route %+v", r))}, nil
		}
		return &RouteReply{CircuitID: r.CircuitID}, nil
	})
	hello, err := Call[*HelloReply](context.Background(), router, &Hello{RouterID: "r2", Protocol: ProtocolVersion})
	if err != nil || !hello.Accepted || hello.Endpoints[0] != "tls:127.0.0.1:6262" {
		t.Fatalf("hello: %+v, %v", hello, err)
	}
	rr, err := Call[*RouteReply](context.Background(), ctrl, &Route{CircuitID: 42, Timeout: time.Second,
		Forward: Hop{Xgress: &Xgress{Binding: "proxy", Address: "tcp:svc:80"}}, Reverse: Hop{Router: "r1"}})
	if err != nil || rr.CircuitID != 42 || rr.Err() != nil {
		t.Fatalf("route: %+v, %v", rr, err)
	}
}

func TestSendOneWay(t *testing.T) {
	t.Parallel()
	got := make(chan *Fault, 100)
	router, _ := pair(t, Options{}, func(c *Channel) {
		c.Handle(TypeFault, func(_ context.Context, m Message) (Message, error) {
			got <- m.(*Fault)
			return nil, nil
		})
	})
	for i := range 100 {
		if err := router.Send(context.Background(), &Fault{CircuitID: uint64(i), Reason: "link down"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		select {
		case f := <-got:
			if f.CircuitID != uint64(i) {
				t.Fatalf("fault %d arrived as %d: order lost", i, f.CircuitID)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fault %d never arrived", i)
		}
	}
}

func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	router, _ := pair(t, Options{RequestTimeout: 100 * time.Millisecond}, func(c *Channel) {
		c.HandleAsync(TypeTerminatorCreate, func(ctx context.Context, m Message) (Message, error) {
			<-release
			return &TerminatorCreateReply{TerminatorID: "t1"}, nil
		})
		c.Handle(TypeCircuitRequest, circuitReplier)
	})
	start := time.Now()
	_, err := router.Request(context.Background(), &TerminatorCreate{Service: "s"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timed out after %s", d)
	}
	// A caller's own deadline wins over the default timeout, longer or shorter.
	long, cancelLong := context.WithTimeout(context.Background(), 400*time.Millisecond)
	start = time.Now()
	_, err = router.Request(long, &TerminatorCreate{Service: "s"})
	cancelLong()
	if d := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || d < 350*time.Millisecond {
		t.Fatalf("with a 400ms deadline: %v after %s, want the caller's deadline", err, d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := router.Request(ctx, &TerminatorCreate{Service: "s"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("with a cancelled context: err = %v", err)
	}
	close(release) // the late replies are dropped; the channel keeps working
	if _, err := Call[*CircuitReply](context.Background(), router, &CircuitRequest{RequestID: "1"}); err != nil {
		t.Fatalf("request after a timeout: %v", err)
	}
}

func TestErrorReplies(t *testing.T) {
	t.Parallel()
	router, _ := pair(t, Options{}, func(c *Channel) {
		c.Handle(TypeTerminatorCreate, func(context.Context, Message) (Message, error) {
			return nil, &Error{Code: "NOT_FOUND", Message: "no such service"}
		})
		c.Handle(TypeTerminatorRemove, func(context.Context, Message) (Message, error) {
			return nil, fmt.Errorf("store: %w", errors.New("disk on fire"))
		})
		c.Handle(TypeIdleCircuitsCheck, func(context.Context, Message) (Message, error) { return nil, nil })
	})
	tests := []struct {
		msg  Message
		code string
	}{
		{&TerminatorCreate{}, "NOT_FOUND"},
		{&TerminatorRemove{}, ErrCodeFailed},
		{&IdleCircuitsCheck{}, ErrCodeFailed},
		{&LinkState{}, ErrCodeUnsupported},
	}
	for _, tt := range tests {
		_, err := router.Request(context.Background(), tt.msg)
		var e *Error
		if !errors.As(err, &e) || e.Code != tt.code {
			t.Errorf("%s: err = %v, want code %s", tt.msg.MessageType(), err, tt.code)
		}
	}
	if _, err := Call[*HelloReply](context.Background(), router, &TerminatorCreate{}); err == nil {
		t.Error("Call with the wrong reply type succeeded")
	}
}

func TestCloseBothEnds(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 500)
	block := make(chan struct{})
	router, ctrl := pair(t, Options{}, func(c *Channel) {
		c.Handle(TypeMetrics, func(context.Context, Message) (Message, error) {
			got <- struct{}{}
			return nil, nil
		})
	})
	router.HandleAsync(TypeRoute, func(ctx context.Context, m Message) (Message, error) {
		<-block
		return nil, ctx.Err()
	})
	defer close(block)

	pending := make(chan error, 1)
	go func() {
		_, err := ctrl.Request(context.Background(), &Route{CircuitID: 1})
		pending <- err
	}()
	for range 500 {
		if err := router.Send(context.Background(), &Metrics{Values: map[string]float64{"x": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	router.Close()
	if err := router.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("closed end: Err = %v", err)
	}
	if err := waitDone(t, ctrl, 5*time.Second); !errors.Is(err, ErrPeerClosed) {
		t.Errorf("peer end: Err = %v, want ErrPeerClosed", err)
	}
	if len(got) != 500 {
		t.Errorf("%d of 500 messages queued before Close arrived", len(got))
	}
	if err := <-pending; !errors.Is(err, ErrPeerClosed) {
		t.Errorf("pending request: err = %v", err)
	}
	if err := router.Send(context.Background(), &Fault{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if _, err := ctrl.Request(context.Background(), &Unroute{}); !errors.Is(err, ErrPeerClosed) {
		t.Errorf("Request after the peer closed: %v", err)
	}
	router.Close()
	ctrl.Close()
}

// TestCloseWithUnreadData closes a channel whose reader is held in a handler while the peer
// sent it more, and whose last messages the peer, slow to
// read, has not received yet: closing a socket with unread data makes the kernel reset the
// connection and drop what it had not sent, so the closing side half-closes, reads on
// (acting on nothing) until the peer closes, then closes.
func TestCloseWithUnreadData(t *testing.T) {
	t.Parallel()
	closeWithUnreadData(t, 100*time.Millisecond, 400)
}

// TestCloseWaitsForASlowPeer is TestCloseWithUnreadData with a peer that reads nothing for
// seconds after the Close, as a loaded machine may: closing still delivers every message and
// ends cleanly at both ends, however late the peer reads.
func TestCloseWaitsForASlowPeer(t *testing.T) {
	t.Parallel()
	closeWithUnreadData(t, 2500*time.Millisecond, 2000)
}

// closeWithUnreadData sends 250 Metrics of the given number of values (about 20 bytes each)
// and closes while the peer reads nothing for peerDelay.
func closeWithUnreadData(t *testing.T, peerDelay time.Duration, metrics int) {
	const n = 250 // within the writer's queue, frames and bytes: no Send waits
	got := make(chan struct{}, n)
	slow := make(chan struct{})
	router, ctrl := pair(t, Options{QueueBytes: 64 << 20}, func(c *Channel) {
		c.Handle(TypeMetrics, func(context.Context, Message) (Message, error) {
			<-slow // the controller reads nothing until after the router's Close
			got <- struct{}{}
			return nil, nil
		})
	})
	held, release := make(chan struct{}), make(chan struct{})
	acted := make(chan struct{}, 10)
	first := true // the reader runs handlers one at a time
	router.Handle(TypeEndpointsUpdate, func(context.Context, Message) (Message, error) {
		if first {
			first = false
			held <- struct{}{}
			<-release // holds the reader until after Close
			return nil, nil
		}
		acted <- struct{}{} // a message read after Close
		return nil, nil
	})
	if err := ctrl.Send(context.Background(), &EndpointsUpdate{}); err != nil {
		t.Fatal(err)
	}
	<-held
	for range 3 { // unread by the router while its reader is held
		if err := ctrl.Send(context.Background(), &EndpointsUpdate{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // they reach the router's socket
	values := map[string]float64{}
	for i := range metrics {
		values[fmt.Sprintf("metric.%04d", i)] = float64(i)
	}
	for range n { // more than the sockets buffer while the controller waits
		if err := router.Send(context.Background(), &Metrics{Values: values}); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan struct{})
	go func() {
		router.Close()
		close(closed)
	}()
	// The reader goes on once Close has begun, the controller reads a moment later.
	testutil.Eventually(t, "Close begins", func() bool { return router.Err() != nil })
	close(release)
	time.AfterFunc(peerDelay, func() { close(slow) })
	select {
	case <-closed:
	case <-time.After(peerDelay + testutil.Patience):
		t.Fatal("Close did not return")
	}
	if err := waitDone(t, ctrl, 5*time.Second); !errors.Is(err, ErrPeerClosed) {
		t.Errorf("peer end: Err = %v, want ErrPeerClosed", err)
	}
	if len(got) != n {
		t.Errorf("%d of %d messages queued before Close arrived", len(got), n)
	}
	if len(acted) != 0 {
		t.Errorf("the closed channel acted on %d messages it read while closing", len(acted))
	}
}

func TestContextEndsChannel(t *testing.T) {
	t.Parallel()
	cc, sc := tlsPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	a := New(ctx, cc, quietLog(), Options{})
	b := New(context.Background(), sc, quietLog(), Options{})
	a.Start()
	b.Start()
	defer b.Close()
	cancel()
	if err := waitDone(t, a, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Err = %v", err)
	}
	if err := waitDone(t, b, 5*time.Second); !errors.Is(err, ErrPeerClosed) {
		t.Errorf("peer Err = %v", err)
	}
}

func TestCloseNeverStarted(t *testing.T) {
	t.Parallel()
	cc, _ := tlsPair(t)
	ch := New(context.Background(), cc, quietLog(), Options{})
	ch.Close()
	if err := waitDone(t, ch, time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Err = %v", err)
	}
}

func TestTypeNames(t *testing.T) {
	t.Parallel()
	for typ, want := range map[Type]string{TypeHello: "Hello", TypeIdleCircuitsReply: "IdleCircuitsReply", 999: "Type(999)"} {
		if got := typ.String(); got != want {
			t.Errorf("%d: %q, want %q", typ, got, want)
		}
	}
	for typ := range Type(100) {
		if m := newMessage(typ); m != nil && m.MessageType() != typ {
			t.Errorf("newMessage(%d) is a %s", typ, m.MessageType())
		}
	}
}

func TestReplyAndClose(t *testing.T) {
	t.Parallel()
	router, ctrl := pair(t, Options{}, func(c *Channel) {
		c.Handle(TypeHello, func(context.Context, Message) (Message, error) {
			return ReplyAndClose(&HelloReply{Reason: "go away"}), nil
		})
	})
	reply, err := Call[*HelloReply](context.Background(), router, &Hello{RouterID: "r1"})
	if err != nil || reply.Accepted || reply.Reason != "go away" {
		t.Fatalf("reply = %+v, %v", reply, err)
	}
	if err := waitDone(t, ctrl, 5*time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("replying end: Err = %v", err)
	}
	if err := waitDone(t, router, 5*time.Second); !errors.Is(err, ErrPeerClosed) {
		t.Errorf("other end: Err = %v", err)
	}
}

// TestAsyncHandlersRunTogether: async handlers run at the same time, on goroutines that serve
// later messages once they are done.
func TestAsyncHandlersRunTogether(t *testing.T) {
	t.Parallel()
	const n = 8
	var arrived sync.WaitGroup
	arrived.Add(n)
	release := make(chan struct{})
	router, _ := pair(t, Options{}, func(c *Channel) {
		c.HandleAsync(TypeCircuitRequest, func(ctx context.Context, m Message) (Message, error) {
			if m.(*CircuitRequest).ServiceName == "wait" {
				arrived.Done()
				<-release
			}
			return circuitReplier(ctx, m)
		})
	})
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := Call[*CircuitReply](context.Background(), router, &CircuitRequest{RequestID: strconv.Itoa(i), ServiceName: "wait"})
			errs <- err
		}()
	}
	arrived.Wait() // every handler is running: none waits for another
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 { // the goroutines of the first ones serve these
		if _, err := Call[*CircuitReply](context.Background(), router, &CircuitRequest{RequestID: strconv.Itoa(i), ServiceName: "s"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSendWithin: a message queued at once needs no wait; with the queue full, SendWithin
// gives up after its time.
func TestSendWithin(t *testing.T) {
	t.Parallel()
	cc, _ := tlsPair(t) // the peer never reads: the writer stalls once the socket is full
	ch := New(context.Background(), cc, quietLog(), Options{QueueSize: 1})
	t.Cleanup(func() { ch.Close() })
	if err := ch.SendWithin(time.Second, &Fault{CircuitID: 1}); err != nil {
		t.Fatal(err) // not started: the queue holds it
	}
	start := time.Now()
	err := ch.SendWithin(50*time.Millisecond, &Fault{CircuitID: 2})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("send to a full queue: %v after %s", err, time.Since(start))
	}
}

// TestQueueBytes: the queue holds at most QueueBytes of encoded bodies, whatever its length
// in frames: a sender waits beyond (here, with its context done, it gives up at once), and
// goes on once the writer has written what was queued.
func TestQueueBytes(t *testing.T) {
	t.Parallel()
	big := &Fault{CircuitID: 1, Reason: strings.Repeat("x", 10_000)}
	cc, sc := tlsPair(t)
	ch := New(context.Background(), cc, quietLog(), Options{QueueBytes: 25_000}) // two of them
	t.Cleanup(func() { ch.Close() })
	for i := range 2 {
		if err := ch.Send(context.Background(), big); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 8 { // a queue without the bound would take one now and then
		if err := ch.Send(done, big); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "queue full") {
			t.Fatalf("a third body over the bound: %v; want to wait for room", err)
		}
	}
	if err := ch.Send(context.Background(), &Fault{CircuitID: 2}); err != nil {
		t.Fatalf("a small body within the bound: %v", err)
	}
	peer := New(context.Background(), sc, quietLog(), Options{})
	got := make(chan uint64, 8)
	peer.Handle(TypeFault, func(_ context.Context, m Message) (Message, error) {
		got <- m.(*Fault).CircuitID
		return nil, nil
	})
	peer.Start()
	t.Cleanup(func() { peer.Close() })
	ch.Start()
	if err := ch.Send(context.Background(), &Fault{CircuitID: 3, Reason: big.Reason}); err != nil {
		t.Fatalf("send once the writer drains the queue: %v", err)
	}
	for _, want := range []uint64{1, 1, 2, 3} {
		if id := <-got; id != want {
			t.Fatalf("got fault %d, want %d", id, want)
		}
	}
}
