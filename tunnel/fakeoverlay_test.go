package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// fakeOverlay is an Overlay in memory: Dial of a service hands one end of a Unix socket
// pair (which half-closes like TCP) to the Accept of the service's Bind, with the app data;
// the test drives WatchServices with setServices.
type fakeOverlay struct {
	mu       sync.Mutex
	services []Service
	version  int
	changed  chan struct{} // closed and replaced on every change
	binds    map[string]*fakeListener
	dials    []fakeDial
	binding  int // Bind calls
}

func newFakeOverlay() *fakeOverlay {
	return &fakeOverlay{changed: make(chan struct{}), binds: map[string]*fakeListener{}}
}

// setServices replaces the list of services the watchers see.
func (f *fakeOverlay) setServices(list ...Service) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.services = slices.Clone(list)
	f.version++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeOverlay) WatchServices(ctx context.Context, fn func([]Service)) error {
	seen := -1
	for {
		f.mu.Lock()
		list, version, changed := slices.Clone(f.services), f.version, f.changed
		f.mu.Unlock()
		if version != seen {
			seen = version
			fn(list)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (f *fakeOverlay) Dial(ctx context.Context, svc Service, app AppData) (net.Conn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, fakeDial{svc.Name, app})
	ln := f.binds[serviceKey(svc)]
	f.mu.Unlock()
	if ln == nil {
		return nil, fmt.Errorf("dial service %q: no terminator", svc.Name)
	}
	mine, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	select {
	case ln.incoming <- accepted{theirs, app}:
		return mine, nil
	case <-ln.done:
	case <-ctx.Done():
	}
	mine.Close()
	theirs.Close()
	return nil, fmt.Errorf("dial service %q: no terminator", svc.Name)
}

func (f *fakeOverlay) Bind(ctx context.Context, svc Service) (Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.binding++
	key := serviceKey(svc)
	if f.binds[key] != nil {
		return nil, fmt.Errorf("service %q is bound already", svc.Name)
	}
	ln := &fakeListener{f: f, key: key, incoming: make(chan accepted), done: make(chan struct{})}
	f.binds[key] = ln
	context.AfterFunc(ctx, func() { ln.Close() })
	return ln, nil
}

// bound reports whether service id is bound.
func (f *fakeOverlay) bound(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.binds[id] != nil
}

// fakeDial is a call of Dial.
type fakeDial struct {
	service string
	app     AppData
}

// lastDial returns the last call of Dial.
func (f *fakeOverlay) lastDial() fakeDial {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.dials) == 0 {
		return fakeDial{}
	}
	return f.dials[len(f.dials)-1]
}

type accepted struct {
	c   net.Conn
	app AppData
}

type fakeListener struct {
	f        *fakeOverlay
	key      string
	incoming chan accepted
	done     chan struct{}
	once     sync.Once

	mu    sync.Mutex
	reach Reach // given by the host (Reacher)
}

// SetReach makes the fake listener a Reacher: the test then reaches targets through
// reacher.
func (l *fakeListener) SetReach(r Reach) {
	l.mu.Lock()
	l.reach = r
	l.mu.Unlock()
}

// reacher returns the Reach the host gave, or nil.
func (l *fakeListener) reacher() Reach {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reach
}

// listener returns the listener of the bound service id, or nil.
func (f *fakeOverlay) listener(id string) *fakeListener {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.binds[id]
}

func (l *fakeListener) Accept() (net.Conn, AppData, error) {
	select {
	case a := <-l.incoming:
		return a.c, a.app, nil
	case <-l.done:
		return nil, AppData{}, net.ErrClosed
	}
}

func (l *fakeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.f.mu.Lock()
		if l.f.binds[l.key] == l {
			delete(l.f.binds, l.key)
		}
		l.f.mu.Unlock()
	})
	return nil
}

// socketPair returns the two ends of a connected Unix stream socket pair.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socket pair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		file := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(file)
		file.Close()
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			if i == 0 {
				syscall.Close(fds[1])
			}
			return nil, nil, errors.Join(errors.New("socket pair"), err)
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// service returns a service with the configs given as JSON by type.
func service(id string, dial, bind bool, configs map[string]string) Service {
	s := Service{ID: id, Name: id, Dial: dial, Bind: bind, Configs: map[string]json.RawMessage{}}
	for typ, c := range configs {
		s.Configs[typ] = json.RawMessage(c)
	}
	return s
}

// testLogger logs to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
