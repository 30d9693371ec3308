// Package bench holds the forwarding benchmarks: overlay paths measured side by side with
// plain Go baselines in the same run, so that ratios, not absolute figures, are compared.
package bench
