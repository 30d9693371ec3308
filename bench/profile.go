package bench

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Profiling the processes of a run. With Options.ProfileDir set, the harness gives every
// process on the forwarding path (Command.Relay: the baselines' relays, the scenarios'
// routers) two environment variables naming files in that directory: ProfileEnv, for a CPU
// profile of the process's life, and, with Options.Trace, TraceEnv, for an execution trace.
// A process honours them by calling StartProfiling first thing and its stop function last:
// the bench's relays do, and so does the test binary when it acts as `zmesh router run`.
// Processes that know nothing of the variables ignore them. Skipping the circuit setup and
// idle circuit measurements leaves the profile mostly to throughput and echo.

// Environment variables that ask a process of the bench for profiles (see StartProfiling).
const (
	ProfileEnv = "ZMESH_BENCH_CPU_PROFILE"
	TraceEnv   = "ZMESH_BENCH_TRACE"
)

// StartProfiling starts a CPU profile into the file ProfileEnv names and an execution trace
// into the file TraceEnv names, each when set, and returns the function that stops them and
// closes the files.
func StartProfiling() (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(errs...)
	}
	for _, p := range []struct {
		env   string
		start func(*os.File) error
		stop  func()
	}{
		{ProfileEnv, func(f *os.File) error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile},
		{TraceEnv, func(f *os.File) error { return trace.Start(f) }, trace.Stop},
	} {
		path := os.Getenv(p.env)
		if path == "" {
			continue
		}
		f, err := os.Create(path)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", p.env, err), stop())
		}
		if err := p.start(f); err != nil {
			f.Close()
			return nil, errors.Join(fmt.Errorf("%s: %w", p.env, err), stop())
		}
		stops = append(stops, func() error {
			p.stop()
			return f.Close()
		})
	}
	return stop, nil
}
