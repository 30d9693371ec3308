package store

import (
	"maps"
	"testing"
)

// Counts counts records per collection and nothing else (index entries, the schema key);
// Check reads the store while it is open and fails once it is closed.
func TestCountsAndCheck(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	folk := people()
	pets := NewCollection("pets", func(p *person) string { return p.ID })
	if err := s.Update(func(tx *Tx) error {
		for _, p := range []*person{{ID: "1", Name: "ann", Emails: []string{"a@x"}, Team: "red"}, {ID: "2", Name: "bob", Team: "red"}} {
			if err := folk.Create(tx, p); err != nil {
				return err
			}
		}
		return pets.Create(tx, &person{ID: "rex"})
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"people": 2, "pets": 1}; !maps.Equal(got, want) {
		t.Errorf("Counts() = %v, want %v", got, want)
	}
	if lsm, vlog := s.Sizes(); lsm < 0 || vlog < 0 {
		t.Errorf("Sizes() = %d, %d; want sizes of files", lsm, vlog)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check on an open store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil {
		t.Error("Check on a closed store succeeded")
	}
}
