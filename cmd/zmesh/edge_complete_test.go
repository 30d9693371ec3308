package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/ctrltest"
)

// TestEdgeCompletion completes entity names from the controller through cobra's __complete
// command, as a shell does, and completes nothing, quietly, without a login.
func TestEdgeCompletion(t *testing.T) {
	t.Parallel()
	session := filepath.Join(t.TempDir(), "session.json")
	edge := edgeFunc(func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"edge", "--session-file", session}, args...)...)
	})
	edge.must(t, "login", ctrltest.Start(t).URL, "-u", "admin", "-p", "admin-pass", "--yes")
	for _, name := range []string{"alice", "albert", "bob"} {
		edge.must(t, "create", "identity", name)
	}
	edge.must(t, "create", "service", "web", "--encryption", "off")
	edge.must(t, "create", "edge-router", "east-1")
	term := regexp.MustCompile(`terminator (\S+)`).FindStringSubmatch(edge.must(t, "create", "terminator", "web", "east-1", "tcp:127.0.0.1:80"))[1]

	complete := func(args ...string) []string {
		t.Helper()
		out, stderr, err := run(t, nil, append([]string{"__complete", "edge", "--session-file", session}, args...)...)
		if err != nil {
			t.Fatalf("complete %v: %v (stderr %q)", args, err, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if last := lines[len(lines)-1]; last != ":4" { // ShellCompDirectiveNoFileComp
			t.Errorf("complete %v: directive %q, want :4", args, last)
		}
		return lines[:len(lines)-1]
	}
	check := func(got []string, want ...string) {
		t.Helper()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("completions %q, want %q", got, want)
		}
	}
	check(complete("get", "identity", "al"), "albert", "alice")
	check(complete("delete", "identities", "b"), "bob")
	check(complete("update", "service", ""), "web")
	check(complete("disable", "identity", "ali"), "alice")
	check(complete("re-enroll", "edge-router", "e"), "east-1")
	check(complete("get", "terminator", term[:3]), term)
	check(complete("policy-advisor", "identities", "alice", "w"), "web")
	check(complete("get", "identity", "alice", "")) // one argument only
	check(complete("use", ""), "default")
	check(complete("get", "identity", "zz"))

	// Without a login: nothing, and no error.
	out, stderr, err := run(t, nil, "__complete", "edge", "--session-file", filepath.Join(t.TempDir(), "none.json"), "get", "identity", "a")
	if err != nil || strings.TrimSpace(out) != ":4" || strings.Contains(stderr, "Error") {
		t.Errorf("complete without a login (%v): %q, stderr %q", err, out, stderr)
	}
}
