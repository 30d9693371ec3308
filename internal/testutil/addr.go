package testutil

import (
	"net"
	"testing"
)

// ClosedAddr returns a loopback host:port that nothing listens on (a port the kernel gave
// and that was closed again): a dead controller, router or peer.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
