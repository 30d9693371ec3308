package config

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// bound is one bounded key: a snippet with %s where the value goes, the path of the value in
// the effective configuration, and the values at and just beyond each end of the range.
type bound struct {
	snippet            string
	path               string
	below, min         string
	max, above         string
	belowMsg, aboveMsg string // the errors for below and above, after "<path>: "
	prefix             string // for a port: the text before it, with which the value reads back
}

// intBound is a bound on a whole number.
func intBound(snippet, path string, min, max int) bound {
	return bound{
		snippet: snippet, path: path,
		below: strconv.Itoa(min - 1), min: strconv.Itoa(min),
		max: strconv.Itoa(max), above: strconv.Itoa(max + 1),
		belowMsg: strconv.Itoa(min-1) + " is below the minimum " + strconv.Itoa(min),
		aboveMsg: strconv.Itoa(max+1) + " is above the maximum " + strconv.Itoa(max),
	}
}

// durationBound is a bound on a duration; one millisecond beyond each end is out of range.
func durationBound(snippet, path string, min, max time.Duration) bound {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
	return bound{
		snippet: snippet, path: path,
		below: ms(min - time.Millisecond), min: ms(min),
		max: ms(max), above: ms(max + time.Millisecond),
		belowMsg: ms(min-time.Millisecond) + " is below the minimum " + duration(min).String(),
		aboveMsg: ms(max+time.Millisecond) + " is above the maximum " + duration(max).String(),
	}
}

func routerBounds() []bound {
	const (
		day      = 24 * time.Hour
		maxMs    = 86_400_000
		ww3      = "transport: {westworld3: {%s}}"
		instrum  = "transport: {westworld3: {instrument: {snapshot_ms: %s}}}"
		maxInt32 = 1<<31 - 1
	)
	b := []bound{
		durationBound("ctrl: {defaultRequestTimeout: %s}", "ctrl.defaultRequestTimeout", 100*time.Millisecond, 10*time.Minute),
		durationBound("ctrl: {heartbeats: {sendInterval: %s}}", "ctrl.heartbeats.sendInterval", 100*time.Millisecond, time.Hour),
		durationBound("ctrl: {heartbeats: {checkInterval: %s}}", "ctrl.heartbeats.checkInterval", 100*time.Millisecond, time.Hour),
		durationBound("edge: {}\nlisteners: [{binding: tunnel, options: {mode: host, udpIdleTimeout: %s}}]", "listeners[0].options.udpIdleTimeout", time.Second, 24*time.Hour),
		durationBound("ctrl: {heartbeats: {closeUnresponsiveTimeout: %s}}", "ctrl.heartbeats.closeUnresponsiveTimeout", time.Second, day),
		intBound("ctrl: {options: {connectTimeoutMs: %s}}", "ctrl.options.connectTimeoutMs", 100, 600_000),
		intBound("edge: {dbSaveIntervalSeconds: %s}", "edge.dbSaveIntervalSeconds", 1, 86_400),
		intBound("dialers: [{binding: proxy, options: {mtu: %s}}]", "dialers[0].options.mtu", 512, 65535),
		intBound("forwarder: {faultTxInterval: %s}", "forwarder.faultTxInterval", 0, maxMs),
		intBound("forwarder: {idleCircuitTimeout: %s}", "forwarder.idleCircuitTimeout", 1, maxMs),
		intBound("forwarder: {idleTxInterval: %s}", "forwarder.idleTxInterval", 0, maxMs),
		intBound("forwarder: {latencyProbeInterval: %s}", "forwarder.latencyProbeInterval", 0, 3_600_000),
		intBound("forwarder: {linkDialQueueLength: %s}", "forwarder.linkDialQueueLength", 1, 10_000),
		intBound("forwarder: {linkDialWorkerCount: %s}", "forwarder.linkDialWorkerCount", 1, 10_000),
		intBound("forwarder: {rateLimitedQueueLength: %s}", "forwarder.rateLimitedQueueLength", 1, 50_000),
		intBound("forwarder: {rateLimitedWorkerCount: %s}", "forwarder.rateLimitedWorkerCount", 1, 10_000),
		intBound("forwarder: {xgressCloseCheckInterval: %s}", "forwarder.xgressCloseCheckInterval", 0, maxMs),
		intBound("forwarder: {xgressDialDwellTime: %s}", "forwarder.xgressDialDwellTime", 0, maxMs),
		intBound("forwarder: {xgressDialQueueLength: %s}", "forwarder.xgressDialQueueLength", 1, 10_000),
		intBound("forwarder: {xgressDialWorkerCount: %s}", "forwarder.xgressDialWorkerCount", 1, 10_000),
		durationBound("healthChecks: {ctrlPingCheck: {interval: %s}}", "healthChecks.ctrlPingCheck.interval", 100*time.Millisecond, day),
		durationBound("healthChecks: {ctrlPingCheck: {timeout: %s}}", "healthChecks.ctrlPingCheck.timeout", 100*time.Millisecond, day),
		durationBound("healthChecks: {ctrlPingCheck: {initialDelay: %s}}", "healthChecks.ctrlPingCheck.initialDelay", 0, day),
		durationBound("healthChecks: {linkCheck: {interval: %s}}", "healthChecks.linkCheck.interval", 100*time.Millisecond, day),
		durationBound("healthChecks: {linkCheck: {initialDelay: %s}}", "healthChecks.linkCheck.initialDelay", 0, day),
		intBound("healthChecks: {linkCheck: {minLinks: %s}}", "healthChecks.linkCheck.minLinks", 0, 10_000),
		durationBound("metrics: {reportInterval: %s}", "metrics.reportInterval", time.Second, day),
		intBound("metrics: {messageQueueSize: %s}", "metrics.messageQueueSize", 1, 10_000),
		durationBound("metrics: {intervalAgeThreshold: %s}", "metrics.intervalAgeThreshold", 0, day),
		intBound("metrics: {serviceLabelLimit: %s}", "metrics.serviceLabelLimit", 0, 10_000),
		intBound("profile: {memory: {path: m.pprof, intervalMs: %s}}", "profile.memory.intervalMs", 100, maxMs),
		intBound(placeholder(ww3, "profile_version: %s"), "transport.westworld3.profile_version", 0, maxInt32),
		intBound(placeholder(ww3, "tx_portal_min_sz: %s"), "transport.westworld3.tx_portal_min_sz", 0, maxInt32),
		intBound(placeholder(ww3, "tx_portal_max_sz: %s"), "transport.westworld3.tx_portal_max_sz", 0, maxInt32),
		intBound(instrum, "transport.westworld3.instrument.snapshot_ms", 0, maxMs),
	}
	// Ports of addresses, of the tunnel's resolver and of proxy services are 1 to 65535.
	portMsg := func(p string) string { return `port "` + p + `" is not a number from 1 to 65535` }
	for _, pb := range []struct{ snippet, path, prefix string }{
		{"ctrl: {endpoint: 'tls:h:%s'}", "ctrl.endpoint", "tls:h:"},
		{"ctrl: {endpoint: null, endpoints: ['tls:h:%s']}", "ctrl.endpoints[0]", "tls:h:"},
		{"edge: {}\nlisteners: [{binding: tunnel, options: {mode: tproxy, resolver: 'udp://127.0.0.1:%s'}}]", "listeners[0].options.resolver", "udp://127.0.0.1:"},
		{"edge: {}\nlisteners: [{binding: tunnel, options: {mode: proxy, services: ['svc:%s']}}]", "listeners[0].options.services[0]", "svc:"},
	} {
		b = append(b, bound{
			snippet: pb.snippet, path: pb.path,
			below: "0", min: "1", max: "65535", above: "65536",
			prefix:   pb.prefix,
			belowMsg: `"` + pb.prefix + `0": ` + portMsg("0"),
			aboveMsg: `"` + pb.prefix + `65536": ` + portMsg("65536"),
		})
	}
	// Both backoffs of a link dialer: the other end of the range is set so that min <= max holds.
	for _, which := range []string{"healthyDialBackoff", "unhealthyDialBackoff"} {
		p := "link.dialers[0]." + which
		pre := "link: {dialers: [{binding: transport, " + which + ": {"
		b = append(b,
			durationBound(pre+"maxRetryInterval: 24h, minRetryInterval: %s}}]}", p+".minRetryInterval", 10*time.Millisecond, day),
			durationBound(pre+"minRetryInterval: 10ms, maxRetryInterval: %s}}]}", p+".maxRetryInterval", 10*time.Millisecond, day),
			bound{
				snippet: pre + "retryBackoffFactor: %s}}]}", path: p + ".retryBackoffFactor",
				below: "0.99", min: "1", max: "100", above: "100.01",
				belowMsg: "0.99 is below the minimum 1", aboveMsg: "100.01 is above the maximum 100",
			},
		)
	}
	return b
}

func TestRouterBounds(t *testing.T) {
	t.Parallel()
	for _, b := range routerBounds() {
		t.Run(b.path, func(t *testing.T) {
			t.Parallel()
			checkBound(t, b, func(doc string) (any, []string) {
				cfg, _, err := ParseRouter(testFile, []byte(withSnippet(t, minimalRouter, doc)), testEnv)
				if err != nil {
					return nil, strs(err.(Errors))
				}
				return cfg, nil
			})
		})
	}
}

// checkBound checks that min and max are accepted and read back, and that below and above are
// rejected with one error naming the key.
func checkBound(t *testing.T, b bound, parse func(doc string) (cfg any, errs []string)) {
	t.Helper()
	for _, v := range []string{b.min, b.max} {
		cfg, errs := parse(placeholder(b.snippet, v))
		if errs != nil {
			t.Errorf("%s = %s rejected: %v", b.path, v, errs)
			continue
		}
		if b.prefix != "" {
			if got, want := lookup(t, cfg, b.path), strconv.Quote(b.prefix+v); got != want {
				t.Errorf("%s = %s read back as %s, want %s", b.path, v, got, want)
			}
			continue
		}
		if got := lookup(t, cfg, b.path); !sameValue(got, v) {
			t.Errorf("%s = %s read back as %s", b.path, v, got)
		}
	}
	for _, c := range []struct{ value, msg string }{{b.below, b.belowMsg}, {b.above, b.aboveMsg}} {
		_, errs := parse(placeholder(b.snippet, c.value))
		if len(errs) != 1 {
			t.Errorf("%s = %s: %d errors, want 1: %v", b.path, c.value, len(errs), errs)
			continue
		}
		if want := ": " + b.path + ": " + c.msg; !strings.HasSuffix(errs[0], want) {
			t.Errorf("%s = %s: error %q, want it to end with %q", b.path, c.value, errs[0], want)
		}
	}
}

// sameValue reports whether the effective value (compact JSON) is the value written in the
// file: equal numbers, or equal durations.
func sameValue(got, written string) bool {
	if w, err := strconv.ParseFloat(written, 64); err == nil {
		g, err := strconv.ParseFloat(got, 64)
		return err == nil && w == g
	}
	d, err := time.ParseDuration(written)
	if err != nil {
		return false
	}
	s, err := strconv.Unquote(got)
	if err != nil {
		return false
	}
	g, err := time.ParseDuration(s)
	return err == nil && g == d
}
