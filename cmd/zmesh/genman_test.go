package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenMan: gen-man writes a page per visible command, with the command's own title and
// flags, none for hidden commands, and is itself absent from the help.
func TestGenMan(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "man1")
	if _, errOut, err := run(t, nil, genManCommand, dir); err != nil {
		t.Fatalf("gen-man: %v (stderr %q)", err, errOut)
	}
	page, err := os.ReadFile(filepath.Join(dir, "zmesh-router-run.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.TH "ZMESH-ROUTER-RUN" "1"`, `"zmesh ` + version + `"`, `\fB--config\fP`, "zmesh-router(1)"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("zmesh-router-run.1 lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(string(page), "Auto generated") {
		t.Errorf("zmesh-router-run.1 has cobra's history section:\n%s", page)
	}
	if root, err := os.ReadFile(filepath.Join(dir, "zmesh.1")); err != nil || !strings.Contains(string(root), `\fB--version\fP`) {
		t.Errorf("zmesh.1 (%v) does not list --version:\n%s", err, root)
	}
	for _, name := range []string{"zmesh.1", "zmesh-version.1", "zmesh-edge-login.1", "zmesh-completion-bash.1"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no %s: %v", name, err)
		}
	}
	for _, hidden := range []string{genManCommand, benchWorkerCommand} {
		if matches, _ := filepath.Glob(filepath.Join(dir, "zmesh-"+hidden+"*")); len(matches) != 0 {
			t.Errorf("a page for the hidden command %s: %v", hidden, matches)
		}
	}
	if stdout, _, err := run(t, nil, "--help"); err != nil || strings.Contains(stdout, genManCommand) {
		t.Errorf("help (%v) shows %s:\n%s", err, genManCommand, stdout)
	}
	if _, _, err := run(t, nil, genManCommand); exitCode(err) != exitUsage {
		t.Errorf("gen-man without DIR: %v (exit %d), want a usage error", err, exitCode(err))
	}
}
