package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
)

// TestProxyHandsConnectionsToTheirService: each port's connections reach carry with that
// port's service, and ending the context closes the listeners and waits for carry.
func TestProxyHandsConnectionsToTheirService(t *testing.T) {
	t.Parallel()
	p, err := ListenProxy("", []config.TunnelService{{Service: "web", Port: 0}, {Service: "db", Port: 0}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Serve(ctx, func(ctx context.Context, c net.Conn, service string) {
			got <- service
			<-ctx.Done()
			c.Close()
		})
		close(done)
	}()
	for _, svc := range []string{"web", "db"} {
		c, err := net.Dial("tcp", p.Addr(svc))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case s := <-got:
			if s != svc {
				t.Fatalf("a connection to %s's port was carried to %s", svc, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no connection to %s", svc)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the context ended")
	}
	if _, err := net.Dial("tcp", p.Addr("web")); err == nil {
		t.Fatal("the proxy still listens after it stopped")
	}
}

func TestProxyPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if _, err := ListenProxy("127.0.0.1", []config.TunnelService{{Service: "x", Port: port}}); err == nil {
		t.Fatal("a taken port was accepted")
	}
}

// TestProxyUpdate: Update opens a listener for a new pair and closes the one of a removed
// pair, while a connection accepted on the removed port goes on until it ends; a new port
// that cannot be opened changes nothing.
func TestProxyUpdate(t *testing.T) {
	t.Parallel()
	p, err := ListenProxy("", []config.TunnelService{{Service: "a", Port: 0}, {Service: "b", Port: 0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	carried := make(chan string, 8)
	go func() {
		p.Serve(ctx, func(ctx context.Context, c net.Conn, service string) {
			defer c.Close()
			carried <- service
			io.Copy(c, c) // an echo, until the client closes
		})
		close(done)
	}()
	echo := func(c net.Conn, msg string) error {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != msg {
			return fmt.Errorf("echoed %q, want %q", buf, msg)
		}
		return nil
	}
	bAddr := p.Addr("b")
	held, err := net.Dial("tcp", bAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := echo(held, "before"); err != nil {
		t.Fatal(err)
	}

	added, removed, err := p.Update([]config.TunnelService{{Service: "a", Port: 0}, {Service: "c", Port: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(added, []config.TunnelService{{Service: "c"}}) || !slices.Equal(removed, []config.TunnelService{{Service: "b"}}) {
		t.Fatalf("Update added %v and removed %v, want c and b", added, removed)
	}
	if p.Addr("b") != "" {
		t.Errorf("Addr(b) = %q after b was removed", p.Addr("b"))
	}
	if c, err := net.Dial("tcp", bAddr); err == nil {
		c.Close()
		t.Error("the removed port still accepts connections")
	}
	c, err := net.Dial("tcp", p.Addr("c"))
	if err != nil {
		t.Fatalf("the added port: %v", err)
	}
	defer c.Close()
	if err := echo(c, "to c"); err != nil {
		t.Fatal(err)
	}
	if err := echo(held, "after b was removed"); err != nil {
		t.Fatalf("the connection on the removed port: %v", err)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	before := p.Services()
	if _, _, err := p.Update([]config.TunnelService{{Service: "d", Port: port}}); err == nil || !strings.Contains(err.Error(), `service "d"`) {
		t.Errorf("Update onto a taken port: %v, want an error naming service d", err)
	}
	if after := p.Services(); !slices.Equal(after, before) {
		t.Errorf("a failed Update changed the list from %v to %v", before, after)
	}
	if err := echo(c, "still"); err != nil {
		t.Fatal(err)
	}

	held.Close()
	c.Close()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after the context ended")
	}
	if n := len(carried); n != 2 {
		t.Errorf("%d connections carried, want 2", n)
	}
}

// TestProxyUpdateMovesAPort: a fixed port moved from one service to another in one Update
// keeps its listener, and its next connections are carried to the new service.
func TestProxyUpdateMovesAPort(t *testing.T) {
	t.Parallel()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	p, err := ListenProxy("", []config.TunnelService{{Service: "web", Port: port}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	carried := make(chan string, 2)
	go p.Serve(ctx, func(_ context.Context, c net.Conn, service string) {
		c.Close()
		carried <- service
	})
	addr := p.Addr("web")
	added, removed, err := p.Update([]config.TunnelService{{Service: "api", Port: port}})
	if err != nil {
		t.Fatalf("moving port %d from web to api: %v", port, err)
	}
	if !slices.Equal(added, []config.TunnelService{{Service: "api", Port: port}}) || !slices.Equal(removed, []config.TunnelService{{Service: "web", Port: port}}) {
		t.Fatalf("Update added %v and removed %v", added, removed)
	}
	if p.Addr("api") != addr || p.Addr("web") != "" {
		t.Fatalf("Addr(api) = %q, Addr(web) = %q; want %q and none", p.Addr("api"), p.Addr("web"), addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-carried; got != "api" {
		t.Fatalf("a connection to the moved port went to %q, want api", got)
	}
}
