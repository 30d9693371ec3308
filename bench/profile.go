package bench

import (
	"errors"
	"fmt"
	"os"
	"runtime/trace"
	"time"

	"github.com/zmesh/zmesh/internal/ops/profile"
)

// Profiling the processes of a run. With Options.ProfileDir set, the harness gives every
// process on the forwarding path (Command.Relay: the baselines' relays, the scenarios'
// routers; Command.Profiled: a load generator with the SDK embedded) environment variables naming files in that directory: ProfileEnv, for a CPU
// profile of the process's life, HeapEnv, for heap profiles every second and at its end, and,
// with Options.Trace, TraceEnv, for an execution trace.
// A process honours them by calling StartProfiling first thing and its stop function last:
// the bench's relays do, and so does the test binary when it acts as `zmesh router run`.
// Processes that know nothing of the variables ignore them. Skipping the circuit setup and
// idle circuit measurements leaves the profile mostly to throughput and echo.

// Environment variables that ask a process of the bench for profiles (see StartProfiling).
const (
	ProfileEnv = "ZMESH_BENCH_CPU_PROFILE"
	HeapEnv    = "ZMESH_BENCH_HEAP_PROFILE"
	TraceEnv   = "ZMESH_BENCH_TRACE"
)

// StartProfiling starts a CPU profile into the file ProfileEnv names and heap profiles every
// second into the file HeapEnv names (with the profile package, as the router's profile
// section does), and an execution trace into the file TraceEnv names, each when set, and returns the function that stops them and closes the
// files.
func StartProfiling() (stop func() error, err error) {
	cpu, err := profile.Start(profile.Options{
		CPUPath:        os.Getenv(ProfileEnv),
		MemoryPath:     os.Getenv(HeapEnv),
		MemoryInterval: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ProfileEnv, err)
	}
	path := os.Getenv(TraceEnv)
	if path == "" {
		return cpu.Stop, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", TraceEnv, err), cpu.Stop())
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, errors.Join(fmt.Errorf("%s: %w", TraceEnv, err), cpu.Stop())
	}
	return func() error {
		trace.Stop()
		return errors.Join(f.Close(), cpu.Stop())
	}, nil
}
