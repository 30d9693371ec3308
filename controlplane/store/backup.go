package store

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
)

// A backup file is backupMagic, Badger's backup stream of the latest version of every key
// (DB.Backup: one consistent snapshot, taken while the store serves), then the SHA-256 of
// the stream: a backup that is cut short or altered is refused before anything is restored.
const backupMagic = "zmesh-store-backup 1\n"

// ErrBadBackup means a backup file is not one, is cut short, or was altered.
var ErrBadBackup = errors.New("not an intact zmesh store backup")

// Backup writes a consistent backup of the store to w while the store keeps serving.
func (s *Store) Backup(w io.Writer) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := io.WriteString(w, backupMagic); err != nil {
		return err
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 256<<10)
	if _, err := s.db.Backup(bw, 0); err != nil {
		return s.noteErr(fmt.Errorf("back up the store: %w", err))
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// backupBody returns a reader of the Badger stream in the backup file f, and checks, once
// the reader is drained, that its SHA-256 matches.
type backupBody struct {
	r    io.Reader
	h    hash.Hash
	sum  []byte
	name string
}

func (b *backupBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF && !bytes.Equal(b.h.Sum(nil), b.sum) {
		return n, fmt.Errorf("%w: %s: its checksum does not match its content", ErrBadBackup, b.name)
	}
	return n, err
}

// openBackup opens the backup file at path and returns its stream.
func openBackup(path string) (*os.File, *backupBody, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	n := fi.Size() - int64(len(backupMagic)) - sha256.Size
	magic := make([]byte, len(backupMagic))
	sum := make([]byte, sha256.Size)
	if n < 0 {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is %d bytes", ErrBadBackup, path, fi.Size())
	}
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != backupMagic {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s does not start as one", ErrBadBackup, path)
	}
	if _, err := f.ReadAt(sum, fi.Size()-sha256.Size); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return f, &backupBody{r: bufio.NewReaderSize(io.LimitReader(f, n), 256<<10), h: sha256.New(), sum: sum, name: path}, nil
}

// CheckBackup reads the backup file at path and fails unless it is intact.
func CheckBackup(path string) error {
	f, body, err := openBackup(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, body)
	return err
}

// Restore creates a store in dir, which must not exist or be empty, from the backup file at
// path, after checking the backup is intact; then opens it as Open does (tables verified,
// schema checked) and closes it.
func Restore(dir, path string, log *slog.Logger) error {
	if err := CheckBackup(path); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("restore into %s: the directory is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	db, err := openBadger(badgerOptions(dir, log))
	if err != nil {
		return fmt.Errorf("create the store in %s: %w", dir, err)
	}
	f, body, err := openBackup(path)
	if err != nil {
		db.Close()
		return err
	}
	defer f.Close()
	if err := db.Load(body, 256); err != nil {
		db.Close()
		return fmt.Errorf("restore %s into %s: %w", path, dir, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("restore %s into %s: %w", path, dir, err)
	}
	s, err := Open(dir, log, Options{})
	if err != nil {
		return fmt.Errorf("open the restored store: %w", err)
	}
	return s.Close()
}
