package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/store"
)

// fsm applies the replicated log to the member's store: each entry is a store.WriteSet,
// with the id its writer gave it (see encodeEntry). It remembers the outcome of the recent
// entries by id, so that a member whose write had an unknown outcome (a leadership lost
// while the entry was in flight) can learn it from its own log, and the raft index of the
// last entry it processed, which the writes wait for. An entry the store fails to apply for
// a reason of this member's own (a disk error, a closed store), not one every member meets
// alike (see Apply), is a fault: the fsm processes no entry from then on, so that the
// store's applied index stays where its content is, and the node stops; a restart replays
// the log from there.
type fsm struct {
	st  *store.Store
	log *slog.Logger
	// dir holds the snapshot being installed while it is checked and loaded.
	dir string

	mu sync.Mutex
	// last is the raft index of the last entry processed (applied or refused), or what a
	// snapshot installed covers.
	last uint64
	// changed is closed and replaced whenever last moves.
	changed chan struct{}
	// outcomes holds the outcome of the entries from index from on, by id; order their ids
	// in log order, the oldest forgotten first once there are maxOutcomes.
	outcomes map[entryID]outcome
	order    []entryID
	from     uint64
	// fault is why this member stopped following the log, nil until then; failed is
	// closed when it is set.
	fault  error
	failed chan struct{}
}

// maxOutcomes bounds the outcomes an fsm remembers: far more than the writes that can be
// in flight within an apply timeout.
const maxOutcomes = 1 << 14

// outcome is what became of one entry: applied at index, or refused with err.
type outcome struct {
	index uint64
	err   error
}

func newFSM(st *store.Store, log *slog.Logger, dir string) *fsm {
	return &fsm{st: st, log: log, dir: dir, changed: make(chan struct{}), outcomes: map[entryID]outcome{}, from: 1, failed: make(chan struct{})}
}

// errLateAppend refuses, on every member, a forwarded write set appended in another raft
// term than the one in which the leader accepted it: it was not applied, and its Update
// may run again, as for a stale write set.
var errLateAppend = fmt.Errorf("a forwarded write set appended in another term than the one it was accepted in: %w", store.ErrStaleWrite)

// Apply applies one write set. Its result (nil or the error) is the response the member that
// made the entry waits for; every member gets the same, since the outcome depends only on
// the log.
func (f *fsm) Apply(l *raft.Log) any {
	if err := f.faulted(); err != nil {
		return err
	}
	id, term, ws, err := decodeEntry(l.Data)
	if err != nil { // the same bytes on every member: refused on every one
		f.log.Error("a raft log entry is no write set; the store does not take it", "index", l.Index, "err", err)
		err = fmt.Errorf("cluster: log entry %d: %w", l.Index, err)
		f.processed(l.Index, id, err)
		return err
	}
	if term != 0 && term != l.Term {
		// A forwarded write set appended in another term than the one its leader accepted
		// it in: its writer may have learned meanwhile, from the leader of a later term, that
		// it is not in the log, and computed it again.
		err = fmt.Errorf("cluster: log entry %d of term %d: %w", l.Index, l.Term, errLateAppend)
		f.log.Debug("write set refused: appended in a later term than its leader accepted it in", "index", l.Index, "accepted_term", term, "term", l.Term)
		f.processed(l.Index, id, err)
		return err
	}
	// The store's refusals that every member gives alike for the same entry are the log's
	// outcome of it, not a fault of this member: a write set computed on an older state
	// (store.ErrStaleWrite) and one that is no valid write set (store.ErrBadWriteSet, also
	// the error of an entry that does not decode, above). Any other error is a fault.
	err = f.st.ApplyWrites(ws, l.Index)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrStaleWrite):
		f.log.Debug("write set refused: computed on an older state", "index", l.Index, "err", err)
	case errors.Is(err, store.ErrBadWriteSet):
		f.log.Warn("write set refused by the store on every member", "index", l.Index, "err", err)
	default:
		return f.fail(l.Index, err)
	}
	f.processed(l.Index, id, err)
	return err
}

// fail notes that the entry at index could not be applied for cause, a fault of this
// member, and wakes the waiters; it returns the fault.
func (f *fsm) fail(index uint64, cause error) error {
	f.log.Error("cannot apply a write set; this member stops following the log (a restart replays it from the store's applied index)",
		"index", index, "err", cause)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fmt.Errorf("cluster: this member could not apply the log entry at index %d and stopped following the log: %w", index, cause)
	close(f.failed)
	close(f.changed)
	f.changed = make(chan struct{})
	return f.fault
}

// faulted returns the fault that stopped this member, nil while it follows the log.
func (f *fsm) faulted() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fault
}

// processed records the outcome of the entry at index and moves last on.
func (f *fsm) processed(index uint64, id entryID, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if index <= f.last { // replayed over a snapshot: its outcome then is not its first
		return
	}
	if id != (entryID{}) {
		if len(f.order) >= maxOutcomes {
			old := f.order[0]
			f.order = f.order[1:]
			f.from = f.outcomes[old].index + 1
			delete(f.outcomes, old)
		}
		f.outcomes[id] = outcome{index: index, err: err}
		f.order = append(f.order, id)
	}
	f.advance(index)
}

// advance sets last to index and wakes the waiters; f.mu is held.
func (f *fsm) advance(index uint64) {
	f.last = index
	close(f.changed)
	f.changed = make(chan struct{})
}

// lastIndex returns the raft index of the last entry processed.
func (f *fsm) lastIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// waitFor returns once the entry at index has been processed, or ctx's error, or the fault
// that stopped this member before it.
func (f *fsm) waitFor(ctx context.Context, index uint64) error {
	for {
		f.mu.Lock()
		last, changed, fault := f.last, f.changed, f.fault
		f.mu.Unlock()
		if last < index && fault != nil {
			return fault
		}
		if last >= index {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("this member has processed the log up to index %d, not yet %d: %w", last, index, ctx.Err())
		}
	}
}

// outcomeOf returns what became of the entry id, if this member knows: found is false when
// the entry is not among those processed; known is false when entries after index after
// may have been forgotten or skipped (a snapshot installed), so its absence proves nothing.
func (f *fsm) outcomeOf(id entryID, after uint64) (o outcome, found, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, found = f.outcomes[id]
	return o, found, found || f.from <= after+1
}

// restored notes that a snapshot covering the log up to index was installed: the entries
// it covers are not replayed, and their outcomes are not known here. A store replaced by a
// snapshot of another log history may go back: replaced sets last to index whatever it was.
func (f *fsm) restored(index uint64, replaced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.outcomes)
	f.order = nil
	if index > f.last || replaced && index != f.last {
		f.advance(index)
	}
	f.from = f.last + 1
}

// entryID names a write set in the log, so that its writer can find it there.
type entryID [16]byte

// entryKind starts a log entry of the store: then come the entry's id, the raft term in
// which the leader accepted a forwarded write set (0 for the leader's own writes), and the
// write set.
const entryKind byte = 0x82

// entryHead is the length of an entry before its write set: the kind, the id and the term.
const entryHead = 1 + len(entryID{}) + 8

// encodeEntry encodes id, term and ws as a log entry: entryKind, the id, the term (8 bytes
// big-endian), then ws's encoding, appended to the header in one buffer.
func encodeEntry(id entryID, term uint64, ws *store.WriteSet) ([]byte, error) {
	out := make([]byte, 0, entryHead)
	out = append(out, entryKind)
	out = append(out, id[:]...)
	out = binary.BigEndian.AppendUint64(out, term)
	out, err := ws.AppendBinary(out)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode a write set: %w", err)
	}
	return out, nil
}

// decodeEntry decodes what encodeEntry encoded.
func decodeEntry(b []byte) (entryID, uint64, *store.WriteSet, error) {
	var id entryID
	if len(b) == 0 || b[0] != entryKind {
		return id, 0, nil, fmt.Errorf("%w: not a log entry of the store", store.ErrBadWriteSet)
	}
	if len(b) < entryHead {
		return id, 0, nil, fmt.Errorf("%w: an entry cut short in its id or term", store.ErrBadWriteSet)
	}
	copy(id[:], b[1:])
	term := binary.BigEndian.Uint64(b[1+len(id):])
	b = b[entryHead:]
	ws := new(store.WriteSet)
	if err := ws.UnmarshalBinary(b); err != nil {
		return id, term, nil, err
	}
	return id, term, ws, nil
}

// snapshotMagic starts a snapshot, followed by the store's applied index at the snapshot
// and the raft index of the last entry the member had processed then (8 bytes big-endian
// each), the store's log history (store.History: a length byte and the bytes), and a store
// backup (store.Backup).
const snapshotMagic = "zmesh-raft-snapshot 3\n"

// maxHistory bounds a history's name, written after a length byte.
const maxHistory = 255

// Snapshot notes the applied index; Persist then writes a backup. The backup is taken
// later than the index, while writes go on, so it may hold later write sets too: Badger's
// backup is one consistent state, it carries its own applied index, and the log entries
// raft replays after installing it that it holds already are skipped.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	// raft would label the snapshot with the index of the last entry handed to Apply, past
	// the entries the store could not apply: the log would be compacted over them.
	if err := f.faulted(); err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	idx, restoring, err := f.st.AppliedIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	if restoring {
		return nil, fmt.Errorf("cluster: snapshot: %w", store.ErrRestoring)
	}
	history, err := f.st.History()
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	if len(history) > maxHistory {
		return nil, fmt.Errorf("cluster: snapshot: the store's log history %q is longer than %d bytes", history, maxHistory)
	}
	return &snapshot{st: f.st, index: idx, last: f.lastIndex(), history: history}, nil
}

type snapshot struct {
	st          *store.Store
	index, last uint64
	history     string
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 256<<10)
	err := func() error {
		if _, err := io.WriteString(w, snapshotMagic); err != nil {
			return err
		}
		head := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, s.index), s.last)
		head = append(append(head, byte(len(s.history))), s.history...)
		if _, err := w.Write(head); err != nil {
			return err
		}
		if err := s.st.Backup(w); err != nil {
			return err
		}
		return w.Flush()
	}()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: write snapshot %s: %w", sink.ID(), err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// Restore installs a snapshot: raft calls it for a snapshot a leader sends a member that
// is too far behind for the log, and at every start for the latest local snapshot. A store
// that holds the snapshot's state already (its applied index is at least the snapshot's, in
// the same log history: a restart) is kept as it is; otherwise the snapshot is written to a
// file, checked, and replaces the live store's content (store.ReplaceFromBackup).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.faulted(); err != nil { // the node is stopping; the next start restores
		return fmt.Errorf("cluster: restore: %w", err)
	}
	r := bufio.NewReaderSize(rc, 256<<10)
	head := make([]byte, len(snapshotMagic)+8+8+1)
	if _, err := io.ReadFull(r, head); err != nil {
		return fmt.Errorf("cluster: restore: read the snapshot's header: %w", err)
	}
	if got := string(head[:len(snapshotMagic)]); got != snapshotMagic {
		return fmt.Errorf("cluster: restore: not a zmesh snapshot: it starts with %q, not %q", got, snapshotMagic)
	}
	idx := binary.BigEndian.Uint64(head[len(snapshotMagic):])
	last := binary.BigEndian.Uint64(head[len(snapshotMagic)+8:])
	h := make([]byte, head[len(head)-1])
	if _, err := io.ReadFull(r, h); err != nil {
		return fmt.Errorf("cluster: restore: read the snapshot's header: %w", err)
	}
	history := string(h)
	local, restoring, err := f.st.AppliedIndex()
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	localHistory, err := f.st.History()
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	if !restoring && idx > 0 && local >= idx && localHistory == history {
		f.log.Info("the store holds the snapshot's state already; keeping it", "snapshot_index", idx, "applied_index", local)
		f.restored(max(last, local), false)
		return nil
	}
	if localHistory != history && local > 0 {
		f.log.Warn("the store followed another log history than the snapshot's (a cluster recovered from the loss of a majority); replacing it",
			"store_history", localHistory, "snapshot_history", history, "applied_index", local)
	}
	tmp, err := os.CreateTemp(f.dir, "install-*.backup")
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: restore: spool the snapshot: %w", err)
	}
	if err := f.st.ReplaceFromBackup(tmp.Name()); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	f.log.Info("store replaced from a snapshot", "snapshot_index", idx, "applied_index_before", local)
	if local, _, err = f.st.AppliedIndex(); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	f.restored(max(last, local), true)
	return nil
}
