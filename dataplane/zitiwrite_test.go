package dataplane

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/zitiproto"
)

// chunkConn records the writes to it and whether a fresh deadline preceded each.
type chunkConn struct {
	net.Conn
	deadline time.Time // set and not yet used by a write
	writes   []int
	stale    int // writes without a fresh deadline
}

func (c *chunkConn) SetWriteDeadline(t time.Time) error { c.deadline = t; return nil }

func (c *chunkConn) Write(p []byte) (int, error) {
	if c.deadline.IsZero() {
		c.stale++
	}
	c.deadline = time.Time{}
	c.writes = append(c.writes, len(p))
	return len(p), nil
}

// A message larger than zitiWriteChunk (an end-to-end encrypted frame of 16 MiB) reaches the
// client's connection in chunks, each written under a deadline of its own: a slow client that
// keeps reading is not timed out on the whole message.
func TestZitiWriteChunksDeadlines(t *testing.T) {
	var timeout atomic.Int64
	timeout.Store(int64(zitiWriteTimeout))
	c := &chunkConn{}
	var m zitiproto.Message
	m.Reset(zitiproto.ContentData)
	m.Body = make([]byte, zitiMaxFrame)
	if err := zitiproto.NewWriter(progressWriter{c, &timeout}).Write(&m); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range c.writes {
		if n > zitiWriteChunk {
			t.Fatalf("a write of %d bytes; chunks are at most %d", n, zitiWriteChunk)
		}
		total += n
	}
	if total < zitiMaxFrame || len(c.writes) < zitiMaxFrame/zitiWriteChunk {
		t.Fatalf("%d bytes in %d writes for a body of %d", total, len(c.writes), zitiMaxFrame)
	}
	if c.stale > 0 {
		t.Fatalf("%d of %d writes without a fresh deadline", c.stale, len(c.writes))
	}
}
