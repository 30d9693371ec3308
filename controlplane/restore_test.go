package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/apiclient"
)

// A backup taken from a running controller through the management API restores, once the
// controller stops, into a store that holds the same identities; a restore while the
// controller runs is refused.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := start(t, dir, "")
	for i := 0; i < 20; i++ {
		createIdentity(t, r.admin, map[string]any{"name": fmt.Sprint("device-", i), "type": "Device", "isAdmin": false})
	}
	want := identityNames(t, r.admin)

	backup := filepath.Join(t.TempDir(), "store.backup")
	f, err := os.Create(backup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.admin.Download(context.Background(), apiclient.ManagementAPI+"/database/backup", f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := store.CheckBackup(backup); err != nil {
		t.Fatal(err)
	}
	// changes after the backup are undone by the restore
	createIdentity(t, r.admin, map[string]any{"name": "after-backup", "type": "Device", "isAdmin": false})

	if _, err := Restore(dir, backup, log); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("restore while the controller runs: %v, want ErrDataDirInUse", err)
	}
	r.shutdown(t)

	aside, err := Restore(dir, backup, log)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(aside); err != nil || !fi.IsDir() {
		t.Fatalf("the old store is not kept aside in %q: %v", aside, err)
	}
	r = start(t, dir, "")
	if got := identityNames(t, r.admin); !slices.Equal(got, want) {
		t.Fatalf("identities after restore: %v, want %v", got, want)
	}
}
