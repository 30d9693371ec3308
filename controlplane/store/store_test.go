package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

type person struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Emails []string `json:"emails"`
	Team   string   `json:"team"`
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func people() *Collection[person] {
	return NewCollection("people", func(p *person) string { return p.ID },
		Index[person]{Name: "name", Unique: true, Keys: func(p *person) []string { return []string{p.Name} }},
		Index[person]{Name: "email", Unique: true, Keys: func(p *person) []string { return p.Emails }},
		Index[person]{Name: "team", Keys: func(p *person) []string { return []string{p.Team} }},
	)
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, discard, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCollectionIndexes(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Update(func(tx *Tx) error {
		must(c.Create(tx, &person{ID: "1", Name: "ann", Emails: []string{"a@x", "ann@x"}, Team: "red"}))
		must(c.Create(tx, &person{ID: "2", Name: "bob", Team: "red"}))
		return c.Create(tx, &person{ID: "3", Name: "cy", Team: "blue"})
	}))

	// Unique conflicts, on create and on rename, leave nothing behind.
	err := s.Update(func(tx *Tx) error { return c.Create(tx, &person{ID: "4", Name: "ann"}) })
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.Index != "name" || conflict.ExistingID != "1" {
		t.Fatalf("duplicate name: err = %v", err)
	}
	err = s.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "2", Name: "bob", Emails: []string{"ann@x"}}) })
	if !errors.As(err, &conflict) || conflict.Index != "email" || conflict.Value != "ann@x" {
		t.Fatalf("duplicate email: err = %v", err)
	}
	err = s.Update(func(tx *Tx) error { return c.Create(tx, &person{ID: "1", Name: "zed"}) })
	if !errors.As(err, &conflict) || conflict.Index != "id" {
		t.Fatalf("duplicate id: err = %v", err)
	}

	// Rename: the old unique value is free again, the new one points to the record.
	must(s.Update(func(tx *Tx) error {
		return c.Put(tx, &person{ID: "1", Name: "anna", Emails: []string{"ann@x"}, Team: "blue"})
	}))
	must(s.View(func(tx *Tx) error {
		if _, err := c.Lookup(tx, "name", "ann"); !errors.Is(err, ErrNotFound) {
			t.Errorf("old name still indexed: %v", err)
		}
		if _, err := c.Lookup(tx, "email", "a@x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("removed email still indexed: %v", err)
		}
		p, err := c.Lookup(tx, "name", "anna")
		if err != nil || p.ID != "1" {
			t.Errorf("lookup anna = %v, %v", p, err)
		}
		red, _ := c.IDsWith(tx, "team", "red")
		blue, _ := c.IDsWith(tx, "team", "blue")
		if fmt.Sprint(red) != "[2]" || fmt.Sprint(blue) != "[1 3]" {
			t.Errorf("team index: red %v blue %v", red, blue)
		}
		n, _ := c.Count(tx)
		if n != 3 {
			t.Errorf("count = %d", n)
		}
		return nil
	}))

	// Delete frees every index value.
	must(s.Update(func(tx *Tx) error { return c.Delete(tx, "1") }))
	must(s.Update(func(tx *Tx) error {
		return c.Create(tx, &person{ID: "5", Name: "anna", Emails: []string{"ann@x"}})
	}))
	err = s.Update(func(tx *Tx) error { return c.Delete(tx, "1") })
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

// TestIndexValuesArePrefixFree checks that a value that is a prefix of another does not
// match the longer one in a non-unique index.
func TestIndexValuesArePrefixFree(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()
	err := s.Update(func(tx *Tx) error {
		if err := c.Create(tx, &person{ID: "1", Name: "a", Team: "red"}); err != nil {
			return err
		}
		return c.Create(tx, &person{ID: "2", Name: "b", Team: "red\x00x"})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.View(func(tx *Tx) error {
		ids, _ := c.IDsWith(tx, "team", "red")
		if fmt.Sprint(ids) != "[1]" {
			t.Errorf("team red = %v, want [1]", ids)
		}
		return nil
	})
}

func TestFailedTransactionChangesNothing(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()
	committed := false
	err := s.Update(func(tx *Tx) error {
		tx.OnCommit(func() { committed = true })
		if err := c.Create(tx, &person{ID: "1", Name: "ann"}); err != nil {
			return err
		}
		return c.Create(tx, &person{ID: "2", Name: "ann"})
	})
	if err == nil {
		t.Fatal("conflict not reported")
	}
	if committed {
		t.Error("OnCommit ran for a failed transaction")
	}
	s.View(func(tx *Tx) error {
		if ok, _ := c.Has(tx, "1"); ok {
			t.Error("record 1 of the failed transaction is stored")
		}
		return nil
	})
}

func TestPersistsAcrossReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	c := people()
	if err := s.Update(func(tx *Tx) error { return c.Create(tx, &person{ID: "1", Name: "ann"}) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	s.View(func(tx *Tx) error {
		p, err := c.Lookup(tx, "name", "ann")
		if err != nil || p.ID != "1" {
			t.Errorf("after reopen: %v, %v", p, err)
		}
		return nil
	})
}

func TestSchemaVersionChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(txn *badger.Txn) error { return txn.Set(schemaKey, []byte("99")) })
	db.Close()
	_, err = Open(dir, discard, Options{})
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "schema 99") {
		t.Fatalf("err = %v", err)
	}
}

func TestSecondOpenFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	if _, err := Open(dir, discard, Options{}); err == nil {
		t.Fatal("a second open of the same directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentUpdatesRetry increments one counter from many goroutines: conflicting
// transactions are retried, so no increment is lost.
func TestConcurrentUpdatesRetry(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()
	if err := s.Update(func(tx *Tx) error { return c.Create(tx, &person{ID: "n", Name: ""}) }); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				errs <- s.Update(func(tx *Tx) error {
					p, err := c.Get(tx, "n")
					if err != nil {
						return err
					}
					p.Emails = append(p.Emails, fmt.Sprint(len(p.Emails)))
					return c.Put(tx, p)
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if !errors.Is(err, badger.ErrConflict) {
				t.Fatal(err)
			}
		}
	}
	s.View(func(tx *Tx) error {
		p, _ := c.Get(tx, "n")
		if len(p.Emails) != workers*each-failed {
			t.Errorf("%d increments stored, %d succeeded", len(p.Emails), workers*each-failed)
		}
		return nil
	})
}

// TestCloseWaitsForOperations closes the store while a read is under way: Close waits for
// it (the read finishes and sees the record; Badger would panic on an iterator of a closed
// database), and reads, writes and checks that start afterwards fail with ErrClosed.
func TestCloseWaitsForOperations(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	c := people()
	if err := s.Update(func(tx *Tx) error { return c.Create(tx, &person{ID: "1", Name: "ann"}) }); err != nil {
		t.Fatal(err)
	}
	reading, finish := make(chan struct{}), make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		readErr <- s.View(func(tx *Tx) error {
			close(reading)
			<-finish // Close is called meanwhile
			n := 0
			err := c.Each(tx, func(*person) error { n++; return nil })
			if err == nil && n != 1 {
				err = fmt.Errorf("read %d records, want 1", n)
			}
			return err
		})
	}()
	<-reading
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a read was under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := s.View(func(*Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("a read started while closing: %v, want ErrClosed", err)
	}
	close(finish)
	if err := <-readErr; err != nil {
		t.Fatalf("the read under way: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Update(func(tx *Tx) error { return c.Create(tx, &person{ID: "2", Name: "bob"}) }); !errors.Is(err, ErrClosed) {
		t.Errorf("a write after Close: %v, want ErrClosed", err)
	}
	if err := s.Check(); !errors.Is(err, ErrClosed) {
		t.Errorf("Check after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Counts(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counts after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
