package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEdgeLoginProfiles keeps two logins side by side, switches between them, reads a
// session file of the form before profiles, and logs out.
func TestEdgeLoginProfiles(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	logins := edge.object(t, "use")["data"].([]any)
	if len(logins) != 1 {
		t.Fatalf("logins: %v", logins)
	}
	first := logins[0].(map[string]any)
	url := first["url"].(string)
	if first["name"] != "default" || first["current"] != true || first["username"] != "admin" || first["token"] != nil {
		t.Errorf("first login: %v", first)
	}
	edge.must(t, "create", "identity", "ops-user")
	// The second profile is the administrator again, under another name.
	if out := edge.must(t, "login", url, "-u", "admin", "-p", "admin-pass", "--yes", "--profile", "lab"); !strings.Contains(out, "(profile lab)") {
		t.Errorf("login --profile: %q", out)
	}
	table := edge.must(t, "use")
	if !regexp.MustCompile(`(?m)^\*\s+lab\s`).MatchString(table) || !regexp.MustCompile(`(?m)^\s+default\s`).MatchString(table) {
		t.Errorf("use lists:\n%s", table)
	}
	if out := edge.must(t, "use", "default"); out != "using login default: "+url+" as admin\n" {
		t.Errorf("use default: %q", out)
	}
	if _, _, err := edge("use", "nope"); err == nil || !strings.Contains(err.Error(), `no login profile "nope"; there are: default, lab`) {
		t.Errorf("use of an unknown profile: %v", err)
	}
	if _, _, err := edge("list", "identities", "--profile", "nope"); err == nil || !strings.Contains(err.Error(), `no login profile "nope"`) {
		t.Errorf("--profile of an unknown profile: %v", err)
	}
	edge.must(t, "list", "identities", "--profile", "lab")
	edge.must(t, "list", "identities", "--cli-identity", "lab")

	// The file is private.
	dir := t.TempDir()
	session := filepath.Join(dir, "s.json")
	other := func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"edge", "--session-file", session}, args...)...)
	}
	if _, _, err := other("login", url, "-u", "admin", "-p", "admin-pass", "--yes"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(session); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("session file: %v %v", fi, err)
	}
	l, err := loadLogins(session)
	if err != nil {
		t.Fatal(err)
	}
	// A file of one session alone, as logins before profiles wrote it, reads as "default".
	oldFile := filepath.Join(dir, "old.json")
	data, _ := json.Marshal(l.Profiles["default"])
	if err := os.WriteFile(oldFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	old := func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"edge", "--session-file", oldFile}, args...)...)
	}
	if out, _, err := old("list", "identities"); err != nil || !strings.Contains(out, "ops-user") {
		t.Errorf("list with an old session file (%v):\n%s", err, out)
	}
	if out, _, err := old("use"); err != nil || !regexp.MustCompile(`(?m)^\*\s+default\s`).MatchString(out) {
		t.Errorf("use with an old session file (%v):\n%s", err, out)
	}

	// Logout ends the API session on the controller and forgets the login.
	if out, _, err := old("logout"); err != nil || out != "logged out of "+url+" as admin (profile default)\n" {
		t.Errorf("logout (%v): %q", err, out)
	}
	if _, err := os.Stat(oldFile); !os.IsNotExist(err) {
		t.Errorf("the session file of no login is still there: %v", err)
	}
	// The token the old file held is refused: s.json held the same session.
	if _, _, err := other("list", "identities"); err == nil {
		t.Error("the session ended by logout still works")
	}
	_, stderr, code := status(t, "edge", "--session-file", oldFile, "logout")
	if code != 1 || !strings.Contains(stderr, "not logged in") {
		t.Errorf("logout when not logged in: exit %d, %q", code, stderr)
	}
	// Logging out of a session the controller already ended only forgets it.
	if out, _, err := other("logout"); err != nil || !strings.Contains(out, "already ended") {
		t.Errorf("logout of an ended session (%v): %q", err, out)
	}

	// Logging out of the current of two profiles leaves the other, not current.
	if out := edge.must(t, "logout"); !strings.Contains(out, "(profile default)") {
		t.Errorf("logout: %q", out)
	}
	if _, _, err := edge("list", "identities"); err == nil || !strings.Contains(err.Error(), "not logged in: no login is current; run zmesh edge use PROFILE (there are: lab)") {
		t.Errorf("a command after logout: %v", err)
	}
	edge.must(t, "use", "lab")
	edge.must(t, "list", "identities")
}
