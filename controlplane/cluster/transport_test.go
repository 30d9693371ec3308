package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestVerifyMember checks the check of a peer controller's certificate: a controller's of
// the network's CA passes; a router's of that CA, a controller's of another CA and none at
// all are refused, each refusal of a certificate naming it by name and fingerprint.
func TestVerifyMember(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	verify := VerifyMember(ca.Pool())
	leafOf := func(cert func() (*tls.Certificate, error)) *x509.Certificate {
		t.Helper()
		c, err := cert()
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	peer := func(leaf *x509.Certificate) tls.ConnectionState {
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	}
	if err := verify(peer(leafOf(controllerCert(t, ca)))); err != nil {
		t.Fatalf("a controller of the network's CA: %v", err)
	}
	names := func(err error, leaf *x509.Certificate) bool {
		return err != nil && strings.Contains(err.Error(), leaf.Subject.CommonName) && strings.Contains(err.Error(), certid.Fingerprint(leaf))
	}
	router := ca.Cert(t, "router-7", pki.ClientServer, "127.0.0.1").Leaf
	if err := verify(peer(router)); !errors.Is(err, certid.ErrNotController) || !names(err, router) {
		t.Fatalf("a router's certificate: %v, want a refusal naming %q", err, router.Subject.CommonName)
	}
	foreign := leafOf(controllerCert(t, testutil.NewCA(t)))
	if err := verify(peer(foreign)); !names(err, foreign) {
		t.Fatalf("a controller of another CA: %v, want a refusal naming %q", err, foreign.Subject.CommonName)
	}
	if err := verify(tls.ConnectionState{}); err == nil {
		t.Fatal("no certificate was accepted")
	}
}

// TestSilentPeerDropped checks that a peer that connects to the raft port and sends
// nothing is dropped at the handshake deadline, and holds up no other connection meanwhile.
func TestSilentPeerDropped(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	const deadline = 200 * time.Millisecond
	ln := listen(t, controllerCert(t, ca), ca, deadline)
	peer := listen(t, controllerCert(t, ca), ca, deadline)

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
	ln := listen(t, controllerCert(t, ca), ca, testutil.Patience)
	ln.serveForwarded(func(c net.Conn) { c.Write([]byte("k")); c.Close() })
	peer := listen(t, controllerCert(t, ca), ca, testutil.Patience)
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
