package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/config"
)

// ctrlTypo is a controller file whose api section is misspelt: the API would listen on the
// default address instead of the one the file names.
const ctrlTypo = "v: 1\ndataDir: data\napi:;:\n  listen: 0.0.0.0:1280\n  advertise: ctrl.example.com:1280\nadmin:\n  password: s3cret-pass\n"

// routerTypo is a router file whose ctrl.endpoint is misspelt.
const routerTypo = "v: 3\nctrl:\n  endpont: tls:127.0.0.1:6262\nidentity:\n  cert: c\n  key: k\n  ca: ca\n"

// TestValidateUnknownKeys checks that validate fails on a typo and names the key meant.
func TestValidateUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, kind, doc string
		wantStderr      []string
	}{
		{"controller api:;", "controller", ctrlTypo, []string{
			`warning: {file}:3: api: section missing, using the default listen address 127.0.0.1:1280 ("api:;" is not read)`,
			"error: {file}:3: api:;: unknown key; did you mean api?",
		}},
		{"router ctrl.endpont", "router", routerTypo, []string{
			"error: {file}:3: ctrl: one of ctrl.endpoint or ctrl.endpoints is required",
			"error: {file}:3: ctrl.endpont: unknown key; did you mean endpoint?",
		}},
		{"router typo alone", "router", minimal + "forwarder:\n  xgressDialWrokerCount: 64\n", []string{
			"warning: {file}:9: forwarder.xgressDialWorkerCount: not set, its default applies (xgressDialWrokerCount is not read)",
			"error: {file}:9: forwarder.xgressDialWrokerCount: unknown key; did you mean xgressDialWorkerCount?",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tt.kind+".yml", tt.doc)
			stdout, stderr, err := run(t, nil, tt.kind, "validate", path)
			var reported reportedError
			if !errors.As(err, &reported) {
				t.Fatalf("err = %v, want a reported failure (exit 1); stderr:\n%s", err, stderr)
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

// TestRunWarnsUnknownKeys checks that run reads past a typo: it logs it at WARN, with the key
// meant and what falls back to its default, and goes on to start. Each file is made to fail
// later, at start, so that no test binds the default addresses.
func TestRunWarnsUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      func(path string) []string
		doc       string
		wantLines []string
		configErr bool // the file has a real error too: run refuses it, after the warnings
	}{
		{"controller api:;", func(p string) []string { return []string{"controller", "run", "--config", p} },
			strings.Replace(ctrlTypo, "dataDir: data", "dataDir: occupied/data", 1), []string{
				`level=WARN msg="{file}:3: api:;: unknown key; did you mean api?; ignored"`,
				`level=WARN msg="{file}:3: api: section missing, using the default listen address 127.0.0.1:1280 (\"api:;\" is not read)"`,
				"level=WARN msg=\"{file}: 1 unknown key ignored; `zmesh controller validate {file}` fails on this file\"",
			}, false},
		{"router ctrl.endpont", func(p string) []string { return []string{"router", "run", p} }, routerTypo, []string{
			`level=WARN msg="{file}:3: ctrl.endpont: unknown key; did you mean endpoint?; ignored"`,
		}, true},
		{"router typo alone", func(p string) []string { return []string{"router", "run", p} }, minimal + "forwarder:\n  xgressDialWrokerCount: 64\n", []string{
			`level=WARN msg="{file}:9: forwarder.xgressDialWrokerCount: unknown key; did you mean xgressDialWorkerCount?; ignored"`,
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "config.yml", tt.doc)
			// dataDir occupied/data cannot be created: occupied is a file.
			writeFileAt(t, filepath.Join(filepath.Dir(path), "occupied"), "")
			ctx, cancel := context.WithCancel(t.Context())
			cancel() // nothing may keep running
			_, stderr, err := runContext(ctx, tt.args(path)...)
			if err == nil {
				t.Fatalf("run succeeded; want it to fail at start (stderr:\n%s)", stderr)
			}
			var errs config.Errors
			if got := errors.As(err, &errs); got != tt.configErr {
				t.Errorf("err = %v: configuration errors %v, want %v", err, got, tt.configErr)
			}
			for _, l := range tt.wantLines {
				if l = strings.ReplaceAll(l, "{file}", path); !strings.Contains(stderr, l) {
					t.Errorf("stderr lacks %s:\n%s", l, stderr)
				}
			}
		})
	}
}

func writeFileAt(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runContext is run with a context: a run command stops when ctx is done.
func runContext(ctx context.Context, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd := newRootCommand(&stdout, &stderr, func(string) (string, bool) { return "", false })
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}
