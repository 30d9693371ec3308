package bench

import (
	"math"
	"testing"
	"time"
)

func TestJainIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"one stream", []float64{3.5}, 1},
		{"equal", []float64{2, 2, 2, 2}, 1},
		{"one of four has all", []float64{5, 0, 0, 0}, 0.25},
		{"1 2 3", []float64{1, 2, 3}, 36.0 / 42.0},
		{"half and half", []float64{1, 1, 0, 0}, 0.5},
		{"empty", nil, 0},
		{"all zero", []float64{0, 0}, 0},
	} {
		if got := JainIndex(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: JainIndex(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Microsecond)
	}
	got := summarize(samples)
	want := Latency{Samples: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}
	if got != want {
		t.Errorf("summarize(1..100µs) = %+v, want %+v", got, want)
	}
	if got := summarize([]time.Duration{7 * time.Microsecond}); got.P50 != 7 || got.P99 != 7 {
		t.Errorf("one sample: %+v", got)
	}
	if got := summarize(nil); got.Samples != 0 {
		t.Errorf("no samples: %+v", got)
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	line := "4242 (zmesh bench) worker) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 5 0 123 0 0\n"
	got, err := parseStat(line)
	if err != nil || got != 2870*time.Millisecond {
		t.Errorf("parseStat = %v, %v; want 2.87s (287 ticks)", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 eleven 12"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func TestGbps(t *testing.T) {
	t.Parallel()
	if got := gbps(1e9, 8); got != 1 {
		t.Errorf("gbps(1e9 bytes, 8s) = %v, want 1", got)
	}
	if got := gbps(1, 0); got != 0 {
		t.Errorf("gbps over 0s = %v, want 0", got)
	}
}

// TestWithRatio: a ratio that two decimals would show as 0.00 is shown as below 0.01.
func TestWithRatio(t *testing.T) {
	for _, tc := range []struct {
		ok    bool
		ratio float64
		want  string
	}{
		{false, 2, "1ms"},
		{true, 1.234, "1ms (1.23×)"},
		{true, 0.01, "1ms (0.01×)"},
		{true, 0.006, "1ms (0.01×)"},
		{true, 0.0049, "1ms (<0.01×)"},
		{true, 0, "1ms (0.00×)"},
	} {
		if got := withRatio("1ms", tc.ok, tc.ratio); got != tc.want {
			t.Errorf("withRatio(%v, %v) = %q, want %q", tc.ok, tc.ratio, got, tc.want)
		}
	}
}
