package ctrlproto

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkRequest measures one request/response round trip over loopback TLS: a
// CircuitRequest answered with a CircuitReply, the shape of circuit setup.
func BenchmarkRequest(b *testing.B) {
	router, _ := pair(b, Options{}, func(c *Channel) { c.Handle(TypeCircuitRequest, circuitReplier) })
	req := &CircuitRequest{RequestID: "1", SessionToken: "0b4f6f1e-8c53-4a57-9d4e-1c3f2b9a7e10", ServiceName: "web"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := router.Request(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestParallel is BenchmarkRequest with many requests in flight, answered by an
// async handler: the writer's batching at work.
func BenchmarkRequestParallel(b *testing.B) {
	router, _ := pair(b, Options{}, func(c *Channel) { c.HandleAsync(TypeCircuitRequest, circuitReplier) })
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for i := 0; pb.Next(); i++ {
			req := &CircuitRequest{RequestID: strconv.Itoa(i), ServiceName: "web"}
			if _, err := router.Request(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
