//go:build linux

// Package netnstest is for tests that need a network of their own: it creates network
// namespaces (lo up), veth pairs between them with addresses, default routes, and runs a
// function in a namespace on a locked thread, so that the sockets and processes it creates
// belong there. Every namespace and link it makes is removed in t.Cleanup. Only tests import
// it; they must run as root (SkipUnlessRoot skips them elsewhere).
package netnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// carrierTimeout bounds the wait for a new veth pair to carry traffic.
const carrierTimeout = 5 * time.Second

// SkipUnlessRoot skips the test, saying why it needs root, when the process is not root.
func SkipUnlessRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root: %s", why)
	}
}

// New creates a network namespace with lo up, without moving the calling thread into it. It
// lives as long as its handle, closed at the end of the test, or a process or thread in it.
// name only labels errors.
func New(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	SkipUnlessRoot(t, "creates network namespaces")
	ns := netns.None()
	// netns.New moves the thread that calls it: do it on a thread of its own.
	err := onThread(func() (err error) {
		ns, err = netns.New()
		return err
	})
	if err != nil {
		if ns.IsOpen() {
			ns.Close()
		}
		t.Fatalf("network namespace %s: %v", name, err)
	}
	t.Cleanup(func() { ns.Close() })
	setLoUp(t, Handle(t, ns), name)
	return ns
}

// Enter locks the calling goroutine to its thread and moves the thread into a new network
// namespace with lo up, for code under test that works in the namespace of the thread that
// calls it. At the end of the test the thread goes back to its namespace and is unlocked;
// when it cannot go back it stays locked and ends with the test's goroutine. Only the
// test's own goroutine may call Enter. name only labels errors.
func Enter(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	SkipUnlessRoot(t, "creates network namespaces")
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("network namespace %s: current network namespace: %v", name, err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		t.Fatalf("network namespace %s: create: %v", name, err) // the thread stays locked
	}
	t.Cleanup(func() {
		defer orig.Close()
		defer ns.Close()
		if err := netns.Set(orig); err != nil {
			t.Errorf("leave network namespace %s (the test's thread ends with it): %v", name, err)
			return
		}
		runtime.UnlockOSThread()
	})
	setLoUp(t, Handle(t, ns), name)
	return ns
}

func setLoUp(t testing.TB, h *netlink.Handle, name string) {
	t.Helper()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("network namespace %s: set lo up: %v", name, err)
	}
}

// Handle returns a netlink handle working in namespace ns, closed at the end of the test.
func Handle(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// End is one side of a veth pair: its namespace, device name and address.
type End struct {
	NS   netns.NsHandle
	Dev  string
	Addr netip.Prefix
}

// Veth creates a veth pair between a.NS and b.NS (created in a's namespace with its peer
// placed in b's, never in the host's), gives each end its address, sets both up and waits
// until they carry traffic. The pair is deleted at the end of the test.
func Veth(t testing.TB, a, b End) {
	t.Helper()
	ha, hb := Handle(t, a.NS), Handle(t, b.NS)
	if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.Dev}, PeerName: b.Dev,
		PeerNamespace: netlink.NsFd(b.NS)}); err != nil {
		t.Fatalf("add veth %s/%s: %v", a.Dev, b.Dev, err)
	}
	t.Cleanup(func() {
		// Deleting one end deletes the pair. A test may have deleted it already.
		link, err := ha.LinkByName(a.Dev)
		if err == nil {
			err = ha.LinkDel(link)
		}
		if err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
			t.Errorf("delete veth %s/%s: %v", a.Dev, b.Dev, err)
		}
	})
	for _, side := range []struct {
		h *netlink.Handle
		e End
	}{{ha, a}, {hb, b}} {
		link, err := side.h.LinkByName(side.e.Dev)
		if err != nil {
			t.Fatalf("find %s: %v", side.e.Dev, err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: side.e.Addr.Addr().AsSlice(),
			Mask: net.CIDRMask(side.e.Addr.Bits(), side.e.Addr.Addr().BitLen())}}
		if err := side.h.AddrAdd(link, addr); err != nil {
			t.Fatalf("add %s to %s: %v", side.e.Addr, side.e.Dev, err)
		}
		if err := side.h.LinkSetUp(link); err != nil {
			t.Fatalf("set %s up: %v", side.e.Dev, err)
		}
	}
	// Until the kernel's link watch has seen the carrier, a veth drops what it is to send.
	for _, side := range []struct {
		h   *netlink.Handle
		dev string
	}{{ha, a.Dev}, {hb, b.Dev}} {
		deadline := time.Now().Add(carrierTimeout)
		for {
			link, err := side.h.LinkByName(side.dev)
			if err != nil {
				t.Fatalf("find %s: %v", side.dev, err)
			}
			state := link.Attrs().OperState
			if state == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not up after %v: operstate %s", side.dev, carrierTimeout, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// DefaultRoute adds a default route via gw in namespace ns. It goes with the namespace (or
// with the link it goes out on) at the end of the test.
func DefaultRoute(t testing.TB, ns netns.NsHandle, gw netip.Addr) {
	t.Helper()
	if err := Handle(t, ns).RouteAdd(&netlink.Route{Gw: gw.AsSlice()}); err != nil {
		t.Fatalf("default route via %s: %v", gw, err)
	}
}

// Run runs fn on a thread of its own moved into network namespace ns: the sockets fn
// creates, and the processes it starts, belong to ns. The thread goes back to its namespace
// afterwards; when it cannot, it stays locked and ends with its goroutine, so no other
// goroutine ever runs in ns by accident. Run returns fn's error, or why the thread could
// not enter or leave ns. fn does not run on the test's goroutine: it must not call t.Fatal.
func Run(ns netns.NsHandle, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter network namespace: %w", err)
		}
		return fn()
	})
}

// onThread runs fn on a locked thread of its own, then returns the thread to the network
// namespace it was in and unlocks it. When the thread cannot go back, it stays locked and
// ends with its goroutine, so no other goroutine ever runs in a namespace fn moved it to.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer orig.Close()
		// fn may end its goroutine (t.FailNow off the test's goroutine does): say so
		// rather than leave the caller waiting. The thread stays locked and ends.
		returned := false
		defer func() {
			if !returned {
				errc <- errors.New("the function run in a network namespace did not return")
			}
		}()
		fnErr := fn()
		returned = true
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return to the thread's network namespace (thread dropped): %w (before: %v)", err, fnErr)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// Do is Run for a test whose fn keeps its own results: failing to enter or leave ns fails
// the test, so that a result fn did not produce is never mistaken for one it did.
func Do(t testing.TB, ns netns.NsHandle, fn func()) {
	t.Helper()
	if err := Run(ns, func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// DialTimeout dials address from namespace ns and returns the dial's result, for tests that
// expect it to fail as well as for those that expect it to succeed; failing to enter or
// leave ns fails the test.
func DialTimeout(t testing.TB, ns netns.NsHandle, network, address string, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	var c net.Conn
	var err error
	Do(t, ns, func() { c, err = net.DialTimeout(network, address, timeout) })
	return c, err
}

// ListenUDP opens a UDP socket on laddr (nil: an address and port of the kernel's choice)
// in namespace ns, failing the test when it cannot. The caller closes it.
func ListenUDP(t testing.TB, ns netns.NsHandle, network string, laddr *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	Do(t, ns, func() { c, err = net.ListenUDP(network, laddr) })
	if err != nil {
		t.Fatalf("listen %s %v in a network namespace: %v", network, laddr, err)
	}
	return c
}

// Dialer dials from network namespace NS. Its DialContext fits net/http's Transport and
// the tunnel's host dialer.
type Dialer struct {
	NS netns.NsHandle
}

// DialContext dials address from d.NS; the connection, once made, is used from any thread.
func (d Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := Run(d.NS, func() error {
		var nd net.Dialer
		var err error
		c, err = nd.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
