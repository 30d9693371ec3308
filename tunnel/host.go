package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmesh/zmesh/tunnel/intercept"
)

// ContextDialer opens the connections to hosted services' targets; *net.Dialer is one.
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// HostOptions configure Host.Run. The zero value means all defaults.
type HostOptions struct {
	// UDPIdleTimeout ends a UDP flow that carried no datagram either way for so long
	// (DefaultUDPIdleTimeout when zero).
	UDPIdleTimeout time.Duration
	// Dialer opens the connections to targets: network "tcp" or "udp" (a connected UDP
	// socket), address host:port. A plain net.Dialer when nil; in a tproxy tunnel, one whose
	// sockets carry the bypass mark (intercept.Interceptor.BypassControl), lest a target whose
	// address is intercepted loop back into the tunnel.
	Dialer ContextDialer
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

func (o HostOptions) withDefaults() HostOptions {
	if o.UDPIdleTimeout <= 0 {
		o.UDPIdleTimeout = DefaultUDPIdleTimeout
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Host is the tunnel's host mode: it hosts every service its identity may bind that has a
// host.v1 or host.v2 config, and carries each circuit reaching it to the target the config
// names: a TCP connection, or a UDP socket fed with the circuit's datagrams (see
// DatagramConn).
//
// Each hosted service is bound once. A circuit goes to the first terminator of the config
// that accepts its AppData (see HostTerminator.Target); when dialing that target fails, the
// next accepting terminator is tried. A circuit no terminator accepts, or none of whose
// targets answers, is closed and logged with the service and the target. listenOptions'
// precedence and cost are parsed but not passed on: Overlay.Bind takes none.
//
// Services are bound and unbound as the overlay reports them: a service that goes away,
// loses the Bind permission or its host config is unbound and its connections are closed;
// a changed host config applies to the circuits that come after it. A failed Bind, or a
// listener that ends by itself, is retried with a backoff of up to a minute.
//
// The zero Host is ready for Run; Stats may be called at any time.
type Host struct {
	running atomic.Bool

	bound        atomic.Int64
	bindFailures atomic.Uint64
	circuits     atomic.Uint64
	refused      atomic.Uint64
	dialFailures atomic.Uint64
	active       atomic.Int64

	relay Relay
}

// HostStats is a snapshot of a Host's counters.
type HostStats struct {
	Bound        int64  // services bound now
	BindFailures uint64 // Binds that failed
	Circuits     uint64 // circuits accepted
	Refused      uint64 // circuits no terminator of the config accepted
	DialFailures uint64 // circuits accepted whose targets could not be reached
	Active       int64  // circuits carried now (TCP connections and UDP flows)
}

// Stats returns a snapshot of the counters.
func (h *Host) Stats() HostStats {
	return HostStats{
		Bound:        h.bound.Load(),
		BindFailures: h.bindFailures.Load(),
		Circuits:     h.circuits.Load(),
		Refused:      h.refused.Load(),
		DialFailures: h.dialFailures.Load(),
		Active:       h.active.Load(),
	}
}

// Run hosts services until ctx ends, then closes the listeners and connections, waits for
// them and returns nil; or returns the error that ended the overlay's service watch. A Host
// runs once.
func (h *Host) Run(ctx context.Context, overlay Overlay, opts HostOptions) error {
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("tunnel host: already run")
	}
	opts = opts.withDefaults()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &hostRun{
		h:        h,
		overlay:  overlay,
		opts:     opts,
		log:      opts.Logger.With("tunnel", "host"),
		ctx:      runCtx,
		bindings: map[string]*binding{},
	}
	err := overlay.WatchServices(runCtx, r.update)
	cancel()
	r.mu.Lock()
	r.stopped = true
	for key := range r.bindings {
		r.unbind(key)
	}
	r.mu.Unlock()
	r.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("tunnel host: watching services: %w", err)
}

// hostRun is the state of one Run.
type hostRun struct {
	h       *Host
	overlay Overlay
	opts    HostOptions
	log     *slog.Logger
	ctx     context.Context // Run's
	wg      sync.WaitGroup  // every goroutine of the run

	mu       sync.Mutex // update, and the end of Run
	stopped  bool
	bindings map[string]*binding // by serviceKey
}

// binding is one hosted service.
type binding struct {
	svc        Service
	configType string // of raw
	raw        []byte
	cfg        atomic.Pointer[HostConfig]
	cancel     context.CancelFunc // unbinds
}

// serviceKey identifies a service across updates: its id, or its name when it has none.
func serviceKey(svc Service) string {
	if svc.ID != "" {
		return svc.ID
	}
	return svc.Name
}

// update binds, rebinds and unbinds to match the overlay's list of services.
func (r *hostRun) update(list []Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	seen := map[string]bool{}
	for _, svc := range list {
		key := serviceKey(svc)
		if !svc.Bind || seen[key] {
			continue
		}
		cfg, ok, err := HostConfigOf(svc)
		if !ok {
			continue
		}
		if err != nil {
			r.log.Error("tunnel host: service not hosted: its host config is not valid", "service", svc.Name, "error", err)
			continue
		}
		seen[key] = true
		typ := HostV2
		if _, v2 := svc.Configs[HostV2]; !v2 {
			typ = HostV1
		}
		raw := svc.Configs[typ]
		b := r.bindings[key]
		if b != nil && b.svc.Name == svc.Name && b.svc.EncryptionRequired == svc.EncryptionRequired {
			if b.configType != typ || !bytes.Equal(b.raw, raw) {
				b.configType, b.raw = typ, raw
				b.cfg.Store(&cfg)
				r.logConfig(svc, typ, cfg, "tunnel host: host config changed")
			}
			continue
		}
		if b != nil {
			r.unbind(key) // the service changed in a way its listener holds
		}
		r.bind(key, svc, typ, raw, cfg)
	}
	for key := range r.bindings {
		if !seen[key] {
			r.log.Info("tunnel host: unbinding service", "service", r.bindings[key].svc.Name)
			r.unbind(key)
		}
	}
}

func (r *hostRun) logConfig(svc Service, typ string, cfg HostConfig, msg string) {
	r.log.Info(msg, "service", svc.Name, "configType", typ, "terminators", len(cfg.Terminators))
	for i, t := range cfg.Terminators {
		if len(t.Ignored) > 0 {
			r.log.Warn("tunnel host: host config fields not supported; ignored", "service", svc.Name,
				"configType", typ, "terminator", i, "fields", t.Ignored)
		}
	}
}

// bind starts hosting svc. The caller holds mu.
func (r *hostRun) bind(key string, svc Service, typ string, raw []byte, cfg HostConfig) {
	ctx, cancel := context.WithCancel(r.ctx)
	b := &binding{svc: svc, configType: typ, raw: raw, cancel: cancel}
	b.cfg.Store(&cfg)
	r.bindings[key] = b
	r.logConfig(svc, typ, cfg, "tunnel host: hosting service")
	r.wg.Go(func() { r.serve(ctx, b) })
}

// unbind stops hosting a service and closes its connections. The caller holds mu.
func (r *hostRun) unbind(key string) {
	r.bindings[key].cancel()
	delete(r.bindings, key)
}

// Backoff of Bind retries.
const (
	minRebindWait = 500 * time.Millisecond
	maxRebindWait = time.Minute
)

// serve binds b's service and accepts its circuits until ctx ends, binding again after a
// failed Bind or a listener that ended.
func (r *hostRun) serve(ctx context.Context, b *binding) {
	var wait time.Duration
	for ctx.Err() == nil {
		ln, err := r.overlay.Bind(ctx, b.svc)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.h.bindFailures.Add(1)
			wait = min(max(2*wait, minRebindWait), maxRebindWait)
			r.log.Warn("tunnel host: bind failed; retrying", "service", b.svc.Name, "in", wait, "error", err)
			sleep(ctx, wait)
			continue
		}
		if rc, ok := ln.(Reacher); ok {
			rc.SetReach(func(app AppData) (Connect, error) { return r.reach(ctx, b, app) })
		}
		r.h.bound.Add(1)
		began := time.Now()
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		for {
			c, app, err := ln.Accept()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("tunnel host: listener ended; binding again", "service", b.svc.Name, "error", err)
				}
				break
			}
			r.h.circuits.Add(1)
			r.wg.Go(func() { r.carry(ctx, b, c, app) })
		}
		stop()
		ln.Close()
		r.h.bound.Add(-1)
		if time.Since(began) > 30*time.Second {
			wait = 0
		}
		wait = min(max(2*wait, minRebindWait), maxRebindWait)
		sleep(ctx, wait)
	}
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// carry takes circuit c with app to its target and carries it until either end or ctx ends.
func (r *hostRun) carry(ctx context.Context, b *binding, c net.Conn, app AppData) {
	defer c.Close()
	r.h.active.Add(1)
	defer r.h.active.Add(-1)
	conn, tg, log, err := r.target(ctx, ctx, b, app)
	if err != nil {
		return
	}
	if tg.Protocol == intercept.UDP {
		r.relayUDP(ctx, c, conn, log)
	} else {
		r.h.relay.Join(ctx, c, conn)
	}
}

// reach is the Reach of binding b, whose context is ctx: the Connect of a circuit with app to
// its TCP target, for the overlay, which carries the circuit itself (Reacher). The
// connection is closed when ctx ends; the function Connect returns is called once the circuit
// has ended.
func (r *hostRun) reach(ctx context.Context, b *binding, app AppData) (Connect, error) {
	for i, t := range b.cfg.Load().Terminators {
		if tg, err := t.Target(app); err == nil && tg.Protocol == intercept.UDP {
			return nil, fmt.Errorf("terminator %d: %w", i, ErrDatagramTarget) // for Accept, counted there
		}
	}
	return func(dialCtx context.Context) (net.Conn, func(), error) {
		dialCtx, cancel := context.WithCancel(dialCtx)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		r.h.circuits.Add(1)
		conn, _, _, err := r.target(ctx, dialCtx, b, app)
		if err != nil {
			return nil, nil, err
		}
		r.h.active.Add(1)
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		var once sync.Once
		return conn, func() {
			once.Do(func() {
				stop()
				r.h.active.Add(-1)
			})
		}, nil
	}, nil
}

// target connects, within dialCtx, to the target of a circuit with app: the first terminator
// of b's config that accepts app and answers; it logs and counts a circuit that reaches none,
// unless ctx, the binding's, ended.
func (r *hostRun) target(ctx, dialCtx context.Context, b *binding, app AppData) (net.Conn, Target, *slog.Logger, error) {
	cfg := b.cfg.Load()
	log := r.log.With("service", b.svc.Name)
	var refusal error
	var failed []string
	for i, t := range cfg.Terminators {
		tg, err := t.Target(app)
		if err != nil {
			if refusal == nil {
				refusal = fmt.Errorf("terminator %d: %w", i, err)
			}
			continue
		}
		conn, err := r.dial(dialCtx, tg, t.ConnectTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil, tg, log, ctx.Err()
			}
			log.Warn("tunnel host: cannot reach target", "target", tg, "error", err)
			failed = append(failed, tg.String())
			continue
		}
		log.Debug("tunnel host: carrying circuit", "target", tg, "src", app.SrcIP+":"+app.SrcPort)
		return conn, tg, log.With("target", tg), nil
	}
	if len(failed) > 0 {
		r.h.dialFailures.Add(1)
		log.Warn("tunnel host: circuit closed: no target reachable", "targets", failed)
		return nil, Target{}, log, fmt.Errorf("no target reachable: %v", failed)
	}
	r.h.refused.Add(1)
	log.Warn("tunnel host: circuit refused", "requested", requested(app), "error", refusal)
	return nil, Target{}, log, fmt.Errorf("circuit refused: %w", refusal)
}

// requested describes what a circuit's dialing end asked for.
func requested(app AppData) string {
	host := app.DstIP
	if app.DstHostname != "" {
		host = app.DstHostname
	}
	return app.Protocol + ":" + host + ":" + app.DstPort
}

// dial connects to tg within timeout.
func (r *hostRun) dial(ctx context.Context, tg Target, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return r.opts.Dialer.DialContext(ctx, tg.Protocol, netJoin(tg.Address, tg.Port))
}

// relayUDP carries the datagrams framed on circuit to the connected UDP socket target and
// its replies back, until either fails, the circuit ends, the flow is idle for the idle
// timeout, or ctx ends; then it closes both.
func (r *hostRun) relayUDP(ctx context.Context, circuit, target net.Conn, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := startIdleTimer(r.opts.UDPIdleTimeout, func() {
		log.Debug("tunnel host: UDP flow idle; closing", "timeout", r.opts.UDPIdleTimeout)
		cancel()
	})
	defer idle.stop()
	stop := context.AfterFunc(ctx, func() {
		circuit.Close()
		target.Close()
	})
	defer stop()
	defer target.Close()

	dc := NewDatagramConn(circuit)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		buf := make([]byte, MaxDatagram)
		for {
			n, err := dc.ReadDatagram(buf)
			if err != nil {
				return
			}
			idle.touch()
			if _, err := target.Write(buf[:n]); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
				log.Debug("tunnel host: UDP send to target", "error", err)
				return
			}
		}
	})
	wg.Go(func() {
		defer cancel()
		buf := make([]byte, MaxDatagram)
		for {
			n, err := target.Read(buf)
			if err != nil {
				if errors.Is(err, syscall.ECONNREFUSED) && ctx.Err() == nil {
					continue // an ICMP port unreachable for an earlier datagram
				}
				return
			}
			idle.touch()
			if err := dc.WriteDatagram(buf[:n]); err != nil {
				return
			}
		}
	})
	wg.Wait()
}
