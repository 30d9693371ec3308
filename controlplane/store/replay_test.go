package store

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// replayed is what a hook of the other member saw of one record.
type replayed struct {
	id       string
	replayed bool
	exists   bool
	before   string // the name before the write set, "" when there was none
	writeErr error
}

// TestReplayedHooks has a member apply the write sets of another: its hooks run for every
// record written, in the transaction (seeing the new state, and the old one through
// Before) and after the commit, and may not write; the member that made the write set runs
// its own hooks once, as without replication. A hook in the transaction may view the store.
func TestReplayedHooks(t *testing.T) {
	t.Parallel()
	origin, other, rep := twoMembers(t)
	other.SetReplicator(&forwarder{leader: origin, log: rep})

	mine, theirs := people(), people()
	mine.Watch(origin)
	theirs.Watch(other)
	var originSeen []string
	mine.OnChange = func(tx *Tx, id string) {
		if tx.Replayed() {
			t.Errorf("the origin's hook for %s runs as replayed", id)
		}
		tx.OnCommit(func() { originSeen = append(originSeen, id) })
	}

	var mu sync.Mutex
	var seen []replayed
	committed := make(chan string, 10)
	theirs.OnChange = func(tx *Tx, id string) {
		r := replayed{id: id, replayed: tx.Replayed()}
		r.exists, _ = theirs.Has(tx, id)
		if p, err := theirs.Before(tx, id); err == nil {
			r.before = p.Name
		} else if !errors.Is(err, ErrNotFound) {
			t.Errorf("before of %s: %v", id, err)
		}
		r.writeErr = theirs.Put(tx, &person{ID: id + "-copy", Name: id + "-copy"})
		// Viewing the store from the transaction's hook does not wait for the write set.
		if err := other.View(func(*Tx) error { return nil }); err != nil {
			t.Errorf("view from a replayed hook: %v", err)
		}
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		tx.OnCommit(func() {
			committed <- id
		})
	}

	if err := origin.Update(func(tx *Tx) error {
		if err := mine.Create(tx, &person{ID: "1", Name: "ann"}); err != nil {
			return err
		}
		return mine.Create(tx, &person{ID: "2", Name: "bob"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := origin.Update(func(tx *Tx) error { return mine.Delete(tx, "2") }); err != nil {
		t.Fatal(err)
	}
	var after []string
	for len(after) < 3 {
		select {
		case id := <-committed:
			after = append(after, id)
		case <-time.After(30 * time.Second):
			t.Fatalf("the replayed hooks ran after the commit for %v only", after)
		}
	}
	if !slices.Equal(after, []string{"1", "2", "2"}) {
		t.Fatalf("after-commit hooks ran for %v, want [1 2 2] in the log's order", after)
	}
	if !slices.Equal(originSeen, []string{"1", "2", "2"}) {
		t.Fatalf("the origin's own hooks ran for %v, want [1 2 2]", originSeen)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []replayed{{id: "1", replayed: true, exists: true}, {id: "2", replayed: true, exists: true}, {id: "2", replayed: true, before: "bob"}}
	if len(seen) != len(want) {
		t.Fatalf("the other member's hooks saw %+v", seen)
	}
	for i, r := range seen {
		if !errors.Is(r.writeErr, errReplayedWrite) {
			t.Fatalf("a replayed hook's write: %v, want it refused", r.writeErr)
		}
		r.writeErr = nil
		if r != want[i] {
			t.Fatalf("hook %d saw %+v, want %+v", i, r, want[i])
		}
	}
	if a, b := withoutSchema(dump(t, origin)), withoutSchema(dump(t, other)); !maps.Equal(a, b) {
		t.Fatalf("members differ:\n%v\n%v", a, b)
	}
}

// TestReplayedHookUpdates has the hooks of replayed write sets update the store they run
// on: on a follower (whose Update goes through the leader) and on the leader (which
// replays its followers' write sets while it appends them). The hooks run after the
// write set's commit, on their own goroutine, so none of these waits for itself.
func TestReplayedHookUpdates(t *testing.T) {
	t.Parallel()
	leader, follower, rep := twoMembers(t)
	follower.SetReplicator(&forwarder{leader: leader, log: rep})

	type counter struct {
		ID string `json:"id"`
		N  int    `json:"n"`
	}
	counters := NewCollection("counters", func(c *counter) string { return c.ID })
	increment := func(s *Store, name string) error {
		return s.Update(func(tx *Tx) error {
			n := 0
			if c, err := counters.Get(tx, name); err == nil {
				n = c.N
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
			return counters.Put(tx, &counter{ID: name, N: n + 1})
		})
	}
	done := make(chan error, 10)
	names := map[*Store]string{leader: "seen-by-leader", follower: "seen-by-follower"}
	// Each member counts, through its own Update, the people the other member wrote.
	for _, s := range []*Store{leader, follower} {
		c := people()
		c.Watch(s)
		c.OnChange = func(tx *Tx, id string) {
			if !tx.Replayed() {
				return
			}
			if err := s.View(func(*Tx) error { return nil }); err != nil {
				t.Errorf("view from a replayed hook: %v", err)
			}
			tx.OnCommit(func() { done <- increment(s, names[s]) })
		}
	}

	c := people()
	writes := make(chan error, 2)
	go func() {
		writes <- leader.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "1", Name: "ann"}) })
		writes <- follower.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "2", Name: "bob"}) })
	}()
	for range 4 { // two writes, two hooks' updates
		select {
		case err := <-writes:
			if err != nil {
				t.Fatal(err)
			}
		case err := <-done:
			if err != nil {
				t.Fatalf("update from a replayed hook: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a write or a replayed hook's update is stuck")
		}
	}
	for _, s := range []*Store{leader, follower} {
		for _, name := range names {
			var got *counter
			if err := s.View(func(tx *Tx) (err error) { got, err = counters.Get(tx, name); return err }); err != nil || got.N != 1 {
				t.Fatalf("counter %s: %+v (%v), want 1", name, got, err)
			}
		}
	}
}

// lossyReplicator applies every write set to its store, then reports an error: the reply
// of a log that committed the write was lost.
type lossyReplicator struct {
	st    *Store
	index uint64
}

func (r *lossyReplicator) Replicate(ws *WriteSet) error {
	r.index++
	if err := r.st.ApplyWrites(ws, r.index); err != nil {
		return err
	}
	return errors.New("the reply was lost")
}

// TestOwnWriteSetReplyLost: a write set of this store's Update applied while the replicator
// reports an error did happen: the Update succeeds and runs its own hooks, once, and the
// store does not replay it.
func TestOwnWriteSetReplyLost(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	s.SetReplicator(&lossyReplicator{st: s})
	c := people()
	c.Watch(s)
	var hooks []bool
	c.OnChange = func(tx *Tx, id string) {
		replayedTx := tx.Replayed()
		tx.OnCommit(func() { hooks = append(hooks, replayedTx) })
	}
	if err := s.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "1", Name: "ann"}) }); err != nil {
		t.Fatalf("an applied write whose reply was lost: %v", err)
	}
	if !slices.Equal(hooks, []bool{false}) {
		t.Fatalf("hooks ran %v, want once, not replayed", hooks)
	}
	if _, err := c.Before(&Tx{}, "1"); err == nil {
		t.Fatal("Before read a transaction that is not replayed")
	}
}

// TestWaitReplayed: WaitReplayed returns once the hooks of the write sets applied before it
// was called have run, and not before.
func TestWaitReplayed(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	s.WaitReplayed() // nothing applied: returns at once
	c := people()
	c.Watch(s)
	release := make(chan struct{})
	var ran []string
	c.OnChange = func(tx *Tx, id string) {
		tx.OnCommit(func() {
			if id == "1" {
				<-release
			}
			ran = append(ran, id)
		})
	}
	for i, id := range []string{"1", "2"} {
		ws := &WriteSet{Base: uint64(i), Writes: []Write{{Key: c.recordKey(id), Value: []byte(`{"id":"` + id + `"}`)}}}
		if err := s.ApplyWrites(ws, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan []string)
	go func() {
		s.WaitReplayed()
		waited <- slices.Clone(ran)
	}()
	select {
	case got := <-waited:
		t.Fatalf("WaitReplayed returned while a hook was held, having run %v", got)
	default:
	}
	close(release)
	if got := <-waited; !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("WaitReplayed returned after the hooks of %v, want [1 2]", got)
	}
}

// racingReplicator has the store apply each write set on another goroutine and reports an
// error (a wait that timed out) after yielding a varying number of times, so that the
// error reaches the Update before, while and after the write set is applied.
type racingReplicator struct {
	st    *Store
	index atomic.Uint64
	spins int
	wg    sync.WaitGroup
}

func (r *racingReplicator) Replicate(ws *WriteSet) error {
	idx := r.index.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.st.ApplyWrites(ws, idx); err != nil {
			panic(err)
		}
	}()
	for range r.spins {
		runtime.Gosched()
	}
	return errors.New("timed out waiting for this member to apply")
}

// TestOwnWriteSetAppliedAsWaiterGivesUp: whenever the Update of a write set gives up
// waiting, the write set's hooks run once, never replayed: when the write set was applied
// before the Update returns it succeeds and runs them, otherwise they run on the hook
// queue once it is applied.
func TestOwnWriteSetAppliedAsWaiterGivesUp(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()
	c.Watch(s)
	var own, replayedRuns atomic.Int64
	c.OnChange = func(tx *Tx, _ string) {
		if tx.Replayed() {
			tx.OnCommit(func() { replayedRuns.Add(1) })
		} else {
			tx.OnCommit(func() { own.Add(1) })
		}
	}
	rep := &racingReplicator{st: s}
	s.SetReplicator(rep)
	succeeded, failed := 0, 0
	for i := range 300 {
		rep.spins = i % 40
		ownBefore, replayedBefore := own.Load(), replayedRuns.Load()
		id := fmt.Sprint(i)
		err := s.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: id, Name: "n" + id}) })
		rep.wg.Wait()
		s.WaitReplayed()
		var has bool
		if err := s.View(func(tx *Tx) error { var err error; has, err = c.Has(tx, id); return err }); err != nil {
			t.Fatal(err)
		}
		if !has {
			t.Fatalf("write %d was not applied", i)
		}
		ownRan, replayedRan := own.Load()-ownBefore, replayedRuns.Load()-replayedBefore
		if err == nil {
			succeeded++
		} else {
			failed++
		}
		if ownRan != 1 || replayedRan != 0 {
			t.Fatalf("write %d (Update: %v): its own hooks ran %d times, the replayed ones %d", i, err, ownRan, replayedRan)
		}
	}
	t.Logf("%d Updates succeeded, %d gave up before their write set was applied", succeeded, failed)
}

// heldReplicator keeps each write set without applying it and reports an error, as a wait
// for the log that timed out while the entry was still on its way.
type heldReplicator struct{ held []*WriteSet }

func (r *heldReplicator) Replicate(ws *WriteSet) error {
	r.held = append(r.held, ws)
	return errors.New("timed out waiting for this member to apply")
}

// TestAbandonedUpdateRunsAfterCommit: the after-commit functions of an Update that gave up
// waiting run (on the hook queue, once) when its write set is applied later, including
// those that only the member that made a change runs (the writes that follow a change); a
// write set refused as stale runs none, and the Update runs again.
func TestAbandonedUpdateRunsAfterCommit(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir())
	defer s.Close()
	c := people()
	c.Watch(s)
	var mu sync.Mutex
	var ran []string
	note := func(what string) func() {
		return func() { mu.Lock(); ran = append(ran, what); mu.Unlock() }
	}
	c.OnChange = func(tx *Tx, id string) {
		if tx.Replayed() {
			tx.OnCommit(note("replayed " + id))
		} else {
			tx.OnCommit(note("hook " + id))
		}
	}
	rep := &heldReplicator{}
	s.SetReplicator(rep)
	err := s.Update(func(tx *Tx) error {
		tx.OnCommit(note("follow-up 1"))
		return c.Put(tx, &person{ID: "1", Name: "ann"})
	})
	if err == nil || len(rep.held) != 1 {
		t.Fatalf("Update: %v with %d write sets held, want an error and 1", err, len(rep.held))
	}
	if err := s.ApplyWrites(rep.held[0], 1); err != nil {
		t.Fatal(err)
	}
	s.WaitReplayed()
	mu.Lock()
	got := slices.Clone(ran)
	mu.Unlock()
	if want := []string{"follow-up 1", "hook 1"}; !slices.Equal(got, want) {
		t.Fatalf("after the write set of an Update that gave up was applied, ran %q, want %q", got, want)
	}
	// Applied again (a log replayed), it runs nothing more.
	if err := s.ApplyWrites(rep.held[0], 1); err != nil {
		t.Fatal(err)
	}
	s.WaitReplayed()

	// A write set refused as stale: the Update runs again, the refused one never runs its
	// functions, not even if it reaches the store again.
	stale := &staleOnce{st: s}
	s.SetReplicator(stale)
	if err := s.Update(func(tx *Tx) error {
		tx.OnCommit(note("follow-up 2"))
		return c.Put(tx, &person{ID: "2", Name: "bob"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyWrites(stale.refused, 3); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("the refused write set applied again: %v", err)
	}
	s.WaitReplayed()
	mu.Lock()
	got = slices.Clone(ran)
	mu.Unlock()
	if want := []string{"follow-up 1", "hook 1", "follow-up 2", "hook 2"}; !slices.Equal(got, want) {
		t.Fatalf("ran %q, want %q", got, want)
	}
}

// staleOnce refuses the first write set as stale, then applies each at the next index.
type staleOnce struct {
	st      *Store
	refused *WriteSet
	index   uint64
}

func (r *staleOnce) Replicate(ws *WriteSet) error {
	if r.refused == nil {
		r.refused = ws
		return ErrStaleWrite
	}
	r.index++
	return r.st.ApplyWrites(ws, 1+r.index)
}
