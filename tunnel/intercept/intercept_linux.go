package intercept

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Interceptor owns the transparent-proxy state of one network namespace: the nftables table,
// the policy rule and route, and the transparent listeners. Its methods may be called from
// any goroutine.
type Interceptor struct {
	opts  Options
	log   *slog.Logger
	sys   *system
	rules *ruleset
	tcp   *net.TCPListener
	udp   *net.UDPConn
	stop  func() bool // stops closing on the end of Open's context

	mu        sync.RWMutex        // Lock: Add, Remove, Close; RLock: ReplyConn
	installed map[string]struct{} // ids of the interceptions
	closed    bool

	interceptions atomic.Int64
	tcpAccepted   atomic.Uint64
	udpReceived   atomic.Uint64
}

// Open installs the interceptor in the network namespace of the calling thread: it removes
// state left by an earlier run with the same options (see Cleanup), opens the transparent
// listeners, adds the policy rule and route and creates the nftables table with no
// interceptions. The interceptor lives until Close, or until ctx is done, which closes it.
func Open(ctx context.Context, opts Options) (*Interceptor, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open tproxy interceptor: %w", err)
	}
	sys, err := openSystem(o)
	if err != nil {
		return nil, fmt.Errorf("open tproxy interceptor: %w", err)
	}
	i := &Interceptor{
		opts:      o,
		log:       o.Logger.With("table", o.Table),
		sys:       sys,
		rules:     newRuleset(o),
		installed: map[string]struct{}{},
	}
	if err := i.install(ctx); err != nil {
		i.teardown()
		return nil, fmt.Errorf("open tproxy interceptor: %w", err)
	}
	i.mu.Lock() // Close, which reads i.stop, may run at once if ctx is done already
	i.stop = context.AfterFunc(ctx, func() {
		if err := i.Close(); err != nil {
			i.log.Error("tproxy intercept: close at end of context", "error", err)
		}
	})
	i.mu.Unlock()
	i.log.Info("tproxy intercept: installed", "tcp", i.TCPAddr(), "udp", i.UDPAddr(),
		"mark", fmt.Sprintf("%#x", o.Mark), "bypassMark", fmt.Sprintf("%#x", o.BypassMark),
		"routeTable", o.RouteTable)
	return i, nil
}

// install does the work of Open; on error the caller tears down what it did.
func (i *Interceptor) install(ctx context.Context) error {
	removed, err := i.sys.cleanup()
	for _, r := range removed {
		i.log.Warn("tproxy intercept: removed state left by an earlier run", "what", r)
	}
	if err != nil {
		return fmt.Errorf("clean up state of an earlier run: %w", err)
	}

	err = inNetNS(i.sys.ns, func() error {
		transparent := control(
			sockopt{unix.SOL_IP, unix.IP_TRANSPARENT, 1, "IP_TRANSPARENT"},
			sockopt{unix.SOL_SOCKET, unix.SO_MARK, int(i.opts.BypassMark), "SO_MARK"})
		lc := net.ListenConfig{Control: transparent}
		ln, err := lc.Listen(ctx, "tcp4", i.opts.Listen.String())
		if err != nil {
			return fmt.Errorf("transparent TCP listener: %w", err)
		}
		i.tcp = ln.(*net.TCPListener)
		lc.Control = func(network, address string, c syscall.RawConn) error {
			if err := transparent(network, address, c); err != nil {
				return err
			}
			return control(sockopt{unix.SOL_IP, unix.IP_RECVORIGDSTADDR, 1, "IP_RECVORIGDSTADDR"})(network, address, c)
		}
		pc, err := lc.ListenPacket(ctx, "udp4", i.opts.Listen.String())
		if err != nil {
			return fmt.Errorf("transparent UDP listener: %w", err)
		}
		i.udp = pc.(*net.UDPConn)
		return nil
	})
	if err != nil {
		return err
	}
	i.rules.tcpPort = i.TCPAddr().Port()
	i.rules.udpPort = i.UDPAddr().Port()

	if err := i.sys.installRouting(); err != nil {
		return err
	}

	nft, err := i.sys.nft()
	if err != nil {
		return err
	}
	defer nft.CloseLasting()
	i.rules.install(nft)
	if err := nft.Flush(); err != nil {
		return fmt.Errorf("install nftables table %s: %w", i.opts.Table, hint(err))
	}
	return nil
}

// teardown undoes a failed install as far as it got.
func (i *Interceptor) teardown() {
	if _, err := i.sys.cleanup(); err != nil {
		i.log.Debug("tproxy intercept: clean up after failed open", "error", err)
	}
	i.closeListeners()
	i.sys.close()
}

func (i *Interceptor) closeListeners() {
	if i.tcp != nil {
		i.tcp.Close()
	}
	if i.udp != nil {
		i.udp.Close()
	}
}

// Close removes the nftables table, the policy rule and the route and closes the listeners.
// Connections already accepted and reply sockets stay open; they are the caller's. Closing
// again does nothing.
func (i *Interceptor) Close() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil
	}
	i.closed = true
	i.stop()
	_, err := i.sys.cleanup()
	i.closeListeners()
	i.sys.close()
	clear(i.installed)
	i.interceptions.Store(0)
	if err != nil {
		return fmt.Errorf("close tproxy interceptor: %w", err)
	}
	i.log.Info("tproxy intercept: removed")
	return nil
}

// Add installs interception ic under id, replacing the interception id had, in one atomic
// nftables batch: on error, the rules are as they were.
func (i *Interceptor) Add(id string, ic Interception) error {
	if err := validID(id); err != nil {
		return fmt.Errorf("add interception: %w", err)
	}
	ic, err := ic.normalize()
	if err != nil {
		return fmt.Errorf("add interception %q: %w", id, err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return fmt.Errorf("add interception %q: %w", id, net.ErrClosed)
	}
	nft, old, err := i.tagged(id)
	if err != nil {
		return fmt.Errorf("add interception %q: %w", id, err)
	}
	defer nft.CloseLasting()
	for _, r := range old {
		if err := nft.DelRule(r); err != nil {
			return fmt.Errorf("add interception %q: replace rule: %w", id, err)
		}
	}
	rules := i.rules.rules(id, ic)
	for _, r := range rules {
		nft.AddRule(r)
	}
	if err := nft.Flush(); err != nil {
		return fmt.Errorf("add interception %q to nftables table %s: %w", id, i.opts.Table, hint(err))
	}
	if _, had := i.installed[id]; !had {
		i.interceptions.Add(1)
	}
	i.installed[id] = struct{}{}
	i.log.Info("tproxy intercept: interception added", "id", id, "prefixes", ic.Prefixes,
		"ports", ic.Ports, "protocols", ic.Protocols, "rules", len(rules), "replaced", len(old))
	return nil
}

// Remove deletes the rules of interception id in one atomic nftables batch. It returns an
// error wrapping ErrNotInstalled if id has no interception.
func (i *Interceptor) Remove(id string) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return fmt.Errorf("remove interception %q: %w", id, net.ErrClosed)
	}
	if _, ok := i.installed[id]; !ok {
		return fmt.Errorf("remove interception %q: %w", id, ErrNotInstalled)
	}
	nft, old, err := i.tagged(id)
	if err != nil {
		return fmt.Errorf("remove interception %q: %w", id, err)
	}
	defer nft.CloseLasting()
	for _, r := range old {
		if err := nft.DelRule(r); err != nil {
			return fmt.Errorf("remove interception %q: %w", id, err)
		}
	}
	if err := nft.Flush(); err != nil {
		return fmt.Errorf("remove interception %q from nftables table %s: %w", id, i.opts.Table, hint(err))
	}
	delete(i.installed, id)
	i.interceptions.Add(-1)
	i.log.Info("tproxy intercept: interception removed", "id", id, "rules", len(old))
	return nil
}

// tagged returns a new nftables connection, which the caller closes with CloseLasting, and
// the rules of interception id.
func (i *Interceptor) tagged(id string) (*nftables.Conn, []*nftables.Rule, error) {
	nft, err := i.sys.nft()
	if err != nil {
		return nil, nil, err
	}
	rules, err := i.rules.tagged(nft, id)
	if err != nil {
		nft.CloseLasting()
		return nil, nil, fmt.Errorf("nftables table %s: %w", i.opts.Table, hint(err))
	}
	return nft, rules, nil
}

// Accept waits for the next intercepted TCP connection. Its LocalAddr is the original
// destination, its RemoteAddr the client. After Close, the error wraps net.ErrClosed.
func (i *Interceptor) Accept() (net.Conn, error) {
	c, err := i.tcp.Accept()
	if err != nil {
		return nil, err
	}
	i.tcpAccepted.Add(1)
	return c, nil
}

// ReadUDP waits for the next intercepted datagram, copies it into b (which should hold 65535
// bytes) and returns its length, the client that sent it and its original destination. A
// datagram longer than b comes truncated with an error wrapping ErrTruncated. Errors other
// than those wrapping net.ErrClosed concern one datagram only. Replies must come from
// origDst: send them with a socket from ReplyConn.
func (i *Interceptor) ReadUDP(b []byte) (n int, client, origDst netip.AddrPort, err error) {
	oob := make([]byte, unix.CmsgSpace(unix.SizeofSockaddrInet6))
	n, oobn, flags, client, err := i.udp.ReadMsgUDPAddrPort(b, oob)
	if err != nil {
		return 0, netip.AddrPort{}, netip.AddrPort{}, err
	}
	client = unmap(client)
	origDst, err = origDstAddr(oob[:oobn])
	if err != nil {
		return 0, client, netip.AddrPort{}, fmt.Errorf("intercepted datagram from %s: %w", client, err)
	}
	i.udpReceived.Add(1)
	if flags&unix.MSG_TRUNC != 0 {
		return n, client, origDst, fmt.Errorf("intercepted datagram from %s to %s, longer than %d bytes: %w",
			client, origDst, len(b), ErrTruncated)
	}
	return n, client, origDst, nil
}

// origDstAddr returns the address of the IP_ORIGDSTADDR control message in oob.
func origDstAddr(oob []byte) (netip.AddrPort, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parse control messages: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_IP || m.Header.Type != unix.IP_ORIGDSTADDR {
			continue
		}
		sa, err := unix.ParseOrigDstAddr(&m)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("parse original destination: %w", err)
		}
		if sa4, ok := sa.(*unix.SockaddrInet4); ok {
			return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(sa4.Port)), nil
		}
	}
	return netip.AddrPort{}, errors.New("no original destination (IP_ORIGDSTADDR) with the datagram")
}

// ReplyConn returns a new UDP socket bound to origDst with IP_TRANSPARENT and SO_REUSEADDR,
// for sending replies to clients with WriteToUDPAddrPort so that they come from the address
// the clients sent to. It also carries the bypass mark, so its packets are not intercepted.
// The socket is not connected, and so does not take the clients' further datagrams away from
// ReadUDP; one socket serves any number of clients of origDst. The caller caches and closes
// it (Close of the interceptor does not).
func (i *Interceptor) ReplyConn(origDst netip.AddrPort) (*net.UDPConn, error) {
	origDst = unmap(origDst)
	if !origDst.Addr().Is4() {
		return nil, fmt.Errorf("reply socket on %s: only IPv4 is supported", origDst)
	}
	i.mu.RLock()
	defer i.mu.RUnlock()
	if i.closed {
		return nil, fmt.Errorf("reply socket on %s: %w", origDst, net.ErrClosed)
	}
	var pc net.PacketConn
	err := inNetNS(i.sys.ns, func() error {
		lc := net.ListenConfig{Control: control(
			sockopt{unix.SOL_IP, unix.IP_TRANSPARENT, 1, "IP_TRANSPARENT"},
			sockopt{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1, "SO_REUSEADDR"},
			sockopt{unix.SOL_SOCKET, unix.SO_MARK, int(i.opts.BypassMark), "SO_MARK"})}
		var err error
		pc, err = lc.ListenPacket(context.Background(), "udp4", origDst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reply socket on %s: %w", origDst, err)
	}
	return pc.(*net.UDPConn), nil
}

// BypassControl gives a socket the bypass mark (SO_MARK, which needs CAP_NET_ADMIN), so that
// none of its packets are intercepted. Set it as the Control of the net.Dialer (or
// net.ListenConfig) of every socket the tunnel sends through, or its own egress may loop
// back into the tunnel.
func (i *Interceptor) BypassControl(network, address string, c syscall.RawConn) error {
	return control(sockopt{unix.SOL_SOCKET, unix.SO_MARK, int(i.opts.BypassMark), "SO_MARK"})(network, address, c)
}

// TCPAddr returns the address of the transparent TCP listener.
func (i *Interceptor) TCPAddr() netip.AddrPort {
	return unmap(i.tcp.Addr().(*net.TCPAddr).AddrPort())
}

// UDPAddr returns the address of the transparent UDP socket.
func (i *Interceptor) UDPAddr() netip.AddrPort {
	return unmap(i.udp.LocalAddr().(*net.UDPAddr).AddrPort())
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// Stats returns a snapshot of the counters.
func (i *Interceptor) Stats() Stats {
	return Stats{
		Interceptions: i.interceptions.Load(),
		TCPAccepted:   i.tcpAccepted.Load(),
		UDPReceived:   i.udpReceived.Load(),
	}
}

// sockopt is an integer socket option.
type sockopt struct {
	level, name, value int
	desc               string
}

// control returns a Control function for net.Dialer and net.ListenConfig setting opts.
func control(opts ...sockopt) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range opts {
				if err := unix.SetsockoptInt(int(fd), o.level, o.name, o.value); err != nil {
					serr = fmt.Errorf("set %s: %w", o.desc, hint(err))
					return
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}
