package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// readyTimeout bounds the wait for a worker's ready line.
const readyTimeout = 30 * time.Second

// Scenario is one forwarding path under test. The harness starts the sink, calls Setup, points
// the load generator at the returned Target, and afterwards calls Target.Teardown and stops
// every process the scenario started through Env.
type Scenario interface {
	// Name identifies the scenario in --scenarios and the table; unique within a run.
	Name() string
	// Baseline names the scenario this one is compared with ("" for a baseline itself). The
	// baseline is run whenever this one is, and the table shows this one's figures as ratios
	// to it.
	Baseline() string
	// Setup starts the path from a load-generator-facing address to env.Sink and returns that
	// address. Processes must be started with env.Start.
	Setup(ctx context.Context, env *Env) (Target, error)
}

// Target is a scenario ready to be measured.
type Target struct {
	// Addr is the 127.0.0.1 host:port the load generator connects to.
	Addr string
	// Via, when set, are the load generator's flags for another way onto the path than TCP
	// to Addr: --via and what it needs (see connectorConfig). Addr may then be empty
	// (ViaSDK).
	Via []string
	// Teardown, if set, runs after the measurements and before the harness stops the
	// scenario's processes.
	Teardown func(context.Context) error
	// Circuits marks a path that opens a circuit for every connection (or, for the relay
	// baselines, a relayed connection, the same work without a controller): the harness then
	// also measures circuit setup (Options.SetupDuration, Options.SetupRate), which zmesh
	// paths compare with their baseline's.
	Circuits bool
	// IdleRouters, when not empty, are the routers whose memory the idle-circuit measurement
	// (Options.IdleCircuits) reads. The routers of one scenario must not hold both ends of
	// the idle circuits in one process when that needs more file descriptors than a process
	// may open.
	IdleRouters []Router
}

// embedsSDK reports whether the load generator reaches t through an SDK client in its own
// process (ViaSDK), which puts that process on the path.
func (t Target) embedsSDK() bool {
	i := slices.Index(t.Via, "--via")
	return i >= 0 && i+1 < len(t.Via) && t.Via[i+1] == ViaSDK
}

// loadgenArgs are the load generator's flags that say how it connects to t.
func (t Target) loadgenArgs() []string {
	var args []string
	if t.Addr != "" {
		args = append(args, "--addr", t.Addr)
	}
	return append(args, t.Via...)
}

// Router is a router process of a scenario, with its role on the path.
type Router struct {
	// Role is what the router does on the path: "ingress", "egress" or "ingress+egress".
	Role    string
	Process *Process
}

// Define returns a Scenario from its name, its baseline's name and its setup function.
func Define(name, baseline string, setup func(context.Context, *Env) (Target, error)) Scenario {
	return defined{name: name, baseline: baseline, setup: setup}
}

type defined struct {
	name, baseline string
	setup          func(context.Context, *Env) (Target, error)
}

func (d defined) Name() string     { return d.name }
func (d defined) Baseline() string { return d.baseline }
func (d defined) Setup(ctx context.Context, env *Env) (Target, error) {
	return d.setup(ctx, env)
}

// Env is what the harness gives a scenario's Setup.
type Env struct {
	// Dir is an empty directory for the scenario's files (configuration, certificates, data),
	// removed after the run.
	Dir string
	// Sink is the address of the sink process where the scenario's path must end: it
	// discards or echoes, as the first byte of each connection says.
	Sink string
	// Log is the harness's logger.
	Log *slog.Logger

	exec    Exec
	started func(name string, pid int)
	// profile, when set, is the file name prefix of the profiles of the Relay and Profiled
	// processes.
	profile string
	trace   bool
	mu      sync.Mutex
	procs   []*Process
}

// Start starts c and, for a worker, waits until it is ready. The process runs until the
// harness tears the scenario down (or ctx ends).
func (e *Env) Start(ctx context.Context, c Command) (*Process, error) {
	return e.start(ctx, c, c.Worker)
}

func (e *Env) start(ctx context.Context, c Command, waitReady bool) (*Process, error) {
	if e.profile != "" && (c.Relay || c.Profiled) {
		c.env = append(c.env, ProfileEnv+"="+e.profile+c.Name+".cpu.pprof",
			HeapEnv+"="+e.profile+c.Name+".heap.pprof")
		if e.trace {
			c.env = append(c.env, TraceEnv+"="+e.profile+c.Name+".trace")
		}
	}
	p, err := startProcess(ctx, e.exec, c)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	e.Log.Debug("started", "process", c.Name, "pid", p.PID(), "args", c.Args)
	if e.started != nil {
		e.started(c.Name, p.PID())
	}
	if waitReady {
		if err := p.waitReady(ctx, readyTimeout); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// forget drops a process that has exited on its own and whose outcome has been reported.
func (e *Env) forget(p *Process) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, q := range e.procs {
		if q == p {
			e.procs = append(e.procs[:i], e.procs[i+1:]...)
			return
		}
	}
}

// relayCPU returns the CPU time used so far by the scenario's relay processes, and false when
// it has none.
func (e *Env) relayCPU() (time.Duration, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var total time.Duration
	found := false
	for _, p := range e.procs {
		if !p.relay {
			continue
		}
		found = true
		t, err := cpuTime(p.PID())
		if err != nil {
			return 0, true, fmt.Errorf("%s: %w", p.name, err)
		}
		total += t
	}
	return total, found, nil
}

// stopAll stops the processes, the latest started first, and returns an error for each one
// that had exited with a failure while it should have been running, unless the run was
// interrupted, which ends them all.
func (e *Env) stopAll(interrupted bool) error {
	e.mu.Lock()
	procs := e.procs
	e.procs = nil
	e.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(); err != nil && !interrupted {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FreeAddr returns a 127.0.0.1 address with a TCP port that was free a moment ago, for
// processes whose listen address must be written into their configuration before they
// start. See freeLoopbackPort for why the port is not the kernel's choice.
func FreeAddr() (string, error) {
	port, err := freeLoopbackPort("tcp")
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// freeLoopbackPort returns a 127.0.0.1 port of network ("tcp" or "udp") that was free a
// moment ago, chosen at random below the kernel's ephemeral range: a port the kernel picked
// (listening on port 0) could be handed to one of the many connections the bench's
// processes open before the process it is meant for binds it, which then fails with
// "address already in use"; ports below that range are never handed out that way.
func freeLoopbackPort(network string) (int, error) {
	low := ephemeralLow()
	for range 100 {
		port := low - 1 - rand.IntN(min(low-1024, 16384))
		var err error
		if network == "udp" {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				err = pc.Close()
			}
		} else {
			var ln net.Listener
			if ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				err = ln.Close()
			}
		}
		if err == nil {
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free %s port below %d: 100 ports tried, all taken", network, low)
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux's
// ip_local_port_range), or 32768, its default, when that cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 2048 {
				return low
			}
		}
	}
	return 32768
}

// WaitListening waits until something accepts TCP connections on addr, for processes that do
// not announce readiness themselves. The probe connection is closed at once, without data.
func WaitListening(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to listen: %w (last: %w)", addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
