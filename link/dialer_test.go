package link

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/testutil"
)

// freePort returns a loopback TCP port nobody listens on (for now).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestDialerRedialsAfterBackoff(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, nil)
	b := newNode(t, ca, "router-b", releaseAll, nil)
	port := freePort(t)
	d := a.newDialer(t)
	addr := "tls:127.0.0.1:" + strconv.Itoa(port)
	if err := d.Dial(Target{RouterID: "router-b", Address: addr, Groups: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	// Nobody listens yet: the dial fails and the target waits for its backoff.
	testutil.Eventually(t, "the first dial fails", func() bool { return d.state("router-b") == waiting })
	b.listen(t, config.TransportTLS, port)
	first := a.waitUp(t)
	b.waitUp(t)

	// Reset the link's ack connection: both routers take the link down and a dials again.
	c := tcpOf(t, first, len(first.Stats())-1)
	c.SetLinger(0)
	c.Close()
	a.waitDown(t)
	b.waitDown(t)
	second := a.waitUp(t)
	if second.ID() == first.ID() {
		t.Errorf("the redialed link has the old id %s", first.ID())
	}
	if got := b.waitUp(t); got.ID() != second.ID() {
		t.Errorf("b accepted link %s, a dialed %s", got.ID(), second.ID())
	}
}

func TestDialerDialsAtOnceWhenPeerComesOnline(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, nil)
	b := newNode(t, ca, "router-b", releaseAll, nil)
	port := freePort(t)
	dc := dialerConfig(true)
	dc.UnhealthyDialBackoff = config.Backoff{
		MinRetryInterval:   time.Hour,
		MaxRetryInterval:   time.Hour,
		RetryBackoffFactor: 10,
	}
	d := a.newDialer(t, dc)
	d.SetPeerOnline("router-b", false)
	if err := d.Dial(Target{RouterID: "router-b", Address: "tls:127.0.0.1:" + strconv.Itoa(port), Groups: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the dial fails", func() bool { return d.state("router-b") == waiting })
	if w := d.wait("router-b"); w != time.Hour {
		t.Fatalf("offline peer waits %s, want the unhealthy minimum 1h", w)
	}
	b.listen(t, config.TransportTLS, port)
	d.SetPeerOnline("router-b", true)
	a.waitUp(t) // well before the hour
}

func TestDialQueueFullFailsAtOnce(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, func(o *Options) {
		o.DialQueueLength = 1
		o.DialWorkerCount = 1
		o.HandshakeTimeout = 3 * time.Second
	})
	// A listener that accepts and never answers keeps the only worker busy.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	d := a.newDialer(t)
	addr := "tls:" + hole.Addr().String()
	if err := d.Dial(Target{RouterID: "router-b", Address: addr, Groups: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	c := <-accepted // the worker is dialing router-b
	defer c.Close()
	if err := d.Dial(Target{RouterID: "router-c", Address: addr, Groups: []string{"default"}}); err != nil {
		t.Fatalf("the queue's one slot: %v", err)
	}
	start := time.Now()
	err = d.Dial(Target{RouterID: "router-d", Address: addr, Groups: []string{"default"}})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Dial with the queue full: %v; want ErrQueueFull", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Dial took %s with the queue full", el)
	}
}

func TestDialerSkipsTargetsOfOtherGroups(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, nil)
	var conns atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	d := a.newDialer(t, dialerConfig(true, "east", "west"))
	err = d.Dial(Target{RouterID: "router-b", Address: "tls:" + ln.Addr().String(), Groups: []string{"north"}})
	if !errors.Is(err, ErrNoCommonGroup) {
		t.Fatalf("Dial: %v; want ErrNoCommonGroup", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections to a listener of another group", n)
	}
}

func TestListenerRefusesOtherGroups(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, nil)
	b := newNode(t, ca, "router-b", releaseAll, nil)
	ln := b.listen(t, config.TransportTLS, 0, "east")
	d := a.newDialer(t)
	tg := targetOf("router-b", ln)
	tg.Groups = []string{"default"} // the controller's view is stale: the listener moved to east
	addr, _ := config.ParseAddress(tg.Address, config.TransportTLS)
	_, err := d.dial("router-b", addr, dialerConfig(true))
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("dial: %v; want ErrRefused", err)
	}
}

func TestDialerRejectsBadTargets(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	a := newNode(t, ca, "router-a", releaseAll, nil)
	d := a.newDialer(t)
	for _, tg := range []Target{
		{RouterID: "", Address: "tls:127.0.0.1:1", Groups: []string{"default"}},
		{RouterID: "router-a", Address: "tls:127.0.0.1:1", Groups: []string{"default"}},
		{RouterID: "router-b", Address: "tcp:127.0.0.1:1", Groups: []string{"default"}},
		{RouterID: "router-b", Address: "127.0.0.1:1", Groups: []string{"default"}},
	} {
		if err := d.Dial(tg); err == nil {
			t.Errorf("Dial(%+v) succeeded", tg)
		}
	}
}

func TestNextWait(t *testing.T) {
	t.Parallel()
	healthy := config.Backoff{MinRetryInterval: 5 * time.Second, MaxRetryInterval: 5 * time.Minute, RetryBackoffFactor: 1.5}
	unhealthy := config.Backoff{MinRetryInterval: time.Minute, MaxRetryInterval: time.Hour, RetryBackoffFactor: 10}
	tests := []struct {
		b    config.Backoff
		prev time.Duration
		want time.Duration
	}{
		{healthy, 0, 5 * time.Second},
		{healthy, 5 * time.Second, 7500 * time.Millisecond},
		{healthy, 4 * time.Minute, 5 * time.Minute},
		{healthy, 5 * time.Minute, 5 * time.Minute},
		{unhealthy, 0, time.Minute},
		{unhealthy, 5 * time.Second, time.Minute}, // switching from the healthy policy
		{unhealthy, time.Minute, 10 * time.Minute},
		{unhealthy, 10 * time.Minute, time.Hour},
		{unhealthy, 1 << 62, time.Hour},
	}
	for _, tt := range tests {
		if got := nextWait(tt.b, tt.prev); got != tt.want {
			t.Errorf("nextWait(%v, %s) = %s, want %s", tt.b, tt.prev, got, tt.want)
		}
	}
}

func TestLocalAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ bind, peer, want string }{
		{"", "127.0.0.1", "invalid AddrPort"},
		{"127.0.0.1", "127.0.0.1", "127.0.0.1:0"},
		{"tls:127.0.0.1:7000", "127.0.0.1", "127.0.0.1:7000"},
		{"lo", "127.0.0.1", "127.0.0.1:0"},
		{"lo", "::ffff:127.0.0.2", "127.0.0.1:0"},
		{"lo", "::1", "[::1]:0"}, // of the peer's family, not the interface's first address
	} {
		if tc.peer == "::1" && !hasLoopback6() {
			continue
		}
		got, err := localAddr(t.Context(), tc.bind, tc.peer)
		if err != nil || got.String() != tc.want {
			t.Errorf("localAddr(%q, %q) = %v, %v; want %s", tc.bind, tc.peer, got, err, tc.want)
		}
	}
	if _, err := localAddr(t.Context(), "no-such-if0", "127.0.0.1"); err == nil {
		t.Error("localAddr of a missing interface succeeded")
	}
}

// hasLoopback6 reports whether lo has ::1.
func hasLoopback6() bool {
	ifi, err := net.InterfaceByName("lo")
	if err != nil {
		return false
	}
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(net.IPv6loopback) {
			return true
		}
	}
	return false
}

// TestDialerBindsToTheInterfaceAddressOfThePeersFamily dials a listener on ::1 with the
// interface lo as bind: the dialer must bind ::1, not lo's first address, 127.0.0.1.
func TestDialerBindsToTheInterfaceAddressOfThePeersFamily(t *testing.T) {
	t.Parallel()
	if !hasLoopback6() {
		t.Skip("lo has no ::1")
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			a := newNode(t, ca, "router-a", releaseAll, nil)
			b := newNode(t, ca, "router-b", releaseAll, nil)
			bind := config.Address{Transport: tr, Host: "::1", Port: 0}
			ln, err := Listen(b.ctx, config.LinkListener{Binding: "transport", Bind: bind, Advertise: bind, Groups: []string{"default"}}, b.reg)
			if err != nil {
				t.Fatal(err)
			}
			dc := dialerConfig(true)
			dc.Bind = "lo"
			if err := a.newDialer(t, dc).Dial(targetOf("router-b", ln)); err != nil {
				t.Fatal(err)
			}
			l := a.waitUp(t)
			if ip := netip.MustParseAddrPort(l.RemoteAddr().String()).Addr(); ip != netip.IPv6Loopback() {
				t.Errorf("linked to %s", l.RemoteAddr())
			}
		})
	}
}

// state and wait read a target's state for tests.
func (d *Dialer) state(id string) targetState {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.targets[id]; t != nil {
		return t.state
	}
	return -1
}

func (d *Dialer) wait(id string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.targets[id].wait
}
