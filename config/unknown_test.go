package config

import (
	"slices"
	"strings"
	"testing"
)

// TestUnknownKeys checks that a key the schema does not know is an error once Strict is
// applied (validate), names the key a typo is closest to or lists the allowed keys, and says
// what falls back to its default because of it; without Strict (run) the same file loads,
// with the unknown keys among the warnings.
func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		parse      func(string, []byte, func(string) (string, bool)) (any, []Diagnostic, error)
		doc        string
		errs       []string
		warns      []string
		loadsInRun bool
	}{
		{"ctrl.endpont", parseRouterAny, "v: 3\nctrl:\n  endpont: tls:127.0.0.1:6262\n" + idABC, []string{
			"r.yml:3: ctrl: one of ctrl.endpoint or ctrl.endpoints is required",
			"r.yml:3: ctrl.endpont: unknown key; did you mean endpoint?",
		}, nil, false},
		{"case only", parseRouterAny, minimalRouter + "Forwarder: {xgressDialWorkerCount: 64}\n", []string{
			"r.yml:8: Forwarder: unknown key; did you mean forwarder?",
		}, []string{
			"r.yml:8: forwarder: section missing, its defaults apply (Forwarder is not read)",
		}, true},
		{"swapped letters", parseRouterAny, minimalRouter + "forwarder: {xgressDialWrokerCount: 64}\n", []string{
			"r.yml:8: forwarder.xgressDialWrokerCount: unknown key; did you mean xgressDialWorkerCount?",
		}, []string{
			"r.yml:8: forwarder.xgressDialWorkerCount: not set, its default applies (xgressDialWrokerCount is not read)",
		}, true},
		{"section that turns a feature on", parseRouterAny, minimalRouter + "edeg: {csr: {}}\n", []string{
			"r.yml:8: edeg: unknown key; did you mean edge?",
		}, []string{
			"r.yml:8: edge: section missing: the router runs fabric-only, without edge functionality or SDK connectivity (edeg is not read)",
		}, true},
		{"far from every key", parseRouterAny, minimalRouter + "apiProxy: {listener: 'x'}\nforwarder: {rateLimiter: 1}\n", []string{
			"r.yml:8: apiProxy: unknown key; allowed: v, ctrl, identity, edge, link, listeners, dialers, forwarder, healthChecks, metrics, web, profile, trace, transport, log",
			"r.yml:9: forwarder.rateLimiter: unknown key; allowed: faultTxInterval, idleCircuitTimeout, idleTxInterval, latencyProbeInterval, linkDialQueueLength, linkDialWorkerCount, rateLimitedQueueLength, rateLimitedWorkerCount, xgressCloseCheckInterval, xgressDialDwellTime, xgressDialQueueLength, xgressDialWorkerCount",
		}, nil, true},
		{"merge keys", parseRouterAny, minimalRouter + "a: &x {b: 1}\nforwarder:\n  <<: *x\n", []string{
			"r.yml:8: forwarder.b: unknown key; allowed: faultTxInterval, idleCircuitTimeout, idleTxInterval, latencyProbeInterval, linkDialQueueLength, linkDialWorkerCount, rateLimitedQueueLength, rateLimitedWorkerCount, xgressCloseCheckInterval, xgressDialDwellTime, xgressDialQueueLength, xgressDialWorkerCount",
			"r.yml:8: a: unknown key; allowed: v, ctrl, identity, edge, link, listeners, dialers, forwarder, healthChecks, metrics, web, profile, trace, transport, log",
		}, nil, true},
		{"typo in an options map", parseRouterAny, minimalRouter + "edge: {csr: {}}\nlisteners:\n  - binding: tunnel\n    options: {mdoe: tproxy}\n", []string{
			"r.yml:11: listeners[0].options.mdoe: unknown key; did you mean mode?",
		}, []string{
			"r.yml:11: listeners[0].options.mode: not set, using the default mode host (mdoe is not read)",
		}, true},
		{"typo of an alias", parseRouterAny, "v: 3\nctrl: {endpoint: 'tls:a:1'}\nidentity: {cert: a, key: b, ca: c, server_cert: s}\nlisteners:\n  - binding: transport\n    bind: tls:0.0.0.0:1\n    options: {advertize: h:1}\n", []string{
			"r.yml:5: listeners[0].advertise: is required: the <host>:<port> clients use to reach this listener (advertise or options.advertise)",
			"r.yml:7: listeners[0].options.advertize: unknown key; did you mean advertise?",
		}, []string{
			"r.yml:7: listeners[0].options.advertise: not set, its default applies (advertize is not read)",
		}, false},
		{"controller api:;", parseControllerAny, "v: 1\ndataDir: /d\napi:;:\n  listen: 0.0.0.0:1280\nadmin: {password: secret}\n", []string{
			"c.yml:3: api:;: unknown key; did you mean api?",
		}, []string{
			`c.yml:3: api: section missing, using the default listen address 127.0.0.1:1280 ("api:;" is not read)`,
		}, true},
		{"controller apii", parseControllerAny, "v: 1\ndataDir: /d\napii:\n  listen: 0.0.0.0:1280\nadmin: {password: secret}\n", []string{
			"c.yml:3: apii: unknown key; did you mean api?",
		}, []string{
			"c.yml:3: api: section missing, using the default listen address 127.0.0.1:1280 (apii is not read)",
		}, true},
		{"controller nested", parseControllerAny, "v: 1\ndataDir: /d\napi: {lisen: 0.0.0.0:1280, advertise: a:1}\nadmin: {password: secret, usrname: bob1}\n", []string{
			"c.yml:3: api.lisen: unknown key; did you mean listen?",
			"c.yml:4: admin.usrname: unknown key; did you mean username?",
		}, []string{
			"c.yml:3: api.listen: not set, its default applies (lisen is not read)",
			"c.yml:4: admin.username: not set, its default applies (usrname is not read)",
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, warns, err := tt.parse("", []byte(tt.doc), testEnv)
			if loaded := err == nil && cfg != nil; loaded != tt.loadsInRun {
				t.Errorf("loads without Strict: %v (err %v), want %v", loaded, err, tt.loadsInRun)
			}
			if n := CountUnknownKeys(warns); n == 0 {
				t.Errorf("no unknown key among the warnings %q", strs(warns))
			}
			warns, err = Strict(warns, err)
			errs, ok := err.(Errors)
			if !ok {
				t.Fatalf("err = %v, want Errors", err)
			}
			if got := strs(errs); !slices.Equal(got, tt.errs) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.errs, "\n"))
			}
			if got := strs(warns); !slices.Equal(got, tt.warns) {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.warns, "\n"))
			}
		})
	}
}

func parseRouterAny(_ string, data []byte, env func(string) (string, bool)) (any, []Diagnostic, error) {
	cfg, w, err := ParseRouter("r.yml", data, env)
	if cfg == nil {
		return nil, w, err
	}
	return cfg, w, err
}

func parseControllerAny(_ string, data []byte, env func(string) (string, bool)) (any, []Diagnostic, error) {
	cfg, w, err := ParseController("c.yml", data, env)
	if cfg == nil {
		return nil, w, err
	}
	return cfg, w, err
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	known := []string{"v", "ctrl", "identity", "api", "endpoint", "endpoints", "mode", "ca", "key"}
	for key, want := range map[string]string{
		"api:;": "api", "apii": "api", "API": "api", "ap": "api",
		"endpont": "endpoint", "endpiont": "endpoint", "endpointz": "endpoint",
		"mdoe": "mode", "kye": "key", "V": "v",
		"x": "", "db": "", "cert": "", "apiProxy": "", "identityy": "identity", "": "",
	} {
		if got := suggest(key, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
}
