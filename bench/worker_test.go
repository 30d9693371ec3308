package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

func TestRunWorkerRefusesBadArguments(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a role is required"},
		{[]string{"router"}, `role "router" is not allowed`},
		{[]string{"sink", "--nope"}, "flag provided but not defined"},
		{[]string{"sink", "extra"}, "unexpected arguments"},
		{[]string{"relay"}, "--to is required"},
		{[]string{"relay", "--to", "127.0.0.1:1", "--in", "udp"}, `--in "udp"`},
		{[]string{"relay", "--to", "127.0.0.1:1", "--out", "tls"}, "load TLS key pair"},
		{[]string{"loadgen"}, "--addr is required"},
		{[]string{"loadgen", "--addr", "127.0.0.1:1", "--mode", "ping"}, `--mode "ping"`},
		{[]string{"loadgen", "--addr", "127.0.0.1:1", "--streams", "0"}, "must be positive"},
		{[]string{"loadgen", "--addr", "127.0.0.1:1", "--mode", "setup", "--conns", "0"}, "must be positive"},
		{[]string{"loadgen", "--addr", "127.0.0.1:1", "--mode", "setup", "--rate", "-1"}, "must not be negative"},
		{[]string{"loadgen", "--addr", "127.0.0.1:1", "--mode", "idle", "--circuits", "0"}, "must be positive"},
	} {
		err := RunWorker(t.Context(), tc.args, nil, io.Discard, log)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RunWorker(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// startWorker runs a server worker in-process and returns its announced address; it stops
// when the test ends.
func startWorker(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(ctx, args, nil, pw, slog.New(slog.NewTextHandler(io.Discard, nil)))
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %q: %v", args, err)
		}
	})
	var m message
	if err := json.NewDecoder(pr).Decode(&m); err != nil || m.Addr == "" {
		t.Fatalf("worker %q announced %+v, %v", args, m, err)
	}
	go io.Copy(io.Discard, pr)
	return m.Addr
}

// TestTLSRelayCarriesHalfClose sends through a two-hop TLS relay in discard mode and checks
// the sink's count comes back after the half-close, then echoes through it.
func TestTLSRelayCarriesHalfClose(t *testing.T) {
	t.Parallel()
	cert, key, err := writeSelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sink := startWorker(t, "sink")
	b := startWorker(t, "relay", "--in", "tls", "--cert", cert, "--key", key, "--to", sink)
	a := startWorker(t, "relay", "--out", "tls", "--cert", cert, "--key", key, "--to", b)

	c, err := newConnector(connectorConfig{addr: a})
	if err != nil {
		t.Fatal(err)
	}
	streams, err := runThroughput(t.Context(), c, 2, 50*time.Millisecond, 64<<10)
	if err != nil || len(streams) != 2 || streams[0].Bytes == 0 {
		t.Fatalf("throughput through the relay: %+v, %v", streams, err)
	}
	lat, err := runEcho(t.Context(), c, 2, 20, time.Second, 64)
	if err != nil || lat.Samples != 20 {
		t.Fatalf("echo through the relay: %+v, %v", lat, err)
	}

	conn, err := net.Dial("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := append([]byte{modeDiscard}, bytes.Repeat([]byte("z"), 1000)...)
	if _, err := conn.Write(payload); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := io.ReadAll(conn)
	if err != nil || len(answer) != 8 || binary.BigEndian.Uint64(answer) != 1000 {
		t.Errorf("answer after half-close: %x, %v; want the count 1000 and EOF", answer, err)
	}
}

// The end-to-end TLS relay carries throughput, echo and circuits for a load generator that
// speaks TLS inside TLS.
func TestE2ERelay(t *testing.T) {
	t.Parallel()
	cert, key, err := writeSelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sink := startWorker(t, "sink")
	b := startWorker(t, "relay", "--in", relayInE2E, "--cert", cert, "--key", key, "--to", sink)
	a := startWorker(t, "relay", "--in", "tls", "--out", "tls", "--cert", cert, "--key", key, "--to", b)

	c, err := newConnector(connectorConfig{via: ViaTLSE2E, addr: a, cert: cert, key: key})
	if err != nil {
		t.Fatal(err)
	}
	streams, err := runThroughput(t.Context(), c, 2, 50*time.Millisecond, 64<<10)
	if err != nil || len(streams) != 2 || streams[0].Bytes == 0 {
		t.Fatalf("throughput through the relay: %+v, %v", streams, err)
	}
	lat, err := runEcho(t.Context(), c, 1, 20, time.Second, 64)
	if err != nil || lat.Samples != 20 {
		t.Fatalf("echo through the relay: %+v, %v", lat, err)
	}
	setup, err := runSetup(t.Context(), c, 2, 100*time.Millisecond)
	if err != nil || setup.Circuits == 0 || setup.Failed != 0 {
		t.Fatalf("circuits through the relay: %+v, %v", setup, err)
	}

}

func TestLoopbackAndWaitListening(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "10.0.0.1:80": false, "localhost:80": false, "nonsense": false} {
		if err := checkLoopback(addr); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v", addr, err)
		}
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitListening(t.Context(), addr, 100*time.Millisecond); err == nil {
		t.Errorf("WaitListening on a closed port %s succeeded", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the free port was taken meanwhile: %v", err)
	}
	defer ln.Close()
	if err := WaitListening(t.Context(), addr, 5*time.Second); err != nil {
		t.Errorf("WaitListening on %s: %v", addr, err)
	}
}

// TestSinkEchoesConcurrentConnections echoes, on connections open at once, more than the
// sink's pooled echo buffer holds, each connection its own bytes: a buffer shared by two
// connections would mix them. Twenty rounds, since two echoes must overlap to show it.
func TestSinkEchoesConcurrentConnections(t *testing.T) {
	t.Parallel()
	sink := startWorker(t, "sink")
	for round := range 20 {
		if !echoConcurrently(t, sink) {
			t.Fatalf("round %d failed", round+1)
		}
	}
}

// echoConcurrently echoes a connection's own bytes on each of 8 connections at once and
// reports whether every connection got its bytes back.
func echoConcurrently(t *testing.T, sink string) bool {
	const conns, size = 8, 3*echoBufferSize + 123
	errs := make(chan error, conns)
	for i := range conns {
		go func() {
			errs <- func() error {
				conn, err := net.Dial("tcp", sink)
				if err != nil {
					return err
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				want := bytes.Repeat([]byte{byte('a' + i)}, size)
				go func() {
					conn.Write([]byte{modeEcho})
					conn.Write(want)
					conn.(*net.TCPConn).CloseWrite()
				}()
				got, err := io.ReadAll(conn)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, want) {
					return fmt.Errorf("connection %d: echoed %d bytes that are not the %d it sent", i, len(got), size)
				}
				return nil
			}()
		}()
	}
	ok := true
	for range conns {
		if err := <-errs; err != nil {
			t.Error(err)
			ok = false
		}
	}
	return ok
}

// A throughput stream whose path stops reading fails once the watchdog gives up on the
// blocked write, rather than hanging the run.
func TestPushFailsOnStalledPath(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept() // accepted, never read
		if err == nil {
			held <- c
		}
	}()
	c, err := newConnector(connectorConfig{addr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	defer func() {
		if s := <-held; s != nil {
			s.Close()
		}
	}()
	start := time.Now()
	_, err = push(t.Context(), conn, make([]byte, 256<<10), start, start.Add(50*time.Millisecond), 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("push on a path that never reads: %v, want a stall", err)
	}
}
