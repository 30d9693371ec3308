package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a run, as `zmesh bench -o json` prints it.
type Report struct {
	DurationSeconds float64 `json:"durationSeconds"`
	Streams         int     `json:"streams"`
	WriteSize       int     `json:"writeSize"`
	RTTSamples      int     `json:"rttSamples"`
	RTTConns        int     `json:"rttConns"`
	CPUs            int     `json:"cpus"`
	// SetupSeconds, SetupWorkers and SetupRate describe the circuit setup measurements,
	// IdleCircuits the idle-circuit one; zero when they were skipped.
	SetupSeconds float64 `json:"setupSeconds,omitempty"`
	SetupWorkers int     `json:"setupWorkers,omitempty"`
	SetupRate    float64 `json:"setupRate,omitempty"`
	IdleCircuits int     `json:"idleCircuits,omitempty"`
	// Repeat is the number of rounds (Options.Repeat). Results holds, for each scenario, the
	// round whose throughput was the median one, with Spreads over every round; Rounds holds
	// each round's results when there were several.
	Repeat  int        `json:"repeat"`
	Results []Result   `json:"results"`
	Rounds  [][]Result `json:"rounds,omitempty"`
	// Goals are the performance targets (Goals) checked against the run.
	Goals []GoalResult `json:"goals,omitempty"`
}

// Result is one scenario's figures; a failed scenario has Error and whatever it measured.
type Result struct {
	Scenario   string      `json:"scenario"`
	Baseline   string      `json:"baseline,omitempty"`
	Throughput *Throughput `json:"throughput,omitempty"`
	RTT        *Latency    `json:"rtt,omitempty"`
	// CPUSecondsPerGiB is the user+system CPU time of the scenario's relay processes during
	// the throughput measurement per GiB delivered; absent when it has none (direct) or the
	// platform has no /proc.
	CPUSecondsPerGiB *float64 `json:"cpuSecondsPerGiB,omitempty"`
	// Ratio compares this scenario with its baseline; Spreads gives each ratio over the
	// rounds of a repeated run.
	Ratio   *Ratio   `json:"ratio,omitempty"`
	Spreads *Spreads `json:"spreads,omitempty"`
	// CircuitSetup (closed loop), PacedSetup (open loop at Report.SetupRate) and IdleMemory
	// are the circuit measurements of paths with circuits.
	CircuitSetup *CircuitSetup `json:"circuitSetup,omitempty"`
	PacedSetup   *CircuitSetup `json:"pacedSetup,omitempty"`
	IdleMemory   *IdleMemory   `json:"idleMemory,omitempty"`
	Error        string        `json:"error,omitempty"`
}

// Throughput is the throughput measurement: the aggregate over every stream and each stream.
type Throughput struct {
	// Gbps is all bytes over the longest stream's time, in Gbit/s.
	Gbps    float64  `json:"gbps"`
	Bytes   int64    `json:"bytes"`
	Seconds float64  `json:"seconds"`
	Jain    float64  `json:"jain"`
	Streams []Stream `json:"streams"`
}

func newThroughput(streams []Stream) *Throughput {
	t := &Throughput{Streams: streams}
	rates := make([]float64, len(streams))
	for i, s := range streams {
		t.Bytes += s.Bytes
		t.Seconds = max(t.Seconds, s.Seconds)
		rates[i] = s.Gbps
	}
	t.Gbps = gbps(t.Bytes, t.Seconds)
	t.Jain = JainIndex(rates)
	return t
}

// Ratio is a scenario's figures divided by its baseline's: above 1 is faster for Throughput,
// slower for the RTTs and costlier for CPU.
type Ratio struct {
	Throughput float64  `json:"throughput"`
	RTTP50     float64  `json:"rttP50"`
	RTTP99     float64  `json:"rttP99"`
	CPU        *float64 `json:"cpuPerGiB,omitempty"`
	// Setup compares the closed-loop circuit setup rates, PacedSetupP99 the p99 latencies at
	// Report.SetupRate, when both were measured.
	Setup         *float64 `json:"setup,omitempty"`
	PacedSetupP99 *float64 `json:"pacedSetupP99,omitempty"`
}

// compare fills the Ratio of every result of one round whose baseline was measured in it.
func compare(round []Result) {
	byName := make(map[string]*Result, len(round))
	for i := range round {
		byName[round[i].Scenario] = &round[i]
	}
	for i := range round {
		res := &round[i]
		base := byName[res.Baseline]
		if res.Baseline == "" || base == nil || res.Throughput == nil || base.Throughput == nil || res.RTT == nil || base.RTT == nil {
			continue
		}
		res.Ratio = &Ratio{
			Throughput: res.Throughput.Gbps / base.Throughput.Gbps,
			RTTP50:     res.RTT.P50 / base.RTT.P50,
			RTTP99:     res.RTT.P99 / base.RTT.P99,
		}
		if res.CPUSecondsPerGiB != nil && base.CPUSecondsPerGiB != nil && *base.CPUSecondsPerGiB > 0 {
			cpu := *res.CPUSecondsPerGiB / *base.CPUSecondsPerGiB
			res.Ratio.CPU = &cpu
		}
		if res.CircuitSetup != nil && base.CircuitSetup != nil && base.CircuitSetup.PerSecond > 0 {
			setup := res.CircuitSetup.PerSecond / base.CircuitSetup.PerSecond
			res.Ratio.Setup = &setup
		}
		if res.PacedSetup != nil && base.PacedSetup != nil && base.PacedSetup.Latency.P99 > 0 {
			p99 := res.PacedSetup.Latency.P99 / base.PacedSetup.Latency.P99
			res.Ratio.PacedSetupP99 = &p99
		}
	}
}

// WriteTable prints the report as an aligned table, followed by the errors of failed
// scenarios. Figures of a scenario with a baseline are followed by their ratio to it.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%.3gs per measurement, %d stream(s) of %d KiB writes, %d × %d B echo over %d connection(s), %d CPUs\n\n",
		r.DurationSeconds, r.Streams, r.WriteSize>>10, r.RTTSamples, echoSize, r.RTTConns, r.CPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	multi := r.Streams > 1
	head := []string{"SCENARIO", "BASELINE", "GBIT/S"}
	if multi {
		head = append(head, "STREAM MIN-MAX", "JAIN")
	}
	head = append(head, "RTT P50", "RTT P99", "CPU S/GIB")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	var failures []string
	for _, res := range r.Results {
		fmt.Fprintln(tw, strings.Join(res.cells(multi), "\t"))
		if res.Error != "" {
			failures = append(failures, res.Scenario+": "+res.Error)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if err := r.writeCircuits(w); err != nil {
		return err
	}
	if err := r.writeSpreads(w); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if err := r.writeGoals(w); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	for _, f := range failures {
		if _, err := fmt.Fprintln(w, "\nFAILED "+f); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}

func (res Result) cells(multi bool) []string {
	var ratio Ratio
	if res.Ratio != nil {
		ratio = *res.Ratio
	}
	cells := []string{res.Scenario, orDash(res.Baseline)}
	if res.Throughput == nil {
		cells = append(cells, "-")
		if multi {
			cells = append(cells, "-", "-")
		}
	} else {
		t := res.Throughput
		cells = append(cells, withRatio(fmt.Sprintf("%.2f", t.Gbps), res.Ratio != nil, ratio.Throughput))
		if multi {
			lo, hi := t.Streams[0].Gbps, t.Streams[0].Gbps
			for _, s := range t.Streams {
				lo, hi = min(lo, s.Gbps), max(hi, s.Gbps)
			}
			cells = append(cells, fmt.Sprintf("%.2f-%.2f", lo, hi), fmt.Sprintf("%.3f", t.Jain))
		}
	}
	if res.RTT == nil {
		cells = append(cells, "-", "-")
	} else {
		cells = append(cells,
			withRatio(fmtMicros(res.RTT.P50), res.Ratio != nil, ratio.RTTP50),
			withRatio(fmtMicros(res.RTT.P99), res.Ratio != nil, ratio.RTTP99))
	}
	if res.CPUSecondsPerGiB == nil {
		cells = append(cells, "-")
	} else {
		cells = append(cells, withRatio(fmt.Sprintf("%.2f", *res.CPUSecondsPerGiB), ratio.CPU != nil, deref(ratio.CPU)))
	}
	if res.Error != "" {
		cells[len(cells)-1] += "  FAILED"
	}
	return cells
}

// writeCircuits prints the circuit measurements of the scenarios that have them.
func (r *Report) writeCircuits(w io.Writer) error {
	var rows []Result
	for _, res := range r.Results {
		if res.CircuitSetup != nil || res.IdleMemory != nil {
			rows = append(rows, res)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	var about []string
	if r.SetupWorkers > 0 {
		about = append(about, fmt.Sprintf("setup: %d at a time for %.3gs, connect to echoed byte", r.SetupWorkers, r.SetupSeconds))
	}
	if r.SetupRate > 0 {
		about = append(about, fmt.Sprintf("then %.0f started per second, from when each was due", r.SetupRate))
	}
	if r.IdleCircuits > 0 {
		about = append(about, "idle: resident memory growth per established idle circuit")
	}
	fmt.Fprintf(w, "\nCircuits (%s)\n\n", strings.Join(about, "; "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"SCENARIO", "SETUP/S", "SETUP P50", "SETUP P99", "", "", "", "FAILED", "IDLE CIRCUITS", "MEMORY PER IDLE CIRCUIT"}
	if r.SetupRate > 0 {
		at := fmt.Sprintf("@%.0f/S", r.SetupRate)
		header[4], header[5], header[6] = at+" DONE/S", at+" P50", at+" P99"
	}
	fmt.Fprintln(tw, strings.Join(withoutUnused(header, header), "\t"))
	for _, res := range rows {
		cells := []string{res.Scenario, "-", "-", "-", "-", "-", "-", "-", "-", "-"}
		failed := 0
		if s := res.CircuitSetup; s != nil {
			cells[1] = fmt.Sprintf("%.0f", s.PerSecond)
			if res.Ratio != nil && res.Ratio.Setup != nil {
				cells[1] = withRatio(cells[1], true, *res.Ratio.Setup)
			}
			cells[2], cells[3] = fmtMicros(s.Latency.P50), fmtMicros(s.Latency.P99)
			failed += s.Failed
			cells[7] = fmt.Sprintf("%d", failed)
		}
		if s := res.PacedSetup; s != nil {
			cells[4] = fmt.Sprintf("%.0f", s.PerSecond)
			cells[5], cells[6] = fmtMicros(s.Latency.P50), fmtMicros(s.Latency.P99)
			if res.Ratio != nil && res.Ratio.PacedSetupP99 != nil {
				cells[6] = withRatio(cells[6], true, *res.Ratio.PacedSetupP99)
			}
			failed += s.Failed
			cells[7] = fmt.Sprintf("%d", failed)
		}
		if m := res.IdleMemory; m != nil {
			cells[8] = fmt.Sprintf("%d", m.Circuits)
			if m.Circuits < m.Requested {
				cells[8] += fmt.Sprintf(" of %d", m.Requested)
			}
			var per []string
			for _, rm := range m.Routers {
				per = append(per, fmt.Sprintf("%s %s: %.1f KiB", rm.Role, rm.Router, rm.BytesPerCircuit/1024))
			}
			cells[9] = strings.Join(per, ", ")
		}
		fmt.Fprintln(tw, strings.Join(withoutUnused(header, cells), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func withRatio(s string, ok bool, ratio float64) string {
	if !ok {
		return s
	}
	if ratio > 0 && ratio < 0.005 {
		// Two decimals would print 0.00×, as if the figure were nothing: a zmesh path's setup
		// latency against a TLS relay that cannot keep up with the rate, for one.
		return s + " (<0.01×)"
	}
	return fmt.Sprintf("%s (%.2f×)", s, ratio)
}

func fmtMicros(us float64) string {
	if us >= 10000 {
		return fmt.Sprintf("%.1fms", us/1000)
	}
	if us < 100 {
		return fmt.Sprintf("%.1fµs", us)
	}
	return fmt.Sprintf("%.0fµs", us)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

// withoutUnused returns cells without the columns whose header is empty (measurements that
// were not made).
func withoutUnused(header, cells []string) []string {
	out := make([]string, 0, len(cells))
	for i, c := range cells {
		if header[i] != "" {
			out = append(out, c)
		}
	}
	return out
}
