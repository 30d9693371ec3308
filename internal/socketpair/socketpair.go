// Package socketpair connects two parts of one process with a Unix stream socket pair: real
// sockets with kernel buffers and half-close (CloseWrite), but no TCP stack and no TLS. The
// router's tunnel reaches its circuits through them, and a co-located controller serves its
// router's control channel over one.
package socketpair

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// New returns the two ends of a connected Unix stream socket pair.
func New() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socket pair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f) // works on a duplicate of the descriptor
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("socket pair: %w", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}
