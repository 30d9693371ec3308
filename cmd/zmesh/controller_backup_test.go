package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// zmesh controller backup streams a running controller's store into a 0600 file, and
// zmesh controller restore turns it into the store of a stopped controller's data directory.
func TestControllerBackupRestoreCommands(t *testing.T) {
	t.Parallel()
	url := ctrltest.Start(t).URL
	dir := t.TempDir()
	session := filepath.Join(dir, "session.json")
	if _, _, err := run(t, nil, "controller", "backup", "--session-file", session, filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "not logged in") {
		t.Fatalf("backup before login: %v", err)
	}
	if _, _, err := run(t, nil, "edge", "--session-file", session, "login", url, "-u", "admin", "-p", "admin-pass", "--yes"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "edge", "--session-file", session, "create", "identity", "laptop", "--type", "Device"); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "store.backup")
	out, _, err := run(t, nil, "controller", "backup", "--session-file", session, backup)
	if err != nil || !strings.Contains(out, "written to "+backup) {
		t.Fatalf("backup: %v %q", err, out)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	if err := store.CheckBackup(backup); err != nil {
		t.Fatal(err)
	}

	dataDir := filepath.Join(dir, "data")
	cfg := writeFile(t, "ctrl.yml", "v: 1\ndataDir: "+dataDir+"\nadmin:\n  password: admin-pass\n")
	if out, _, err := run(t, nil, "controller", "restore", "-c", cfg, backup); err != nil || !strings.Contains(out, "restored") {
		t.Fatalf("restore: %v %q", err, out)
	}
	// The first restore closed its lock file, but a child that another test of this process
	// forked at that moment holds the lock until it execs: the second waits for that.
	testutil.Eventually(t, "the data directory's lock free for the second restore", func() bool {
		out, _, err = run(t, nil, "controller", "restore", "-c", cfg, backup)
		return !errors.Is(err, controlplane.ErrDataDirInUse)
	})
	if err != nil || !strings.Contains(out, "the previous store is in "+filepath.Join(dataDir, "db.before-restore-")) {
		t.Fatalf("second restore: %v %q", err, out)
	}
	s, err := store.Open(filepath.Join(dataDir, "db"), slog.New(slog.NewTextHandler(io.Discard, nil)), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counts, err := s.Counts()
	if err != nil || counts["identities"] < 2 { // the administrator and laptop
		t.Fatalf("restored store: %v %v", counts, err)
	}
}
