package bench

import (
	"math"
	"slices"
	"time"
)

// JainIndex returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when every x is equal,
// 1/n when one x has everything. It returns 0 for an empty input or one whose values are all
// zero, where fairness is undefined.
func JainIndex(xs []float64) float64 {
	var sum, squares float64
	for _, x := range xs {
		sum += x
		squares += x * x
	}
	if len(xs) == 0 || squares == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * squares)
}

// Latency summarises round-trip samples, in microseconds.
type Latency struct {
	Samples int     `json:"samples"`
	P50     float64 `json:"p50Micros"`
	P90     float64 `json:"p90Micros"`
	P99     float64 `json:"p99Micros"`
	Max     float64 `json:"maxMicros"`
	Mean    float64 `json:"meanMicros"`
}

// summarize sorts samples in place and returns their percentiles (nearest rank).
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var total time.Duration
	for _, s := range samples {
		total += s
	}
	return Latency{
		Samples: len(samples),
		P50:     micros(percentile(samples, 50)),
		P90:     micros(percentile(samples, 90)),
		P99:     micros(percentile(samples, 99)),
		Max:     micros(samples[len(samples)-1]),
		Mean:    micros(total / time.Duration(len(samples))),
	}
}

// percentile returns the nearest-rank p-th percentile of sorted, which must not be empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank-1, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// gbps is bytes over seconds in gigabits per second.
func gbps(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) * 8 / seconds / 1e9
}
