package controlplane

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
)

// A controller whose store has a flipped byte refuses to start and says which file and what
// to do, rather than serve what is left.
func TestCorruptStoreRefusesToStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := testConfig(dir, "127.0.0.1:1")
	ctrl, err := Open(cfg, log, Build{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Close(); err != nil { // flushes the records into a table
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table written")
	}
	file := tables[0]
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctrl, err = Open(cfg, log, Build{})
	if err == nil {
		ctrl.Close()
		t.Fatal("a controller with a corrupt store started")
	}
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("err = %v, want store.ErrCorrupt naming %s and the restore", err, file)
	}
}
