package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/zmesh/zmesh/bench"
)

// cliEnv makes the test binary act as the zmesh command line, so that `zmesh bench` can
// re-execute it as its workers (`zmesh bench-worker ...`) the way the real binary does.
const cliEnv = "ZMESH_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(cliEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		root := newRootCommand(os.Stdout, os.Stderr, os.LookupEnv)
		root.SetArgs(os.Args[1:])
		err := root.ExecuteContext(ctx)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "zmesh:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testBenchExec runs the bench workers from the test binary acting as the CLI; GORACE keeps a
// -race build from sleeping a second at every worker's exit.
func testBenchExec() (bench.Exec, error) {
	exec, err := selfExec()
	exec.Env = []string{cliEnv + "=1", "GORACE=atexit_sleep_ms=0"}
	return exec, err
}

func runBench(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := newBenchCommand(testBenchExec, func(string) (string, bool) { return "", false })
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return stdout.String(), stderr.String(), err
}

// TestBenchJSON: -o json, or --json as bench had it first, prints the report as JSON.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{{"-o", "json"}, {"--json"}} {
		testBenchJSON(t, flags)
	}
}

func testBenchJSON(t *testing.T, flags []string) {
	stdout, stderr, err := runBench(t, append([]string{"--duration", "200ms", "--scenarios", "io-copy", "--rtt-samples", "50"}, flags...)...)
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
	}
	if len(rep.Results) != 1 || rep.Results[0].Scenario != "io-copy" || rep.Results[0].Throughput == nil || rep.Results[0].RTT == nil {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(stderr, "bench [1/1] io-copy: throughput") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
}

func TestBenchTable(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runBench(t, "--duration", "200ms", "--scenarios", "direct", "--streams", "2", "--rtt-samples", "50")
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, stderr)
	}
	for _, want := range []string{"SCENARIO", "JAIN", "RTT P50", "CPU S/GIB", "direct"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
}

// TestBenchZmeshOneRouter runs the one-router scenario through the real `zmesh router run
// --controller` command (the test binary acting as the CLI), with its circuit setup figures.
func TestBenchZmeshOneRouter(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runBench(t, "--duration", "300ms", "--scenarios", "zmesh-1router", "--rtt-samples", "100",
		"--setup-duration", "300ms", "--setup-workers", "4", "--json")
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
	}
	if len(rep.Results) != 2 || rep.Results[1].Scenario != "zmesh-1router" {
		t.Fatalf("report %+v, want io-copy and zmesh-1router", rep)
	}
	res := rep.Results[1]
	if res.Throughput == nil || res.RTT == nil || res.Ratio == nil || res.CircuitSetup == nil || res.CircuitSetup.Circuits == 0 {
		t.Errorf("zmesh-1router: %+v", res)
	}
	if !strings.Contains(stderr, "zmesh-1router: circuit setup, 4 at a time") {
		t.Errorf("no circuit setup progress on stderr: %q", stderr)
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--streams", "0"}, "must be positive"},
		{[]string{"--duration", "-1s"}, "must be positive"},
		{[]string{"--scenarios", "nope"}, `"nope" is not known`},
		{[]string{"--setup-duration", "-1s"}, "must not be negative"},
		{[]string{"--idle-circuits", "-1"}, "must not be negative"},
		{[]string{"--setup-workers", "0"}, "must be positive"},
		{[]string{"-o", "xml"}, `--output "xml" is not allowed; allowed: text, json`},
		{[]string{"--json", "-o", "text"}, "--json and --output text ask for two formats"},
	} {
		if _, _, err := runBench(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != exitUsage {
			t.Errorf("bench %q: %v (exit %d), want a usage error with %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}

func TestBenchWorkerIsHidden(t *testing.T) {
	t.Parallel()
	stdout, _, err := run(t, nil, "--help")
	if err != nil || !strings.Contains(stdout, "bench ") || strings.Contains(stdout, benchWorkerCommand) {
		t.Errorf("help (%v) should list bench and hide %s:\n%s", err, benchWorkerCommand, stdout)
	}
	_, _, err = run(t, nil, benchWorkerCommand, "nope")
	if err == nil || !strings.Contains(err.Error(), `role "nope"`) {
		t.Errorf("bench-worker nope: %v", err)
	}
}
