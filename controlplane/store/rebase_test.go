package store

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// forwarder is a follower's replicator: it hands the follower's write sets to the leader's
// store, which appends them to the log. arrive, when set, is called first.
type forwarder struct {
	leader *Store
	log    Replicator
	arrive func()
}

func (f *forwarder) Replicate(ws *WriteSet) error {
	if f.arrive != nil {
		f.arrive()
	}
	return f.leader.ReplicateForwarded(f.log, ws)
}

// cluster3 is a leader and two followers sharing one log.
func cluster3(t *testing.T) (leader *Store, followers [2]*Store, log *logReplicator) {
	t.Helper()
	leader = open(t, t.TempDir())
	followers = [2]*Store{open(t, t.TempDir()), open(t, t.TempDir())}
	t.Cleanup(func() {
		for _, s := range []*Store{leader, followers[0], followers[1]} {
			s.Close()
		}
	})
	log = &logReplicator{members: []*Store{leader, followers[0], followers[1]}}
	leader.SetReplicator(log)
	return leader, followers, log
}

// TestDisjointStaleWritesRebase has two followers compute writes to different records on the
// same state, both before either reaches the leader: the second is rebased, not refused, so
// each Update runs once.
func TestDisjointStaleWritesRebase(t *testing.T) {
	t.Parallel()
	leader, followers, log := cluster3(t)
	c := people()
	var arrived sync.WaitGroup
	arrived.Add(2)
	for _, f := range followers {
		var once sync.Once
		f.SetReplicator(&forwarder{leader: leader, log: log, arrive: func() {
			once.Do(func() { arrived.Done(); arrived.Wait() }) // both computed on index 0
		}})
	}
	var runs [2]atomic.Int32
	var wg sync.WaitGroup
	for i, f := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := string(rune('1' + i))
			if err := f.Update(func(tx *Tx) error {
				runs[i].Add(1)
				if _, err := c.Count(tx); err != nil { // reads every record: yet no record is written twice
					return err
				}
				return c.Create(tx, &person{ID: "p" + id, Name: "n" + id, Team: "t" + id})
			}); err != nil {
				t.Errorf("follower %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Counting reads the prefix of people: the second write set read it before the first
	// wrote under it, so it is refused once and runs again; the rest rebases.
	if total := runs[0].Load() + runs[1].Load(); total != 3 {
		t.Fatalf("the updates ran %d times in all, want 3 (one refused for its count)", total)
	}

	// Without the count, writes to different records both go through on a stale base.
	arrived.Add(2)
	for _, f := range followers {
		var once sync.Once
		f.SetReplicator(&forwarder{leader: leader, log: log, arrive: func() {
			once.Do(func() { arrived.Done(); arrived.Wait() })
		}})
	}
	for i, f := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := string(rune('3' + i))
			if err := f.Update(func(tx *Tx) error {
				runs[i].Add(1)
				if _, err := c.Get(tx, "p1"); err != nil {
					return err
				}
				return c.Create(tx, &person{ID: "p" + id, Name: "n" + id, Team: "red"})
			}); err != nil {
				t.Errorf("follower %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if total := runs[0].Load() + runs[1].Load(); total != 5 {
		t.Fatalf("the updates ran %d times in all, want 5: a disjoint write was refused", total)
	}
	for _, s := range []*Store{leader, followers[0], followers[1]} {
		var ids []string
		if err := s.View(func(tx *Tx) (err error) { ids, err = c.IDsWith(tx, "team", "red"); return err }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, []string{"p3", "p4"}) {
			t.Fatalf("red team %v, want [p3 p4]", ids)
		}
		if idx, _, err := s.AppliedIndex(); err != nil || idx != 4 {
			t.Fatalf("applied index %d (%v), want 4", idx, err)
		}
	}
}

// capture computes f's write set on s's current state.
func captured(t *testing.T, s *Store, f func(tx *Tx) error) *WriteSet {
	t.Helper()
	_, ws, err := s.capture(f)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func TestForwardedWriteConflicts(t *testing.T) {
	t.Parallel()
	leader, followers, log := cluster3(t)
	f := followers[0]
	c := people()
	put := func(p *person) {
		t.Helper()
		if err := leader.Update(func(tx *Tx) error { return c.Put(tx, p) }); err != nil {
			t.Fatal(err)
		}
	}
	put(&person{ID: "1", Name: "ann", Team: "red"})
	put(&person{ID: "2", Name: "bob", Team: "blue"})

	// Read record 1, write record 3; record 1 changes meanwhile: refused.
	readsOne := captured(t, f, func(tx *Tx) error {
		if _, err := c.Get(tx, "1"); err != nil {
			return err
		}
		return c.Put(tx, &person{ID: "3", Name: "cy"})
	})
	// Read the red team (an index prefix), write elsewhere.
	readsRed := captured(t, f, func(tx *Tx) error {
		if _, err := c.IDsWith(tx, "team", "red"); err != nil {
			return err
		}
		return c.Put(tx, &person{ID: "4", Name: "dee"})
	})
	// Iterate every person.
	readsAll := captured(t, f, func(tx *Tx) error {
		return c.Each(tx, func(p *person) error { return c.Put(tx, &person{ID: p.ID + "x", Name: p.Name + "x"}) })
	})
	if !slices.ContainsFunc(readsAll.Reads, func(r Read) bool { return r.Prefix && string(r.Key) == "r/people/" }) {
		t.Fatalf("the iteration's reads %+v lack the prefix r/people/", readsAll.Reads)
	}
	for _, r := range readsAll.Reads {
		if !r.Prefix && string(r.Key[:min(len(r.Key), 9)]) == "r/people/" {
			t.Fatalf("read %q is kept beside the prefix that covers it", r.Key)
		}
	}

	put(&person{ID: "5", Name: "eve", Team: "blue"}) // a blue person: no read above sees it but readsAll's
	if err := leader.ReplicateForwarded(log, readsRed); err != nil {
		t.Fatalf("a write that read the red team after a blue person joined: %v", err)
	}
	if err := leader.ReplicateForwarded(log, readsAll); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("an iteration of people after a person was added: %v, want ErrStaleWrite", err)
	}
	put(&person{ID: "1", Name: "ann", Team: "green"})
	if err := leader.ReplicateForwarded(log, readsOne); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("a write that read a record changed since: %v, want ErrStaleWrite", err)
	}

	// Writing the same key as a later write set is a conflict too, reads or not.
	blind := &WriteSet{Base: readsOne.Base, Writes: []Write{{Key: c.recordKey("5"), Value: []byte(`{"id":"5"}`)}}}
	if err := leader.ReplicateForwarded(log, blind); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("a write of a key written since: %v, want ErrStaleWrite", err)
	}
	applied, _, _ := leader.AppliedIndex()
	ahead := &WriteSet{Base: applied + 1, Writes: []Write{{Key: c.recordKey("k"), Value: []byte(`{"id":"k"}`)}}}
	if err := leader.ReplicateForwarded(log, ahead); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("a base beyond the applied index: %v, want ErrStaleWrite", err)
	}

	// Past the window, nothing is rebased.
	leader.win.mu.Lock()
	leader.win.maxSets = 1
	leader.win.mu.Unlock()
	old := captured(t, f, func(tx *Tx) error { return c.Put(tx, &person{ID: "6", Name: "fay"}) })
	put(&person{ID: "7", Name: "gus"})
	put(&person{ID: "8", Name: "hal"})
	if err := leader.ReplicateForwarded(log, old); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("a write set older than the window: %v, want ErrStaleWrite", err)
	}
	recent := captured(t, f, func(tx *Tx) error { return c.Put(tx, &person{ID: "6", Name: "fay"}) })
	put(&person{ID: "9", Name: "ida"})
	if err := leader.ReplicateForwarded(log, recent); err != nil {
		t.Fatalf("a write set one behind, within the window: %v", err)
	}
	for _, s := range []*Store{leader, f} {
		var ok4, ok6, ok3 bool
		if err := s.View(func(tx *Tx) error {
			ok4, _ = c.Has(tx, "4")
			ok6, _ = c.Has(tx, "6")
			ok3, _ = c.Has(tx, "3")
			return nil
		}); err != nil || !ok4 || !ok6 || ok3 {
			t.Fatalf("records 4 %v, 6 %v, 3 %v (%v); want 4 and 6 only", ok4, ok6, ok3, err)
		}
	}
}

// TestOwnUpdateRebases has another member's write set, to another record, applied while
// this member's Update computes its own: the Update's write set is rebased, not run again.
func TestOwnUpdateRebases(t *testing.T) {
	t.Parallel()
	origin, other, rep := twoMembers(t)
	c := people()
	runs := 0
	if err := origin.Update(func(tx *Tx) error {
		runs++
		if runs == 1 { // the log delivers another member's write meanwhile
			ws := &WriteSet{Base: 0, Writes: []Write{{Key: c.recordKey("9"), Value: []byte(`{"id":"9","name":"zed"}`)}}}
			rep.mu.Lock()
			rep.index++
			for _, s := range rep.members {
				if err := s.ApplyWrites(ws, rep.index); err != nil {
					t.Error(err)
				}
			}
			rep.mu.Unlock()
		}
		if _, err := c.Get(tx, "1"); !errors.Is(err, ErrNotFound) {
			return err
		}
		return c.Put(tx, &person{ID: "1", Name: "ann"})
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Fatalf("the update ran %d times, want once", runs)
	}
	for _, s := range []*Store{origin, other} {
		var n int
		if err := s.View(func(tx *Tx) (err error) { n, err = c.Count(tx); return err }); err != nil || n != 2 {
			t.Fatalf("%d people (%v), want 2", n, err)
		}
	}
}

// TestBadWriteSetsRefused: a write set that writes a key outside the collections' keyspaces
// (a meta key of the store's, another prefix, a keyspace without a collection) is refused
// with ErrBadWriteSet, by ApplyWrites on every member alike and changing nothing, and by
// the leader before it reaches the log; the store then applies the next write set as usual.
func TestBadWriteSetsRefused(t *testing.T) {
	t.Parallel()
	leader, followers, log := cluster3(t)
	c := people()
	if err := leader.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "1", Name: "ann"}) }); err != nil {
		t.Fatal(err)
	}
	members := []*Store{leader, followers[0], followers[1]}
	before := make([]map[string]string, len(members))
	for i, s := range members {
		before[i] = dump(t, s)
	}
	good := Write{Key: c.recordKey("2"), Value: []byte(`{"id":"2","name":"bob"}`)}
	for _, key := range []string{"meta/restoring", "meta/applied-index", "meta/schema-version", "x/people/1",
		"r/", "r/people", "u//name/1", "m/", "", "meta/r/people/1"} {
		ws := &WriteSet{Base: 1, Writes: []Write{good, {Key: []byte(key), Value: []byte("8bytes..")}}}
		for i, s := range members {
			if err := s.ApplyWrites(ws, 2); !errors.Is(err, ErrBadWriteSet) {
				t.Fatalf("member %d applied a write of %q: %v, want ErrBadWriteSet", i, key, err)
			}
			if got := dump(t, s); !maps.Equal(got, before[i]) {
				t.Fatalf("member %d changed applying a refused write of %q", i, key)
			}
		}
		calls := log.calls
		if err := leader.ReplicateForwarded(log, ws); !errors.Is(err, ErrBadWriteSet) || log.calls != calls {
			t.Fatalf("forwarded write of %q: %v with %d log entries, want ErrBadWriteSet and none", key, err, log.calls-calls)
		}
	}
	// The next entry applies on every member: nothing was left behind (no restoring marker).
	for i, s := range members {
		if err := s.ApplyWrites(&WriteSet{Base: 1, Writes: []Write{good}}, 2); err != nil {
			t.Fatalf("member %d, the write set after the refused ones: %v", i, err)
		}
	}
}

// TestRebaseWorkBounded: a write set so far behind that more than maxRebaseKeys keys were
// written since its Base is refused as stale rather than checked against all of them; one
// within the bound is rebased. A read prefix under another read prefix is found too.
func TestRebaseWorkBounded(t *testing.T) {
	t.Parallel()
	leader, followers, log := cluster3(t)
	c := people()
	put := func(id string) {
		t.Helper()
		if err := leader.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: id, Name: "n" + id, Team: "t" + id}) }); err != nil {
			t.Fatal(err)
		}
	}
	put("0")
	old := func(id string) *WriteSet {
		return captured(t, followers[0], func(tx *Tx) error { return c.Put(tx, &person{ID: id, Name: "n" + id}) })
	}
	behind3, behind2 := old("a"), old("b")
	for i := 1; i <= 3; i++ {
		put(fmt.Sprint(i)) // 3 keys each: the record and its two index entries
	}
	leader.win.mu.Lock()
	leader.win.maxRebaseKeys = 8
	leader.win.mu.Unlock()
	if err := leader.ReplicateForwarded(log, behind3); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("a write set 9 keys behind, with a bound of 8: %v, want ErrStaleWrite", err)
	}
	leader.win.mu.Lock()
	leader.win.maxRebaseKeys = 9
	leader.win.mu.Unlock()
	if err := leader.ReplicateForwarded(log, behind2); err != nil {
		t.Fatalf("a write set 9 keys behind, with a bound of 9: %v", err)
	}

	// Prefixes nested in each other and around the key written since, in any order.
	applied, _, _ := leader.AppliedIndex()
	put("5")
	for i, reads := range [][]Read{
		{{Key: []byte("r/people/5"), Prefix: true}, {Key: []byte("r/"), Prefix: true}},
		{{Key: []byte("r/zz"), Prefix: true}, {Key: []byte("r/people/"), Prefix: true}, {Key: []byte("r/people/4"), Prefix: true}},
		{{Key: []byte("r/a"), Prefix: true}, {Key: []byte("r/people/"), Prefix: true}, {Key: []byte("r/people/5"), Prefix: true}},
	} {
		ws := &WriteSet{Base: applied, Reads: reads, Writes: []Write{{Key: c.recordKey("c"), Value: []byte(`{"id":"c"}`)}}}
		if err := leader.ReplicateForwarded(log, ws); !errors.Is(err, ErrStaleWrite) {
			t.Fatalf("reads %d after r/people/5 was written: %v, want ErrStaleWrite", i, err)
		}
	}
	ws := &WriteSet{Base: applied, Reads: []Read{{Key: []byte("r/people/4"), Prefix: true}, {Key: []byte("r/people/6"), Prefix: true}},
		Writes: []Write{{Key: c.recordKey("c"), Value: []byte(`{"id":"c"}`)}}}
	if err := leader.ReplicateForwarded(log, ws); err != nil {
		t.Fatalf("reads beside r/people/5: %v", err)
	}
}

// TestCompactReads drops the reads under another read's prefix, keeping the order of the
// others.
func TestCompactReads(t *testing.T) {
	t.Parallel()
	k := func(s string) Read { return Read{Key: []byte(s)} }
	p := func(s string) Read { return Read{Key: []byte(s), Prefix: true} }
	for _, tc := range []struct {
		name     string
		in, want []Read
	}{
		{"keys only", []Read{k("r/a/1"), k("r/b/2")}, []Read{k("r/a/1"), k("r/b/2")}},
		{"key under a prefix", []Read{k("r/a/1"), p("r/a/"), k("r/b/2")}, []Read{p("r/a/"), k("r/b/2")}},
		{"prefix under a prefix", []Read{p("m/a/x/"), k("r/a"), p("m/a/")}, []Read{k("r/a"), p("m/a/")}},
		{"nested three deep", []Read{p("u/a/n/v"), p("u/a/n/"), p("u/a/"), k("u/a/n/v1"), k("u/b/1")}, []Read{p("u/a/"), k("u/b/1")}},
		{"disjoint prefixes", []Read{p("r/b/"), k("r/ab"), p("r/a/"), k("r/b")}, []Read{p("r/b/"), k("r/ab"), p("r/a/"), k("r/b")}},
	} {
		got := compactReads(slices.Clone(tc.in))
		if !slices.EqualFunc(got, tc.want, func(a, b Read) bool { return bytes.Equal(a.Key, b.Key) && a.Prefix == b.Prefix }) {
			t.Errorf("%s: compactReads = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSplitKey takes apart the keys a Collection writes and refuses any other.
func TestSplitKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key, collection, rest string
		ok                    bool
	}{
		{"r/people/1", "people", "1", true},
		{"u/people/name/ann", "people", "name/ann", true},
		{"m/people/team/red/1", "people", "team/red/1", true},
		{"r/people/", "people", "", true},
		{"r//1", "", "", false},
		{"r/people", "", "", false},
		{"meta/schema-version", "", "", false},
		{"x/people/1", "", "", false},
	} {
		c, rest, ok := splitKey([]byte(tc.key))
		if ok != tc.ok || ok && (string(c) != tc.collection || string(rest) != tc.rest) {
			t.Errorf("splitKey(%q) = %q, %q, %v; want %q, %q, %v", tc.key, c, rest, ok, tc.collection, tc.rest, tc.ok)
		}
		if validKey([]byte(tc.key)) != tc.ok {
			t.Errorf("validKey(%q) = %v, want %v", tc.key, !tc.ok, tc.ok)
		}
	}
}
