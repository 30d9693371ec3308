package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run runs the zmesh command line with args and returns stdout, stderr and the error.
func run(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := newRootCommand(&stdout, &stderr, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return stdout.String(), stderr.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const minimal = "v: 3\nctrl:\n  endpoint: tls:127.0.0.1:6262\nidentity:\n  cert: c\n  key: k\n  ca: ca\n"

func TestRouterValidateMinimalJSON(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "router.yml", minimal)
	stdout, stderr, err := run(t, nil, "router", "validate", "--output", "json", path)
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(stdout), &cfg); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	for _, section := range []string{"v", "ctrl", "identity", "link", "listeners", "dialers", "forwarder", "healthChecks", "metrics", "web", "profile"} {
		if _, ok := cfg[section]; !ok {
			t.Errorf("section %s missing from the effective configuration", section)
		}
	}
	fwd, _ := cfg["forwarder"].(map[string]any)
	if fwd["xgressDialWorkerCount"] != 128.0 {
		t.Errorf("forwarder.xgressDialWorkerCount = %v, want the default 128", fwd["xgressDialWorkerCount"])
	}
}

func TestRouterValidateFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc  string
		wantStderr []string
	}{
		{"version 2", strings.Replace(minimal, "v: 3", "v: 2", 1), []string{
			"error: {file}:1: v: version 2 is not supported; supported: 3",
		}},
		{"bound", minimal + "forwarder:\n  xgressDialWorkerCount: 0\nmetrics:\n  reportInterval: 25h\n", []string{
			"error: {file}:9: forwarder.xgressDialWorkerCount: 0 is below the minimum 1",
			"error: {file}:11: metrics.reportInterval: 25h is above the maximum 24h",
		}},
		{"unknown key and error", minimal + "apiProxy: {}\ndialers: [{binding: http}]\n", []string{
			"error: {file}:8: apiProxy: unknown key; allowed: v, ctrl, identity, edge, link, listeners, dialers, forwarder, healthChecks, metrics, web, profile, trace, transport, log",
			`error: {file}:9: dialers[0].binding: "http" is not allowed; allowed: proxy, proxy_udp, transport, transport_udp`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "router.yml", tt.doc)
			stdout, stderr, err := run(t, nil, "router", "validate", path)
			var reported reportedError
			if !errors.As(err, &reported) {
				t.Fatalf("err = %v, want a reported failure (exit 1)", err)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			want := strings.ReplaceAll(strings.Join(tt.wantStderr, "\n")+"\n", "{file}", path)
			if stderr != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
			}
		})
	}
}

func TestRouterValidateEndpointAndEndpoints(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(minimal, "  endpoint: tls:127.0.0.1:6262\n", "  endpoint: tls:127.0.0.1:6262\n  endpoints: [tls:10.0.0.1:6262]\n", 1)
	path := writeFile(t, "router.yml", doc)
	stdout, stderr, err := run(t, nil, "router", "validate", "-o", "yaml", path)
	if err != nil {
		t.Fatalf("err = %v; a warning must not fail validation", err)
	}
	if want := "warning: " + path + ":4: ctrl.endpoints: ignored because ctrl.endpoint is set\n"; stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	if !strings.Contains(stdout, "endpoint: tls:127.0.0.1:6262") || strings.Contains(stdout, "10.0.0.1") {
		t.Errorf("effective configuration should keep endpoint only:\n%s", stdout)
	}
}

func TestControllerValidate(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "ctrl.yml", "v: 1\ndataDir: data\nadmin:\n  password: ${ZMESH_ADMIN_PASSWORD}\n")
	stdout, stderr, err := run(t, map[string]string{"ZMESH_ADMIN_PASSWORD": "s3cret-pass"}, "controller", "validate", path)
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	if strings.Contains(stdout, "s3cret-pass") || !strings.Contains(stdout, "password: (hidden)") {
		t.Errorf("the password must be hidden:\n%s", stdout)
	}
	_, stderr, err = run(t, nil, "controller", "validate", path)
	if err == nil || !strings.Contains(stderr, "admin.password: environment variable ZMESH_ADMIN_PASSWORD is not set") {
		t.Errorf("unset variable: err %v, stderr %q", err, stderr)
	}
}

func TestValidateUsageErrors(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "router.yml", minimal)
	if _, _, err := run(t, nil, "router", "validate", "--output", "xml", path); err == nil || !strings.Contains(err.Error(), `--output "xml" is not allowed; allowed: yaml, json`) {
		t.Errorf("--output xml: err = %v", err)
	}
	_, stderr, err := run(t, nil, "router", "validate", filepath.Join(t.TempDir(), "absent.yml"))
	if err == nil || !strings.Contains(stderr, "cannot read the file") {
		t.Errorf("absent file: err %v, stderr %q", err, stderr)
	}
	stdout, _, err := run(t, nil, "version")
	if err != nil || !strings.HasPrefix(stdout, "zmesh ") {
		t.Errorf("version: %q, %v", stdout, err)
	}
}
