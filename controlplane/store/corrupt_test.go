package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fillStore writes n people into a new store in dir and closes it, which flushes them
// into tables.
func fillStore(t testing.TB, dir string, n int) {
	t.Helper()
	s, err := Open(dir, discard, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := people()
	for i := 0; i < n; i += 100 {
		err := s.Update(func(tx *Tx) error {
			for j := i; j < i+100 && j < n; j++ {
				p := &person{ID: fmt.Sprintf("id-%06d", j), Name: fmt.Sprintf("person number %d", j),
					Emails: []string{fmt.Sprintf("p%d@example.org", j)}, Team: fmt.Sprintf("team-%d", j%7)}
				if err := c.Create(tx, p); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// largestTable returns the biggest .sst file in dir.
func largestTable(t *testing.T, dir string) (string, int64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	var best string
	var size int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			best, size = f, fi.Size()
		}
	}
	if best == "" {
		t.Fatalf("no table in %s", dir)
	}
	return best, size
}

func flipByte(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptTableRefusesToOpen(t *testing.T) {
	t.Parallel()
	for _, at := range []float64{0.1, 0.5, 0.9} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			fillStore(t, dir, 3000)
			file, size := largestTable(t, dir)
			flipByte(t, file, int64(float64(size)*at))
			s, err := Open(dir, discard, Options{})
			if err == nil {
				s.Close()
				t.Fatalf("a store with a flipped byte at %d of %d in %s opened", int64(float64(size)*at), size, file)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v (%T), want a *CorruptError", err, err)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "restore") {
				t.Fatalf("err = %v, want the file %s named and what to do", err, file)
			}
		})
	}
}

// A block damaged after the store opened: Badger's reads treat a block whose checksum fails
// as absent (a Get says not found, an iteration ends early), never as altered content; the
// periodic Verify then finds the damage and every later operation fails.
func TestCorruptBlockAfterOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, dir, 3000)
	s := open(t, dir)
	defer s.Close()
	file, size := largestTable(t, dir)
	flipByte(t, file, size/2)
	c := people()
	missing := 0
	for i := 0; i < 3000; i++ {
		id := fmt.Sprintf("id-%06d", i)
		err := s.View(func(tx *Tx) error {
			p, err := c.Get(tx, id)
			if err == nil && p.Name != fmt.Sprintf("person number %d", i) {
				t.Errorf("%s read back altered: %+v", id, p)
			}
			return err
		})
		if err != nil {
			missing++
		}
	}
	if missing == 0 {
		t.Fatal("every record read back: the flipped byte hit no block")
	}
	if err := s.Verify(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) {
		t.Fatalf("Verify = %v, want ErrCorrupt naming %s", err, file)
	}
	if err := s.View(func(tx *Tx) error { _, err := c.Get(tx, "id-000000"); return err }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a read after Verify found the corruption: err = %v, want ErrCorrupt", err)
	}
}

func TestIntactStoreReadsBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, dir, 3000)
	s := open(t, dir)
	defer s.Close()
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	var all []*person
	if err := s.View(func(tx *Tx) (err error) { all, err = people().All(tx); return err }); err != nil {
		t.Fatal(err)
	}
	if len(all) != 3000 || all[1234].Name != "person number 1234" {
		t.Fatalf("read back %d people", len(all))
	}
}

func TestFileModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "db")
	check := func(when string) {
		t.Helper()
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %s has mode %v, want 0700", when, dir, fi.Mode().Perm())
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) == 0 {
			t.Fatalf("%s: no files", when)
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().IsRegular() && info.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s has mode %v, want 0600", when, e.Name(), info.Mode().Perm())
			}
		}
	}
	fillStore(t, dir, 500) // Badger creates tables, logs and its LOCK 0666 less the umask
	check("after close")
	os.Chmod(dir, 0o755)
	s := open(t, dir)
	defer s.Close()
	check("after open")
}

// BenchmarkVerification measures what the checksums cost: opening a store of 20,000 records
// (every table read at open) and reading records at random, with and without verification.
func BenchmarkVerification(b *testing.B) {
	dir := b.TempDir()
	const n = 20000
	fillStore(b, dir, n)
	for _, mode := range []struct {
		name string
		opts Options
	}{{"verify", Options{}}, {"noverify", Options{noVerify: true}}} {
		b.Run("open/"+mode.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s, err := Open(dir, discard, mode.opts)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
		b.Run("get/"+mode.name, func(b *testing.B) {
			s, err := Open(dir, discard, mode.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			c := people()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("id-%06d", (i*7919)%n)
				if err := s.View(func(tx *Tx) error { _, err := c.Get(tx, id); return err }); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("list/"+mode.name, func(b *testing.B) {
			s, err := Open(dir, discard, mode.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for i := 0; i < b.N; i++ {
				if err := s.View(func(tx *Tx) error { _, err := people().All(tx); return err }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("verify-all", func(b *testing.B) {
		s, err := Open(dir, discard, Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for i := 0; i < b.N; i++ {
			if err := s.Verify(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
