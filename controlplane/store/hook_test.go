package store

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestOnChange checks that Put, Create and Delete report the id to OnChange in the caller's
// transaction, that a failed Delete reports nothing, and that what the hook defers with
// OnCommit runs once per committed transaction: never for one that fails, and once (not
// once per attempt) for one retried after a conflict.
func TestOnChange(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()
	var mu sync.Mutex
	var seen, committed []string
	c.OnChange = func(tx *Tx, id string) {
		mu.Lock()
		seen = append(seen, id)
		mu.Unlock()
		tx.OnCommit(func() {
			mu.Lock()
			committed = append(committed, id)
			mu.Unlock()
		})
	}
	take := func() (s, c []string) {
		mu.Lock()
		defer mu.Unlock()
		s, c, seen, committed = seen, committed, nil, nil
		return s, c
	}

	if err := s.Update(func(tx *Tx) error {
		if err := c.Create(tx, &person{ID: "1", Name: "ann"}); err != nil {
			return err
		}
		return c.Put(tx, &person{ID: "2", Name: "bob"})
	}); err != nil {
		t.Fatal(err)
	}
	if sn, cm := take(); !slices.Equal(sn, []string{"1", "2"}) || !slices.Equal(cm, []string{"1", "2"}) {
		t.Fatalf("create: seen %v, committed %v", sn, cm)
	}

	// A transaction that fails after its writes commits nothing.
	boom := errors.New("boom")
	if err := s.Update(func(tx *Tx) error {
		if err := c.Put(tx, &person{ID: "3", Name: "cy"}); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed update: %v", err)
	}
	if sn, cm := take(); !slices.Equal(sn, []string{"3"}) || len(cm) != 0 {
		t.Fatalf("failed transaction: seen %v, committed %v", sn, cm)
	}

	// Deleting a missing record reports nothing; deleting one reports its id.
	if err := s.Update(func(tx *Tx) error {
		if err := c.Delete(tx, "3"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete of a missing record: %v", err)
		}
		return c.Delete(tx, "1")
	}); err != nil {
		t.Fatal(err)
	}
	if sn, cm := take(); !slices.Equal(sn, []string{"1"}) || !slices.Equal(cm, []string{"1"}) {
		t.Fatalf("delete: seen %v, committed %v", sn, cm)
	}

	// A transaction that loses a conflict runs again; its effects are those of the attempt
	// that committed.
	attempts := 0
	if err := s.Update(func(tx *Tx) error {
		attempts++
		if _, err := c.Get(tx, "2"); err != nil {
			return err
		}
		if attempts == 1 { // a concurrent transaction changes what this one read
			if err := s.Update(func(tx2 *Tx) error { return c.Put(tx2, &person{ID: "2", Name: "bob2"}) }); err != nil {
				return err
			}
		}
		return c.Put(tx, &person{ID: "2", Name: "bob3"})
	}); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("the conflicting transaction ran %d times, want 2", attempts)
	}
	if sn, cm := take(); !slices.Equal(sn, []string{"2", "2", "2"}) || !slices.Equal(cm, []string{"2", "2"}) {
		t.Fatalf("retried transaction: seen %v, committed %v (want the inner and the last attempt's)", sn, cm)
	}
}
