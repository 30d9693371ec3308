package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// TestSilentPeerDropped checks that a peer that connects to the raft port and sends
// nothing is dropped at the handshake deadline, and holds up no other connection meanwhile.
func TestSilentPeerDropped(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	const deadline = 200 * time.Millisecond
	ln, err := newStreamLayer("127.0.0.1:0", "", controllerCert(t, ca), ca.Pool(), deadline, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := newStreamLayer("127.0.0.1:0", "", controllerCert(t, ca), ca.Pool(), deadline, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	began := time.Now() // before the listener can have accepted the connection
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// A member connects meanwhile and is handed to raft.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Patience)
	defer cancel()
	conn, err := peer.dial(ctx, ln.Addr().String(), kindRaft)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	accepted.Close()

	// The silent peer's connection is closed by the listener once the deadline passes.
	silent.SetReadDeadline(time.Now().Add(testutil.Patience))
	_, err = silent.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silent peer is still connected after %v", testutil.Patience)
	}
	if waited := time.Since(began); waited < deadline {
		t.Fatalf("a silent peer was dropped after %v, before the %v deadline", waited, deadline)
	}
}
