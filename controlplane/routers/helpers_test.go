package routers_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

// env is a controller serving its API and control channel on loopback.
type env struct {
	ctrl     *controlplane.Controller
	m        *model.Model
	admin    *apiclient.Client
	url      string // of the API
	ctrlAddr string
	logs     *ctrltest.LogBuffer
	stop     func()
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T) *env {
	t.Helper()
	c := ctrltest.Start(t)
	return &env{ctrl: c.Ctrl, m: c.Model, admin: c.Admin(t), url: c.URL, ctrlAddr: c.CtrlAddr, logs: c.Logs, stop: c.Stop}
}

// enroll creates an edge router and enrolls it, returning its id and client certificate.
func (e *env) enroll(t *testing.T, name string) (string, tls.Certificate) {
	t.Helper()
	r := ctrltest.EnrollRouter(t, e.m, name, name+".example")
	return r.ID, r.Client
}

// dial connects a router's channel with cert and starts it.
func (e *env) dial(t *testing.T, cert tls.Certificate) *ctrlproto.Channel {
	t.Helper()
	conn, err := tls.Dial("tcp", e.ctrlAddr, &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      e.ctrl.CA().Pool(),
		ServerName:   "127.0.0.1",
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatalf("dial the control channel: %v", err)
	}
	ch := ctrlproto.New(context.Background(), conn, quietLog(), ctrlproto.Options{RequestTimeout: 5 * time.Second})
	ch.Start()
	t.Cleanup(func() { ch.Close() })
	return ch
}

func hello(ch *ctrlproto.Channel, id string) (*ctrlproto.HelloReply, error) {
	return ctrlproto.Call[*ctrlproto.HelloReply](context.Background(), ch, &ctrlproto.Hello{
		RouterID: id, Version: "test", Protocol: ctrlproto.ProtocolVersion, Hostname: "er.example",
		Listeners:     []ctrlproto.Listener{{Binding: "edge", Address: "tls:er.example:3022"}, {Binding: "tunnel"}},
		LinkListeners: []ctrlproto.LinkListener{{Address: "tls:er.example:4022", Transport: "tls", Groups: []string{"default"}}},
	})
}

// routerView is what the management API shows of an edge router.
type routerView struct {
	IsOnline           bool              `json:"isOnline"`
	Hostname           string            `json:"hostname"`
	SupportedProtocols map[string]string `json:"supportedProtocols"`
}

func (e *env) view(t *testing.T, id string) routerView {
	t.Helper()
	var v routerView
	if _, err := e.admin.Do(context.Background(), "GET", "/edge/management/v1/edge-routers/"+id, nil, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func waitClosed(t *testing.T, ch *ctrlproto.Channel) error {
	t.Helper()
	select {
	case <-ch.Done():
		return ch.Err()
	case <-time.After(5 * time.Second):
		t.Fatal("the router's channel is still open after 5s")
		return nil
	}
}
