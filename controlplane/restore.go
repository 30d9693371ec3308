package controlplane

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Restore replaces the store of the data directory dataDir with the backup file at path,
// while no controller runs on it: it takes the directory's lock (ErrDataDirInUse when a
// controller holds it), checks the backup is intact, restores it into a new directory and
// only then moves the old store aside, to db.before-restore-<time>, which it returns ("" when
// there was none). The CA and certificates in pki/ are not part of a backup.
func Restore(dataDir, path string, log *slog.Logger) (aside string, err error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("create data directory: %w", err)
	}
	lock, err := lockDir(dataDir)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	stamp := time.Now().UTC().Format("20060102T150405Z")
	db := filepath.Join(dataDir, "db")
	tmp := db + ".restoring-" + stamp
	if err := store.Restore(tmp, path, log); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if _, err := os.Stat(db); err == nil {
		aside = db + ".before-restore-" + stamp
		if err := os.Rename(db, aside); err != nil {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("move the old store aside: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, db); err != nil {
		return aside, fmt.Errorf("put the restored store in place (it is in %s): %w", tmp, err)
	}
	if d, err := os.Open(dataDir); err == nil { // make the renames durable
		d.Sync()
		d.Close()
	}
	return aside, nil
}
