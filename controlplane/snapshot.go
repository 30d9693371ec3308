package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// snapshotDir is where POST /database/snapshot writes, below the data directory.
const snapshotDir = "snapshots"

// snapshot writes a backup of the store, the format zmesh controller backup writes and
// restore reads, to <dataDir>/snapshots/store-<UTC time>.backup, and returns its path. The
// file appears under its name only once complete and synced.
func (c *Controller) snapshot() (string, error) {
	dir := filepath.Join(c.cfg.DataDir, snapshotDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("snapshot directory: %w", err)
	}
	path := filepath.Join(dir, "store-"+time.Now().UTC().Format("20060102T150405.000Z")+".backup")
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
	return path, nil
}
