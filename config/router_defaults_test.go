package config

import (
	"testing"
)

// TestRouterDefaults checks every default of the router configuration: a minimal file (plus,
// for sections whose defaults only apply when the section is present, a snippet that turns it
// on) and the value found in the effective configuration.
func TestRouterDefaults(t *testing.T) {
	t.Parallel()
	const (
		edgeOn        = "edge: {csr: {sans: {dns: [localhost]}}}"
		linkDialer    = "link: {dialers: [{binding: transport}]}"
		linkListener  = "identity: {server_cert: s.cert}\nlink: {listeners: [{binding: transport, bind: 'tls:0.0.0.0:6000', advertise: 'r1:6000'}]}"
		tunnelHost    = edgeOn + "\nlisteners: [{binding: tunnel}]"
		tunnelTProxy  = edgeOn + "\nlisteners: [{binding: tunnel, options: {mode: tproxy}}]"
		edgeListener  = edgeOn + "\nidentity: {server_cert: s.cert}\nlisteners: [{binding: edge, bind: 'tls:0.0.0.0:3022', advertise: 'r1:3022'}]"
		dialer        = "dialers: [{binding: proxy}]"
		memoryProfile = "profile: {memory: {path: mem.pprof}}"
		webListener   = "web: [{name: health, bindPoints: [{interface: '127.0.0.1:8081'}], apis: [{binding: health-checks}, {binding: metrics}]}]"
	)
	tests := []struct {
		snippet string
		path    string
		want    string // compact JSON of the effective value
	}{
		{"", "v", `3`},
		{"", "ctrl.endpoint", `"tls:127.0.0.1:6262"`},
		{"", "ctrl.endpoints", `<absent>`},
		{"", "ctrl.bind", `<absent>`},
		{"", "ctrl.defaultRequestTimeout", `"5s"`},
		{"", "ctrl.heartbeats.sendInterval", `"10s"`},
		{"", "ctrl.heartbeats.checkInterval", `"1s"`},
		{"", "ctrl.heartbeats.closeUnresponsiveTimeout", `"30s"`},
		{"", "ctrl.options.connectTimeoutMs", `5000`},
		{"", "ctrl.endpointsFile", `"/etc/zmesh/endpoints"`},
		{"", "identity.cert", `"/etc/zmesh/certs/client.cert"`},
		{"", "identity.server_cert", `<absent>`},
		{"", "identity.alt_server_certs", `[]`},
		{"", "edge", `<absent>`},
		{"edge: {}", "edge.db", `"/etc/zmesh/router.yml.proto.gzip"`},
		{"edge: {}", "edge.dbSaveIntervalSeconds", `30`},
		{"edge: {}", "edge.csr", `<absent>`},
		{edgeOn, "edge.csr.sans", `{"dns":["localhost"],"email":[],"ip":[],"uri":[]}`},
		{"", "link", `{"dialers":[],"listeners":[]}`},
		{linkDialer, "link.dialers[0].split", `true`},
		{linkDialer, "link.dialers[0].groups", `["default"]`},
		{linkDialer, "link.dialers[0].bind", `<absent>`},
		{linkDialer, "link.dialers[0].healthyDialBackoff", `{"maxRetryInterval":"5m","minRetryInterval":"5s","retryBackoffFactor":1.5}`},
		{linkDialer, "link.dialers[0].unhealthyDialBackoff", `{"maxRetryInterval":"1h","minRetryInterval":"1m","retryBackoffFactor":10}`},
		{linkListener, "link.listeners[0].groups", `["default"]`},
		{linkListener, "link.listeners[0].advertise", `"tls:r1:6000"`},
		{"", "listeners", `[]`},
		{tunnelHost, "listeners[0].options", `{"mode":"host","udpIdleTimeout":"5m"}`},
		{tunnelTProxy, "listeners[0].options.resolver", `"udp://127.0.0.1:53"`},
		{tunnelTProxy, "listeners[0].options.dnsSvcIpRange", `"100.64.0.1/10"`},
		{edgeListener, "listeners[0].bind", `"tls:0.0.0.0:3022"`},
		{edgeListener, "listeners[0].options", `<absent>`},
		{"", "dialers", `[]`},
		{dialer, "dialers[0].options.mtu", `65535`},
		{"", "forwarder.faultTxInterval", `15000`},
		{"", "forwarder.idleCircuitTimeout", `60000`},
		{"", "forwarder.idleTxInterval", `60000`},
		{"", "forwarder.latencyProbeInterval", `10000`},
		{"", "forwarder.linkDialQueueLength", `1000`},
		{"", "forwarder.linkDialWorkerCount", `32`},
		{"", "forwarder.rateLimitedQueueLength", `5000`},
		{"", "forwarder.rateLimitedWorkerCount", `5`},
		{"", "forwarder.xgressCloseCheckInterval", `5000`},
		{"", "forwarder.xgressDialDwellTime", `0`},
		{"", "forwarder.xgressDialQueueLength", `1000`},
		{"", "forwarder.xgressDialWorkerCount", `128`},
		{"", "healthChecks.ctrlPingCheck.interval", `"30s"`},
		{"", "healthChecks.ctrlPingCheck.timeout", `"15s"`},
		{"", "healthChecks.ctrlPingCheck.initialDelay", `"15s"`},
		{"", "healthChecks.linkCheck.interval", `"5s"`},
		{"", "healthChecks.linkCheck.initialDelay", `"1s"`},
		{"", "healthChecks.linkCheck.minLinks", `0`},
		{"", "metrics.reportInterval", `"1m"`},
		{"", "metrics.messageQueueSize", `10`},
		{"", "metrics.intervalAgeThreshold", `"1m20s"`},
		{"", "metrics.circuitEvents", `false`},
		{"", "metrics.serviceLabelLimit", `100`},
		{"metrics: {circuitEvents: true, serviceLabelLimit: 0}", "metrics.circuitEvents", `true`},
		{"metrics: {circuitEvents: true, serviceLabelLimit: 0}", "metrics.serviceLabelLimit", `0`},
		{"", "web", `[]`},
		{webListener, "web[0].bindPoints[0].address", `"127.0.0.1:8081"`},
		{webListener, "web[0].apis[1].binding", `"metrics"`},
		{"", "profile", `{}`},
		{memoryProfile, "profile.memory.intervalMs", `15000`},
		{memoryProfile, "profile.memory.path", `"/etc/zmesh/mem.pprof"`},
		{"", "trace", `<absent>`},
		{"", "transport", `<absent>`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			doc := minimalRouter
			if tt.snippet != "" {
				doc = withSnippet(t, minimalRouter, tt.snippet)
			}
			cfg, _ := parseRouter(t, doc)
			if got := lookup(t, cfg, tt.path); got != tt.want {
				t.Errorf("%s = %s, want %s", tt.path, got, tt.want)
			}
		})
	}
}

// TestRouterMinimalHasEverySection checks that a minimal file's effective configuration shows
// every section that has defaults.
func TestRouterMinimalHasEverySection(t *testing.T) {
	t.Parallel()
	cfg, warns := parseRouter(t, minimalRouter)
	if len(warns) != 0 {
		t.Errorf("warnings for a minimal file: %v", strs(warns))
	}
	for _, section := range []string{"v", "ctrl", "identity", "link", "listeners", "dialers", "forwarder", "healthChecks", "metrics", "web", "profile"} {
		if lookup(t, cfg, section) == "<absent>" {
			t.Errorf("section %s is absent from the effective configuration", section)
		}
	}
}
