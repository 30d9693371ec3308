package xgress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// TestDialPoolQueueFullFailsAtOnce: with one turn taken and the queue full, a dial fails at
// once; stopping the pool fails the dial that waits rather than leaving it hanging.
func TestDialPoolQueueFullFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewDialPool(ctx, DialPoolOptions{QueueLength: 1, Workers: 1, Dwell: time.Hour})
	req := DialRequest{Binding: BindingProxy, Address: "127.0.0.1:1"}
	results := make(chan error, 2)
	for want := 1; want <= 2; want++ {
		go func() {
			_, err := p.Dial(context.Background(), req)
			results <- err
		}()
		// the first takes the turn, the second waits in the queue
		waitLoad(t, p, fmt.Sprintf("dial %d asked", want), func(queued, busy int) bool { return queued+busy == want })
	}
	start := time.Now()
	_, err := p.Dial(context.Background(), req)
	if !errors.Is(err, ErrDialQueueFull) || time.Since(start) > time.Second { // not the hour's dwell
		t.Fatalf("third dial: %v after %s", err, time.Since(start))
	}
	if queued, busy := p.Load(); queued != 1 || busy != 1 {
		t.Fatalf("load %d queued, %d busy", queued, busy)
	}
	cancel()
	for range 2 {
		select {
		case err := <-results:
			if err == nil {
				t.Fatal("a dial to a closed port succeeded")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a dial was never answered after the pool stopped")
		}
	}
	if queued, busy := p.Load(); queued != 0 || busy != 0 {
		t.Fatalf("after the pool stopped: load %d queued, %d busy", queued, busy)
	}
}

// listenLoopback returns a TCP listener on 127.0.0.1, closed when the test ends.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// waitLoad waits until the pool's load satisfies ok.
func waitLoad(t *testing.T, p *DialPool, what string, ok func(queued, busy int) bool) {
	t.Helper()
	testutil.EventuallyNil(t, what, func() error {
		if queued, busy := p.Load(); !ok(queued, busy) {
			return fmt.Errorf("%d queued, %d busy", queued, busy)
		}
		return nil
	})
}

// TestDialPoolTurns: at most Workers dials run at once; the others take their turns in the
// order they came, each handed over as a dial ends (a dial that asks again at once does not
// find the queue full); a dial whose turn does not come before its context ends fails.
func TestDialPoolTurns(t *testing.T) {
	t.Parallel()
	ln := listenLoopback(t)
	req := DialRequest{Binding: BindingProxy, Address: ln.Addr().String()}

	// Six turns among two workers, each held until the test ends it: the turns come in the
	// order asked, one as each running turn ends.
	p := NewDialPool(t.Context(), DialPoolOptions{QueueLength: 8, Workers: 2})
	started := make(chan int, 6)
	var end [6]chan struct{}
	var wg sync.WaitGroup
	for i := range 6 {
		end[i] = make(chan struct{})
		wg.Go(func() {
			if err := p.turn(t.Context(), req); err != nil {
				t.Error(err)
				return
			}
			started <- i
			<-end[i]
			p.done()
		})
		waitLoad(t, p, fmt.Sprintf("turn %d asked", i), func(queued, busy int) bool { return queued+busy == i+1 })
	}
	next := func() int {
		select {
		case i := <-started:
			return i
		case <-time.After(10 * time.Second):
			t.Fatal("no turn began within 10s")
			return -1
		}
	}
	if a, b := next(), next(); a+b != 1 {
		t.Fatalf("the first turns went to %d and %d, want 0 and 1", a, b)
	}
	if queued, busy := p.Load(); queued != 4 || busy != 2 {
		t.Fatalf("load %d queued, %d busy; want 4 and 2", queued, busy)
	}
	for i := range 4 {
		close(end[i])
		if got := next(); got != i+2 {
			t.Fatalf("turn %d ended and turn %d began, want %d", i, got, i+2)
		}
		if queued, busy := p.Load(); queued != 3-i || busy != 2 {
			t.Fatalf("after turn %d: load %d queued, %d busy", i, queued, busy)
		}
	}
	close(end[4])
	close(end[5])
	wg.Wait()
	if queued, busy := p.Load(); queued != 0 || busy != 0 {
		t.Fatalf("all turns ended: load %d queued, %d busy", queued, busy)
	}

	// Workers 1, queue 1: a dial that ends and asks again at once while another waits is
	// queued behind it, not refused.
	one := NewDialPool(t.Context(), DialPoolOptions{QueueLength: 1, Workers: 1})
	for range 200 {
		var pair sync.WaitGroup
		for range 2 {
			pair.Go(func() {
				for range 2 {
					c, err := one.Dial(t.Context(), req)
					if err != nil {
						t.Errorf("a dial with the queue not full: %v", err)
						return
					}
					c.Close()
				}
			})
		}
		pair.Wait()
		if t.Failed() {
			return
		}
	}

	// The only turn held through a long dwell: a dial whose context ends first fails.
	slow := NewDialPool(t.Context(), DialPoolOptions{QueueLength: 8, Workers: 1, Dwell: time.Hour})
	go slow.Dial(t.Context(), req)
	waitLoad(t, slow, "the first dial's turn", func(_, busy int) bool { return busy == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := slow.Dial(ctx, req); err == nil || !strings.Contains(err.Error(), "no turn") {
		t.Fatalf("a dial without a turn in time: %v", err)
	}
	if queued, _ := slow.Load(); queued != 0 {
		t.Fatalf("%d dials still queued after the one waiting gave up", queued)
	}
}

func TestDialBindings(t *testing.T) {
	t.Parallel()
	ln := listenLoopback(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewDialPool(ctx, DialPoolOptions{QueueLength: 4, Workers: 2})
	dial := func(binding, addr string) (net.Conn, error) {
		return p.Dial(ctx, DialRequest{Binding: binding, Address: addr})
	}
	for _, tc := range []struct{ binding, addr, errPart string }{
		{BindingProxy, ln.Addr().String(), ""},
		{BindingTransport, "tcp:" + ln.Addr().String(), ""},
		{BindingTransport, "udp:" + ln.Addr().String(), "allowed: tls, tcp"},
		{BindingTransport, "no-transport", "not <transport>:<host>:<port>"},
		{"edge", ln.Addr().String(), "allowed: proxy, proxy_udp, transport, transport_udp"},
	} {
		c, err := dial(tc.binding, tc.addr)
		if tc.errPart == "" {
			if err != nil {
				t.Errorf("%s %s: %v", tc.binding, tc.addr, err)
				continue
			}
			buf := make([]byte, 2)
			if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
				t.Errorf("%s: read %q %v", tc.binding, buf, err)
			}
			c.Close()
		} else if err == nil || !strings.Contains(err.Error(), tc.errPart) {
			t.Errorf("%s %s: %v", tc.binding, tc.addr, err)
		}
	}
	// UDP: a datagram reaches a UDP server.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := dial(BindingProxyUDP, pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("datagram"))
	buf := make([]byte, 64)
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := pc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "datagram" {
		t.Fatalf("udp: %q %v", buf[:n], err)
	}
}

// TestDialTimeouts: a dial that hangs (a TLS service that never answers its handshake) ends
// at the pool's Timeout when the caller's deadline is later (10 s, so that a pool ignoring
// its Timeout fails the test rather than hangs it), and at the caller's deadline when that
// comes first.
func TestDialTimeouts(t *testing.T) {
	t.Parallel()
	ln := listenLoopback(t)
	go func() { // accepts and stays silent
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	req := DialRequest{Binding: BindingTransport, Address: "tls:" + ln.Addr().String()}
	for _, tc := range []struct {
		name              string
		pool, caller, max time.Duration
	}{
		{"the pool's timeout", 100 * time.Millisecond, 10 * time.Second, 5 * time.Second},
		{"the caller's deadline", time.Minute, 100 * time.Millisecond, 5 * time.Second},
	} {
		p := NewDialPool(t.Context(), DialPoolOptions{QueueLength: 1, Workers: 1, Timeout: tc.pool})
		ctx, cancel := context.WithTimeout(t.Context(), tc.caller)
		defer cancel()
		start := time.Now()
		_, err := p.Dial(ctx, req)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: the hanging dial ended with %v, want a deadline error", tc.name, err)
		}
		if took < 100*time.Millisecond || took > tc.max {
			t.Errorf("%s: the hanging dial ended after %s, want about 100ms", tc.name, took)
		}
	}
}
