package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/store"
)

// TestEntryEncoding checks that an entry carries its id, its term (0 for the leader's own
// write) and its write set, encoded after the entry's head; that a bare write set, with no
// entry head, is refused; and that an entry cut short in its id is refused.
func TestEntryEncoding(t *testing.T) {
	t.Parallel()
	ws := &store.WriteSet{Base: 7, Writes: []store.Write{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("d"), Delete: true}}}
	id := newEntryID()
	b, err := encodeEntry(id, 0, ws)
	if err != nil {
		t.Fatal(err)
	}
	gotID, term, got, err := decodeEntry(b)
	if err != nil || gotID != id || term != 0 || got.Base != 7 || len(got.Writes) != 2 || string(got.Writes[0].Value) != "v" || !got.Writes[1].Delete {
		t.Fatalf("decoded %x term %d %+v (%v), want %x term 0 %+v", gotID, term, got, err, id, ws)
	}
	bare, err := ws.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[entryHead:], bare) {
		t.Fatalf("the entry's write set %x, want its encoding %x", b[entryHead:], bare)
	}
	if _, _, _, err := decodeEntry(bare); !errors.Is(err, store.ErrBadWriteSet) {
		t.Fatalf("a bare write set: %v, want a refusal", err)
	}
	if _, _, _, err := decodeEntry(b[:9]); !errors.Is(err, store.ErrBadWriteSet) {
		t.Fatalf("an entry cut short: %v", err)
	}
}

// applyAt is a store's replicator that applies each write set straight to an fsm at the
// next index, as a log of one member would.
type applyAt struct {
	f    *fsm
	next uint64
	ids  []entryID
}

func (r *applyAt) Replicate(ws *store.WriteSet) error {
	id := newEntryID()
	b, err := encodeEntry(id, 0, ws)
	if err != nil {
		return err
	}
	r.ids = append(r.ids, id)
	res, _ := r.f.Apply(&raft.Log{Index: r.next, Data: b}).(error)
	r.next++
	return res
}

// TestFSMOutcomesAndRestore applies entries to an fsm, reads their outcomes by id, then
// installs a snapshot at index 3 (of no log history) into another member's fsm: the store
// takes its content, the fsm counts the log as processed up to the snapshot's index and
// claims no knowledge of the ids before it.
func TestFSMOutcomesAndRestore(t *testing.T) {
	t.Parallel()
	c := items()
	src := openStore(t)
	f := newFSM(src, quiet, t.TempDir())
	rep := &applyAt{f: f, next: 3}
	src.SetReplicator(rep)
	if err := src.Update(func(tx *store.Tx) error { return c.Put(tx, &item{ID: "a", Name: "a"}) }); err != nil {
		t.Fatal(err)
	}
	okID := rep.ids[0]
	// A write set computed before index 3 arrives at index 4: refused on every member.
	staleID := newEntryID()
	b, err := encodeEntry(staleID, 0, &store.WriteSet{Base: 0, Writes: []store.Write{{Key: []byte("x"), Value: []byte("y")}}})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := f.Apply(&raft.Log{Index: 4, Data: b}).(error); !errors.Is(res, store.ErrStaleWrite) {
		t.Fatalf("a write set on an older state: %v", res)
	}
	if o, found, _ := f.outcomeOf(okID, 0); !found || o.index != 3 || o.err != nil {
		t.Fatalf("outcome of the applied entry: %+v found %v", o, found)
	}
	if o, found, _ := f.outcomeOf(staleID, 0); !found || o.index != 4 || !errors.Is(o.err, store.ErrStaleWrite) {
		t.Fatalf("outcome of the refused entry: %+v found %v", o, found)
	}
	if _, found, known := f.outcomeOf(newEntryID(), 0); found || !known {
		t.Fatalf("an entry never appended: found %v known %v, want absent for sure", found, known)
	}
	if f.lastIndex() != 4 {
		t.Fatalf("last index %d, want 4", f.lastIndex())
	}

	var snap bytes.Buffer
	snap.WriteString(snapshotMagic)
	snap.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 3), 3))
	snap.WriteByte(0) // the history's length: none
	if err := src.Backup(&snap); err != nil {
		t.Fatal(err)
	}
	dst := openStore(t)
	g := newFSM(dst, quiet, t.TempDir())
	if err := g.Restore(io.NopCloser(&snap)); err != nil {
		t.Fatal(err)
	}
	if idx, _, err := dst.AppliedIndex(); err != nil || idx != 3 {
		t.Fatalf("restored store at index %d (%v), want 3", idx, err)
	}
	var got *item
	if err := dst.View(func(tx *store.Tx) (err error) { got, err = c.Get(tx, "a"); return err }); err != nil || got.Name != "a" {
		t.Fatalf("restored item %+v (%v)", got, err)
	}
	if g.lastIndex() != 3 {
		t.Fatalf("last index after the restore %d, want 3", g.lastIndex())
	}
	if _, found, known := g.outcomeOf(okID, 0); found || known {
		t.Fatalf("an entry before the snapshot: found %v known %v, want not known", found, known)
	}
}

// TestLateAppendRefused checks that an entry carrying the term its leader accepted it in is
// applied when it lands in that term, and refused by the fsm (as stale, so its Update may
// run again) when it lands in another; and that a leader takes a forwarded set only when
// it was sent in the leader's term.
func TestLateAppendRefused(t *testing.T) {
	t.Parallel()
	st, err := store.Open(filepath.Join(t.TempDir(), "store"), quiet, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := newFSM(st, quiet, t.TempDir())
	c := items()
	late := writeSetOf(t, func(tx *store.Tx) error { return c.Put(tx, &item{ID: "late", Name: "late"}) })
	id := newEntryID()
	b, err := encodeEntry(id, 5, late)
	if err != nil {
		t.Fatal(err)
	}
	if gotID, term, _, err := decodeEntry(b); err != nil || gotID != id || term != 5 {
		t.Fatalf("decoded %x term %d (%v)", gotID, term, err)
	}
	if _, _, _, err := decodeEntry(b[:1+len(id)+4]); !errors.Is(err, store.ErrBadWriteSet) {
		t.Fatalf("an entry cut short in its term: %v", err)
	}
	res, _ := f.Apply(&raft.Log{Index: 1, Term: 6, Data: b}).(error)
	if !errors.Is(res, store.ErrStaleWrite) || f.faulted() != nil || f.lastIndex() != 1 {
		t.Fatalf("an entry appended in a later term: %v (fault %v, last %d), want a stale refusal", res, f.faulted(), f.lastIndex())
	}
	if o, found, _ := f.outcomeOf(id, 0); !found || !errors.Is(o.err, store.ErrStaleWrite) {
		t.Fatalf("its outcome: %+v found %v", o, found)
	}
	if err := st.View(func(tx *store.Tx) error { _, err := c.Get(tx, "late"); return err }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused entry's record: %v, want none", err)
	}
	if res, _ := f.Apply(&raft.Log{Index: 2, Term: 5, Data: b}).(error); res != nil {
		t.Fatalf("an entry appended in the term it was accepted in: %v", res)
	}
	if err := st.View(func(tx *store.Tx) error { _, err := c.Get(tx, "late"); return err }); err != nil {
		t.Fatalf("the applied entry's record: %v", err)
	}
}
