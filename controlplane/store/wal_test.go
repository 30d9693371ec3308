package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyDir copies the regular files of src into a new directory dst: a copy of a running
// store's files, as after a crash (the write-ahead log not yet flushed into a table).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// walWithData returns the write-ahead log in dir that holds entries, and the offset just past
// its last non-zero byte.
func walWithData(t *testing.T, dir string) (string, int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if end := bytes.LastIndexFunc(data, func(r rune) bool { return r != 0 }) + 1; end > 4096 {
			return f, end
		}
	}
	t.Fatalf("no write-ahead log with data in %s", dir)
	return "", 0
}

func countPeople(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.View(func(tx *Tx) (err error) { n, err = people().Count(tx); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWriteAheadLogChecked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	live := filepath.Join(root, "live")
	s := open(t, live)
	c := people()
	for i := 0; i < 500; i += 10 {
		if err := s.Update(func(tx *Tx) error {
			for j := i; j < i+10; j++ {
				if err := c.Create(tx, &person{ID: fmt.Sprintf("id-%04d", j), Name: fmt.Sprint("p", j)}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"intact", "damaged", "torn"} {
		copyDir(t, live, filepath.Join(root, name))
	}
	s.Close()

	intact := open(t, filepath.Join(root, "intact"))
	if n := countPeople(t, intact); n != 500 {
		t.Fatalf("a crashed store's copy holds %d people, want 500", n)
	}
	intact.Close()

	// A write torn by the crash: the last entry is cut. Badger drops it; no refusal.
	wal, end := walWithData(t, filepath.Join(root, "torn"))
	data, _ := os.ReadFile(wal)
	clear(data[end-12 : end])
	os.WriteFile(wal, data, 0o600)
	torn := open(t, filepath.Join(root, "torn"))
	if n := countPeople(t, torn); n != 490 {
		t.Errorf("after a torn last write: %d people, want 490", n)
	}
	torn.Close()

	// A byte flipped in the middle: later writes follow it; refused.
	wal, end = walWithData(t, filepath.Join(root, "damaged"))
	data, _ = os.ReadFile(wal)
	data[end/2] ^= 0x04
	os.WriteFile(wal, data, 0o600)
	s2, err := Open(filepath.Join(root, "damaged"), discard, Options{})
	if err == nil {
		t.Fatalf("a store whose write-ahead log is damaged in the middle opened with %d people", countPeople(t, s2))
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), wal) {
		t.Fatalf("err = %v, want ErrCorrupt naming %s", err, wal)
	}
}
