package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

// teardownTimeout bounds a scenario's Teardown, which runs even when the run was interrupted.
const teardownTimeout = 30 * time.Second

// Options configure a run. Zero numbers take the defaults.
type Options struct {
	// Exec says how to start the worker and scenario processes; Path is required.
	Exec Exec
	// Scenarios are all the scenarios known, in the order they run.
	Scenarios []Scenario
	// Only restricts the run to the named scenarios and their baselines; empty runs all.
	Only []string
	// Duration is the length of the throughput measurement and the most the echo
	// measurement takes (default 5s).
	Duration time.Duration
	// Streams is the number of parallel throughput connections (default 1).
	Streams int
	// WriteSize is the size of each throughput write (default 256 KiB).
	WriteSize int
	// RTTSamples is the number of timed 64-byte round trips (default 10000).
	RTTSamples int
	// RTTConns is the number of echo connections the round trips are spread over (default 1).
	RTTConns int
	// SetupDuration is the length of the circuit setup measurement of paths with circuits
	// (default 3s); SkipSetup leaves it out.
	SetupDuration time.Duration
	SkipSetup     bool
	// SetupWorkers is the number of circuits being set up at a time (default 16).
	SetupWorkers int
	// SetupRate is the rate of the open-loop setup measurement that follows the closed-loop
	// one: circuits started per second whatever the earlier ones do, for SetupDuration,
	// with their latency from when each was due (default DefaultSetupRate, the target);
	// SkipSetupRate leaves it out.
	SetupRate     float64
	SkipSetupRate bool
	// IdleCircuits is the number of idle circuits whose memory the routers of scenarios with
	// IdleRouters are measured with (default 10000); SkipIdle leaves it out.
	IdleCircuits int
	SkipIdle     bool
	// Repeat is the number of rounds (default 1): each round measures every selected
	// scenario, baselines included, so that each ratio is taken against a baseline of the
	// same round; the report gives every ratio's median and range over the rounds.
	Repeat int
	// Log receives the harness's diagnostics; nil discards them.
	Log *slog.Logger
	// Progress, if set, receives a one-line status whenever the run moves on.
	Progress func(status string)
	// Started, if set, is told of every process the run starts.
	Started func(name string, pid int)
	// ProfileDir, when set, is where the processes on the forwarding path (relays and
	// routers) write a CPU profile of their life, as <scenario>.<process>.cpu.pprof, and with
	// Trace an execution trace too (<scenario>.<process>.trace); see StartProfiling.
	ProfileDir string
	Trace      bool
}

// echoSize is the request and response size of the RTT measurement.
const echoSize = 64

func (o Options) withDefaults() (Options, error) {
	if o.Exec.Path == "" {
		return o, errors.New("bench: Exec.Path (the zmesh executable) is required")
	}
	for _, v := range []struct {
		name string
		val  *int
		def  int
	}{{"streams", &o.Streams, 1}, {"write size", &o.WriteSize, 256 << 10}, {"rtt samples", &o.RTTSamples, 10000}, {"rtt connections", &o.RTTConns, 1},
		{"setup workers", &o.SetupWorkers, 16}, {"idle circuits", &o.IdleCircuits, 10000}, {"repeat", &o.Repeat, 1}} {
		if *v.val < 0 {
			return o, fmt.Errorf("bench: %s %d must not be negative", v.name, *v.val)
		}
		if *v.val == 0 {
			*v.val = v.def
		}
	}
	if o.Duration < 0 {
		return o, fmt.Errorf("bench: duration %s must not be negative", o.Duration)
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.SetupDuration < 0 {
		return o, fmt.Errorf("bench: setup duration %s must not be negative", o.SetupDuration)
	}
	if o.SetupRate < 0 {
		return o, fmt.Errorf("bench: setup rate %g must not be negative", o.SetupRate)
	}
	if o.SetupRate == 0 {
		o.SetupRate = DefaultSetupRate
	}
	if o.SetupDuration == 0 {
		o.SetupDuration = 3 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return o, nil
}

// Run measures the selected scenarios one after the other and returns the report. A scenario
// that fails is reported with its error and the run goes on; the returned error then joins
// every scenario's failure. The report is nil only when the run could not start.
func Run(ctx context.Context, opts Options) (*Report, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	selected, err := selectScenarios(o.Scenarios, o.Only)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "zmesh-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: working directory: %w", err)
	}
	defer os.RemoveAll(dir)
	rep := &Report{
		DurationSeconds: o.Duration.Seconds(),
		Streams:         o.Streams,
		WriteSize:       o.WriteSize,
		RTTSamples:      o.RTTSamples,
		RTTConns:        o.RTTConns,
		CPUs:            runtime.NumCPU(),
	}
	if !o.SkipSetup {
		rep.SetupSeconds, rep.SetupWorkers = o.SetupDuration.Seconds(), o.SetupWorkers
		if !o.SkipSetupRate {
			rep.SetupRate = o.SetupRate
		}
	}
	if !o.SkipIdle {
		rep.IdleCircuits = o.IdleCircuits
	}
	rep.Repeat = o.Repeat
	var errs []error
	rounds := make([][]Result, 0, o.Repeat)
run:
	for round := 1; round <= o.Repeat; round++ {
		results := make([]Result, 0, len(selected))
		for i, sc := range selected {
			if err := ctx.Err(); err != nil {
				errs = append(errs, fmt.Errorf("bench interrupted: %w", err))
				if len(results) > 0 {
					rounds = append(rounds, results)
				}
				break run
			}
			res := Result{Scenario: sc.Name(), Baseline: sc.Baseline()}
			label := fmt.Sprintf("[%d/%d] %s", i+1, len(selected), sc.Name())
			if o.Repeat > 1 {
				label = fmt.Sprintf("[round %d/%d, %d/%d] %s", round, o.Repeat, i+1, len(selected), sc.Name())
			}
			if err := o.measure(ctx, dir, round, sc, label, &res); err != nil {
				res.Error = err.Error()
				errs = append(errs, fmt.Errorf("scenario %s (round %d): %w", sc.Name(), round, err))
				o.Log.Error("scenario failed", "scenario", sc.Name(), "round", round, "err", err)
			}
			results = append(results, res)
		}
		compare(results)
		rounds = append(rounds, results)
	}
	rep.summarize(rounds)
	rep.Goals = check(Goals(), rounds)
	return rep, errors.Join(errs...)
}

// measure runs one scenario: sink, setup, idle circuits and circuit setup (paths with
// circuits), throughput, echo, teardown.
func (o Options) measure(ctx context.Context, root string, round int, sc Scenario, label string, res *Result) (err error) {
	env := &Env{
		Dir:     filepath.Join(root, fmt.Sprintf("%s.%d", sc.Name(), round)),
		Log:     o.Log.With("scenario", sc.Name()),
		exec:    o.Exec,
		started: o.Started,
	}
	if o.ProfileDir != "" {
		env.profile, env.trace = filepath.Join(o.ProfileDir, sc.Name()+"."), o.Trace
	}
	if err := os.Mkdir(env.Dir, 0o700); err != nil {
		return fmt.Errorf("scenario directory: %w", err)
	}
	defer func() {
		o.Progress(label + ": stopping")
		err = errors.Join(err, env.stopAll(ctx.Err() != nil))
	}()
	o.Progress(label + ": setting up")
	sink, err := env.Start(ctx, Command{Name: "sink", Worker: true, Args: []string{"sink"}})
	if err != nil {
		return err
	}
	env.Sink = sink.Addr()
	target, err := sc.Setup(ctx, env)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if target.Teardown != nil {
		defer func() {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
			defer cancel()
			if terr := target.Teardown(tctx); terr != nil {
				err = errors.Join(err, fmt.Errorf("teardown: %w", terr))
			}
		}()
	}
	if target.Addr != "" || len(target.Via) == 0 {
		if err := checkLoopback(target.Addr); err != nil {
			return err
		}
	}
	// The idle circuits come first, so that the routers' memory grows from what a fresh
	// router holds rather than into what earlier measurements left free in their heaps.
	if len(target.IdleRouters) > 0 && !o.SkipIdle {
		o.Progress(fmt.Sprintf("%s: %d idle circuits", label, o.IdleCircuits))
		if res.IdleMemory, err = o.idleMemory(ctx, env, target); err != nil {
			return err
		}
		env.waitQuiet(ctx)
	}
	if target.Circuits && !o.SkipSetup {
		o.Progress(fmt.Sprintf("%s: circuit setup, %d at a time for %s", label, o.SetupWorkers, o.SetupDuration))
		if res.CircuitSetup, err = o.circuitSetup(ctx, env, target, 0); err != nil {
			return err
		}
		env.waitQuiet(ctx)
		if !o.SkipSetupRate {
			o.Progress(fmt.Sprintf("%s: circuit setup, %.0f per second for %s", label, o.SetupRate, o.SetupDuration))
			if res.PacedSetup, err = o.circuitSetup(ctx, env, target, o.SetupRate); err != nil {
				return err
			}
			env.waitQuiet(ctx)
		}
	}
	o.Progress(fmt.Sprintf("%s: throughput, %d stream(s) for %s", label, o.Streams, o.Duration))
	if res.Throughput, res.CPUSecondsPerGiB, err = o.throughput(ctx, env, target); err != nil {
		return err
	}
	o.Progress(fmt.Sprintf("%s: %d B echo, %d round trips", label, echoSize, o.RTTSamples))
	res.RTT, err = o.echo(ctx, env, target)
	return err
}

// throughput runs the load generator in throughput mode and returns its figures with the
// CPU time the relay processes used meanwhile (nil when there are none or it is unknown).
func (o Options) throughput(ctx context.Context, env *Env, target Target) (*Throughput, *float64, error) {
	cpuBefore, hasRelays, cpuErr := env.relayCPU()
	var m message
	err := o.loadgen(ctx, env, &m, target, "throughput",
		"--streams", strconv.Itoa(o.Streams), "--duration", o.Duration.String(),
		"--write-size", strconv.Itoa(o.WriteSize))
	if err != nil {
		return nil, nil, err
	}
	cpuAfter, _, err := env.relayCPU()
	cpuErr = errors.Join(cpuErr, err)
	if len(m.Throughput) != o.Streams {
		return nil, nil, fmt.Errorf("throughput: the load generator reported %d streams of %d", len(m.Throughput), o.Streams)
	}
	tp := newThroughput(m.Throughput)
	if tp.Bytes == 0 {
		return nil, nil, errors.New("throughput: no byte was delivered")
	}
	if !hasRelays {
		return tp, nil, nil
	}
	if cpuErr != nil {
		env.Log.Warn("relay CPU time unknown", "err", cpuErr)
		return tp, nil, nil
	}
	perGiB := (cpuAfter - cpuBefore).Seconds() / (float64(tp.Bytes) / (1 << 30))
	return tp, &perGiB, nil
}

// echo runs the load generator in echo mode.
func (o Options) echo(ctx context.Context, env *Env, target Target) (*Latency, error) {
	var m message
	err := o.loadgen(ctx, env, &m, target, "echo",
		"--conns", strconv.Itoa(o.RTTConns), "--samples", strconv.Itoa(o.RTTSamples),
		"--duration", o.Duration.String(), "--size", strconv.Itoa(echoSize))
	if err != nil {
		return nil, err
	}
	if m.Echo == nil || m.Echo.Samples == 0 {
		return nil, errors.New("echo: the load generator reported no round trip")
	}
	return m.Echo, nil
}

// DefaultSetupRate is the default rate of the open-loop setup measurement: the circuit setup
// target, 5,000 per second.
const DefaultSetupRate = 5000

// pacedInFlight bounds the circuits the open-loop setup measurement has open at once.
const pacedInFlight = 256

// circuitSetup runs the load generator in setup mode: closed loop with o.SetupWorkers
// workers when rate is 0, open loop at rate otherwise.
func (o Options) circuitSetup(ctx context.Context, env *Env, target Target, rate float64) (*CircuitSetup, error) {
	var m message
	conns := o.SetupWorkers
	if rate > 0 {
		conns = pacedInFlight
	}
	err := o.loadgen(ctx, env, &m, target, "setup", "--rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"--conns", strconv.Itoa(conns), "--duration", o.SetupDuration.String())
	if err != nil {
		return nil, fmt.Errorf("circuit setup: %w", err)
	}
	if m.Setup == nil || m.Setup.Circuits == 0 {
		return nil, errors.New("circuit setup: the load generator reported no circuit")
	}
	return m.Setup, nil
}

// idleOpenTimeout bounds the opening of the idle circuits.
const idleOpenTimeout = 5 * time.Minute

// idleSettle is how long the idle circuits are left alone before the routers' memory is read.
const idleSettle = time.Second

// idleMemory reads the resident memory of the target's routers, has a load generator open
// o.IdleCircuits circuits and hold them, reads the routers' memory again, and stops it.
func (o Options) idleMemory(ctx context.Context, env *Env, target Target) (*IdleMemory, error) {
	res := &IdleMemory{Requested: o.IdleCircuits}
	for _, r := range target.IdleRouters {
		before, err := rss(r.Process.PID())
		if err != nil {
			return nil, fmt.Errorf("idle circuits: %s: %w", r.Process.Name(), err)
		}
		res.Routers = append(res.Routers, RouterMemory{Router: r.Process.Name(), Role: r.Role, RSSBefore: before})
	}
	p, err := env.start(ctx, Command{Name: "loadgen-idle", Worker: true, Args: append(append([]string{"loadgen", "--mode", "idle"}, target.loadgenArgs()...),
		"--circuits", strconv.Itoa(o.IdleCircuits), "--conns", "32")}, false)
	if err != nil {
		return nil, err
	}
	defer func() {
		p.stop()
		env.forget(p)
	}()
	var opened *idleOpened
	err = p.waitLine(ctx, idleOpenTimeout, "holding its idle circuits", func(line string) bool {
		var m message
		if decodeMessage(line, &m) && m.Idle != nil {
			opened = m.Idle
			return true
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("idle circuits: %w", err)
	}
	res.Circuits, res.OpenSeconds = opened.Circuits, opened.Seconds
	if res.Circuits < res.Requested {
		env.Log.Warn("fewer idle circuits than asked: the file descriptor limit is lower", "circuits", res.Circuits, "requested", res.Requested)
	}
	select {
	case <-time.After(idleSettle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for i := range res.Routers {
		r := &res.Routers[i]
		if r.RSSAfter, err = rss(target.IdleRouters[i].Process.PID()); err != nil {
			return nil, fmt.Errorf("idle circuits: %s: %w", r.Router, err)
		}
		r.BytesPerCircuit = float64(r.RSSAfter-r.RSSBefore) / float64(res.Circuits)
	}
	if !p.running() {
		return nil, fmt.Errorf("idle circuits: %w", p.failure("exited while holding its circuits"))
	}
	return res, nil
}

// Quiet relay processes: at most quietCPU (one clock tick) of CPU time over quietWindow.
const (
	quietWindow  = 250 * time.Millisecond
	quietCPU     = 10 * time.Millisecond
	quietTimeout = 15 * time.Second
)

// waitQuiet waits, up to quietTimeout, until the relay processes are quiet, so that the work
// one measurement left behind (circuits being torn down) does not count in the next.
func (e *Env) waitQuiet(ctx context.Context) {
	deadline := time.Now().Add(quietTimeout)
	prev, _, err := e.relayCPU()
	for err == nil && time.Now().Before(deadline) {
		select {
		case <-time.After(quietWindow):
		case <-ctx.Done():
			return
		}
		var cur time.Duration
		if cur, _, err = e.relayCPU(); err == nil && cur-prev <= quietCPU {
			return
		}
		prev = cur
	}
	e.Log.Warn("the relay processes did not become quiet", "within", quietTimeout, "err", err)
}

// loadgen runs one load generator process on target with args and decodes its result into m.
func (o Options) loadgen(ctx context.Context, env *Env, m *message, target Target, mode string, args ...string) error {
	args = append(append(append([]string{"loadgen"}, target.loadgenArgs()...), "--mode", mode), args...)
	c := Command{Name: "loadgen", Worker: true, Args: args}
	if target.embedsSDK() { // its profile is named by its measurement: each overwrites its own
		c.Name, c.Profiled = "loadgen-"+mode, true
	}
	p, err := env.start(ctx, c, false)
	if err != nil {
		return err
	}
	err = p.result(ctx, m)
	if !p.running() {
		env.forget(p)
	}
	return err
}

// checkLoopback refuses a target outside the loopback interface: bench traffic stays local.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("target address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("target address %q is not a loopback IP address", addr)
	}
	return nil
}
