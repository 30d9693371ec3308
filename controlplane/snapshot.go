package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// snapshotDir is where POST /database/snapshot writes, below the data directory.
const snapshotDir = "snapshots"

// keepSnapshots is how many snapshots stay: each new one deletes the oldest beyond it, so
// that repeated requests cannot fill the disk the store lives on.
const keepSnapshots = 5

// snapshot writes a backup of the store, the format zmesh controller backup writes and
// restore reads, to <dataDir>/snapshots/store-<UTC time>.backup, and returns its path. The
// file appears under its name only once complete and synced. Snapshots are made one at a
// time, and the newest keepSnapshots stay.
func (c *Controller) snapshot() (string, error) {
	c.snapshotMu.Lock()
	defer c.snapshotMu.Unlock()
	dir := filepath.Join(c.cfg.DataDir, snapshotDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("snapshot directory: %w", err)
	}
	path := filepath.Join(dir, "store-"+time.Now().UTC().Format("20060102T150405.000000000Z")+".backup")
	tmp, err := os.CreateTemp(dir, ".snapshot-*")
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := c.store.Backup(tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return path, pruneSnapshots(dir)
}

// pruneSnapshots deletes all but the newest keepSnapshots snapshots in dir (their names sort
// by time).
func pruneSnapshots(dir string) error {
	old, err := filepath.Glob(filepath.Join(dir, "store-*.backup"))
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	slices.Sort(old)
	for _, p := range old[:max(len(old)-keepSnapshots, 0)] {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("snapshot: delete an old one: %w", err)
		}
	}
	return nil
}
