package dataplane

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// An OpenZiti client that stops reading holds nothing of the router: with its channel's
// socket full and a circuit's writer blocked on it, ending the circuit (as an Unroute from
// the controller does, on the control channel's reader) returns; once the write timeout
// passes, the channel is closed as unresponsive.

func TestZitiStalledClientHoldsNothing(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 3*testutil.Patience)
	n, svc, ln, e, cl := s.n, s.svc, s.ln, s.e, s.cl
	var written atomic.Int64
	go func() {
		c, _, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := make([]byte, 64<<10)
		for {
			k, err := c.Write(chunk)
			written.Add(int64(k))
			if err != nil {
				return
			}
		}
	}()
	// Shorter than Patience, long enough for the host to fill the path first.
	e.r.ziti.writeTimeout.Store(int64(10 * time.Second))
	tok := n.zitiSession(cl, e.r, svc.ID, "Dial")
	zc, reply, err := cl.connect(tok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.stall.Lock()
	defer cl.stall.Unlock()
	zc.write([]byte("go"), 0)
	cid, _ := reply.String(zitiproto.HeaderCircuitID)
	circuit, err := strconv.ParseUint(cid, 10, 64)
	if err != nil {
		t.Fatalf("circuit id %q: %v", cid, err)
	}
	// The host's writes stop when every buffer on the way is full and E's writer waits on
	// the client's socket.
	last, since := int64(-1), time.Now()
	testutil.Eventually(t, "the host's writes to stop", func() bool {
		if w := written.Load(); w != last {
			last, since = w, time.Now()
			return false
		}
		return last > 1<<20 && time.Since(since) > time.Second
	})
	ended := make(chan struct{})
	go func() {
		e.r.endCircuit(circuit, "x", false)
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(testutil.Patience):
		t.Fatal("ending a circuit waits for a client that does not read")
	}

	testutil.Eventually(t, "the router to close the unresponsive client's channel", func() bool {
		return e.r.ziti.clientCount() == 0
	})
}

// A dial to an OpenZiti host whose channel's writer is stuck on the host's full socket gives
// up when its context ends, rather than wait for the writer.
func TestZitiDialToStalledHostHonoursContext(t *testing.T) {
	t.Parallel()
	s := newZitiBound(t, false, nil)
	n, svc, h, e, host, dialer := s.n, s.svc, s.h, s.e, s.host, s.dialer
	h.r.ziti.writeTimeout.Store(int64(time.Hour)) // the context, not the write timeout, must end the dial
	accepted := make(chan error, 1)
	go func() {
		_, _, err := host.accept()
		accepted <- err
	}()
	zc, _, err := dialer.connect(n.zitiSession(dialer, e.r, svc.ID, "Dial"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	host.stall.Lock()
	defer host.stall.Unlock()
	var sent atomic.Int64
	go func() {
		body := make([]byte, 64<<10)
		for zc.write(body, 0) == nil {
			sent.Add(int64(len(body)))
		}
	}()
	last, since := int64(-1), time.Now()
	testutil.Eventually(t, "the dialer's writes to stop", func() bool {
		if s := sent.Load(); s != last {
			last, since = s, time.Now()
			return false
		}
		return last > 1<<20 && time.Since(since) > time.Second
	})
	var address string
	h.r.ziti.mu.Lock()
	for a := range h.r.ziti.binds {
		address = a
	}
	h.r.ziti.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := h.r.ziti.dial(ctx, &ctrlproto.Xgress{Binding: BindingEdge, Address: address}, 1)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a dial through a stuck channel succeeded")
		}
	case <-time.After(testutil.Patience):
		t.Fatal("a dial to a host whose channel's writer is stuck ignores its context")
	}
}
