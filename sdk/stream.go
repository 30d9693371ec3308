package sdk

import (
	"sync/atomic"
	"time"

	"github.com/xtaci/smux"
)

// circuitStream is the router stream a Conn runs over. It refuses a Read once the read
// deadline has passed, as a net.Conn does, instead of letting smux consume buffered data:
// smux sends the window update for consumed data under the read deadline, so after the
// deadline it drops the update, and a sender waiting for that window stalls for good.
type circuitStream struct {
	*smux.Stream
	readDeadline atomic.Int64 // unix nanoseconds; 0 for none
}

func newCircuitStream(st *smux.Stream) *circuitStream { return &circuitStream{Stream: st} }

// Read reads from the stream, or fails with smux's timeout once the read deadline passed.
func (s *circuitStream) Read(p []byte) (int, error) {
	if d := s.readDeadline.Load(); d != 0 && time.Now().UnixNano() >= d {
		return 0, smux.ErrTimeout
	}
	return s.Stream.Read(p)
}

// SetReadDeadline sets the read deadline.
func (s *circuitStream) SetReadDeadline(t time.Time) error {
	s.storeReadDeadline(t)
	return s.Stream.SetReadDeadline(t)
}

// SetDeadline sets the read and write deadlines.
func (s *circuitStream) SetDeadline(t time.Time) error {
	s.storeReadDeadline(t)
	return s.Stream.SetDeadline(t)
}

func (s *circuitStream) storeReadDeadline(t time.Time) {
	if t.IsZero() {
		s.readDeadline.Store(0)
		return
	}
	s.readDeadline.Store(t.UnixNano())
}
