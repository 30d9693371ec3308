package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/apiclient"
)

// POST /database/snapshot writes an intact backup into the data directory; the integrity
// scans run over the real store and report their outcome.
func TestDatabaseSnapshotAndIntegrity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := start(t, dir, "")
	ctx := context.Background()
	if _, err := r.admin.Do(ctx, "POST", apiclient.ManagementAPI+"/database/snapshot", nil, nil); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, snapshotDir, "store-*.backup"))
	if err != nil || len(files) != 1 {
		t.Fatalf("snapshots: %v %v", files, err)
	}
	if err := store.CheckBackup(files[0]); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot mode: %v %v", fi.Mode(), err)
	}
	var before struct {
		InProgress bool    `json:"inProgress"`
		EndTime    *string `json:"endTime"`
		Results    []any   `json:"results"`
	}
	if _, err := r.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/database/data-integrity-results", nil, &before); err != nil {
		t.Fatal(err)
	}
	if before.InProgress || before.EndTime != nil {
		t.Fatalf("results before any scan: %+v", before)
	}
	for _, op := range []string{"check-data-integrity", "fix-data-integrity"} {
		if _, err := r.admin.Do(ctx, "POST", apiclient.ManagementAPI+"/database/"+op, nil, nil); err != nil {
			t.Fatal(err)
		}
		var after struct {
			InProgress   bool    `json:"inProgress"`
			FixingErrors bool    `json:"fixingErrors"`
			EndTime      *string `json:"endTime"`
			Error        *string `json:"error"`
			Results      []any   `json:"results"`
		}
		if _, err := r.admin.Do(ctx, "GET", apiclient.ManagementAPI+"/database/data-integrity-results", nil, &after); err != nil {
			t.Fatal(err)
		}
		if after.InProgress || after.EndTime == nil || after.Error != nil || len(after.Results) != 0 || after.FixingErrors != (op == "fix-data-integrity") {
			t.Fatalf("%s: %+v", op, after)
		}
	}
}

// Snapshots beyond keepSnapshots delete the oldest ones.
func TestSnapshotsKeepTheNewest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := start(t, dir, "")
	var made []string
	for range keepSnapshots + 2 {
		if _, err := r.admin.Do(context.Background(), "POST", apiclient.ManagementAPI+"/database/snapshot", nil, nil); err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob(filepath.Join(dir, snapshotDir, "store-*.backup"))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(files)
		made = append(made, files[len(files)-1])
		if len(files) > keepSnapshots {
			t.Fatalf("%d snapshots kept, want at most %d", len(files), keepSnapshots)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, snapshotDir, "store-*.backup"))
	slices.Sort(files)
	if !slices.Equal(files, made[len(made)-keepSnapshots:]) {
		t.Fatalf("kept %v, want the newest %v", files, made[len(made)-keepSnapshots:])
	}
}
