package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// logReplicator is a replicated log in one process: every write set gets the next index,
// goes through its encoding and is applied to every member, the origin last. before, when
// set, runs ahead of each replication (another member's write arriving first).
type logReplicator struct {
	mu      sync.Mutex
	index   uint64
	members []*Store
	calls   int
	before  func()
}

func (r *logReplicator) Replicate(ws *WriteSet) error {
	if r.before != nil {
		r.before()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.index++
	b, err := ws.MarshalBinary()
	if err != nil {
		return err
	}
	var got WriteSet
	if err := got.UnmarshalBinary(b); err != nil {
		return err
	}
	var originErr error
	for i := len(r.members) - 1; i >= 0; i-- {
		err := r.members[i].ApplyWrites(&got, r.index)
		if i == 0 {
			originErr = err
		}
	}
	return originErr
}

// twoMembers opens two stores, origin and other, replicated through one logReplicator that
// origin's Updates go through; both are closed when the test ends.
func twoMembers(t *testing.T) (origin, other *Store, rep *logReplicator) {
	t.Helper()
	origin, other = open(t, t.TempDir()), open(t, t.TempDir())
	t.Cleanup(func() {
		other.Close()
		origin.Close()
	})
	rep = &logReplicator{members: []*Store{origin, other}}
	origin.SetReplicator(rep)
	return origin, other, rep
}

// withoutSchema drops the keys a member writes for itself (the schema version at open).
func withoutSchema(m map[string]string) map[string]string {
	delete(m, string(schemaKey))
	return m
}

func TestReplicatedUpdate(t *testing.T) {
	t.Parallel()
	origin, other, rep := twoMembers(t)
	c := people()
	var committed []string
	c.OnChange = func(tx *Tx, id string) { tx.OnCommit(func() { committed = append(committed, id) }) }

	if err := origin.Update(func(tx *Tx) error {
		if err := c.Create(tx, &person{ID: "1", Name: "ann", Emails: []string{"a@x"}, Team: "red"}); err != nil {
			return err
		}
		return c.Create(tx, &person{ID: "2", Name: "bob", Team: "red"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := origin.Update(func(tx *Tx) error { return c.Delete(tx, "2") }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(committed, []string{"1", "2", "2"}) {
		t.Fatalf("the origin's hooks ran for %v, want [1 2 2]", committed)
	}
	a, b := withoutSchema(dump(t, origin)), withoutSchema(dump(t, other))
	if !maps.Equal(a, b) {
		t.Fatalf("members differ:\n%v\n%v", a, b)
	}
	if err := other.View(func(tx *Tx) error {
		p, err := c.Lookup(tx, "email", "a@x")
		if err != nil || p.Name != "ann" {
			t.Errorf("the other member's lookup: %v, %v", p, err)
		}
		ids, err := c.IDsWith(tx, "team", "red")
		if err != nil || !slices.Equal(ids, []string{"1"}) {
			t.Errorf("the other member's team index: %v, %v", ids, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{origin, other} {
		if idx, restoring, err := s.AppliedIndex(); err != nil || restoring || idx != 2 {
			t.Fatalf("applied index %d (restoring %v, %v), want 2", idx, restoring, err)
		}
	}

	// A failing function and one that writes nothing replicate nothing.
	boom := errors.New("boom")
	if err := origin.Update(func(tx *Tx) error {
		if err := c.Put(tx, &person{ID: "3", Name: "cy"}); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed update: %v", err)
	}
	ran := false
	if err := origin.Update(func(tx *Tx) error { tx.OnCommit(func() { ran = true }); return nil }); err != nil || !ran {
		t.Fatalf("empty update: %v, hook ran %v", err, ran)
	}
	if rep.calls != 2 {
		t.Fatalf("%d replications, want 2", rep.calls)
	}

	// A write set applied already (a replayed log) changes nothing.
	if err := other.ApplyWrites(&WriteSet{Base: 0, Writes: []Write{{Key: []byte("r/people/9"), Value: []byte(`{}`)}}}, 1); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(a, withoutSchema(dump(t, other))) {
		t.Fatal("a replayed write set changed the store")
	}
}

// TestStaleWriteSetRunsAgain has another member's write set reach the log between the
// origin's reading and its write set: the origin's is refused everywhere and its Update
// runs again on the new state, so neither increment is lost.
func TestStaleWriteSetRunsAgain(t *testing.T) {
	t.Parallel()
	origin, other, rep := twoMembers(t)
	type counter struct {
		ID string `json:"id"`
		N  int    `json:"n"`
	}
	c := NewCollection("counters", func(c *counter) string { return c.ID })
	once := sync.Once{}
	rep.before = func() {
		once.Do(func() { // the other member's increment, computed on the same state
			b, _ := json.Marshal(counter{ID: "x", N: 1})
			rep.mu.Lock()
			rep.index++
			for _, s := range rep.members {
				if err := s.ApplyWrites(&WriteSet{Base: 0, Writes: []Write{{Key: c.recordKey("x"), Value: b}}}, rep.index); err != nil {
					t.Error(err)
				}
			}
			rep.mu.Unlock()
		})
	}
	runs := 0
	if err := origin.Update(func(tx *Tx) error {
		runs++
		n := 0
		if cur, err := c.Get(tx, "x"); err == nil {
			n = cur.N
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		return c.Put(tx, &counter{ID: "x", N: n + 1})
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("the update ran %d times, want 2", runs)
	}
	for _, s := range []*Store{origin, other} {
		var got *counter
		if err := s.View(func(tx *Tx) (err error) { got, err = c.Get(tx, "x"); return err }); err != nil || got.N != 2 {
			t.Fatalf("counter %v (%v), want 2", got, err)
		}
	}
	err := other.ApplyWrites(&WriteSet{Base: 1, Writes: []Write{{Key: []byte("k"), Value: nil}}}, 9)
	if !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("a write set on an old state: %v, want ErrStaleWrite", err)
	}
}

func TestReplaceFromBackup(t *testing.T) {
	t.Parallel()
	src, dst := open(t, t.TempDir()), open(t, t.TempDir())
	defer src.Close()
	defer dst.Close()
	c := people()
	rep := &logReplicator{members: []*Store{src}}
	src.SetReplicator(rep)
	for _, p := range []*person{{ID: "1", Name: "ann", Team: "red"}, {ID: "2", Name: "bob", Team: "blue"}} {
		if err := src.Update(func(tx *Tx) error { return c.Put(tx, p) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "7", Name: "old", Team: "red"}) }); err != nil {
		t.Fatal(err)
	}
	// The watchers are told, after the replacement, and may read the new content.
	var mu sync.Mutex
	var told [][]string
	dst.OnReplaced(func() {
		var ids []string
		if err := dst.View(func(tx *Tx) error {
			return c.Each(tx, func(p *person) error { ids = append(ids, p.ID); return nil })
		}); err != nil {
			t.Errorf("view from a replacement's hook: %v", err)
		}
		mu.Lock()
		told = append(told, ids)
		mu.Unlock()
	})
	path := filepath.Join(t.TempDir(), "snap")
	backupTo(t, src, path)
	if err := dst.ReplaceFromBackup(path); err != nil {
		t.Fatal(err)
	}
	dst.WaitReplayed()
	mu.Lock()
	if len(told) != 1 || !slices.Equal(told[0], []string{"1", "2"}) {
		t.Fatalf("the replacement's hooks saw %q, want once [1 2]", told)
	}
	mu.Unlock()
	if a, b := dump(t, src), dump(t, dst); !maps.Equal(a, b) {
		t.Fatalf("replaced store differs:\n%v\n%v", a, b)
	}
	if idx, restoring, err := dst.AppliedIndex(); err != nil || restoring || idx != 2 {
		t.Fatalf("applied index %d (restoring %v, %v), want 2", idx, restoring, err)
	}
	// The store serves and replicates on from there.
	dst.SetReplicator(&logReplicator{members: []*Store{dst}, index: 2})
	if err := dst.Update(func(tx *Tx) error { return c.Put(tx, &person{ID: "3", Name: "cy", Team: "red"}) }); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := dst.View(func(tx *Tx) (err error) { ids, err = c.IDsWith(tx, "team", "red"); return err }); err != nil || !slices.Equal(ids, []string{"1", "3"}) {
		t.Fatalf("red team %v (%v), want [1 3]", ids, err)
	}
	if err := dst.ReplaceFromBackup(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing backup replaced the store")
	}
	dst.WaitReplayed()
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 {
		t.Fatalf("a refused backup ran the replacement's hooks: %q", told)
	}
}

func TestWriteSetEncoding(t *testing.T) {
	t.Parallel()
	ws := &WriteSet{Base: 1 << 40, Writes: []Write{
		{Key: []byte("r/a/1"), Value: []byte(`{"id":"1"}`)},
		{Key: []byte("m/a/x"), Value: []byte{}},
		{Key: []byte("u/a/y"), Delete: true},
	}, Reads: []Read{{Key: []byte("r/b/2")}, {Key: []byte("r/c/"), Prefix: true}}, Origin: "store-1", Seq: 7}
	b, err := ws.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got WriteSet
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.Base != ws.Base || len(got.Writes) != 3 || got.Origin != ws.Origin || got.Seq != ws.Seq {
		t.Fatalf("decoded %+v", got)
	}
	if len(got.Reads) != 2 || string(got.Reads[0].Key) != "r/b/2" || got.Reads[0].Prefix ||
		string(got.Reads[1].Key) != "r/c/" || !got.Reads[1].Prefix {
		t.Fatalf("decoded reads %+v", got.Reads)
	}
	for i, w := range got.Writes {
		if !bytes.Equal(w.Key, ws.Writes[i].Key) || !bytes.Equal(w.Value, ws.Writes[i].Value) || w.Delete != ws.Writes[i].Delete {
			t.Fatalf("write %d: %+v, want %+v", i, w, ws.Writes[i])
		}
	}
	for n := range len(b) {
		if err := new(WriteSet).UnmarshalBinary(b[:n]); !errors.Is(err, ErrBadWriteSet) {
			t.Fatalf("cut to %d bytes: %v", n, err)
		}
	}
	if err := new(WriteSet).UnmarshalBinary(append(b, 0)); !errors.Is(err, ErrBadWriteSet) {
		t.Fatalf("a trailing byte: %v", err)
	}
}

func FuzzWriteSet(f *testing.F) {
	b, _ := (&WriteSet{Base: 3, Writes: []Write{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("d"), Delete: true}}}).MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ws WriteSet
		if ws.UnmarshalBinary(b) != nil {
			return
		}
		again, err := ws.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back WriteSet
		if err := back.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoded write set refused: %v", err)
		}
		if back.Base != ws.Base || len(back.Writes) != len(ws.Writes) {
			t.Fatalf("round trip changed %+v to %+v", ws, back)
		}
	})
}
