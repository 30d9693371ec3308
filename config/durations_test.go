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

// TestUnitDurations checks that keys the file writes with a unit suffix load as
// time.Duration, and that the effective configuration writes them back as an operator
// would ("90m" becomes "1h30m", not "1h30m0s").
func TestUnitDurations(t *testing.T) {
	t.Parallel()
	doc := withSnippet(t, minimalRouter, `
ctrl: {defaultRequestTimeout: 1500ms, heartbeats: {sendInterval: 2s, checkInterval: 250ms, closeUnresponsiveTimeout: 90m}}
edge: {}
link: {dialers: [{binding: transport, healthyDialBackoff: {minRetryInterval: 1.5s, maxRetryInterval: 2m},
  unhealthyDialBackoff: {minRetryInterval: 3s, maxRetryInterval: 1h}}]}
listeners: [{binding: tunnel, options: {mode: host, udpIdleTimeout: 45s}}]
healthChecks: {ctrlPingCheck: {interval: 7s, timeout: 3s, initialDelay: 0s}, linkCheck: {interval: 11s, initialDelay: 2s}}
metrics: {reportInterval: 2m, intervalAgeThreshold: 100s}
`)
	cfg, _ := parseRouter(t, doc)
	ctrl, errs := parseController(t, withSnippet(t, minimalController, "sessionTimeout: 24h\nsessionMaxLifetime: 36h"))
	if ctrl == nil {
		t.Fatalf("the controller document does not load: %v", errs)
	}
	for _, tt := range []struct {
		name      string
		got, want time.Duration
		written   string // in the effective configuration, as JSON
		v         any
	}{
		{"ctrl.defaultRequestTimeout", cfg.Ctrl.DefaultRequestTimeout, 1500 * time.Millisecond, `"1.5s"`, cfg},
		{"ctrl.heartbeats.sendInterval", cfg.Ctrl.Heartbeats.SendInterval, 2 * time.Second, `"2s"`, cfg},
		{"ctrl.heartbeats.checkInterval", cfg.Ctrl.Heartbeats.CheckInterval, 250 * time.Millisecond, `"250ms"`, cfg},
		{"ctrl.heartbeats.closeUnresponsiveTimeout", cfg.Ctrl.Heartbeats.CloseUnresponsiveTimeout, 90 * time.Minute, `"1h30m"`, cfg},
		{"link.dialers[0].healthyDialBackoff.minRetryInterval", cfg.Link.Dialers[0].HealthyDialBackoff.MinRetryInterval, 1500 * time.Millisecond, `"1.5s"`, cfg},
		{"link.dialers[0].healthyDialBackoff.maxRetryInterval", cfg.Link.Dialers[0].HealthyDialBackoff.MaxRetryInterval, 2 * time.Minute, `"2m"`, cfg},
		{"link.dialers[0].unhealthyDialBackoff.minRetryInterval", cfg.Link.Dialers[0].UnhealthyDialBackoff.MinRetryInterval, 3 * time.Second, `"3s"`, cfg},
		{"link.dialers[0].unhealthyDialBackoff.maxRetryInterval", cfg.Link.Dialers[0].UnhealthyDialBackoff.MaxRetryInterval, time.Hour, `"1h"`, cfg},
		{"listeners[0].options.udpIdleTimeout", cfg.Listeners[0].Tunnel.UDPIdleTimeout, 45 * time.Second, `"45s"`, cfg},
		{"healthChecks.ctrlPingCheck.interval", cfg.HealthChecks.CtrlPingCheck.Interval, 7 * time.Second, `"7s"`, cfg},
		{"healthChecks.ctrlPingCheck.timeout", cfg.HealthChecks.CtrlPingCheck.Timeout, 3 * time.Second, `"3s"`, cfg},
		{"healthChecks.ctrlPingCheck.initialDelay", cfg.HealthChecks.CtrlPingCheck.InitialDelay, 0, `"0s"`, cfg},
		{"healthChecks.linkCheck.interval", cfg.HealthChecks.LinkCheck.Interval, 11 * time.Second, `"11s"`, cfg},
		{"healthChecks.linkCheck.initialDelay", cfg.HealthChecks.LinkCheck.InitialDelay, 2 * time.Second, `"2s"`, cfg},
		{"metrics.reportInterval", cfg.Metrics.ReportInterval, 2 * time.Minute, `"2m"`, cfg},
		{"metrics.intervalAgeThreshold", cfg.Metrics.IntervalAgeThreshold, 100 * time.Second, `"1m40s"`, cfg},
		{"sessionTimeout", ctrl.SessionTimeout, 24 * time.Hour, `"24h"`, ctrl},
		{"sessionMaxLifetime", ctrl.SessionMaxLifetime, 36 * time.Hour, `"36h"`, ctrl},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
		if got := lookup(t, tt.v, tt.name); got != tt.written {
			t.Errorf("%s is written %s, want %s", tt.name, got, tt.written)
		}
	}
}
