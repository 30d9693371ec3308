package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// A replicated store (a controller cluster's member) commits nothing by itself: Update runs
// its function in a Badger transaction as usual, captures what the transaction wrote as a
// WriteSet and hands it to a Replicator, which orders it with every member's writes (a raft
// log) and has every member apply it with ApplyWrites. The store keeps the index of the
// last write set it applied (appliedKey), in the same transactions as the writes, so that:
//   - a write set computed on a state that another write set changed since is refused on
//     every member alike (its Base is not the applied index): no update is lost when writes
//     race or a new leader's state lags;
//   - before a write set is appended to the log, the store that appends it (the leader's,
//     for its own writes and those other members forward) moves its Base up to the applied
//     index when none of the write sets applied since wrote a key it read or wrote
//     (ReplicateForwarded): writes to different records do not refuse each other;
//   - a write set applied already (a log replayed after a restart or a restore) is skipped;
//   - a snapshot (a backup) carries the index of the state it holds.

// Errors of replication.
var (
	// ErrStaleWrite is the refusal of a write set computed on a state that has changed since;
	// the Update it came from runs again on the current state.
	ErrStaleWrite = errors.New("store: the write set was computed on a state that has changed since")
	// ErrRestoring is the error of an operation that starts while the store's content is
	// being replaced from a snapshot, or of a write on a store that such a replacement left
	// unfinished (until the next one completes).
	ErrRestoring = errors.New("store: being replaced from a snapshot")
	// ErrBadWriteSet is the refusal of a write set no Update of a store makes: bytes that
	// are no encoded write set, or one that writes a key outside the collections' keyspaces
	// (see validKey), such as the store's own meta keys. ApplyWrites refuses it as it
	// refuses a stale one, on every member alike and changing nothing.
	ErrBadWriteSet = errors.New("store: not a write set of the store's collections")
)

// The keyspaces of the collections (see Collection): records, unique and non-unique index
// entries. A write set writes nothing else; the meta keys are the store's own.
var keyspaces = [][]byte{[]byte(recordsPrefix), []byte("u/"), []byte("m/")}

// splitKey splits a key a Collection writes, a keyspace's prefix, a collection name (not
// empty, no slash) and a slash, then the rest (a record's id, an index's name and value):
// ok is false for any other key.
func splitKey(key []byte) (collection, rest []byte, ok bool) {
	for _, ks := range keyspaces {
		if after, found := bytes.CutPrefix(key, ks); found {
			collection, rest, ok = bytes.Cut(after, []byte("/"))
			return collection, rest, ok && len(collection) > 0
		}
	}
	return nil, nil, false
}

// validKey tells whether key is one a Collection writes (see splitKey).
func validKey(key []byte) bool {
	_, _, ok := splitKey(key)
	return ok
}

// checkKeys fails with an error wrapping ErrBadWriteSet unless ws writes valid keys only.
func checkKeys(ws *WriteSet) error {
	for i, w := range ws.Writes {
		if !validKey(w.Key) {
			return fmt.Errorf("%w: write %d is of key %q", ErrBadWriteSet, i, w.Key)
		}
	}
	return nil
}

var (
	// appliedKey holds the raft index of the last write set applied, 8 bytes big-endian.
	appliedKey = []byte("meta/applied-index")
	// restoringKey is present while ReplaceFromBackup loads a backup: the content is partial.
	restoringKey = []byte("meta/restoring")
	// historyKey names the log history whose entries the store applied (SetHistory).
	historyKey = []byte("meta/log-history")
)

// Write is one change of a write set: Value stored under Key, or Key deleted.
type Write struct {
	Key, Value []byte
	Delete     bool
}

// Read is a key a transaction read, or with Prefix every key under it (an iteration).
type Read struct {
	Key    []byte
	Prefix bool
}

// WriteSet is everything one transaction wrote, in order, Base, the applied index of the
// state it read, and Reads, what it read of that state (each key or prefix once; a key
// under a prefix read is left out).
//
// Origin and Seq name the Update that made it: the id of its member's store (a random id
// each time the store opens) and a number of that store's. A member applying a write set
// that none of its own Updates waits for runs the hooks of the records it wrote (see
// Collection.Watch and ApplyWrites).
type WriteSet struct {
	Base   uint64
	Writes []Write
	Reads  []Read
	Origin string
	Seq    uint64
}

// compactReads drops the reads another read's prefix covers (reads holds each key or prefix
// once).
func compactReads(reads []Read) []Read {
	var prefixes [][]byte
	for _, r := range reads {
		if r.Prefix {
			prefixes = append(prefixes, r.Key)
		}
	}
	if len(prefixes) == 0 {
		return reads
	}
	prefixes = outermost(prefixes)
	out := reads[:0:0]
	for _, r := range reads {
		var covered bool
		if r.Prefix { // kept when it is one of the outermost
			_, outer := slices.BinarySearchFunc(prefixes, r.Key, bytes.Compare)
			covered = !outer
		} else {
			covered = underAny(r.Key, prefixes)
		}
		if !covered {
			out = append(out, r)
		}
	}
	return out
}

// Bounds of the window of recent write sets a store remembers the written keys of.
const (
	windowSets  = 10_000
	windowBytes = 64 << 20
)

// writeWindow holds the keys written by the last write sets this store applied, so that a
// write set computed on an older state can be checked against what changed since.
type writeWindow struct {
	mu sync.Mutex
	// known: from is set; the window then holds every write set applied after index from.
	known bool
	from  uint64
	sets  []appliedSet // oldest first
	bytes int
	// maxSets and maxBytes bound the window; the oldest sets leave it first.
	maxSets, maxBytes int
	// maxRebaseKeys bounds the keys a rebase checks (see rebase).
	maxRebaseKeys int
}

type appliedSet struct {
	index uint64
	keys  [][]byte
}

// add records the keys of ws, applied at index on a store whose applied index was prev.
// The caller holds mu.
func (w *writeWindow) add(prev, index uint64, ws *WriteSet) {
	if !w.known {
		w.known, w.from = true, prev
	}
	set := appliedSet{index: index, keys: make([][]byte, len(ws.Writes))}
	for i, wr := range ws.Writes {
		set.keys[i] = wr.Key
		w.bytes += len(wr.Key)
	}
	w.sets = append(w.sets, set)
	for len(w.sets) > 0 && (len(w.sets) > w.maxSets || w.bytes > w.maxBytes) {
		old := w.sets[0]
		for _, k := range old.keys {
			w.bytes -= len(k)
		}
		w.sets[0] = appliedSet{}
		w.sets = w.sets[1:]
		w.from = old.index
	}
}

// reset forgets the window: the store's content was replaced. The caller holds mu.
func (w *writeWindow) reset() {
	w.known, w.from, w.sets, w.bytes = false, 0, nil, 0
}

// maxRebaseKeys bounds the keys written since a write set's Base that rebase checks it
// against: a write set further behind is refused as stale (its member computes it again
// once it has caught up), so that one write set cannot hold the window, and so the log's
// applies, for long.
const maxRebaseKeys = 1 << 16

// rebase checks ws against the store's applied index: a ws computed on it is kept as it
// is; one computed on an older state that the window covers, and that reads and writes no
// key a write set applied since wrote, gets Base moved up to it. Any other fails with an
// error wrapping ErrStaleWrite; one that writes a key outside the collections' keyspaces
// with one wrapping ErrBadWriteSet.
//
// Its work under the window's lock is bounded: at most maxRebaseKeys keys, each looked up
// in ws's keys (a map) and its read prefixes (a binary search), both prepared beforehand
// and only for a ws behind the applied index.
func (s *Store) rebase(ws *WriteSet) error {
	if err := checkKeys(ws); err != nil {
		return err
	}
	var k *rebaseKeys
	for {
		done, err := s.rebaseOn(ws, k)
		if done {
			return err
		}
		k = prepareRebase(ws) // outside the lock, then again under it
	}
}

// rebaseKeys are what a write set read and wrote, ready to be checked against the window.
type rebaseKeys struct {
	touched  map[string]struct{} // keys read or written
	prefixes [][]byte            // prefixes read (see outermost)
}

func prepareRebase(ws *WriteSet) *rebaseKeys {
	k := &rebaseKeys{touched: make(map[string]struct{}, len(ws.Reads)+len(ws.Writes))}
	for _, r := range ws.Reads {
		if r.Prefix {
			k.prefixes = append(k.prefixes, r.Key)
		} else {
			k.touched[string(r.Key)] = struct{}{}
		}
	}
	for _, w := range ws.Writes {
		k.touched[string(w.Key)] = struct{}{}
	}
	k.prefixes = outermost(k.prefixes)
	return k
}

// rebaseOn is rebase under the window's lock; with k nil, it returns done false when ws is
// to be checked against the window (k is needed).
func (s *Store) rebaseOn(ws *WriteSet, k *rebaseKeys) (done bool, err error) {
	s.win.mu.Lock()
	defer s.win.mu.Unlock()
	applied, restoring, err := s.AppliedIndex()
	if err != nil {
		return true, err
	}
	if restoring {
		return true, fmt.Errorf("%w: a replacement was left unfinished", ErrRestoring)
	}
	if !s.win.known { // every write set applied from now on is recorded
		s.win.known, s.win.from = true, applied
	}
	switch {
	case ws.Base == applied:
		return true, nil
	case ws.Base > applied:
		return true, fmt.Errorf("%w: computed at index %d, beyond the store's %d", ErrStaleWrite, ws.Base, applied)
	case ws.Base < s.win.from:
		return true, fmt.Errorf("%w: computed at index %d, the store is at %d and remembers the writes after %d only",
			ErrStaleWrite, ws.Base, applied, s.win.from)
	case k == nil:
		return false, nil
	}
	checked := 0
	for i := len(s.win.sets) - 1; i >= 0 && s.win.sets[i].index > ws.Base; i-- {
		set := &s.win.sets[i]
		if checked += len(set.keys); checked > s.win.maxRebaseKeys {
			return true, fmt.Errorf("%w: computed at index %d, more than %d keys behind the store's %d",
				ErrStaleWrite, ws.Base, s.win.maxRebaseKeys, applied)
		}
		for _, key := range set.keys {
			_, hit := k.touched[string(key)]
			if hit || underAny(key, k.prefixes) {
				return true, fmt.Errorf("%w: computed at index %d; %q was written at index %d", ErrStaleWrite, ws.Base, key, set.index)
			}
		}
	}
	ws.Base = applied
	return true, nil
}

// outermost sorts prefixes and drops those under another: no prefix of the result starts
// with another one.
func outermost(prefixes [][]byte) [][]byte {
	slices.SortFunc(prefixes, bytes.Compare)
	out := prefixes[:0]
	for _, p := range prefixes {
		// Sorted, a prefix comes right before the keys under it that are kept.
		if len(out) > 0 && bytes.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// underAny tells whether key starts with one of prefixes, sorted with none under another
// (see outermost): only the last one not after key can be its prefix.
func underAny(key []byte, prefixes [][]byte) bool {
	i, found := slices.BinarySearchFunc(prefixes, key, bytes.Compare)
	if found {
		return true
	}
	return i > 0 && bytes.HasPrefix(key, prefixes[i-1])
}

// ReplicateForwarded hands rep a write set another member computed (the leader's store, for
// a write a follower forwarded), as this member's replicated writes are: one at a time,
// after those under way. A write set computed on an older state than this store's is
// rebased (see rebase) or refused with an error wrapping ErrStaleWrite, for its member to
// compute again; one that writes a key outside the collections' keyspaces is refused with
// an error wrapping ErrBadWriteSet.
func (s *Store) ReplicateForwarded(rep Replicator, ws *WriteSet) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if len(ws.Writes) == 0 {
		return nil
	}
	if err := s.rebase(ws); err != nil {
		return err
	}
	return rep.Replicate(ws)
}

// Replicator takes over the commits of a store's Update: Replicate returns nil once ws has
// been applied to this store (by ApplyWrites, under the index the replicator gave it), or an
// error; an error wrapping ErrStaleWrite makes Update run its function again.
type Replicator interface {
	Replicate(ws *WriteSet) error
}

// SetReplicator makes every later Update go through r; nil restores local commits. It is
// set once, before the store serves writes.
func (s *Store) SetReplicator(r Replicator) { s.rep.Store(replicatorBox{r}) }

// replicatorBox holds a Replicator in an atomic.Value, which needs one concrete type.
type replicatorBox struct{ r Replicator }

// replicator is the Replicator set, or nil; read without the store's lock, which every
// operation takes.
func (s *Store) replicator() Replicator {
	b, _ := s.rep.Load().(replicatorBox)
	return b.r
}

// replicate runs f, hands what it wrote to rep and returns f's after-commit hooks once rep
// has applied it. The member's replicated writes run one at a time.
func (s *Store) replicate(rep Replicator, f func(tx *Tx) error) ([]func(), error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for attempt := 1; ; attempt++ {
		after, ws, err := s.capture(f)
		if err != nil {
			return nil, err
		}
		if len(ws.Writes) == 0 { // nothing to agree on
			return after, nil
		}
		err = s.rebase(ws)
		if err == nil {
			err = s.replicateOwn(rep, ws, after)
		}
		if errors.Is(err, ErrStaleWrite) && attempt < maxAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		return after, nil
	}
}

// replicateOwn hands rep a write set of this member's Update, marked as this store's so
// that ApplyWrites leaves its hooks to the Update. A write set applied here while rep
// reports an error (a reply lost) did happen: it counts as replicated. One that ApplyWrites
// is applying when rep reports an error is waited for. One not applied by then, unless it
// was refused as stale, may still be: the Update's after-commit functions (after) are kept
// with it, and ApplyWrites runs them on the hook queue if it applies the write set later.
// So they run once the write set is applied, whether the Update still waits or not.
func (s *Store) replicateOwn(rep Replicator, ws *WriteSet, after []func()) error {
	ws.Origin, ws.Seq = s.id, s.seq.Add(1)
	s.pmu.Lock()
	s.pending[ws.Seq] = &pendingWrite{}
	s.pmu.Unlock()
	err := rep.Replicate(ws)
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p := s.pending[ws.Seq]
	for p.state == pendApplying {
		s.pdone.Wait()
	}
	if p.state == pendApplied {
		delete(s.pending, ws.Seq)
		return nil
	}
	if errors.Is(err, ErrStaleWrite) { // refused: the Update runs again or fails
		delete(s.pending, ws.Seq)
		return err
	}
	p.state, p.after = pendAbandoned, after
	s.abandoned = append(s.abandoned, ws.Seq)
	for len(s.abandoned) > maxAbandoned {
		seq := s.abandoned[0]
		s.abandoned = s.abandoned[1:]
		if old, ok := s.pending[seq]; ok && old.state == pendAbandoned {
			delete(s.pending, seq)
			s.log.Warn("forgetting the after-commit functions of an Update that gave up waiting; "+
				"they will not run if its write set is applied later", "seq", seq)
		}
	}
	return err
}

// maxAbandoned bounds the write sets whose Update gave up waiting that a store keeps the
// after-commit functions of, the latest; far more than can be in flight at once.
const maxAbandoned = 1024

// The states of a write set an Update of this store made.
const (
	pendWaiting   = iota // not applied yet, its Update waits
	pendApplying         // ApplyWrites is applying it, without replaying its hooks
	pendApplied          // applied: the Update runs its hooks
	pendAbandoned        // not applied yet, its Update gave up: ApplyWrites runs after
)

// pendingWrite is a write set an Update of this store made and that was not applied yet
// when the Update handed it to the replicator.
type pendingWrite struct {
	state int
	// after are the Update's after-commit functions, once it gave up.
	after []func()
}

// awaited tells whether ws is a write set of an Update of this store whose hooks are not
// to be replayed: one that waits for it (marked as being applied until settled says how
// that ended), or one that gave up, whose after-commit functions it returns.
func (s *Store) awaited(ws *WriteSet) (own bool, after []func()) {
	if ws.Origin != s.id {
		return false, nil
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p, ok := s.pending[ws.Seq]
	switch {
	case !ok:
		return false, nil
	case p.state == pendWaiting:
		p.state = pendApplying
		return true, nil
	case p.state == pendAbandoned:
		return true, p.after
	}
	return false, nil
}

// settled records whether the write set ws, which awaited reported, was applied.
func (s *Store) settled(ws *WriteSet, applied bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p, ok := s.pending[ws.Seq]
	switch {
	case !ok:
	case p.state == pendApplying:
		p.state = pendWaiting
		if applied {
			p.state = pendApplied
		}
		s.pdone.Broadcast()
	case p.state == pendAbandoned && applied: // its after-commit functions run now
		delete(s.pending, ws.Seq)
	}
}

// capture runs f in a read-write transaction that it discards, and returns what f wrote.
func (s *Store) capture(f func(tx *Tx) error) ([]func(), *WriteSet, error) {
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	tx := &Tx{txn: s.db.NewTransaction(true), capture: true}
	defer tx.txn.Discard()
	base, restoring, err := readApplied(tx.txn)
	if err != nil {
		return nil, nil, s.noteErr(err)
	}
	if restoring {
		return nil, nil, fmt.Errorf("%w: a replacement was left unfinished", ErrRestoring)
	}
	if err := f(tx); err != nil {
		return nil, nil, s.noteErr(err)
	}
	return tx.after, &WriteSet{Base: base, Writes: tx.writes, Reads: compactReads(tx.reads)}, nil
}

// readApplied returns the applied index and whether a replacement is unfinished.
func readApplied(txn *badger.Txn) (uint64, bool, error) {
	if _, err := txn.Get(restoringKey); err == nil {
		return 0, true, nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, fmt.Errorf("read %s: %w", restoringKey, err)
	}
	item, err := txn.Get(appliedKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", appliedKey, err)
	}
	var idx uint64
	err = item.Value(func(b []byte) error {
		if len(b) != 8 {
			return fmt.Errorf("%s holds %d bytes, not 8", appliedKey, len(b))
		}
		idx = binary.BigEndian.Uint64(b)
		return nil
	})
	return idx, false, err
}

// AppliedIndex returns the index of the last write set applied, 0 for none; restoring is true
// while a replacement from a snapshot is unfinished (the content is then partial).
func (s *Store) AppliedIndex() (index uint64, restoring bool, err error) {
	if err := s.enter(); err != nil {
		return 0, false, err
	}
	defer s.leave()
	err = s.db.View(func(txn *badger.Txn) error {
		index, restoring, err = readApplied(txn)
		return err
	})
	return index, restoring, s.noteErr(err)
}

// History returns the name of the log history the store follows, "" for a cluster's first.
// A recovery from the loss of a majority starts another history (SetHistory), whose indexes
// may name other entries than those the lost members applied under the same indexes: a
// store of another history cannot be told apart by its applied index alone.
func (s *Store) History() (string, error) {
	if err := s.enter(); err != nil {
		return "", err
	}
	defer s.leave()
	var h string
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(historyKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", historyKey, err)
		}
		return item.Value(func(b []byte) error { h = string(b); return nil })
	})
	return h, s.noteErr(err)
}

// SetHistory records that the store follows the log history named h from now on; backups
// carry it. Only a recovery calls it, on a store no replicator writes to.
func (s *Store) SetHistory(h string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.noteErr(s.db.Update(func(txn *badger.Txn) error { return txn.Set(historyKey, []byte(h)) }))
}

// ApplyWrites applies ws, the entry of the replicated log at index, in one transaction,
// and records index as applied. A write set at an index applied already is skipped (nil);
// one whose Base is not the applied index fails with ErrStaleWrite, and then one that
// writes a key outside the collections' keyspaces with ErrBadWriteSet: both change
// nothing, the applied index included. The outcome depends only on the store's state and
// the log, so every member gets the same.
//
// The write set of an Update of this store that waits for it runs no hooks here: the
// Update runs its own. That of an Update that gave up waiting runs the Update's
// after-commit functions on the hook queue below (see replicateOwn). Any other (another
// member's, or one whose Update's functions are forgotten) is replayed: the hooks given to Watch run for each record it wrote, in its transaction
// after the writes (tx.Replayed is true, and writes through it fail), and what they
// registered with OnCommit runs after the commit, on a goroutine of the store's that runs
// the replayed write sets' hooks one after the other in the log's order. ApplyWrites does
// not wait for them, so those hooks may use the store, Update included.
func (s *Store) ApplyWrites(ws *WriteSet, index uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	after, err := s.applyWrites(ws, index)
	s.leave()
	if err == nil && len(after) > 0 {
		s.hooks.push(after)
	}
	return err
}

// applyWrites is ApplyWrites within the operation; it returns the replayed write set's
// after-commit hooks.
func (s *Store) applyWrites(ws *WriteSet, index uint64) ([]func(), error) {
	s.win.mu.Lock() // the window moves with the applied index
	defer s.win.mu.Unlock()
	var prev uint64
	done := false
	var tx *Tx
	own, ownAfter := s.awaited(ws)
	defer func() {
		if tx != nil {
			tx.before.Discard()
		}
	}()
	err := s.db.Update(func(txn *badger.Txn) error {
		applied, restoring, err := readApplied(txn)
		if err != nil {
			return err
		}
		if restoring {
			return fmt.Errorf("%w: a replacement was left unfinished", ErrRestoring)
		}
		if index <= applied {
			return nil
		}
		prev, done = applied, true
		if ws.Base != applied {
			return fmt.Errorf("%w: computed at index %d, the store is at %d", ErrStaleWrite, ws.Base, applied)
		}
		if err := checkKeys(ws); err != nil {
			return err
		}
		if !own {
			if ids := s.watchedRecords(ws); len(ids) > 0 {
				// The state the write set replaces: no write set commits while the window's
				// lock is held, and txn has written nothing yet.
				tx = &Tx{replayed: true, before: s.db.NewTransaction(false), changed: ids}
			}
		}
		for _, w := range ws.Writes {
			if w.Delete {
				err = txn.Delete(w.Key)
			} else {
				err = txn.Set(w.Key, w.Value)
			}
			if err != nil {
				return fmt.Errorf("apply the write set of index %d: %w", index, err)
			}
		}
		if tx != nil {
			tx.txn = txn
			for _, c := range tx.changed {
				c.hook(tx, c.id)
			}
		}
		return txn.Set(appliedKey, binary.BigEndian.AppendUint64(nil, index))
	})
	if own { // the Update waiting for ws, if it gave up meanwhile, waits for this
		s.settled(ws, err == nil && done)
	}
	if err != nil {
		return nil, s.noteErr(err)
	}
	if !done {
		return nil, nil
	}
	s.win.add(prev, index, ws)
	if tx == nil {
		return ownAfter, nil
	}
	return tx.after, nil
}

// OnReplaced registers f to run after ReplaceFromBackup has replaced the store's content
// (or dropped it, failing to load the backup after): what is kept in memory of the content
// no longer holds, and no write set's hooks tell what changed. f runs on the goroutine of
// the hook queue (see ApplyWrites), after the hooks of the write sets applied before, and
// may use the store. Call it before the store applies write sets.
func (s *Store) OnReplaced(f func()) {
	s.rmu.Lock()
	s.replaced = append(s.replaced, f)
	s.rmu.Unlock()
}

// ReplaceFromBackup replaces the whole content of the open store with the backup file at
// path (a raft snapshot being installed), after checking the backup is intact. Badger must
// not be read while it drops its content, so the operations under way are waited for and
// those that start meanwhile fail with ErrRestoring. A marker key stays while the backup
// loads: a store left half-loaded by a crash refuses writes (ErrRestoring) until a
// replacement completes. Once the content was dropped, the functions given to OnReplaced
// run on the hook queue, whether the load then succeeds or not.
func (s *Store) ReplaceFromBackup(path string) error {
	if err := CheckBackup(path); err != nil {
		return err
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.corrupt != nil:
		s.mu.Unlock()
		return s.corrupt
	case s.replacing:
		s.mu.Unlock()
		return ErrRestoring
	}
	s.replacing = true
	for s.active > 0 {
		s.idle.Wait()
	}
	s.active++ // Close waits for the replacement
	s.mu.Unlock()
	s.win.mu.Lock()
	s.win.reset() // the writes it remembers are not those that led to the new content
	s.win.mu.Unlock()
	dropped := false
	defer func() {
		s.mu.Lock()
		s.replacing = false
		s.mu.Unlock()
		s.leave()
		if dropped { // outside the operation: the hooks may use the store
			s.rmu.Lock()
			fns := slices.Clone(s.replaced)
			s.rmu.Unlock()
			s.hooks.push(fns)
		}
	}()

	err := s.db.DropAll()
	dropped = true // even a failed DropAll may have dropped part of the content
	if err != nil {
		return s.noteErr(fmt.Errorf("replace the store from %s: drop the content: %w", path, err))
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(restoringKey, nil) }); err != nil {
		return s.noteErr(fmt.Errorf("replace the store from %s: %w", path, err))
	}
	f, body, err := openBackup(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := s.db.Load(body, 256); err != nil {
		return s.noteErr(fmt.Errorf("replace the store from %s: %w", path, err))
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(restoringKey) }); err != nil {
		return s.noteErr(fmt.Errorf("replace the store from %s: %w", path, err))
	}
	if s.dir != "" {
		return restrictModes(s.dir)
	}
	return nil
}

// writeSetVersion starts an encoded write set.
const writeSetVersion = 3

// MarshalBinary encodes ws: a version byte, Base as a uvarint, Origin as a uvarint length
// and the bytes, Seq and the number of writes as uvarints, then
// each write as a kind byte (0 set, 1 delete), the key and, for a set, the value, each as a
// uvarint length and the bytes; then the number of reads and each read as a kind byte (0 a
// key, 1 a prefix) and the key.
func (ws *WriteSet) MarshalBinary() ([]byte, error) { return ws.AppendBinary(nil) }

// AppendBinary appends ws's encoding (see MarshalBinary) to b, growing it at most once, so
// that a caller framing the set (a log entry, a request) copies it no second time.
func (ws *WriteSet) AppendBinary(b []byte) ([]byte, error) {
	n := 1 + 5*binary.MaxVarintLen64 + len(ws.Origin)
	for _, w := range ws.Writes {
		n += 1 + 2*binary.MaxVarintLen64 + len(w.Key) + len(w.Value)
	}
	for _, r := range ws.Reads {
		n += 1 + binary.MaxVarintLen64 + len(r.Key)
	}
	b = slices.Grow(b, n)
	b = append(b, writeSetVersion)
	b = binary.AppendUvarint(b, ws.Base)
	b = binary.AppendUvarint(b, uint64(len(ws.Origin)))
	b = append(b, ws.Origin...)
	b = binary.AppendUvarint(b, ws.Seq)
	b = binary.AppendUvarint(b, uint64(len(ws.Writes)))
	for _, w := range ws.Writes {
		if w.Delete {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(w.Key)))
			b = append(b, w.Key...)
			continue
		}
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(w.Key)))
		b = append(b, w.Key...)
		b = binary.AppendUvarint(b, uint64(len(w.Value)))
		b = append(b, w.Value...)
	}
	b = binary.AppendUvarint(b, uint64(len(ws.Reads)))
	for _, r := range ws.Reads {
		kind := byte(0)
		if r.Prefix {
			kind = 1
		}
		b = append(b, kind)
		b = binary.AppendUvarint(b, uint64(len(r.Key)))
		b = append(b, r.Key...)
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary encoded; keys and values are copied out of b.
func (ws *WriteSet) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != writeSetVersion {
		return fmt.Errorf("%w: unknown version", ErrBadWriteSet)
	}
	r := wsReader{b: b[1:]}
	base := r.uvarint()
	origin := string(r.bytes())
	seq := r.uvarint()
	count := r.uvarint()
	if r.err == nil && count > uint64(len(r.b)) { // every write takes 2 bytes or more
		r.err = fmt.Errorf("%w: %d writes in %d bytes", ErrBadWriteSet, count, len(r.b))
	}
	var writes []Write
	if r.err == nil {
		writes = make([]Write, 0, count)
	}
	for i := uint64(0); i < count && r.err == nil; i++ {
		kind := r.byte()
		var w Write
		switch kind {
		case 0:
			w.Key = r.bytes()
			w.Value = r.bytes()
		case 1:
			w.Key, w.Delete = r.bytes(), true
		default:
			if r.err == nil {
				r.err = fmt.Errorf("%w: write %d has kind %d", ErrBadWriteSet, i, kind)
			}
		}
		if r.err == nil && len(w.Key) == 0 {
			r.err = fmt.Errorf("%w: write %d has an empty key", ErrBadWriteSet, i)
		}
		writes = append(writes, w)
	}
	nreads := r.uvarint()
	if r.err == nil && nreads > uint64(len(r.b)) { // every read takes 2 bytes or more
		r.err = fmt.Errorf("%w: %d reads in %d bytes", ErrBadWriteSet, nreads, len(r.b))
	}
	var reads []Read
	if r.err == nil && nreads > 0 {
		reads = make([]Read, 0, nreads)
	}
	for i := uint64(0); i < nreads && r.err == nil; i++ {
		kind := r.byte()
		if r.err == nil && kind > 1 {
			r.err = fmt.Errorf("%w: read %d has kind %d", ErrBadWriteSet, i, kind)
		}
		reads = append(reads, Read{Key: r.bytes(), Prefix: kind == 1})
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the last read", ErrBadWriteSet, len(r.b))
	}
	if r.err != nil {
		return r.err
	}
	ws.Base, ws.Writes, ws.Reads, ws.Origin, ws.Seq = base, writes, reads, origin, seq
	return nil
}

// wsReader reads an encoded write set; the first error sticks.
type wsReader struct {
	b   []byte
	err error
}

func (r *wsReader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: cut short", ErrBadWriteSet)
	}
}

func (r *wsReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wsReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *wsReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	out := append([]byte{}, r.b[:n]...)
	r.b = r.b[n:]
	return out
}
