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

// TestConnectionBounds checks that an accepting member closes at once a connection beyond
// maxHandshakes still in their handshake, and a forwarding connection beyond maxForwarding
// being served, and takes them again once one ends.
func TestConnectionBounds(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	ln, err := newStreamLayer("127.0.0.1:0", "", controllerCert(t, ca), ca.Pool(), testutil.Patience, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.serveForwarded(func(c net.Conn) { c.Write([]byte("k")); c.Close() })
	peer, err := newStreamLayer("127.0.0.1:0", "", controllerCert(t, ca), ca.Pool(), testutil.Patience, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Patience)
	defer cancel()
	// closedAtOnce reports whether the listener closed c rather than leave it waiting.
	closedAtOnce := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(testutil.Patience))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}

	// Every handshake slot but one is taken; a silent peer takes the last one.
	for range maxHandshakes - 1 {
		ln.handshakes <- struct{}{}
	}
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the silent peer holds the last handshake slot", func() bool { return len(ln.handshakes) == maxHandshakes })
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if !closedAtOnce(extra) {
		t.Fatal("a connection beyond the handshake bound was not closed")
	}
	extra.Close()
	silent.Close() // its handshake fails now, and frees its slot
	testutil.Eventually(t, "the silent peer's slot freed", func() bool { return len(ln.handshakes) == maxHandshakes-1 })
	for range maxHandshakes - 1 {
		<-ln.handshakes
	}

	// Every forwarding slot is taken: a forwarding connection is closed unserved.
	for range maxForwarding {
		ln.forwards <- struct{}{}
	}
	conn, err := peer.dial(ctx, ln.Addr().String(), kindForward)
	if err != nil {
		t.Fatal(err)
	}
	if !closedAtOnce(conn) {
		t.Fatal("a forwarding connection beyond the bound was not closed")
	}
	conn.Close()
	<-ln.forwards
	conn, err = peer.dial(ctx, ln.Addr().String(), kindForward)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(testutil.Patience))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatalf("a forwarding connection within the bound was not served: %v", err)
	}
}
