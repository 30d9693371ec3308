package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// inNS runs fn on a thread of its own moved into network namespace ns: the sockets fn
// creates, and the processes it starts, belong to ns. The thread returns to its namespace
// afterwards; when it cannot, it stays locked and ends with its goroutine, so no other
// goroutine ever runs in ns by accident.
func inNS(ns netns.NsHandle, fn func() error) error {
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
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return from network namespace (thread dropped): %w (fn: %v)", err, fnErr)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// newNS creates an anonymous network namespace with lo up; it lives as long as the handle
// (closed at the end of the test) or a process in it.
func newNS(t *testing.T, name string) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ns, err = netns.New() // unshares the thread's network namespace
		if err != nil {
			// The thread may or may not have moved: leave it locked so that it ends.
			errc <- err
			return
		}
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return from the new namespace (thread dropped): %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("new network namespace %s: %v", name, err)
	}
	t.Cleanup(func() { ns.Close() })
	h := handleAt(t, ns)
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("namespace %s: set lo up: %v", name, err)
	}
	return ns
}

// handleAt returns a netlink handle working in namespace ns, closed at the end of the test.
func handleAt(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// end is one side of a veth pair.
type end struct {
	ns   netns.NsHandle
	dev  string
	addr netip.Prefix
}

// veth creates a veth pair between a.ns and b.ns (created in a's namespace with its peer
// placed in b's, never in the host's), gives each end its address, sets both up and waits
// until they carry traffic.
func veth(t *testing.T, a, b end) {
	t.Helper()
	ha, hb := handleAt(t, a.ns), handleAt(t, b.ns)
	if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.dev}, PeerName: b.dev,
		PeerNamespace: netlink.NsFd(b.ns)}); err != nil {
		t.Fatalf("add veth %s/%s: %v", a.dev, b.dev, err)
	}
	for _, side := range []struct {
		h *netlink.Handle
		e end
	}{{ha, a}, {hb, b}} {
		link, err := side.h.LinkByName(side.e.dev)
		if err != nil {
			t.Fatalf("find %s: %v", side.e.dev, err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: side.e.addr.Addr().AsSlice(), Mask: net.CIDRMask(side.e.addr.Bits(), 32)}}
		if err := side.h.AddrAdd(link, addr); err != nil {
			t.Fatalf("add %s to %s: %v", side.e.addr, side.e.dev, err)
		}
		if err := side.h.LinkSetUp(link); err != nil {
			t.Fatalf("set %s up: %v", side.e.dev, err)
		}
	}
	// Until the kernel's link watch has seen the carrier, a veth drops what it is to send.
	for _, side := range []struct {
		h   *netlink.Handle
		dev string
	}{{ha, a.dev}, {hb, b.dev}} {
		eventually(t, time.Now().Add(5*time.Second), side.dev+" up", func() error {
			link, err := side.h.LinkByName(side.dev)
			if err != nil {
				return err
			}
			if s := link.Attrs().OperState; s != netlink.OperUp {
				return fmt.Errorf("operstate %s", s)
			}
			return nil
		})
	}
}

// defaultRoute adds a default route via gw in namespace ns.
func defaultRoute(t *testing.T, ns netns.NsHandle, gw netip.Addr) {
	t.Helper()
	if err := handleAt(t, ns).RouteAdd(&netlink.Route{Gw: gw.AsSlice()}); err != nil {
		t.Fatalf("default route via %s: %v", gw, err)
	}
}

// nsDialer dials TCP and UDP from a network namespace.
func nsDialer(ns netns.NsHandle) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var c net.Conn
		err := inNS(ns, func() error {
			var err error
			var d net.Dialer
			c, err = d.DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
}

// eventually calls f every 100 ms until it returns nil, and fails the test with f's last
// error once deadline passes.
func eventually(t *testing.T, deadline time.Time, what string, f func() error) {
	t.Helper()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done in time: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
