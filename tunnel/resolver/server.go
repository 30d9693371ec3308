package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"

	"github.com/miekg/dns"
)

// Server is a Resolver's UDP and TCP sockets on one address; see Resolver.Listen.
type Server struct {
	r         *Resolver
	addr      netip.AddrPort
	udp       *net.UDPConn
	tcp       *net.TCPListener
	upstreams []netip.AddrPort
	used      atomic.Bool // set by Run or Close, which own the sockets
}

// Listen binds UDP and TCP sockets on addr, for Server.Run. With port 0 both get the same
// free port; Addr returns it. Upstreams that are the bound address itself are dropped, lest
// queries loop.
func (r *Resolver) Listen(addr netip.AddrPort) (*Server, error) {
	if !addr.IsValid() {
		return nil, errors.New("resolver: no address to listen on")
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	udpNet, tcpNet := "udp4", "tcp4"
	if addr.Addr().Is6() {
		udpNet, tcpNet = "udp6", "tcp6"
	}
	for attempt := 1; ; attempt++ {
		pc, err := net.ListenUDP(udpNet, net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return nil, fmt.Errorf("resolver: listening on udp %s: %w", addr, err)
		}
		lap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
		bound := netip.AddrPortFrom(lap.Addr().Unmap(), lap.Port())
		ln, err := net.ListenTCP(tcpNet, net.TCPAddrFromAddrPort(bound))
		if err != nil {
			pc.Close()
			if addr.Port() == 0 && attempt < 10 && errors.Is(err, syscall.EADDRINUSE) {
				continue // the free UDP port is taken in TCP: try another
			}
			return nil, fmt.Errorf("resolver: listening on tcp %s: %w", bound, err)
		}
		s := &Server{r: r, addr: bound, udp: pc, tcp: ln}
		for _, up := range r.upstreams {
			if up == bound || bound.Addr().IsUnspecified() && up.Port() == bound.Port() && up.Addr().IsLoopback() {
				r.log.Warn("resolver: ignoring upstream that is the resolver itself", "upstream", up)
				continue
			}
			s.upstreams = append(s.upstreams, up)
		}
		return s, nil
	}
}

// Addr returns the address the server is bound to.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Run answers queries over UDP and TCP until ctx ends, then shuts both servers down and
// returns nil, or returns the error that stopped a server. A Server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.used.CompareAndSwap(false, true) {
		return errors.New("resolver: server already run or closed")
	}
	ctx, cancel := context.WithCancel(ctx) // ends forwarding in flight when Run returns
	defer cancel()

	servers := []*dns.Server{
		{PacketConn: s.udp, UDPSize: dns.DefaultMsgSize},
		{Listener: s.tcp},
	}
	started := make([]chan struct{}, len(servers))
	done := make([]chan error, len(servers)) // receives what ActivateAndServe returned
	for i, srv := range servers {
		network := []string{"udp", "tcp"}[i]
		srv.Handler = dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			reply := s.r.answer(ctx, s.upstreams, req, network)
			if err := w.WriteMsg(reply); err != nil {
				s.r.log.Debug("resolver: writing reply", "client", w.RemoteAddr(), "error", err)
			}
		})
		started[i], done[i] = make(chan struct{}), make(chan error, 1)
		srv.NotifyStartedFunc = func() { close(started[i]) }
		go func() {
			err := srv.ActivateAndServe()
			if err != nil {
				err = fmt.Errorf("resolver: serving %s on %s: %w", network, s.addr, err)
			}
			done[i] <- err
		}()
	}

	// Shutting down a server that has not started yet fails and leaves it running, so wait
	// for both to start (or fail to) before waiting for the end.
	var errs []error
	for i := range servers {
		select {
		case <-started[i]:
		case err := <-done[i]:
			errs = append(errs, err)
			done[i] = nil
		}
	}
	if len(errs) == 0 {
		select {
		case <-ctx.Done():
		case err := <-done[0]:
			errs = append(errs, err)
			done[0] = nil
		case err := <-done[1]:
			errs = append(errs, err)
			done[1] = nil
		}
	}
	cancel()
	for i, srv := range servers {
		if done[i] != nil {
			srv.Shutdown() // returns once the server's handlers have returned
			errs = append(errs, <-done[i])
		}
	}
	s.udp.Close()
	s.tcp.Close()
	return errors.Join(errs...)
}

// Close releases the sockets of a server that will not Run; once Run is called, Run owns
// them.
func (s *Server) Close() error {
	if !s.used.CompareAndSwap(false, true) {
		return nil
	}
	return errors.Join(s.udp.Close(), s.tcp.Close())
}
