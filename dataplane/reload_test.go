package dataplane

import (
	"net"
	"slices"
	"testing"

	"github.com/zmesh/zmesh/config"
)

// TestReloadProxyServices: a reload with another services list opens the new pair's port and
// closes the removed one's (connections in progress are tunnel.Proxy's test).
func TestReloadProxyServices(t *testing.T) {
	t.Parallel()
	n, _, addr := line(t, "tls", false)
	a := n.routers["A"].r

	cfg := *a.cfg
	cfg.Listeners = slices.Clone(cfg.Listeners)
	tun := *cfg.Listeners[0].Tunnel
	tun.Services = []config.TunnelService{{Service: "other", Port: 0}}
	cfg.Listeners[0].Tunnel = &tun
	applied, err := a.Reload(&cfg)
	if err != nil || !slices.Equal(applied, []string{"listeners[0].options.services"}) {
		t.Fatalf("Reload = %q, %v; want the services applied", applied, err)
	}
	if a.ProxyAddress("data") != "" || a.ProxyAddress("other") == "" {
		t.Fatalf("after the reload: data at %q, other at %q; want other alone", a.ProxyAddress("data"), a.ProxyAddress("other"))
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the removed service's port still accepts connections")
	}
	if c, err := net.Dial("tcp", a.ProxyAddress("other")); err != nil {
		t.Errorf("the added service's port: %v", err)
	} else {
		c.Close()
	}
}
