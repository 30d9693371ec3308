package sdk

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/socketpair"
)

// streamPair returns the two ends of one smux stream over a socket pair.
func streamPair(t *testing.T) (dialed, accepted *smux.Stream) {
	t.Helper()
	a, b, err := socketpair.New()
	if err != nil {
		t.Fatal(err)
	}
	client, err := smux.Client(a, edgeproto.Smux())
	if err != nil {
		t.Fatal(err)
	}
	server, err := smux.Server(b, edgeproto.Smux())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	if dialed, err = client.OpenStream(); err != nil {
		t.Fatal(err)
	}
	if _, err := dialed.Write([]byte{0}); err != nil { // smux announces a stream with data
		t.Fatal(err)
	}
	if accepted, err = server.AcceptStream(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(accepted, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return dialed, accepted
}

// TestReadAfterDeadlineConsumesNothing checks that a Read after the read deadline fails
// with a timeout and leaves buffered data for the next Read, as net.Conn does: smux would
// consume it and drop the window update that goes with it.
func TestReadAfterDeadlineConsumesNothing(t *testing.T) {
	t.Parallel()
	w, r := streamPair(t)
	s := newCircuitStream(r)
	if _, err := w.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(s, got); err != nil { // the frame has arrived: 5 bytes stay buffered
		t.Fatal(err)
	}
	if err := s.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := s.Read(make([]byte, 16))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read after the deadline = %d, %v; want 0 and a timeout", n, err)
	}
	if err := s.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "56789" {
		t.Fatalf("Read after clearing the deadline = %q, %v; want the buffered 56789", got, err)
	}
}
