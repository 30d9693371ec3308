package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
				err = fmt.Errorf("%w: the manifest lists the table but the file is missing", y.ErrChecksumMismatch)
			}
			if !isChecksumErr(err) { // an I/O error, not damage
				return fmt.Errorf("verify %s: %w", path, err)
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

// verifyWALs checks the write-ahead logs (*.mem) in dir, which hold the writes not yet in a
// table. Badger replays a log up to its first entry whose checksum fails and drops the rest
// without a word: right for a write torn by a crash, which can only be the last entry, but a
// damaged entry in the middle would lose every later write. So a log with data after the
// extent of its first bad entry is corruption.
func verifyWALs(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Size() <= walHeaderSize {
			continue // gone, or holds no entry (mmap cannot map an empty file)
		}
		mf, err := z.OpenMmapFile(f, os.O_RDONLY, 0) // mapped, not read: 32 MB each
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		off, ok := walIntact(mf.Data)
		mf.Close(-1)
		if !ok {
			return &CorruptError{Dir: dir, File: f, Err: fmt.Errorf("%w: entry at offset %d is damaged and later writes follow it", y.ErrChecksumMismatch, off)}
		}
	}
	return nil
}

// walHeaderSize is Badger's header of a log file (the encryption key id and IV).
const walHeaderSize = 20

// walIntact parses Badger's log entries (meta, user meta, uvarint key length, value length
// and expiry, the key and value, a big-endian CRC-32C of all that) from data and reports
// the offset of the first entry that does not parse, and whether only zeros follow its
// extent.
func walIntact(data []byte) (int, bool) {
	off := walHeaderSize
	for off < len(data) {
		n, extent, ok := walEntry(data[off:])
		if !ok {
			end := off + extent
			if end > len(data) {
				return off, true
			}
			return off, bytes.IndexFunc(data[end:], func(r rune) bool { return r != 0 }) < 0
		}
		off += n
	}
	return off, true
}

// walEntry parses one entry at the start of b: its length when it is intact, otherwise the
// extent its header claims (0 when the header itself does not parse).
func walEntry(b []byte) (n, extent int, ok bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	h := 2
	var lens [3]uint64
	for i := range lens {
		v, k := binary.Uvarint(b[h:])
		if k <= 0 {
			return 0, 0, false
		}
		lens[i] = v
		h += k
	}
	if lens[0] == 0 && lens[1] == 0 && b[0] == 0 {
		return 0, 0, false // zeros: the end of the log
	}
	if lens[0] > 1<<16 || lens[1] > 1<<31 {
		return 0, 0, false
	}
	total := h + int(lens[0]) + int(lens[1]) + crc32.Size
	if total > len(b) {
		return 0, total, false
	}
	if crc32.Checksum(b[:total-crc32.Size], y.CastagnoliCrcTable) != binary.BigEndian.Uint32(b[total-crc32.Size:total]) {
		return 0, total, false
	}
	return total, total, true
}
