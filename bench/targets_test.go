package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestSpreadOf(t *testing.T) {
	for _, c := range []struct {
		xs          []float64
		med, lo, hi float64
	}{
		{[]float64{2}, 2, 2, 2},
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		s := spreadOf(c.xs)
		if s == nil || s.Median != c.med || s.Min != c.lo || s.Max != c.hi || s.Rounds != len(c.xs) {
			t.Errorf("spreadOf(%v) = %+v", c.xs, s)
		}
	}
	if spreadOf(nil) != nil {
		t.Error("spreadOf(nil) is not nil")
	}
}

// round builds one round: the baseline and two-router results with the given throughputs
// and echo p50s, and an SDK scenario with a setup rate.
func round(baseGbps, gbps, baseP50, p50, sdkSetup, onRampSetup float64) []Result {
	rs := []Result{
		{Scenario: BaselineTLSRelay, Throughput: &Throughput{Gbps: baseGbps}, RTT: &Latency{P50: baseP50, P99: baseP50}},
		{Scenario: ZmeshTwoRoutersTLS, Baseline: BaselineTLSRelay, Throughput: &Throughput{Gbps: gbps}, RTT: &Latency{P50: p50, P99: p50},
			CircuitSetup: &CircuitSetup{PerSecond: onRampSetup}},
		{Scenario: BaselineE2ERelay, Throughput: &Throughput{Gbps: 1}, RTT: &Latency{P50: 100, P99: 100}},
		{Scenario: ZmeshSDKEncryptedInProcess, Baseline: BaselineE2ERelay, Throughput: &Throughput{Gbps: 1}, RTT: &Latency{P50: 100, P99: 100},
			CircuitSetup: &CircuitSetup{PerSecond: sdkSetup}},
	}
	compare(rs)
	return rs
}

// Over three rounds the report keeps the median-throughput round of each scenario, the
// spread of every ratio, and checks the targets on the medians.
func TestRepeatedRunSummary(t *testing.T) {
	rounds := [][]Result{
		round(1, 1.2, 100, 200, 900, 1000), // ratios: throughput 1.2, p50 2.0, setup-vs 0.9
		round(1, 0.5, 100, 110, 500, 1000), // 0.5, 1.1, 0.5
		round(2, 2.0, 100, 120, 700, 1000), // 1.0, 1.2, 0.7
	}
	rep := &Report{Repeat: 3}
	rep.summarize(rounds)
	rep.Goals = check(Goals(), rounds)
	if len(rep.Results) != 4 || len(rep.Rounds) != 3 {
		t.Fatalf("%d results, %d rounds", len(rep.Results), len(rep.Rounds))
	}
	two := rep.Results[1]
	if two.Throughput.Gbps != 1.2 { // the rounds gave 1.2, 0.5, 2.0: the median is 1.2
		t.Errorf("the two-router result is the round with %v Gbit/s, want the median 1.2", two.Throughput.Gbps)
	}
	if s := two.Spreads; s == nil || s.Throughput.Median != 1.0 || s.Throughput.Min != 0.5 || s.Throughput.Max != 1.2 || s.RTTP50.Median != 1.2 {
		t.Errorf("spreads %+v", s)
	}
	verdicts := map[string]bool{}
	for _, g := range rep.Goals {
		if g.Measured {
			verdicts[g.Scenario+" "+g.Figure] = g.Met
		}
	}
	want := map[string]bool{
		ZmeshTwoRoutersTLS + " throughput":         true, // median 1.0 ≥ 0.9
		ZmeshTwoRoutersTLS + " rtt-p50":            true, // median 1.2 ≤ 1.3
		ZmeshSDKEncryptedInProcess + " throughput": true,
		ZmeshSDKEncryptedInProcess + " rtt-p50":    true,
		ZmeshSDKEncryptedInProcess + " setup-vs":   false, // median 0.7 < 0.8
	}
	for k, met := range want {
		if got, ok := verdicts[k]; !ok || got != met {
			t.Errorf("goal %s: measured %v, met %v; want met %v", k, ok, got, met)
		}
	}
	if len(verdicts) != len(want) {
		t.Errorf("goals measured: %v", verdicts)
	}
	if m := rep.Missed(); len(m) != 1 || m[0].Figure != "setup-vs" {
		t.Errorf("missed %+v", m)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"over 3 rounds", "1.00× (0.50-1.20)", "MISSED  " + ZmeshSDKEncryptedInProcess + " setup rate vs " + ZmeshTwoRoutersTLS + " ≥ 0.80×: 0.70×"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the table lacks %q:\n%s", s, out.String())
		}
	}
}
