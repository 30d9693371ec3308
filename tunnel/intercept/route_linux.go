package intercept

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// system holds the netlink handles of one network namespace and the settings that name the
// interceptor's state in it.
type system struct {
	opts Options
	ns   netns.NsHandle
	rt   *netlink.Handle
}

// openSystem opens handles on the network namespace of the calling thread.
func openSystem(o Options) (*system, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("open network namespace of this thread: %w", err)
	}
	rt, err := openIn(ns,
		func() (*netlink.Handle, error) { return netlink.NewHandle(unix.NETLINK_ROUTE) },
		func() (*netlink.Handle, error) { return netlink.NewHandleAt(ns, unix.NETLINK_ROUTE) })
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("open rtnetlink: %w", hint(err))
	}
	return &system{opts: o, ns: ns, rt: rt}, nil
}

// openIn opens a netlink socket in ns: with open, on the calling thread and without
// setns(2), when that thread is in ns (every thread of a router is), so that CAP_NET_ADMIN
// is enough; otherwise with openAt, which enters ns with setns(2) and so needs CAP_SYS_ADMIN
// (tests, whose threads are in several namespaces). The thread is locked meanwhile, so that
// the socket is made where its namespace was checked.
func openIn[T any](ns netns.NsHandle, open, openAt func() (T, error)) (T, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cur, err := netns.Get(); err == nil {
		same := cur.Equal(ns)
		cur.Close()
		if same {
			return open()
		}
	}
	return openAt()
}

// nft returns a fresh nftables connection to the namespace, its socket opened at once (so
// that openIn decides where it is); the caller closes it with CloseLasting. Each batch gets
// its own, so that a failed batch leaves nothing queued or remembered behind.
func (s *system) nft() (*nftables.Conn, error) {
	c, err := openIn(s.ns,
		func() (*nftables.Conn, error) { return nftables.New(nftables.AsLasting()) },
		func() (*nftables.Conn, error) {
			return nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(s.ns)))
		})
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink: %w", hint(err))
	}
	return c, nil
}

func (s *system) close() {
	s.rt.Close()
	s.ns.Close()
}

// policyRule is "fwmark <mark> lookup <table> pref <priority>".
func (s *system) policyRule() *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlink.FAMILY_V4
	r.Mark = s.opts.Mark
	r.Table = s.opts.RouteTable
	r.Priority = s.opts.RulePriority
	return r
}

// localRoute is "local 0.0.0.0/0 dev lo table <table>".
func (s *system) localRoute() (*netlink.Route, error) {
	lo, err := s.rt.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find device lo: %w", err)
	}
	return &netlink.Route{
		Family:    netlink.FAMILY_V4,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		LinkIndex: lo.Attrs().Index,
		Table:     s.opts.RouteTable,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
	}, nil
}

// deleteTable deletes the nftables table if it exists, and reports whether it did.
func (s *system) deleteTable() (bool, error) {
	nft, err := s.nft()
	if err != nil {
		return false, err
	}
	defer nft.CloseLasting()
	t := newRuleset(s.opts).table
	tables, err := nft.ListTablesOfFamily(t.Family)
	if err != nil {
		return false, fmt.Errorf("look for nftables table %s: %w", t.Name, hint(err))
	}
	for _, x := range tables {
		if x.Name != t.Name {
			continue
		}
		nft.DelTable(t)
		if err := nft.Flush(); err != nil {
			if errors.Is(err, os.ErrNotExist) { // gone meanwhile
				return false, nil
			}
			return false, fmt.Errorf("delete nftables table %s: %w", t.Name, hint(err))
		}
		return true, nil
	}
	return false, nil
}

// installRouting adds the policy rule and the local route.
func (s *system) installRouting() error {
	route, err := s.localRoute()
	if err != nil {
		return err
	}
	if err := s.rt.RouteAdd(route); err != nil {
		return fmt.Errorf("add route local 0.0.0.0/0 dev lo table %d: %w", s.opts.RouteTable, hint(err))
	}
	if err := s.rt.RuleAdd(s.policyRule()); err != nil {
		return fmt.Errorf("add ip rule fwmark %#x lookup %d: %w", s.opts.Mark, s.opts.RouteTable, hint(err))
	}
	return nil
}

// cleanup removes the nftables table, every policy rule "fwmark <mark> lookup <table>" and
// the local default route of the table, whichever exist, and returns what it removed.
func (s *system) cleanup() ([]string, error) {
	var removed []string
	var errs []error
	deleted, err := s.deleteTable()
	if err != nil {
		errs = append(errs, err)
	} else if deleted {
		removed = append(removed, "nftables table "+s.opts.Table)
	}

	rules, err := s.rt.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Mark: s.opts.Mark, Table: s.opts.RouteTable},
		netlink.RT_FILTER_MARK|netlink.RT_FILTER_TABLE)
	if err != nil {
		errs = append(errs, fmt.Errorf("list ip rules: %w", hint(err)))
	}
	for _, r := range rules {
		desc := fmt.Sprintf("ip rule fwmark %#x lookup %d pref %d", r.Mark, r.Table, r.Priority)
		if err := s.rt.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete %s: %w", desc, hint(err)))
			continue
		}
		removed = append(removed, desc)
	}

	routes, err := s.rt.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: s.opts.RouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		errs = append(errs, fmt.Errorf("list routes of table %d: %w", s.opts.RouteTable, hint(err)))
	}
	for _, r := range routes {
		if r.Type != unix.RTN_LOCAL || r.Dst != nil && r.Dst.String() != "0.0.0.0/0" {
			continue
		}
		desc := fmt.Sprintf("route local 0.0.0.0/0 table %d", s.opts.RouteTable)
		if err := s.rt.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete %s: %w", desc, hint(err)))
			continue
		}
		removed = append(removed, desc)
	}
	return removed, errors.Join(errs...)
}

// Cleanup removes, from the network namespace of the calling thread, whatever an interceptor
// with these options installed and left behind, e.g. when its process crashed: the nftables
// table, the policy rule and the local route. Missing pieces are not an error. Open does the
// same before installing anything.
func Cleanup(opts Options) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	s, err := openSystem(o)
	if err != nil {
		return err
	}
	defer s.close()
	removed, err := s.cleanup()
	for _, r := range removed {
		o.Logger.Info("tproxy intercept: removed stale state", "what", r)
	}
	if err != nil {
		return fmt.Errorf("clean up tproxy state: %w", err)
	}
	return nil
}

// inNetNS runs fn on a thread in network namespace ns, so that the sockets fn creates belong
// to it whichever thread the caller runs on.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		cur, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open network namespace of this thread: %w", err)
			return
		}
		defer cur.Close()
		if cur.Equal(ns) {
			done <- fn()
			runtime.UnlockOSThread()
			return
		}
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter network namespace: %w", hint(err))
			return
		}
		ferr := fn()
		if err := netns.Set(cur); err != nil {
			// Leave the thread locked: the runtime ends it with this goroutine.
			done <- errors.Join(ferr, fmt.Errorf("restore network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// hint appends the reason to a permission error: tproxy needs CAP_NET_ADMIN.
func hint(err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w (tproxy needs CAP_NET_ADMIN)", err)
	}
	return err
}
