//go:build unix

package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/pproftest"
)

// TestProfileZmesh is not a test but a tool, skipped unless ZMESH_BENCH_PROFILE_DIR names a
// directory: it runs the scenarios of ZMESH_BENCH_SCENARIOS (default zmesh-2routers-tls)
// with their baselines, ZMESH_BENCH_STREAMS streams (default 16) for ZMESH_BENCH_DURATION
// (default 5s), without circuit setup (unless ZMESH_BENCH_SETUP=1: then 5 s of closed-loop
// setup, without the open-loop rate measurement) and idle circuits, every router and relay its
// own process (the test binary acting as `zmesh router run`), and leaves a CPU profile of each
// router and relay in that directory, and of the load generator when the SDK is embedded in
// it (and execution traces with ZMESH_BENCH_TRACES=1; not ZMESH_BENCH_TRACE, which names the
// trace file of the process it is set for):
//
//	ZMESH_BENCH_PROFILE_DIR=/tmp/prof go test -run TestProfileZmesh -v ./bench
//	go tool pprof -top /tmp/prof/zmesh-2routers-tls.router-a.cpu.pprof
//
// Run it without -race: the race detector would dominate the profiles.
func TestProfileZmesh(t *testing.T) {
	dir := os.Getenv("ZMESH_BENCH_PROFILE_DIR")
	if dir == "" {
		t.Skip("set ZMESH_BENCH_PROFILE_DIR to profile the routers")
	}
	streams, duration := 16, 5*time.Second
	if s := os.Getenv("ZMESH_BENCH_STREAMS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("ZMESH_BENCH_STREAMS: %v", err)
		}
		streams = n
	}
	if s := os.Getenv("ZMESH_BENCH_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("ZMESH_BENCH_DURATION: %v", err)
		}
		duration = d
	}
	only := []string{ZmeshTwoRoutersTLS}
	if s := os.Getenv("ZMESH_BENCH_SCENARIOS"); s != "" {
		only = strings.Split(s, ",")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(t.Context(), Options{
		Exec:          testExec(t),
		Scenarios:     append(Baselines(), Zmesh()...),
		Only:          only,
		Duration:      duration,
		Streams:       streams,
		RTTSamples:    1000,
		SkipSetup:     os.Getenv("ZMESH_BENCH_SETUP") != "1",
		SkipIdle:      true,
		SkipSetupRate: true,
		SetupDuration: 5 * time.Second,
		ProfileDir:    dir,
		Trace:         os.Getenv("ZMESH_BENCH_TRACES") == "1",
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	profiles, _ := filepath.Glob(filepath.Join(dir, "*.cpu.pprof"))
	if len(profiles) == 0 {
		t.Fatalf("no profile in %s", dir)
	}
	for _, p := range profiles {
		t.Logf("profile %s", p)
	}
}

// TestRunWritesProfiles runs the io-copy baseline with Options.ProfileDir and Trace: its relay
// (and only it: the sink and the load generator are not on the forwarding path) leaves a CPU
// profile, a heap profile and an execution trace.
func TestRunWritesProfiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := Run(t.Context(), Options{
		Exec:       testExec(t),
		Scenarios:  Baselines(),
		Only:       []string{BaselineProxy},
		Duration:   100 * time.Millisecond,
		RTTSamples: 10,
		ProfileDir: dir,
		Trace:      true,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	want := []string{BaselineProxy + ".relay.cpu.pprof", BaselineProxy + ".relay.heap.pprof", BaselineProxy + ".relay.trace"}
	if len(files) != len(want) {
		t.Fatalf("profiles %q, want %q", files, want)
	}
	for _, name := range want {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, %v", name, st, err)
		}
	}
	if types := pproftest.SampleTypes(t, filepath.Join(dir, want[1])); !slices.Contains(types, "inuse_space/bytes") {
		t.Errorf("the heap profile's sample types: %v", types)
	}
}
