package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// tcpEcho serves TCP echo on ln: each connection's bytes come back, and its end of input
// ends the output (half-close).
func tcpEcho(t *testing.T, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
			}()
		}
	}()
}

// tcpEchoPort serves TCP echo (tcpEcho) on a port of 127.0.0.1 it returns.
func tcpEchoPort(t *testing.T) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcpEcho(t, ln)
	return ln.Addr().(*net.TCPAddr).Port
}

// udpEcho serves UDP echo on pc.
func udpEcho(t *testing.T, pc net.PacketConn) {
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, MaxDatagram)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
}

// runHost runs a Host on overlay until the end of the test.
func runHost(t *testing.T, overlay Overlay, opts HostOptions) *Host {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	h := &Host{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, overlay, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("host Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("host Run did not return after its context ended")
		}
	})
	return h
}

// TestHostTCP: the target port follows the circuit's dst_port within allowedPortRanges, data
// crosses both ways with half-close, and a port outside the ranges is refused.
func TestHostTCP(t *testing.T) {
	t.Parallel()
	port := tcpEchoPort(t)

	f := newFakeOverlay()
	h := runHost(t, f, HostOptions{})
	f.setServices(service("echo", false, true, map[string]string{HostV1: fmt.Sprintf(
		`{"protocol":"tcp","address":"127.0.0.1","forwardPort":true,"allowedPortRanges":[{"low":%d,"high":%d}]}`, port, port)}))
	testutil.Eventually(t, "echo bound", func() bool { return f.bound("echo") })

	svc := Service{ID: "echo", Name: "echo"}
	c, err := f.Dial(t.Context(), svc, AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("hello "), 50000)
	go func() {
		c.Write(msg)
		c.(closeWriter).CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo returned %d bytes, want %d", len(got), len(msg))
	}

	// Outside allowedPortRanges: closed at once, the target never dialed.
	c, err = f.Dial(t.Context(), svc, AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: strconv.Itoa(port + 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("refused circuit: read %d bytes, %v; want EOF", n, err)
	}
	// A UDP circuit cannot feed the TCP target.
	c, err = f.Dial(t.Context(), svc, AppData{Protocol: "udp", DstPort: strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("UDP circuit to TCP target: read %d bytes, %v; want EOF", n, err)
	}
	testutil.Eventually(t, "counters", func() bool {
		s := h.Stats()
		return s.Circuits == 3 && s.Refused == 2 && s.DialFailures == 0 && s.Active == 0 && s.Bound == 1
	})
}

// TestHostDialFailure: a target that refuses the connection closes the circuit and counts.
func TestHostDialFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there now
	f := newFakeOverlay()
	h := runHost(t, f, HostOptions{})
	f.setServices(service("gone", false, true, map[string]string{HostV1: fmt.Sprintf(
		`{"protocol":"tcp","address":"127.0.0.1","port":%d}`, addr.Port)}))
	testutil.Eventually(t, "gone bound", func() bool { return f.bound("gone") })
	c, err := f.Dial(t.Context(), Service{ID: "gone"}, AppData{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("read %d bytes, %v; want EOF", n, err)
	}
	testutil.Eventually(t, "a dial failure", func() bool { return h.Stats().DialFailures == 1 })
}

// TestHostReach: a listener that is a Reacher gets the host's Reach, which connects to the
// target a circuit's app data selects and counts the circuit active until its done function
// is called; the service's unbinding closes the connection; a UDP target is refused with
// ErrDatagramTarget and not counted; a target that does not answer is a dial failure.
func TestHostReach(t *testing.T) {
	t.Parallel()
	port := tcpEchoPort(t)
	_, gonePort, _ := net.SplitHostPort(testutil.ClosedAddr(t))

	f := newFakeOverlay()
	h := runHost(t, f, HostOptions{})
	f.setServices(
		service("echo", false, true, map[string]string{HostV1: fmt.Sprintf(
			`{"forwardProtocol":true,"allowedProtocols":["tcp","udp"],"address":"127.0.0.1","port":%d}`, port)}),
		service("gone", false, true, map[string]string{HostV1: fmt.Sprintf(`{"protocol":"tcp","address":"127.0.0.1","port":%s}`, gonePort)}))
	var reach, reachGone Reach
	testutil.Eventually(t, "the host's Reach for both services", func() bool {
		if l := f.listener("echo"); l != nil {
			reach = l.reacher()
		}
		if l := f.listener("gone"); l != nil {
			reachGone = l.reacher()
		}
		return reach != nil && reachGone != nil
	})

	connect := func(reach Reach, app AppData) (net.Conn, func(), error) {
		c, err := reach(app)
		if err != nil {
			return nil, nil, err
		}
		return c(t.Context())
	}
	c, done, err := connect(reach, AppData{Protocol: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	if s := h.Stats(); s.Circuits != 1 || s.Active != 1 {
		t.Fatalf("stats %+v after a reach, want a circuit, active", s)
	}
	msg := []byte("reached")
	c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo %q (%v)", got, err)
	}
	done()
	done() // once only
	if s := h.Stats(); s.Active != 0 {
		t.Fatalf("stats %+v after done, want none active", s)
	}
	c.Close()

	if _, err := reach(AppData{Protocol: "udp"}); !errors.Is(err, ErrDatagramTarget) {
		t.Fatalf("reach of a UDP target: %v, want ErrDatagramTarget", err)
	}
	if _, _, err := connect(reachGone, AppData{}); err == nil {
		t.Fatal("reach of a target that does not answer succeeded")
	}
	if s := h.Stats(); s.Circuits != 2 || s.DialFailures != 1 || s.Active != 0 {
		t.Fatalf("stats %+v, want two circuits (the UDP one is not counted), a dial failure", s)
	}

	// A connect whose context ends (the route's timeout) is a dial failure too.
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	gc, err := reachGone(AppData{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gc(ended); err == nil {
		t.Fatal("a connect whose context ended succeeded")
	}
	if s := h.Stats(); s.Circuits != 3 || s.DialFailures != 2 {
		t.Fatalf("stats %+v, want the connect past its context counted as a dial failure", s)
	}

	// Unbinding the service closes what was reached and not yet done.
	c, _, err = connect(reach, AppData{Protocol: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	f.setServices()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a reached connection of an unbound service: read %v, want it closed", err)
	}
}

// TestHostUDP: datagrams framed on the circuit reach a UDP target and come back with their
// boundaries, and an idle flow is closed after the idle timeout.
func TestHostUDP(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udpEcho(t, pc)
	port := pc.LocalAddr().(*net.UDPAddr).Port

	f := newFakeOverlay()
	const idle = time.Second // keep-alives every third of it pass even with a loaded machine's stalls
	h := runHost(t, f, HostOptions{UDPIdleTimeout: idle})
	// The first terminator refuses udp; the second takes it.
	f.setServices(service("dns", false, true, map[string]string{HostV2: fmt.Sprintf(`{"terminators":[
		{"protocol":"tcp","address":"127.0.0.1","port":%d},
		{"forwardProtocol":true,"allowedProtocols":["udp"],"address":"127.0.0.1","port":%d,
		 "listenOptions":{"precedence":"required","cost":10}}]}`, port, port)}))
	testutil.Eventually(t, "dns bound", func() bool { return f.bound("dns") })

	c, err := f.Dial(t.Context(), Service{ID: "dns"}, AppData{Protocol: "udp", DstIP: "10.1.2.3", DstPort: "53"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dc := NewDatagramConn(c)
	sizes := []int{1, 0, 1400, 30000, 7}
	for i, n := range sizes {
		if err := dc.WriteDatagram(bytes.Repeat([]byte{byte('a' + i)}, n)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, MaxDatagram)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i, want := range sizes {
		n, err := dc.ReadDatagram(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], bytes.Repeat([]byte{byte('a' + i)}, want)) {
			t.Fatalf("datagram %d: %d bytes, want %d bytes of %c", i, n, want, 'a'+i)
		}
	}
	if s := h.Stats(); s.Active != 1 {
		t.Errorf("%d active circuits during the flow, want 1", s.Active)
	}

	// Datagrams keep the flow open past the idle timeout.
	for range 6 {
		time.Sleep(idle / 3)
		if err := dc.WriteDatagram([]byte("keep")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := dc.ReadDatagram(buf); err != nil || string(buf[:n]) != "keep" {
			t.Fatalf("active flow: read %q, %v", buf[:n], err)
		}
	}

	// Idle: the host closes the circuit after the idle timeout.
	start := time.Now()
	if n, err := dc.ReadDatagram(buf); err != io.EOF {
		t.Fatalf("idle flow: read %d bytes, %v; want EOF", n, err)
	}
	if d := time.Since(start); d < idle/2 || d > 10*idle {
		t.Errorf("idle flow closed after %v, timeout %v", d, idle)
	}
	testutil.Eventually(t, "no active circuit", func() bool { return h.Stats().Active == 0 })
}

// TestHostUnbind: a service that goes away, or loses Bind, is unbound and its connections
// end; one that comes back is bound again; the end of Run unbinds everything.
func TestHostUnbind(t *testing.T) {
	t.Parallel()
	cfg := map[string]string{HostV1: fmt.Sprintf(`{"protocol":"tcp","address":"127.0.0.1","port":%d}`, tcpEchoPort(t))}

	f := newFakeOverlay()
	h := &Host{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, f, HostOptions{Logger: testLogger(t)}) }()
	f.setServices(service("a", false, true, cfg), service("b", false, true, cfg), service("dialonly", true, false, cfg))
	testutil.Eventually(t, "a and b bound", func() bool { return f.bound("a") && f.bound("b") && h.Stats().Bound == 2 })
	if f.bound("dialonly") {
		t.Error("a service without Bind permission is bound")
	}
	c, err := f.Dial(t.Context(), Service{ID: "a"}, AppData{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	// a loses Bind: unbound, its connection closed.
	f.setServices(service("a", true, false, cfg), service("b", false, true, cfg))
	testutil.Eventually(t, "a unbound", func() bool { return !f.bound("a") && h.Stats().Bound == 1 })
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection of an unbound service stays open")
	}
	if _, err := f.Dial(t.Context(), Service{ID: "a"}, AppData{}); err == nil {
		t.Error("dialing an unbound service succeeded")
	}
	// b goes away; a comes back.
	f.setServices(service("a", false, true, cfg))
	testutil.Eventually(t, "a bound, b unbound", func() bool { return f.bound("a") && !f.bound("b") && h.Stats().Bound == 1 })

	// A changed host config applies to the next circuits without binding again.
	f.mu.Lock()
	binds := f.binding
	f.mu.Unlock()
	f.setServices(service("a", false, true, map[string]string{HostV1: `{"protocol":"udp","address":"127.0.0.1","port":9}`}))
	testutil.Eventually(t, "the new config", func() bool {
		c, err := f.Dial(t.Context(), Service{ID: "a"}, AppData{Protocol: "tcp"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(closeWriter).CloseWrite() // the old config's echo ends too
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		return h.Stats().Refused == 1 // tcp circuit, udp terminator
	})
	f.mu.Lock()
	if f.binding != binds {
		t.Errorf("a config change bound the service again (%d binds, %d before)", f.binding, binds)
	}
	f.mu.Unlock()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if f.bound("a") || h.Stats().Bound != 0 {
		t.Error("a still bound after Run returned")
	}
}

// TestHostInvalidConfig: a service whose host config is not valid is not bound.
func TestHostInvalidConfig(t *testing.T) {
	t.Parallel()
	f := newFakeOverlay()
	h := runHost(t, f, HostOptions{})
	f.setServices(service("bad", false, true, map[string]string{HostV1: `{"protocol":"tcp","address":"127.0.0.1"}`}),
		service("good", false, true, map[string]string{HostV1: `{"protocol":"tcp","address":"127.0.0.1","port":9}`}))
	testutil.Eventually(t, "good bound", func() bool { return f.bound("good") })
	if f.bound("bad") || h.Stats().Bound != 1 {
		t.Error("a service with an invalid host config is bound")
	}
}
