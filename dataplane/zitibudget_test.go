package dataplane

import (
	"context"
	"testing"

	"github.com/zmesh/zmesh/internal/zitiproto"
)

// The bytes queued toward all the circuits of an OpenZiti channel stay within the channel's
// budget, though each circuit's queue has room: a client cannot hold a circuit's queue worth
// of the router's memory per circuit it opens. Bytes read, and those of a circuit that ended,
// make room again.
func TestZitiChannelBudget(t *testing.T) {
	s := newZitiServer(nil)
	_, zc := s.newConn(context.Background(), nil, "", "")
	const piece = 512 << 10
	zc.budget = 2 * piece
	if zc.budget >= zitiQueueBytes {
		t.Fatalf("the test's budget %d must be below a circuit's queue, %d", zc.budget, zitiQueueBytes)
	}
	body := func() *zitiproto.Message {
		m := s.pool.Get()
		m.Reset(zitiproto.ContentData)
		m.Body = make([]byte, piece)
		return m
	}
	c1, c2, c3 := newZitiCircuit(zc, 1, false), newZitiCircuit(zc, 2, false), newZitiCircuit(zc, 3, false)
	c1.push(body())
	c2.push(body())
	if c3.reserve(piece) {
		t.Fatalf("a circuit took %d bytes beyond the channel's budget of %d", piece, zc.budget)
	}
	// c1's reader reads its piece: room for c3.
	buf := make([]byte, piece)
	for n := 0; n < piece; {
		k, err := c1.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	if !c3.reserve(piece) {
		t.Fatal("no room once a circuit's bytes were read")
	}
	// c2 ends with its piece unread: its bytes leave the budget with it.
	c2.closeQuiet()
	if !c1.reserve(piece) {
		t.Fatal("no room once a circuit holding queued bytes ended")
	}
	zc.qmu.Lock()
	defer zc.qmu.Unlock()
	if zc.qbytes != 2*piece {
		t.Fatalf("the channel counts %d bytes queued, want %d", zc.qbytes, 2*piece)
	}
}
