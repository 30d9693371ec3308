package tunnel

import (
	"context"
	"net"
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
