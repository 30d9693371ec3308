// Package sdkoverlay is the standalone tunneler: the tunnel modes (proxy, tproxy, host) of
// package tunnel driven by an identity through the Go SDK instead of by a router. It adapts
// an sdk.Client to tunnel.Overlay: services watched with the client, circuits dialed with
// the tunnel's app data, services hosted through sdk.Listeners.
package sdkoverlay

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
)

// ServicesPoll is how often the tunneler asks the controller whether its services changed.
const ServicesPoll = 5 * time.Second

// Overlay is tunnel.Overlay over an SDK client.
type Overlay struct {
	C *sdk.Client
}

var _ tunnel.Overlay = Overlay{}

// WatchServices reports the identity's services now and whenever they change.
func (o Overlay) WatchServices(ctx context.Context, f func([]tunnel.Service)) error {
	current := map[string]tunnel.Service{}
	return o.C.WatchServices(ctx, ServicesPoll, func(added, changed, removed []sdk.Service) {
		for _, s := range removed {
			delete(current, s.ID)
		}
		for _, s := range slices.Concat(added, changed) {
			current[s.ID] = convert(s)
		}
		list := make([]tunnel.Service, 0, len(current))
		for _, s := range current {
			list = append(list, s)
		}
		f(list)
	})
}

func convert(s sdk.Service) tunnel.Service {
	return tunnel.Service{ID: s.ID, Name: s.Name, EncryptionRequired: s.EncryptionRequired,
		Dial: s.CanDial(), Bind: s.CanBind(), Configs: s.Configs}
}

// Dial dials the service with the app data.
func (o Overlay) Dial(ctx context.Context, svc tunnel.Service, app tunnel.AppData) (net.Conn, error) {
	data, err := json.Marshal(app)
	if err != nil {
		return nil, err
	}
	conn, err := o.C.DialWithOptions(ctx, svc.Name, sdk.DialOptions{AppData: data})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Bind hosts the service through the SDK.
func (o Overlay) Bind(ctx context.Context, svc tunnel.Service) (tunnel.Listener, error) {
	ln, err := o.C.Listen(ctx, svc.Name)
	if err != nil {
		return nil, err
	}
	return &listener{ln: ln}, nil
}

// listener gives accepted connections their app data.
type listener struct {
	ln   *sdk.Listener
	once sync.Once
}

func (l *listener) Accept() (net.Conn, tunnel.AppData, error) {
	for {
		c, err := l.ln.AcceptConn()
		if err != nil {
			return nil, tunnel.AppData{}, err
		}
		var app tunnel.AppData
		if len(c.AppData()) > 0 {
			if err := json.Unmarshal(c.AppData(), &app); err != nil {
				c.Close()
				continue // a dialer that sent something else: not a tunnel's circuit
			}
		}
		return c, app, nil
	}
}

func (l *listener) Close() error {
	var err error
	l.once.Do(func() { err = l.ln.Close() })
	if err != nil {
		return fmt.Errorf("close listener: %w", err)
	}
	return nil
}
