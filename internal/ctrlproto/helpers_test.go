package ctrlproto

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/testutil"
)

// tlsPair returns both ends of a TLS 1.3 connection over loopback, the client
// authenticated with a certificate from a fresh CA.
func tlsPair(t testing.TB) (client, server *tls.Conn) {
	t.Helper()
	ca := testutil.NewCA(t)
	serverCert := ca.Cert(t, "controller", pki.Server, "127.0.0.1")
	clientCert := ca.Cert(t, "router", pki.Client)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		tc := c.(*tls.Conn)
		if tc.Handshake() != nil {
			tc.Close()
			accepted <- nil
			return
		}
		accepted <- tc
	}()
	client, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{clientCert},
		RootCAs:      ca.Pool(),
		ServerName:   "127.0.0.1",
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	if server = <-accepted; server == nil {
		t.Fatal("server handshake failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// pair returns two started channels over one TLS connection: the router's end and the
// controller's. register, when not nil, registers handlers on the controller's end before
// it starts.
func pair(t testing.TB, opts Options, register func(*Channel)) (router, ctrl *Channel) {
	t.Helper()
	cc, sc := tlsPair(t)
	router = New(context.Background(), cc, quietLog(), opts)
	ctrl = New(context.Background(), sc, quietLog(), opts)
	if register != nil {
		register(ctrl)
	}
	router.Start()
	ctrl.Start()
	t.Cleanup(func() { router.Close(); ctrl.Close() })
	return router, ctrl
}

// withRaw returns a started channel and the raw TLS connection of its peer.
func withRaw(t testing.TB, opts Options) (*Channel, *tls.Conn) {
	t.Helper()
	cc, sc := tlsPair(t)
	ch := New(context.Background(), cc, quietLog(), opts)
	ch.Start()
	// The raw end does not speak the protocol: it closes first, as a peer would once it read
	// the channel's end, so that Close need not wait for it.
	t.Cleanup(func() { sc.Close(); ch.Close() })
	return ch, sc
}

// writeFrame writes one frame with an arbitrary header to w.
func writeFrame(t testing.TB, w io.Writer, h header, body []byte) {
	t.Helper()
	buf := make([]byte, headerSize, headerSize+len(body))
	h.put(buf)
	if _, err := w.Write(append(buf, body...)); err != nil {
		t.Fatalf("write frame: %v", err)
	}
}

// readFrames reads frames from r until one satisfies keep or the deadline passes.
func readUntil(t testing.TB, conn net.Conn, keep func(header, []byte) bool) (header, []byte) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer conn.SetReadDeadline(time.Time{})
	hbuf := make([]byte, headerSize)
	for {
		h, body, err := readFrame(conn, hbuf, DefaultMaxBodySize)
		if err != nil {
			t.Fatalf("read frame: %v", err)
		}
		if keep(h, body) {
			return h, body
		}
	}
}

// waitDone waits for ch to close and returns its cause.
func waitDone(t testing.TB, ch *Channel, within time.Duration) error {
	t.Helper()
	select {
	case <-ch.Done():
		return ch.Err()
	case <-time.After(within):
		t.Fatalf("channel still open after %s", within)
		return nil
	}
}
