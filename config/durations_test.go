package config

import (
	"testing"
	"time"
)

// TestIntegerDurations checks that keys the file gives in whole milliseconds or seconds load
// as time.Duration in those units.
func TestIntegerDurations(t *testing.T) {
	t.Parallel()
	doc := withSnippet(t, minimalRouter, `
ctrl: {options: {connectTimeoutMs: 2500}}
edge: {dbSaveIntervalSeconds: 90}
forwarder: {faultTxInterval: 1500, idleCircuitTimeout: 2, idleTxInterval: 0, latencyProbeInterval: 250,
  xgressCloseCheckInterval: 4000, xgressDialDwellTime: 7}
profile: {memory: {path: mem.pprof, intervalMs: 20000}}
`)
	cfg, _ := parseRouter(t, doc)
	for _, tt := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ctrl.options.connectTimeoutMs", cfg.Ctrl.Options.ConnectTimeout, 2500 * time.Millisecond},
		{"edge.dbSaveIntervalSeconds", cfg.Edge.DBSaveInterval, 90 * time.Second},
		{"forwarder.faultTxInterval", cfg.Forwarder.FaultTxInterval, 1500 * time.Millisecond},
		{"forwarder.idleCircuitTimeout", cfg.Forwarder.IdleCircuitTimeout, 2 * time.Millisecond},
		{"forwarder.idleTxInterval", cfg.Forwarder.IdleTxInterval, 0},
		{"forwarder.latencyProbeInterval", cfg.Forwarder.LatencyProbeInterval, 250 * time.Millisecond},
		{"forwarder.xgressCloseCheckInterval", cfg.Forwarder.XgressCloseCheckInterval, 4 * time.Second},
		{"forwarder.xgressDialDwellTime", cfg.Forwarder.XgressDialDwellTime, 7 * time.Millisecond},
		{"profile.memory.intervalMs", cfg.Profile.Memory.Interval, 20 * time.Second},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
