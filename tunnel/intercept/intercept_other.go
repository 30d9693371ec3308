//go:build !linux

package intercept

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// errNeedsLinux is what everything returns where there is no Linux tproxy.
var errNeedsLinux = errors.New("tproxy needs Linux")

// Interceptor owns the transparent-proxy state of one network namespace; it exists on Linux
// only, and Open fails elsewhere.
type Interceptor struct{}

// Open fails: tproxy needs Linux.
func Open(ctx context.Context, opts Options) (*Interceptor, error) { return nil, errNeedsLinux }

// Cleanup fails: tproxy needs Linux.
func Cleanup(opts Options) error { return errNeedsLinux }

// Close does nothing.
func (i *Interceptor) Close() error { return nil }

// Add fails: tproxy needs Linux.
func (i *Interceptor) Add(id string, ic Interception) error { return errNeedsLinux }

// Remove fails: tproxy needs Linux.
func (i *Interceptor) Remove(id string) error { return errNeedsLinux }

// Accept fails: tproxy needs Linux.
func (i *Interceptor) Accept() (net.Conn, error) { return nil, errNeedsLinux }

// ReadUDP fails: tproxy needs Linux.
func (i *Interceptor) ReadUDP(b []byte) (n int, client, origDst netip.AddrPort, err error) {
	return 0, netip.AddrPort{}, netip.AddrPort{}, errNeedsLinux
}

// ReplyConn fails: tproxy needs Linux.
func (i *Interceptor) ReplyConn(origDst netip.AddrPort) (*net.UDPConn, error) {
	return nil, errNeedsLinux
}

// BypassControl fails: tproxy needs Linux.
func (i *Interceptor) BypassControl(network, address string, c syscall.RawConn) error {
	return errNeedsLinux
}

// TCPAddr returns the zero address.
func (i *Interceptor) TCPAddr() netip.AddrPort { return netip.AddrPort{} }

// UDPAddr returns the zero address.
func (i *Interceptor) UDPAddr() netip.AddrPort { return netip.AddrPort{} }

// Stats returns zeros.
func (i *Interceptor) Stats() Stats { return Stats{} }
