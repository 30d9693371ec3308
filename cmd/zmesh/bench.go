package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/zmesh/zmesh/bench"
)

// benchWorkerCommand is the hidden subcommand the benchmark runs its workers with.
const benchWorkerCommand = "bench-worker"

// benchScenarios lists every scenario `zmesh bench` knows, in the order they run: the
// baselines, then the zmesh paths, each naming its baseline.
func benchScenarios() []bench.Scenario {
	return append(bench.Baselines(), bench.Zmesh()...)
}

// selfExec starts the benchmark's processes from this executable.
func selfExec() (bench.Exec, error) {
	path, err := os.Executable()
	if err != nil {
		return bench.Exec{}, fmt.Errorf("find the zmesh executable for the bench workers: %w", err)
	}
	return bench.Exec{Path: path, WorkerArgs: []string{benchWorkerCommand}}, nil
}

func newBenchCommand(exec func() (bench.Exec, error), lookupEnv env) *cobra.Command {
	var opts bench.Options
	var asJSON, check bool
	var output string
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure forwarding paths against plain Go baselines",
		Long: "Measure each scenario's throughput (--streams TCP connections of large writes for\n" +
			"--duration, with Jain's fairness index over the streams), 64-byte echo round-trip time\n" +
			"(p50/p99) and the CPU seconds its relay processes spend per GiB, and show zmesh paths as\n" +
			"ratios to their baselines. Every load generator, sink, relay and router is its own\n" +
			"process; all traffic stays on 127.0.0.1. Scenarios: direct, io-copy (a one-hop Go\n" +
			"io.Copy proxy), tls-2hop (two Go relays with TLS 1.3 between them), zmesh-1router (one\n" +
			"router with the controller co-located: tunnel proxy on-ramp, circuit, proxy terminator;\n" +
			"against io-copy), zmesh-2routers-tls and zmesh-2routers-quic (the on-ramp on router A, the\n" +
			"terminator on router B, split links over tls: or quic:; against tls-2hop),\n" +
			"zmesh-sdk-e2ee (an SDK client's `zmesh tunnel proxy` through router A's SDK listener to\n" +
			"router B's tunnel in host mode, encrypted end to end) and zmesh-sdk-e2ee-inproc (the\n" +
			"same with the SDK embedded in the load generator), both against tls-e2e-relay (the\n" +
			"load generator's TLS to relay A, TLS from A to B, and an end-to-end TLS session from\n" +
			"the load generator to B inside: the same layers of encryption).\n\n" +
			"For the zmesh paths and the relay baselines (a relayed connection for a circuit) it also\n" +
			"measures circuit setup (--setup-workers circuits at a time, each carrying one byte to\n" +
			"the sink and back, for --setup-duration: the most circuits per second, and latency\n" +
			"p50/p99 at that load), then circuit setup at --setup-rate circuits started per second\n" +
			"whatever the earlier ones do (latency from when each was due), and, on two routers\n" +
			"without an SDK client, the resident memory per idle circuit of each router with\n" +
			"--idle-circuits established circuits. --setup-duration 0, --setup-rate 0 and\n" +
			"--idle-circuits 0 skip them.\n\n" +
			"--repeat N measures every selected scenario N times, each round with its baselines, and\n" +
			"shows every ratio's median and range. The report ends with zmesh's performance targets\n" +
			"that the run measured, met or MISSED (medians over the rounds); --check makes a missed\n" +
			"target an error (exit status 1).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Duration <= 0 || opts.Streams < 1 || opts.RTTSamples < 1 || opts.RTTConns < 1 || opts.WriteSize < 1 || opts.SetupWorkers < 1 || opts.Repeat < 1 {
				return usageError{errors.New("--duration, --streams, --rtt-samples, --rtt-conns, --write-size, --setup-workers and --repeat must be positive")}
			}
			if opts.SetupDuration < 0 || opts.IdleCircuits < 0 || opts.SetupRate < 0 {
				return usageError{errors.New("--setup-duration, --setup-rate and --idle-circuits must not be negative (0 skips the measurement)")}
			}
			if err := checkFormat(output, "text", "json"); err != nil {
				return err
			}
			if asJSON {
				if cmd.Flags().Changed("output") && output != "json" {
					return usagef("--json and --output %s ask for two formats; give one", output)
				}
				output = "json"
			}
			opts.SkipSetup, opts.SkipIdle, opts.SkipSetupRate = opts.SetupDuration == 0, opts.IdleCircuits == 0, opts.SetupRate == 0
			log, err := newLogger(cmd.ErrOrStderr(), lf, lookupEnv)
			if err != nil {
				return err
			}
			if opts.Exec, err = exec(); err != nil {
				return err
			}
			opts.Scenarios = benchScenarios()
			opts.Log = log
			progress := newProgressLine(cmd.ErrOrStderr())
			opts.Progress = progress.show
			rep, runErr := bench.Run(cmd.Context(), opts)
			progress.clear()
			if rep == nil {
				if errors.Is(runErr, bench.ErrUnknownScenario) {
					return usageError{runErr}
				}
				return runErr
			}
			if err := printBenchReport(cmd.OutOrStdout(), rep, output == "json"); err != nil {
				return err
			}
			if runErr != nil {
				return reportedError{msg: "bench: a scenario failed"}
			}
			if missed := rep.Missed(); check && len(missed) > 0 {
				names := make([]string, len(missed))
				for i, g := range missed {
					names[i] = g.String()
				}
				return reportedError{msg: fmt.Sprintf("bench: %d performance target(s) missed: %s", len(missed), strings.Join(names, "; "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Duration, "duration", 5*time.Second, "length of each throughput measurement, and the most each echo measurement takes after its warm-up round trips")
	f.IntVar(&opts.Streams, "streams", 1, "parallel TCP streams of the throughput measurement")
	f.StringSliceVar(&opts.Only, "scenarios", nil, "run only these scenarios (comma-separated), each with its baseline")
	f.IntVar(&opts.RTTSamples, "rtt-samples", 10000, "64-byte round trips to time per scenario")
	f.IntVar(&opts.RTTConns, "rtt-conns", 1, "connections the round trips are spread over")
	f.IntVar(&opts.WriteSize, "write-size", 256<<10, "bytes per write of the throughput measurement")
	f.DurationVar(&opts.SetupDuration, "setup-duration", 3*time.Second, "length of the circuit setup measurement of the zmesh paths; 0 skips it")
	f.IntVar(&opts.SetupWorkers, "setup-workers", 16, "circuits set up at a time in the circuit setup measurement")
	f.Float64Var(&opts.SetupRate, "setup-rate", bench.DefaultSetupRate, "circuits started per second in the open-loop setup measurement that follows; 0 skips it")
	f.IntVar(&opts.IdleCircuits, "idle-circuits", 10000, "idle circuits the routers' memory is measured with (two-router paths); 0 skips it")
	f.IntVar(&opts.Repeat, "repeat", 1, "rounds: every selected scenario measured this many times, each round with its baselines")
	f.BoolVar(&check, "check", false, "exit with status 1 when the run missed one of zmesh's performance targets")
	f.StringVarP(&output, "output", "o", "text", "report format: text or json")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON: -o json")
	lf.register(f)
	return cmd
}

func printBenchReport(w io.Writer, rep *bench.Report, asJSON bool) error {
	if !asJSON {
		return rep.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("print the bench report: %w", err)
	}
	return nil
}

// newBenchWorkerCommand is the hidden entry point of the benchmark's worker processes.
func newBenchWorkerCommand(lookupEnv env) *cobra.Command {
	return &cobra.Command{
		Use:                benchWorkerCommand + " ROLE [flags]",
		Short:              "A process of zmesh bench: sink, relay or loadgen",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logFlags{}, lookupEnv)
			if err != nil {
				return err
			}
			return bench.RunWorker(cmd.Context(), args, cmd.InOrStdin(), cmd.OutOrStdout(), log)
		},
	}
}

// progressLine shows the run's status on one line of a terminal (rewritten in place), or one
// line per status elsewhere.
type progressLine struct {
	w   io.Writer
	tty bool
}

func newProgressLine(w io.Writer) *progressLine {
	f, ok := w.(*os.File)
	return &progressLine{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progressLine) show(status string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kbench %s", status)
		return
	}
	fmt.Fprintf(p.w, "bench %s\n", status)
}

func (p *progressLine) clear() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
