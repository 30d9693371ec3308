package dataplane

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/tunnel"
)

// A router's tunnel dials, as the router's identity, a service another router's tunnel
// hosts: the app data reaches the host, bytes cross both ways with half-close, and with
// end-to-end encryption required the routers' identities do the key exchange. The
// services come from the controller as the identities' policies and configs say.
func TestTunnelOverlay(t *testing.T) {
	t.Parallel()
	n := hostAndProxy(t, "encrypted")
	for _, encrypted := range []bool{false, true} {
		name := "plain"
		if encrypted {
			name = "encrypted"
		}
		svc := &model.Service{Name: name, EncryptionRequired: encrypted}
		if err := n.m.CreateService(svc); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*model.ServicePolicy{
			{Name: "dial-" + name, Type: model.PolicyDial, Semantic: model.SemanticAny, IdentityRoles: []string{"@" + n.routers["A"].id}, ServiceRoles: []string{"@" + svc.ID}},
			{Name: "bind-" + name, Type: model.PolicyBind, Semantic: model.SemanticAny, IdentityRoles: []string{"@" + n.routers["H"].id}, ServiceRoles: []string{"@" + svc.ID}},
		} {
			if err := n.m.CreateServicePolicy(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	services := func(r *Router) map[string]tunnel.Service {
		got := make(chan []tunnel.Service, 1)
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go r.overlay.WatchServices(wctx, func(list []tunnel.Service) {
			select {
			case got <- list:
			default:
			}
		})
		out := map[string]tunnel.Service{}
		for _, s := range <-got {
			out[s.Name] = s
		}
		return out
	}
	hostSvc, dialSvc := services(n.routers["H"].r), services(n.routers["A"].r)
	for _, name := range []string{"plain", "encrypted"} {
		t.Run(name, func(t *testing.T) {
			hs, ds := hostSvc[name], dialSvc[name]
			if !hs.Bind || hs.Dial || !ds.Dial || ds.Bind || hs.EncryptionRequired != (name == "encrypted") {
				t.Fatalf("services: host %+v, dialer %+v", hs, ds)
			}
			ln, err := n.routers["H"].r.overlay.Bind(ctx, hs)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			type accepted struct {
				data string
				app  tunnel.AppData
				err  error
			}
			got := make(chan accepted, 1)
			go func() {
				c, app, err := ln.Accept()
				if err != nil {
					got <- accepted{err: err}
					return
				}
				defer c.Close()
				b, err := io.ReadAll(c)
				if err == nil {
					_, err = c.Write([]byte("reply after half-close"))
				}
				got <- accepted{string(b), app, err}
			}()
			c, err := n.routers["A"].r.overlay.Dial(ctx, ds, tunnel.AppData{Protocol: "tcp", DstIP: "10.1.2.3", DstPort: "443"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("request"))
			c.(interface{ CloseWrite() error }).CloseWrite()
			a := <-got
			if a.err != nil || a.data != "request" || a.app.DstIP != "10.1.2.3" || a.app.DstPort != "443" {
				t.Fatalf("the host got %q with %+v (%v)", a.data, a.app, a.err)
			}
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if b, err := io.ReadAll(c); err != nil || string(b) != "reply after half-close" {
				t.Fatalf("the dialer got %q (%v)", b, err)
			}
		})
	}

	// The proxy mode's connections to a service that requires encryption go through the
	// key exchange too.
	t.Run("proxy mode", func(t *testing.T) {
		ln, err := n.routers["H"].r.overlay.Bind(ctx, hostSvc["encrypted"])
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, _, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					io.Copy(c, c)
				}()
			}
		}()
		if got, err := echoOnce(n.routers["A"].r.ProxyAddress("encrypted"), "through the proxy port"); err != nil || got != "through the proxy port" {
			t.Fatalf("proxy mode to an encrypted service: %q (%v)", got, err)
		}
		if got, err := echoOnce(n.routers["A"].r.ProxyAddress("encrypted"), "again"); err != nil || got != "again" {
			t.Fatalf("proxy mode to an encrypted service, again: %q (%v)", got, err)
		}
	})

	// A router restarted while the controller is away still knows its tunnel's services
	// from edge.db.
	n.stopController()
	h := n.routers["H"]
	h.stop()
	h.start(t)
	if got := services(h.r); !got["plain"].Bind || !got["encrypted"].Bind {
		t.Fatalf("services after a restart without the controller: %+v", got)
	}
}
