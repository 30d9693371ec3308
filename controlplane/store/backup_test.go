package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// dump returns every key of the store with its value.
func dump(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().KeyCopy(nil))] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func backupTo(t *testing.T, s *Store, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Backup(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, filepath.Join(dir, "db"), 3000)
	s := open(t, filepath.Join(dir, "db"))
	defer s.Close()
	// some deletions and updates, so that old versions and tombstones exist
	c := people()
	if err := s.Update(func(tx *Tx) error {
		for i := 0; i < 3000; i += 10 {
			if err := c.Delete(tx, fmt.Sprintf("id-%06d", i)); err != nil {
				return err
			}
		}
		return c.Put(tx, &person{ID: "id-000001", Name: "renamed", Team: "blue"})
	}); err != nil {
		t.Fatal(err)
	}
	want := dump(t, s)
	file := filepath.Join(dir, "backup")
	backupTo(t, s, file)

	restored := filepath.Join(dir, "restored")
	if err := Restore(restored, file, discard); err != nil {
		t.Fatal(err)
	}
	r := open(t, restored)
	defer r.Close()
	got := dump(t, r)
	if len(got) != len(want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %q: restored %q, want %q", k, got[k], v)
		}
	}
	if err := Restore(restored, file, discard); err == nil {
		t.Fatal("a restore into a store that holds data succeeded")
	}
}

func TestAlteredBackupRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, filepath.Join(dir, "db"), 500)
	s := open(t, filepath.Join(dir, "db"))
	file := filepath.Join(dir, "backup")
	backupTo(t, s, file)
	s.Close()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"flipped":   append(append([]byte{}, data[:len(data)/2]...), append([]byte{data[len(data)/2] ^ 1}, data[len(data)/2+1:]...)...),
		"truncated": data[:len(data)-100],
		"empty":     nil,
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "restored-"+name)
		if err := Restore(target, path, discard); !errors.Is(err, ErrBadBackup) {
			t.Errorf("%s backup: err = %v, want ErrBadBackup", name, err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s backup: %s was created", name, target)
		}
	}
}

// A backup taken while transactions commit holds each of them entirely or not at all.
func TestBackupIsConsistentUnderWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "db"))
	defer s.Close()
	c := people()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // every transaction sets the same name on two records
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := s.Update(func(tx *Tx) error {
				if err := c.Put(tx, &person{ID: "a", Name: fmt.Sprint("a", i)}); err != nil {
					return err
				}
				return c.Put(tx, &person{ID: "b", Name: fmt.Sprint("b", i)})
			})
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for n := 0; n < 5; n++ {
		file := filepath.Join(dir, fmt.Sprint("backup", n))
		backupTo(t, s, file)
		restored := filepath.Join(dir, fmt.Sprint("restored", n))
		if err := Restore(restored, file, discard); err != nil {
			t.Fatal(err)
		}
		r := open(t, restored)
		err := r.View(func(tx *Tx) error {
			a, errA := c.Get(tx, "a")
			b, errB := c.Get(tx, "b")
			if errors.Is(errA, ErrNotFound) && errors.Is(errB, ErrNotFound) {
				return nil
			}
			if errA != nil || errB != nil {
				return fmt.Errorf("a: %v, b: %v", errA, errB)
			}
			if a.Name[1:] != b.Name[1:] {
				return fmt.Errorf("the backup holds a as %q and b as %q", a.Name, b.Name)
			}
			return nil
		})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
