//go:build unix

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pidLog records the processes a run starts.
type pidLog struct {
	mu   sync.Mutex
	pids map[int]string
}

func (l *pidLog) started(name string, pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pids[pid] = name
}

// checkGone fails t for every recorded process that still exists.
func (l *pidLog) checkGone(t *testing.T, wantAtLeast int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pids) < wantAtLeast {
		t.Errorf("%d processes started, want at least %d", len(l.pids), wantAtLeast)
	}
	for pid, name := range l.pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after the run: kill 0 = %v", name, pid, err)
		}
	}
}

func TestRunBaselines(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	pids := &pidLog{pids: map[int]string{}}
	// A stand-in for a zmesh scenario: another io.Copy relay compared with the proxy baseline.
	scenarios := append(Baselines(), Define("fake-router", BaselineProxy, setupProxy))
	var progress []string
	rep, err := Run(ctx, Options{
		Exec:          testExec(t),
		Scenarios:     scenarios,
		Duration:      300 * time.Millisecond,
		Streams:       3,
		RTTSamples:    300,
		SetupDuration: 300 * time.Millisecond,
		SetupWorkers:  2,
		SetupRate:     200,
		Progress:      func(s string) { progress = append(progress, s) },
		Started:       pids.started,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// sink + 2 loadgens per scenario, 2 more (the setup measurements) for each of the four
	// with relays, plus 1 + 2 + 2 + 1 relays
	pids.checkGone(t, 5*3+4*2+6)
	if len(rep.Results) != len(scenarios) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(scenarios))
	}
	for _, res := range rep.Results {
		tp := res.Throughput
		if tp == nil || tp.Gbps <= 0 || tp.Bytes <= 0 || len(tp.Streams) != 3 {
			t.Errorf("%s: throughput %+v", res.Scenario, tp)
		} else if tp.Jain <= 0 || tp.Jain > 1 {
			t.Errorf("%s: Jain's index %v is outside (0, 1]", res.Scenario, tp.Jain)
		}
		if res.RTT == nil || res.RTT.Samples <= 0 || res.RTT.P50 <= 0 || res.RTT.P99 < res.RTT.P50 {
			t.Errorf("%s: rtt %+v", res.Scenario, res.RTT)
		}
		hasRelay := res.Scenario != BaselineDirect
		if hasRelay != (res.CPUSecondsPerGiB != nil) {
			t.Errorf("%s: CPU s/GiB %v, want it only for scenarios with relays", res.Scenario, res.CPUSecondsPerGiB)
		}
		if wantRatio := res.Baseline != ""; wantRatio != (res.Ratio != nil) {
			t.Errorf("%s: ratio %+v", res.Scenario, res.Ratio)
		}
		// The relays' connection setup is measured like a zmesh path's circuit setup, as the
		// baseline of the zmesh paths' figures.
		if s, p := res.CircuitSetup, res.PacedSetup; hasRelay != (s != nil && p != nil) ||
			hasRelay && (s.Circuits <= 0 || s.Failed != 0 || p.Rate != 200 || p.Circuits <= 0 || p.Failed != 0) {
			t.Errorf("%s: setup %+v, paced %+v", res.Scenario, s, p)
		}
	}
	if r := rep.Results[len(rep.Results)-1].Ratio; r == nil || r.Throughput <= 0 || r.RTTP50 <= 0 || r.Setup == nil || *r.Setup <= 0 || r.PacedSetupP99 == nil || *r.PacedSetupP99 <= 0 {
		t.Errorf("fake-router ratio to io-copy: %+v", r)
	}

	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Results) != len(scenarios) || back.Results[2].Throughput.Gbps <= 0 {
		t.Errorf("JSON round trip: %v\n%s", err, raw)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"JAIN", "direct", "io-copy", "tls-2hop", "tls-e2e-relay", "fake-router", "×)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if len(progress) == 0 || !strings.HasPrefix(progress[0], "[1/5] direct") {
		t.Errorf("progress %q", progress)
	}
}

func TestRunReportsFailedScenario(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	pids := &pidLog{pids: map[int]string{}}
	broken := Define("broken", BaselineDirect, func(ctx context.Context, env *Env) (Target, error) {
		// A relay without --to exits at once.
		_, err := env.Start(ctx, Command{Name: "bad-relay", Worker: true, Relay: true, Args: []string{"relay"}})
		return Target{}, err
	})
	rep, err := Run(ctx, Options{
		Exec:       testExec(t),
		Scenarios:  append(Baselines(), broken),
		Only:       []string{"broken"},
		Duration:   100 * time.Millisecond,
		RTTSamples: 10,
		Started:    pids.started,
	})
	if err == nil || !strings.Contains(err.Error(), "--to is required") {
		t.Errorf("Run error %v, want the bad relay's complaint", err)
	}
	pids.checkGone(t, 5)
	if rep == nil || len(rep.Results) != 2 || rep.Results[0].Scenario != BaselineDirect || rep.Results[0].Error != "" {
		t.Fatalf("results %+v, want direct (the baseline) measured and broken failed", rep)
	}
	if rep.Results[1].Error == "" || rep.Results[1].Ratio != nil {
		t.Errorf("broken: %+v", rep.Results[1])
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "FAILED broken") {
		t.Errorf("table (%v):\n%s", err, table.String())
	}
}

// With Repeat, every round measures the scenario and its baseline again, and the report
// holds each round and the spread of the ratios.
func TestRunRepeats(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	pids := &pidLog{pids: map[int]string{}}
	rep, err := Run(ctx, Options{
		Exec:       testExec(t),
		Scenarios:  append(Baselines(), Define("fake-router", BaselineProxy, setupProxy)),
		Only:       []string{"fake-router"},
		Duration:   100 * time.Millisecond,
		RTTSamples: 20,
		SkipSetup:  true,
		Repeat:     2,
		Started:    pids.started,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Per round and scenario: a sink, a relay, 2 loadgens.
	pids.checkGone(t, 2*2*4)
	if rep.Repeat != 2 || len(rep.Rounds) != 2 || len(rep.Results) != 2 {
		t.Fatalf("repeat %d, %d rounds, %d results", rep.Repeat, len(rep.Rounds), len(rep.Results))
	}
	for i, round := range rep.Rounds {
		if len(round) != 2 || round[1].Ratio == nil || round[1].Ratio.Throughput <= 0 {
			t.Errorf("round %d: %+v", i+1, round)
		}
	}
	if s := rep.Results[1].Spreads; s == nil || s.Throughput == nil || s.Throughput.Rounds != 2 || s.RTTP50 == nil {
		t.Errorf("spreads %+v", s)
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	t.Parallel()
	exec := testExec(t)
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no executable", Options{Scenarios: Baselines()}, "Exec.Path"},
		{"unknown scenario", Options{Exec: exec, Scenarios: Baselines(), Only: []string{"nope"}}, `"nope" is not known`},
		{"negative streams", Options{Exec: exec, Scenarios: Baselines(), Streams: -1}, "streams -1"},
		{"negative setup", Options{Exec: exec, Scenarios: Baselines(), SetupDuration: -time.Second}, "setup duration -1s"},
		{"negative idle", Options{Exec: exec, Scenarios: Baselines(), IdleCircuits: -1}, "idle circuits -1"},
		{"duplicate", Options{Exec: exec, Scenarios: append(Baselines(), Baselines()[0])}, "two scenarios"},
		{"unknown baseline", Options{Exec: exec, Scenarios: []Scenario{Define("x", "y", setupProxy)}}, `baseline "y"`},
		{"bad name", Options{Exec: exec, Scenarios: []Scenario{Define("a/b", "", setupProxy)}}, `"a/b"`},
	} {
		rep, err := Run(t.Context(), tc.opts)
		if err == nil || rep != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run = %v, %v; want an error with %q", tc.name, rep, err, tc.want)
		}
	}
}
