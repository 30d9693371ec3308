package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// status runs the zmesh command line args and returns its output, its stderr with the
// error as main prints it, and its exit status.
func status(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, err := run(t, nil, args...)
	if err != nil {
		stderr += "zmesh: " + err.Error() + "\n"
	}
	return stdout, stderr, exitCode(err)
}

// TestVersion: --version and the version command print the same line; -o json the same
// facts as JSON.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := "zmesh " + version + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"--version"}, {"version"}, {"version", "-o", "text"}} {
		if out, errOut, code := status(t, args...); out != want || code != 0 {
			t.Errorf("zmesh %s: %q (stderr %q), exit %d; want %q, exit 0", strings.Join(args, " "), out, errOut, code, want)
		}
	}
	out, _, code := status(t, "version", "-o", "json")
	var b buildInfo
	if err := json.Unmarshal([]byte(out), &b); err != nil || code != 0 {
		t.Fatalf("zmesh version -o json: %q, %v, exit %d", out, err, code)
	}
	if b != currentBuild() || b.Version == "" || b.Go == "" {
		t.Errorf("zmesh version -o json: %+v, want %+v", b, currentBuild())
	}
}

// TestExitCodes: 0 for success and a group's help, 2 for a command line that cannot run
// (with a message saying what is wrong), 1 for a failure of a command that ran.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		code int
		msg  string // in stderr
	}{
		{[]string{"edge"}, 0, ""},
		{[]string{"edge", "frobnicate"}, 2, `unknown command "frobnicate" for "zmesh edge"`},
		{[]string{"edge", "lis"}, 2, "did you mean list?"},
		{[]string{"edge", "logout", "now"}, 2, "usage: zmesh edge logout"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate" for "zmesh"`},
		{[]string{"fabric", "frobnicate"}, 2, `unknown command "frobnicate" for "zmesh fabric"`},
		{[]string{"version", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"version", "extra"}, 2, "usage: zmesh version"},
		{[]string{"version", "-o", "yaml"}, 2, `--output "yaml" is not allowed; allowed: text, json`},
		{[]string{"router", "run"}, 2, "no configuration file; give it as the argument or with --config (usage: zmesh router run ROUTER.yml"},
		{[]string{"router", "run", "a.yml", "b.yml"}, 2, "accepts at most 1 arg(s), received 2 (usage: zmesh router run"},
		{[]string{"router", "run", "a.yml", "--config", "b.yml"}, 2, "two configuration files, a.yml and --config b.yml"},
		{[]string{"controller", "run"}, 2, "no configuration file; give it as the argument or with --config (usage: zmesh controller run CONTROLLER.yml"},
		{[]string{"controller", "restore", "backup.zip"}, 2, `required flag(s) "config" not set`},
		{[]string{"controller", "run", "/nonexistent/controller.yml"}, 1, "/nonexistent/controller.yml"},
		{[]string{"controller", "run", "--config", "/nonexistent/controller.yml"}, 1, "/nonexistent/controller.yml"},
		{[]string{"router", "run", "-c", "/nonexistent/router.yml"}, 1, "/nonexistent/router.yml"},
		{[]string{"router", "run", "--log-level", "loud", "r.yml"}, 2, `--log-level "loud" is not allowed`},
		{[]string{"edge", "list", "services", "-o", "xml"}, 2, `--output "xml" is not allowed`},
		{[]string{"router", "run", "/nonexistent/router.yml"}, 1, "/nonexistent/router.yml"},
		{[]string{"edge", "list"}, 2, "list needs an entity type"},
		{[]string{"edge", "list", "nosuch"}, 2, `"nosuch" is not an entity type`},
		{[]string{"edge", "create", "posture-check"}, 2, "needs the kind of"},
		{[]string{"fabric", "list", "nosuch"}, 2, `"nosuch" is not an entity type of fabric list`},
		{[]string{"edge", "login", "notaurl", "-u", "a", "-p", "b"}, 2, "is not a controller URL"},
		{[]string{"edge", "get", "service", "a", "b"}, 2, "usage: zmesh edge get service NAME|ID [flags]"},
		{[]string{"tunnel", "proxy"}, 2, "--service is required"},
		{[]string{"tunnel", "proxy", "--service", "echo:2010"}, 2, "--identity is required"},
	}
	for _, tc := range cases {
		_, errOut, code := status(t, tc.args...)
		if strings.Count(errOut, "usage:") > 1 {
			t.Errorf("zmesh %s: the usage line twice: %q", strings.Join(tc.args, " "), errOut)
		}
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("zmesh %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.msg)
		}
	}
}
