package config

import (
	"slices"
	"testing"
)

// TestLogSection checks the log section of both files: defaults, values, and errors that
// name the file, line, key and the allowed values.
func TestLogSection(t *testing.T) {
	t.Parallel()
	cfg, diags := parseRouter(t, minimalRouter)
	if diags != nil {
		t.Fatal(strs(diags))
	}
	if cfg.Log != (Log{Level: "info", Format: "text"}) {
		t.Errorf("router log without a section = %+v, want info and text", cfg.Log)
	}
	cfg, diags = parseRouter(t, minimalRouter+"log:\n  level: debug\n  format: json\n")
	if diags != nil {
		t.Fatal(strs(diags))
	}
	if cfg.Log != (Log{Level: "debug", Format: "json"}) {
		t.Errorf("router log = %+v, want debug and json", cfg.Log)
	}
	ccfg, errs := parseController(t, minimalController+"log: {level: error}\n")
	if errs != nil {
		t.Fatal(errs)
	}
	if ccfg.Log != (Log{Level: "error", Format: "text"}) {
		t.Errorf("controller log = %+v, want error and text", ccfg.Log)
	}

	_, warns, err := ParseRouter("r.yml", []byte(minimalRouter+"log:\n  level: verbose\n  format: xml\n  colour: true\n"), testEnv)
	got := strs(err.(Errors))
	want := []string{
		`r.yml:9: log.level: "verbose" is not allowed; allowed: debug, info, warn, error`,
		`r.yml:10: log.format: "xml" is not allowed; allowed: text, json`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%q\nwant:\n%q", got, want)
	}
	// Unknown keys are warnings at run time (errors for validate, config.Strict).
	if w := strs(warns); len(w) != 1 || w[0] != `r.yml:11: log.colour: unknown key; allowed: level, format` {
		t.Errorf("warnings = %q, want log.colour refused", w)
	}
	_, errs = parseController(t, minimalController+"log: {level: INFO}\n")
	if len(errs) != 1 || errs[0] != `/etc/zmesh/controller.yml:5: log.level: "INFO" is not allowed; allowed: debug, info, warn, error` {
		t.Errorf("controller errors = %q", errs)
	}
}

// TestChanged checks the fields a reload reports as changed.
func TestChanged(t *testing.T) {
	t.Parallel()
	base := minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options:\n      mode: proxy\n      services: [a:1001, b:1002]\n"
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"same", base, nil},
		{"level", base + "log: {level: debug}\n", []string{"log.level"}},
		{"service renamed", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options:\n      mode: proxy\n      services: [a:1001, c:1002]\n",
			[]string{"listeners[0].options.services[1]"}},
		{"service added", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options:\n      mode: proxy\n      services: [a:1001, b:1002, c:1003]\n",
			[]string{"listeners[0].options.services"}},
		{"section appears and a duration", base + "trace: {path: /tmp/t}\nforwarder: {idleCircuitTimeout: 1000}\n",
			[]string{"forwarder.idleCircuitTimeout", "trace"}},
		{"several", base + "log: {format: json}\nmetrics: {reportInterval: 5s}\n", []string{"log.format", "metrics.reportInterval"}},
	}
	load := func(t *testing.T, doc string) *Router {
		cfg, _, err := ParseRouter(testFile, []byte(doc), testEnv)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old := load(t, base)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Changed(old, load(t, tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Changed = %q, want %q", got, tt.want)
			}
		})
	}
	if !Under("listeners[0].options.services[2]", "listeners[0].options.services") ||
		!Under("log.level", "log.level") || Under("listeners[0].optionsX", "listeners[0].options") || Under("log", "log.level") {
		t.Error("Under is wrong")
	}
}
