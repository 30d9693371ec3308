package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Spread is one ratio over the rounds of a run: their median and range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Rounds int     `json:"rounds"`
}

func spreadOf(xs []float64) *Spread {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Sorted(slices.Values(xs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return &Spread{Median: med, Min: s[0], Max: s[len(s)-1], Rounds: len(s)}
}

// Spreads are a scenario's ratios to its baseline over the rounds of a run (Options.Repeat),
// each round's scenario divided by the same round's baseline.
type Spreads struct {
	Throughput    *Spread `json:"throughput,omitempty"`
	RTTP50        *Spread `json:"rttP50,omitempty"`
	RTTP99        *Spread `json:"rttP99,omitempty"`
	CPU           *Spread `json:"cpuPerGiB,omitempty"`
	Setup         *Spread `json:"setup,omitempty"`
	PacedSetupP99 *Spread `json:"pacedSetupP99,omitempty"`
}

// ratioFields names the ratios a target can bound, with how to read each from a Ratio.
var ratioFields = []struct {
	name   string
	of     func(*Ratio) (float64, bool)
	spread func(*Spreads) **Spread
}{
	{"throughput", func(r *Ratio) (float64, bool) { return r.Throughput, true }, func(s *Spreads) **Spread { return &s.Throughput }},
	{"rtt-p50", func(r *Ratio) (float64, bool) { return r.RTTP50, true }, func(s *Spreads) **Spread { return &s.RTTP50 }},
	{"rtt-p99", func(r *Ratio) (float64, bool) { return r.RTTP99, true }, func(s *Spreads) **Spread { return &s.RTTP99 }},
	{"cpu", func(r *Ratio) (float64, bool) { return deref(r.CPU), r.CPU != nil }, func(s *Spreads) **Spread { return &s.CPU }},
	{"setup", func(r *Ratio) (float64, bool) { return deref(r.Setup), r.Setup != nil }, func(s *Spreads) **Spread { return &s.Setup }},
	{"paced-setup-p99", func(r *Ratio) (float64, bool) { return deref(r.PacedSetupP99), r.PacedSetupP99 != nil },
		func(s *Spreads) **Spread { return &s.PacedSetupP99 }},
}

// spreads gathers each scenario's ratios over rounds.
func spreads(rounds [][]Result, scenario string) *Spreads {
	values := make([][]float64, len(ratioFields))
	for _, round := range rounds {
		for _, res := range round {
			if res.Scenario != scenario || res.Ratio == nil {
				continue
			}
			for i, f := range ratioFields {
				if v, ok := f.of(res.Ratio); ok {
					values[i] = append(values[i], v)
				}
			}
		}
	}
	s := &Spreads{}
	found := false
	for i, f := range ratioFields {
		if sp := spreadOf(values[i]); sp != nil {
			*f.spread(s) = sp
			found = true
		}
	}
	if !found {
		return nil
	}
	return s
}

// Goal is one of zmesh's performance targets as the bench checks it: a figure of Scenario
// that must be at least (AtLeast) or at most Bound. The figure is a ratio to the scenario's
// baseline (the names of ratioFields: throughput, rtt-p50, rtt-p99, cpu, setup,
// paced-setup-p99), "jain" (the fairness of its throughput streams, with several streams), or
// "setup-vs" (its closed-loop circuit setup rate over Other's, measured in the same round).
// Over several rounds the median is checked.
type Goal struct {
	Scenario string  `json:"scenario"`
	Figure   string  `json:"figure"`
	Other    string  `json:"other,omitempty"`
	AtLeast  bool    `json:"atLeast"`
	Bound    float64 `json:"bound"`
}

// Goals returns the targets zmesh is held to (docs/performance.md).
func Goals() []Goal {
	return []Goal{
		{Scenario: ZmeshOneRouter, Figure: "throughput", AtLeast: true, Bound: 0.8},
		{Scenario: ZmeshTwoRoutersTLS, Figure: "throughput", AtLeast: true, Bound: 0.9},
		{Scenario: ZmeshTwoRoutersTLS, Figure: "rtt-p50", Bound: 1.3},
		{Scenario: ZmeshTwoRoutersTLS, Figure: "jain", AtLeast: true, Bound: 0.95},
		{Scenario: ZmeshTwoRoutersQUIC, Figure: "throughput", AtLeast: true, Bound: 0.5},
		{Scenario: ZmeshSDKEncryptedInProcess, Figure: "throughput", AtLeast: true, Bound: 0.9},
		{Scenario: ZmeshSDKEncryptedInProcess, Figure: "rtt-p50", Bound: 1.3},
		{Scenario: ZmeshSDKEncryptedInProcess, Figure: "setup-vs", Other: ZmeshTwoRoutersTLS, AtLeast: true, Bound: 0.8},
	}
}

// GoalResult is a Goal checked against a run: Measured when the run has the figure.
type GoalResult struct {
	Goal
	Measured bool    `json:"measured"`
	Value    float64 `json:"value,omitempty"`
	Met      bool    `json:"met"`
}

func (g Goal) String() string {
	op := "≤"
	if g.AtLeast {
		op = "≥"
	}
	figure := g.Figure
	if g.Figure == "setup-vs" {
		figure = "setup rate vs " + g.Other
	}
	if g.Figure == "jain" {
		return fmt.Sprintf("%s %s %s %.2f", g.Scenario, figure, op, g.Bound)
	}
	return fmt.Sprintf("%s %s %s %.2f×", g.Scenario, figure, op, g.Bound)
}

// value reads the goal's figure from one round's results.
func (g Goal) value(round []Result) (float64, bool) {
	var res, other *Result
	for i := range round {
		switch round[i].Scenario {
		case g.Scenario:
			res = &round[i]
		case g.Other:
			other = &round[i]
		}
	}
	if res == nil || res.Error != "" {
		return 0, false
	}
	switch g.Figure {
	case "jain":
		if res.Throughput == nil || len(res.Throughput.Streams) < 2 {
			return 0, false
		}
		return res.Throughput.Jain, true
	case "setup-vs":
		if other == nil || other.Error != "" || res.CircuitSetup == nil || other.CircuitSetup == nil || other.CircuitSetup.PerSecond <= 0 {
			return 0, false
		}
		return res.CircuitSetup.PerSecond / other.CircuitSetup.PerSecond, true
	}
	if res.Ratio == nil {
		return 0, false
	}
	for _, f := range ratioFields {
		if f.name == g.Figure {
			return f.of(res.Ratio)
		}
	}
	return 0, false
}

// check evaluates goals over the rounds of a run.
func check(goals []Goal, rounds [][]Result) []GoalResult {
	var out []GoalResult
	for _, g := range goals {
		var xs []float64
		for _, round := range rounds {
			if v, ok := g.value(round); ok {
				xs = append(xs, v)
			}
		}
		r := GoalResult{Goal: g}
		if sp := spreadOf(xs); sp != nil {
			r.Measured, r.Value = true, sp.Median
			r.Met = (g.AtLeast && r.Value >= g.Bound) || (!g.AtLeast && r.Value <= g.Bound)
		}
		out = append(out, r)
	}
	return out
}

// Missed returns the goals the run measured and missed.
func (r *Report) Missed() []GoalResult {
	var out []GoalResult
	for _, g := range r.Goals {
		if g.Measured && !g.Met {
			out = append(out, g)
		}
	}
	return out
}

// writeSpreads prints every scenario's ratios over the rounds, when there were several.
func (r *Report) writeSpreads(w io.Writer) error {
	if r.Repeat < 2 {
		return nil
	}
	fmt.Fprintf(w, "\nRatios to the baseline over %d rounds: median (min-max)\n\n", r.Repeat)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"SCENARIO"}
	for _, f := range ratioFields {
		header = append(header, strings.ToUpper(f.name))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, res := range r.Results {
		if res.Spreads == nil {
			continue
		}
		cells := []string{res.Scenario}
		for _, f := range ratioFields {
			sp := *f.spread(res.Spreads)
			if sp == nil {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, fmt.Sprintf("%.2f× (%.2f-%.2f)", sp.Median, sp.Min, sp.Max))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// String is the goal and the figure measured, e.g. "zmesh-1router throughput ≥ 0.80×: 1.05×".
func (g GoalResult) String() string {
	if g.Figure == "jain" {
		return fmt.Sprintf("%s: %.3f", g.Goal, g.Value)
	}
	return fmt.Sprintf("%s: %.2f×", g.Goal, g.Value)
}

// writeGoals prints the goals the run measured, met or missed.
func (r *Report) writeGoals(w io.Writer) error {
	var lines []string
	for _, g := range r.Goals {
		if !g.Measured {
			continue
		}
		verdict := "met   "
		if !g.Met {
			verdict = "MISSED"
		}
		lines = append(lines, verdict+"  "+g.String())
	}
	if len(lines) == 0 {
		return nil
	}
	about := "targets"
	if r.Repeat > 1 {
		about = "targets, medians of the rounds"
	}
	_, err := fmt.Fprintf(w, "\nPerformance %s\n\n%s\n", about, strings.Join(lines, "\n"))
	return err
}

// summarize fills Results from the rounds: for each scenario, the round whose throughput
// was the median one (the first round when none measured it), with the spreads of its
// ratios when there were several rounds.
func (r *Report) summarize(rounds [][]Result) {
	if len(rounds) == 0 {
		return
	}
	if len(rounds) > 1 {
		r.Rounds = rounds
	}
	for i, first := range rounds[0] {
		type pick struct {
			gbps float64
			res  Result
		}
		var measured []pick
		for _, round := range rounds {
			if i < len(round) && round[i].Throughput != nil {
				measured = append(measured, pick{round[i].Throughput.Gbps, round[i]})
			}
		}
		chosen := first
		if len(measured) > 0 {
			slices.SortFunc(measured, func(a, b pick) int { return cmp.Compare(a.gbps, b.gbps) })
			chosen = measured[(len(measured)-1)/2].res
		}
		if len(rounds) > 1 {
			chosen.Spreads = spreads(rounds, first.Scenario)
			for _, round := range rounds {
				if i < len(round) && round[i].Error != "" && chosen.Error == "" {
					chosen.Error = round[i].Error
				}
			}
		}
		r.Results = append(r.Results, chosen)
	}
}
