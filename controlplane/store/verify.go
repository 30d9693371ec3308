package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
	"github.com/dgraph-io/ristretto/v2/z"
)

// Badger's own full verification (a table checked as it opens, DB.VerifyChecksum) panics
// on a nil block when a block cannot be read, in a goroutine of its own during Open; and
// it skips, with a log line only, a table whose checksum fails in other paths. So the store
// verifies the tables itself, one file at a time, before Badger opens them.

// tableCompression returns the tables the manifest in dir lists, with the compression of
// each; none when there is no manifest yet.
func tableCompression(dir string) (map[uint64]options.CompressionType, error) {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, _, err := badger.ReplayManifestFile(f, 0, badger.DefaultOptions(dir))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", y.ErrChecksumMismatch, f.Name(), err)
	}
	out := make(map[uint64]options.CompressionType, len(m.Tables))
	for id, t := range m.Tables {
		out[id] = t.Compression
	}
	return out, nil
}

// verifyTables checks every block checksum of every table the manifest in dir lists; a
// table it lists that is missing is corruption too.
func verifyTables(dir string) error {
	tables, err := tableCompression(dir)
	if err != nil {
		return &CorruptError{Dir: dir, File: filepath.Join(dir, badger.ManifestFilename), Err: err}
	}
	ids := make([]uint64, 0, len(tables))
	for id := range tables {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		path := table.NewFilename(id, dir)
		if err := verifyTable(path, tables[id]); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				err = errors.New("the manifest lists the table but the file is missing")
			}
			return &CorruptError{Dir: dir, File: path, Err: err}
		}
	}
	return nil
}

// verifyTable reads every block of the table in path and checks its checksum.
func verifyTable(path string, c options.CompressionType) (err error) {
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fs.ErrNotExist
		}
		return err
	}
	defer func() {
		if r := recover(); r != nil { // Badger panics on lengths out of range, or a nil block
			err = fmt.Errorf("%w: a block cannot be read: %v", y.ErrChecksumMismatch, r)
		}
		mf.Close(-1)
	}()
	t, err := table.OpenTable(mf, table.Options{ChkMode: options.NoVerification, BlockSize: 4 << 10, Compression: c})
	if err != nil {
		return fmt.Errorf("%w: %v", y.ErrChecksumMismatch, err)
	}
	if err := t.VerifyChecksum(); err != nil {
		return fmt.Errorf("%w: %v", y.ErrChecksumMismatch, err)
	}
	return nil
}
