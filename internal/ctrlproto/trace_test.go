package ctrlproto

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
)

// The trace hook sees each frame a channel writes and reads, with its header decoded and its
// JSON body: a request going out and its reply coming in, matched by sequence.
func TestTraceSeesBothDirections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []TraceEvent
	record := func(e TraceEvent) {
		e.Body = slices.Clone(e.Body) // the channel reuses the buffer
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	cc, sc := tlsPair(t)
	router := New(context.Background(), cc, quietLog(), Options{Trace: record})
	ctrl := New(context.Background(), sc, quietLog(), Options{})
	ctrl.Handle(TypeCircuitRequest, circuitReplier)
	router.Start()
	ctrl.Start()
	t.Cleanup(func() { router.Close(); ctrl.Close() })

	if _, err := Call[*CircuitReply](context.Background(), router, &CircuitRequest{RequestID: "9", ServiceName: "web"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var out, in *TraceEvent
	for i := range events {
		switch e := &events[i]; {
		case e.Direction == TraceOut && e.Type == TypeCircuitRequest:
			out = e
		case e.Direction == TraceIn && e.Type == TypeCircuitReply:
			in = e
		}
	}
	if out == nil || in == nil {
		t.Fatalf("want the request out and the reply in; traced %+v", events)
	}
	if !out.WantReply || out.ReplyTo != 0 || in.WantReply || in.ReplyTo != out.Seq {
		t.Fatalf("headers: request %+v, reply %+v", out, in)
	}
	var req CircuitRequest
	if err := json.Unmarshal(out.Body, &req); err != nil || req.RequestID != "9" || req.ServiceName != "web" {
		t.Fatalf("request body %s: %v", out.Body, err)
	}
	var reply CircuitReply
	if err := json.Unmarshal(in.Body, &reply); err != nil || reply.CircuitID != 9 {
		t.Fatalf("reply body %s: %v", in.Body, err)
	}
	if out.Time.IsZero() || in.Time.Before(out.Time) {
		t.Fatalf("times: request %s, reply %s", out.Time, in.Time)
	}
}
