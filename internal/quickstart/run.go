package quickstart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/dataplane"
)

// RunOptions configure Run.
type RunOptions struct {
	// Version is the zmesh version the controller and routers report.
	Version string
	// Log receives every component's logs, each with its role.
	Log *slog.Logger
	// Ready, when set, is called once the echo service answers through every router's
	// proxy port.
	Ready func()
	// ReadyTimeout bounds the wait for that; 1 minute when zero.
	ReadyTimeout time.Duration
}

// PortInUseError says that a port Run needs is taken.
type PortInUseError struct {
	Port
	Err error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("port %d (%s) is in use on %s: stop what listens there (`ss -ltnp 'sport = :%d'` names it): %v",
		e.Port.Port, e.Role, Host, e.Port.Port, e.Err)
}

func (e *PortInUseError) Unwrap() error { return e.Err }

// Run runs the prepared network in this process: the controller, the echo server and every
// router, until ctx ends; then it stops the routers, the controller and the echo server, in
// that order, and returns once all of them are down (nil after a clean stop). A component
// that stops on its own stops the others, and Run returns its error.
func Run(ctx context.Context, n *Network, opts RunOptions) error {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = time.Minute
	}
	// Every port is tried before anything starts, so that a taken port is named with what it
	// is for instead of surfacing as one component's failure after the others started.
	for _, p := range n.Ports.Listening(len(n.Routers)) {
		ln, err := net.Listen("tcp", p.Addr())
		if err != nil {
			return &PortInUseError{Port: p, Err: err}
		}
		ln.Close()
	}
	password, err := os.ReadFile(n.PasswordFile)
	if err != nil {
		return fmt.Errorf("read the administrator's password: %w", err)
	}
	ccfg, err := LoadController(n.ControllerConfig, strings.TrimSpace(string(password)))
	if err != nil {
		return err
	}
	rcfgs := make([]*config.Router, len(n.Routers))
	for i, r := range n.Routers {
		cfg, _, err := config.LoadRouter(r.Config, func(string) (string, bool) { return "", false })
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		rcfgs[i] = cfg
	}

	// Each group stops on its own context, so that the routers stop while their controller
	// still answers and the echo server outlives the circuits to it.
	g := &group{failed: make(chan struct{})}
	defer g.stop()
	echo, err := listenEcho(Addr(n.Ports.Echo()))
	if err != nil {
		return &PortInUseError{Port: Port{n.Ports.Echo(), "the echo server"}, Err: err}
	}
	g.start(0, "the echo server", echo.serve)

	ctrl, err := controlplane.Open(ccfg, opts.Log.With("role", "controller"), controlplane.Build{Version: opts.Version})
	if err != nil {
		return openError(ccfg.DataDir, err)
	}
	ctrlReady := make(chan struct{})
	g.start(1, "the controller", func(ctx context.Context) error {
		return ctrl.Run(ctx, func(net.Addr) { close(ctrlReady) })
	})
	select {
	case <-ctrlReady:
	case <-g.failed:
		return g.stop()
	case <-ctx.Done():
		return g.stop()
	}

	routers := make([]*dataplane.Router, len(n.Routers))
	for i, r := range n.Routers {
		rt, err := dataplane.New(rcfgs[i], opts.Version, opts.Log.With("role", r.Name))
		if err != nil {
			return errors.Join(fmt.Errorf("%s: %w", r.Name, err), g.stop())
		}
		rt.ConnectLocally(ctrl.ConnectLocal) // every router runs in the controller's process
		routers[i] = rt
		g.start(2, r.Name, rt.Run)
	}
	for i, rt := range routers {
		select {
		case <-rt.Ready():
		case <-g.failed:
			return g.stop()
		case <-ctx.Done():
			return g.stop()
		}
		if err := awaitEcho(ctx, g.failed, Addr(n.Ports.Proxy(n.Routers[i].Index)), opts.ReadyTimeout); err != nil {
			if ctx.Err() != nil {
				return g.stop()
			}
			return errors.Join(fmt.Errorf("the echo service did not answer through %s's proxy port: %w", n.Routers[i].Name, err), g.stop())
		}
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	select {
	case <-ctx.Done():
	case <-g.failed:
	}
	return g.stop()
}

// awaitEcho sends a line to the echo service through a proxy port until it comes back:
// the router's tunnel learns its services, router-1 binds the echo service and the routers
// link only after they connected to the controller, so the first tries may fail.
func awaitEcho(ctx context.Context, failed <-chan struct{}, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for tries := 1; ; tries++ {
		err := Echo(ctx, addr, "zmesh quickstart probe\n")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d tries within %s, the last: %w", tries, timeout, err)
		case <-failed:
			return errors.New("a component stopped")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Echo sends msg to the echo service at addr (a tunnel proxy port), closes its side for
// writing, and checks that msg comes back before the connection ends.
func Echo(ctx context.Context, addr, msg string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("sent %q, got %q back", msg, got)
	}
	return nil
}

// group runs the components in stop tiers: stop ends the highest tier first (routers),
// waits for it, then the next (controller), then the last (echo server).
type group struct {
	mu     sync.Mutex
	tiers  [3]tier
	once   sync.Once
	failed chan struct{} // closed when a component stops before stop was called; made by the caller
	errs   []error
	done   bool
}

type tier struct {
	cancel []context.CancelFunc
	wg     sync.WaitGroup
}

// start runs f in tier t with its own context.
func (g *group) start(t int, name string, f func(context.Context) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	g.tiers[t].cancel = append(g.tiers[t].cancel, cancel)
	g.tiers[t].wg.Go(func() {
		err := f(ctx)
		stopping := ctx.Err() != nil
		if stopping && errors.Is(err, context.Canceled) {
			err = nil
		}
		g.mu.Lock()
		switch {
		case err != nil && stopping:
			g.errs = append(g.errs, fmt.Errorf("%s did not stop cleanly: %w", name, err))
		case err != nil:
			g.errs = append(g.errs, fmt.Errorf("%s stopped: %w", name, err))
		case !stopping:
			g.errs = append(g.errs, fmt.Errorf("%s stopped unexpectedly", name))
		}
		g.mu.Unlock()
		if !stopping {
			g.once.Do(func() { close(g.failed) })
		}
	})
}

// stop stops every tier, highest first, and returns what went wrong. Later calls return
// nil.
func (g *group) stop() error {
	g.mu.Lock()
	if g.done {
		g.mu.Unlock()
		return nil
	}
	g.done = true
	g.mu.Unlock()
	for t := len(g.tiers) - 1; t >= 0; t-- {
		g.mu.Lock()
		cancels := g.tiers[t].cancel
		g.mu.Unlock()
		for _, cancel := range cancels {
			cancel()
		}
		g.tiers[t].wg.Wait()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// openError explains why the quickstart's controller did not open; a data directory that
// another controller holds is most likely another quickstart on the same --dir.
func openError(dataDir string, err error) error {
	if errors.Is(err, controlplane.ErrDataDirInUse) {
		return fmt.Errorf("the quickstart in %s is already running (%w): stop it (Ctrl-C), or start another with --dir and --port-offset",
			filepath.Dir(dataDir), err)
	}
	return fmt.Errorf("open the quickstart's controller (%s): %w", dataDir, err)
}
