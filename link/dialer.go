package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/zmesh/zmesh/config"
)

// Target is a router to link to, as the controller names it: its id and one of its link
// listeners.
type Target struct {
	RouterID string
	Address  string   // the listener's advertise address: tls:<host>:<port> or quic:<host>:<port>
	Groups   []string // the listener's groups
}

// Dialer keeps this router linked to its targets. Dial puts a target in the dial queue
// (forwarder.linkDialQueueLength) that forwarder.linkDialWorkerCount workers empty. A target
// is dialed with the first link dialer of the configuration that shares a group with it.
// After a failed dial the target waits, by the healthy backoff while its router is online
// and by the unhealthy one while it is not, and goes back into the queue. When a link to
// the target goes down the target is dialed again at once if the link had lived at least the
// backoff's minimum, after the backoff otherwise. A link to the target that the other router
// dialed counts as the target's link.
type Dialer struct {
	reg     *Registry
	dialers []config.LinkDialer
	ctx     context.Context
	queue   chan *target
	log     *slog.Logger

	mu      sync.Mutex
	targets map[string]*target // by router id
	offline map[string]bool    // routers known not to be connected to the controller
}

type target struct {
	Target
	addr   config.Address
	dialer *config.LinkDialer
	state  targetState
	wait   time.Duration // the last backoff wait; 0 after a success
	timer  *time.Timer   // while waiting
}

type targetState int

const (
	queued  targetState = iota // in the dial queue
	dialing                    // a worker has it
	linked                     // a link to the router is up
	waiting                    // for the backoff timer
)

// NewDialer starts the dial workers of dialers (the link.dialers of the configuration); they
// stop, and the links dialed close, when ctx ends.
func NewDialer(ctx context.Context, dialers []config.LinkDialer, reg *Registry) (*Dialer, error) {
	if len(dialers) == 0 {
		return nil, errors.New("link dialer: no link dialers configured")
	}
	for i, dc := range dialers {
		if len(dc.Groups) == 0 {
			return nil, fmt.Errorf("link dialer %d: no groups", i)
		}
		if err := checkBackoff(dc.HealthyDialBackoff); err != nil {
			return nil, fmt.Errorf("link dialer %d: healthyDialBackoff: %w", i, err)
		}
		if err := checkBackoff(dc.UnhealthyDialBackoff); err != nil {
			return nil, fmt.Errorf("link dialer %d: unhealthyDialBackoff: %w", i, err)
		}
	}
	d := &Dialer{
		reg:     reg,
		dialers: dialers,
		ctx:     ctx,
		queue:   make(chan *target, reg.opts.DialQueueLength),
		log:     reg.opts.Log.With("component", "link dialer"),
		targets: map[string]*target{},
		offline: map[string]bool{},
	}
	for range reg.opts.DialWorkerCount {
		go d.dialLoop()
	}
	context.AfterFunc(ctx, d.stopTimers)
	return d, nil
}

// Dial queues a dial of t and returns at once. It fails when t is malformed, when no dialer
// shares a group with t (ErrNoCommonGroup), or when the queue is full (ErrQueueFull). For a
// target already known it only updates its address and groups, taken at the next dial.
func (d *Dialer) Dial(t Target) error {
	if err := d.ctx.Err(); err != nil {
		return fmt.Errorf("link dialer stopped: %w", err)
	}
	if t.RouterID == "" || t.RouterID == d.reg.opts.Identity.RouterID {
		return fmt.Errorf("link target %q: not another router", t.RouterID)
	}
	addr, err := config.ParseAddress(t.Address, config.TransportTLS, config.TransportQUIC)
	if err != nil {
		return fmt.Errorf("link target %q: %w", t.RouterID, err)
	}
	dc := d.dialerFor(t.Groups)
	if dc == nil {
		return fmt.Errorf("%w: router %q listens at %s in groups %q; no link dialer of this router is in one", ErrNoCommonGroup, t.RouterID, t.Address, t.Groups)
	}
	t.Groups = append([]string(nil), t.Groups...)
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur := d.targets[t.RouterID]; cur != nil {
		cur.Target, cur.addr, cur.dialer = t, addr, dc
		return nil
	}
	tg := &target{Target: t, addr: addr, dialer: dc, state: queued}
	select {
	case d.queue <- tg:
		d.targets[t.RouterID] = tg
		return nil
	default:
		return fmt.Errorf("%w: %d dials waiting; router %q not queued", ErrQueueFull, cap(d.queue), t.RouterID)
	}
}

// Forget stops dialing router id. A link to it stays up.
func (d *Dialer) Forget(routerID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.targets[routerID]; t != nil {
		if t.timer != nil {
			t.timer.Stop()
		}
		delete(d.targets, routerID)
	}
}

// SetPeerOnline records whether router id is connected to the controller; routers are taken
// as online until told otherwise. A router coming online that is waiting to be redialed is
// dialed at once, and its backoff starts again from the healthy policy.
func (d *Dialer) SetPeerOnline(routerID string, online bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !online {
		d.offline[routerID] = true
		return
	}
	delete(d.offline, routerID)
	t := d.targets[routerID]
	if t == nil {
		return
	}
	t.wait = 0
	if t.state == waiting {
		t.timer.Stop()
		d.enqueue(t)
	}
}

// PeerOnline reports whether the dialer counts a router as online.
func (d *Dialer) PeerOnline(routerID string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.offline[routerID]
}

func (d *Dialer) dialerFor(groups []string) *config.LinkDialer {
	for i := range d.dialers {
		if intersect(d.dialers[i].Groups, groups) {
			return &d.dialers[i]
		}
	}
	return nil
}

// dialLoop dials the targets queued for dialing until the dialer's context ends.
func (d *Dialer) dialLoop() {
	for {
		select {
		case <-d.ctx.Done():
			return
		case t := <-d.queue:
			d.attempt(t)
		}
	}
}

// attempt dials t unless a link to its router is up already.
func (d *Dialer) attempt(t *target) {
	d.mu.Lock()
	if d.targets[t.RouterID] != t {
		d.mu.Unlock()
		return
	}
	t.state = dialing
	id, addr, dc := t.RouterID, t.addr, *t.dialer
	d.mu.Unlock()

	l := d.reg.Get(id)
	var err error
	if l == nil {
		l, err = d.dial(id, addr, dc)
		if errors.Is(err, ErrDuplicate) {
			l = d.reg.Get(id)
		}
	}
	if l != nil {
		d.watch(t, l)
		return
	}
	if d.ctx.Err() != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.targets[id] == t {
		d.schedule(t)
		d.log.Warn("link dial failed", "peer", id, "address", addr.String(), "retry in", t.wait.String(), "err", err)
	}
}

// watch waits for the link to t's router to go down, and dials again.
func (d *Dialer) watch(t *target, l *Link) {
	d.mu.Lock()
	if d.targets[t.RouterID] != t {
		d.mu.Unlock()
		return
	}
	t.state = linked
	d.mu.Unlock()
	since := time.Now()
	go func() {
		select {
		case <-l.Done():
		case <-d.ctx.Done():
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.targets[t.RouterID] != t || t.state != linked || d.ctx.Err() != nil {
			return
		}
		if time.Since(since) >= d.policy(t).MinRetryInterval {
			t.wait = 0
			d.enqueue(t)
			return
		}
		d.schedule(t)
	}()
}

// schedule puts t back into the queue after its next backoff wait. d.mu is held.
func (d *Dialer) schedule(t *target) {
	t.wait = nextWait(d.policy(t), t.wait)
	t.state = waiting
	t.timer = time.AfterFunc(t.wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.targets[t.RouterID] == t && t.state == waiting && d.ctx.Err() == nil {
			d.enqueue(t)
		}
	})
}

// enqueue puts t into the dial queue, or back to waiting when the queue is full. d.mu is held.
func (d *Dialer) enqueue(t *target) {
	select {
	case d.queue <- t:
		t.state = queued
	default:
		d.schedule(t)
		d.log.Warn("link dial queue full", "peer", t.RouterID, "retry in", t.wait.String())
	}
}

func (d *Dialer) policy(t *target) config.Backoff {
	if d.offline[t.RouterID] {
		return t.dialer.UnhealthyDialBackoff
	}
	return t.dialer.HealthyDialBackoff
}

func (d *Dialer) stopTimers() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.targets {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
}

// dial makes a link to router id at addr: one connection, or Options.PayloadConns payload
// connections then an ack connection sharing a new link id, and registers it.
func (d *Dialer) dial(id string, addr config.Address, dc config.LinkDialer) (*Link, error) {
	local, err := localAddr(d.ctx, dc.Bind, addr.Host)
	if err != nil {
		return nil, err
	}
	opts := &d.reg.opts
	h := hello{V: helloVersion, RouterID: opts.Identity.RouterID, LinkID: uuid.NewString(), Role: RoleSingle, Groups: dc.Groups}
	roles := []Role{RoleSingle}
	if dc.Split {
		roles = roles[:0]
		for range opts.PayloadConns {
			roles = append(roles, RolePayload)
		}
		roles = append(roles, RoleAck)
		if opts.PayloadConns > 1 {
			h.Payloads = opts.PayloadConns
		}
	}
	tlsConf := opts.Identity.clientTLS(id)
	var streams []stream
	for i, role := range roles {
		h.Role, h.Index = role, 0
		if role == RolePayload {
			h.Index = i
		}
		s, err := d.open(addr, local, tlsConf, h, id)
		if err != nil {
			for _, s := range streams {
				s.Close()
			}
			return nil, fmt.Errorf("link to router %q at %s: %s connection: %w", id, addr, role, err)
		}
		streams = append(streams, s)
	}
	l := newLink(d.reg, h.LinkID, id, opts.Identity.RouterID, addr.Transport, streams...)
	if err := d.reg.add(d.ctx, l); err != nil {
		return nil, err
	}
	return l, nil
}

// open dials one connection and says hello.
func (d *Dialer) open(addr config.Address, local netip.AddrPort, tlsConf *tls.Config, h hello, peerID string) (stream, error) {
	timeout := d.reg.opts.HandshakeTimeout
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	s, err := dialStream(ctx, addr, local, tlsConf, timeout, &d.reg.bufs)
	if err != nil {
		return nil, err
	}
	if err := clientHandshake(s, h, peerID, timeout); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// localAddr turns a link dialer's bind — an IP, <transport>:<ip>:<port>, or an interface
// name — into the local address to dial peerHost from; empty means any. Of an interface it
// takes the first address of the peer's family (IPv4 for an IPv4 peer), resolving peerHost
// when it is a name; IPv6 addresses must be global or loopback, link-local ones needing a
// zone.
func localAddr(ctx context.Context, bind, peerHost string) (netip.AddrPort, error) {
	if bind == "" {
		return netip.AddrPort{}, nil
	}
	if ip, err := netip.ParseAddr(bind); err == nil {
		return netip.AddrPortFrom(ip, 0), nil
	}
	if _, rest, ok := strings.Cut(bind, ":"); ok {
		if ap, err := netip.ParseAddrPort(rest); err == nil {
			return ap, nil
		}
	}
	ifi, err := net.InterfaceByName(bind)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("link dialer bind %q: %w", bind, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("link dialer bind %q: %w", bind, err)
	}
	peer, err := peerAddr(ctx, peerHost)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("link dialer bind %q: %w", bind, err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if ip = ip.Unmap(); !ok || ip.Is4() != peer.Is4() {
			continue
		}
		if ip.Is4() || ip.IsGlobalUnicast() || ip.IsLoopback() {
			return netip.AddrPortFrom(ip, 0), nil
		}
	}
	family := "IPv6"
	if peer.Is4() {
		family = "IPv4"
	}
	return netip.AddrPort{}, fmt.Errorf("link dialer bind %q: the interface has no usable %s address for %s", bind, family, peerHost)
}

// peerAddr is host's address, or the first address it resolves to.
func peerAddr(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no address", host)
	}
	return ips[0].Unmap(), nil
}
