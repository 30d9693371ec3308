// Package store keeps the controller's entities in Badger: typed collections of JSON records,
// unique and non-unique secondary indexes maintained in the same transaction as the records,
// and a schema version key. Every change that touches several records is one transaction.
package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
)

// SchemaVersion is the layout of keys and records this code reads and writes.
const SchemaVersion = 1

var schemaKey = []byte("meta/schema-version")

// Errors callers tell apart.
var (
	ErrNotFound = errors.New("not found")
	// ErrSchema means the store was written by a version of zmesh with another layout.
	ErrSchema = errors.New("unsupported store schema")
	// ErrClosed is the error of a store operation that starts once Close has.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt means a checksum of the store's files did not match: the store refuses to
	// open, or, found while running, every later operation fails rather than read it.
	ErrCorrupt = errors.New("store is corrupt")
)

// recoveryHint tells an operator what to do with a corrupt store.
const recoveryHint = "stop the controller, move the directory aside and restore the last backup " +
	"with zmesh controller restore (see docs/controller-recovery.md)"

// CorruptError is a checksum mismatch in the store's files: Dir is the store's directory,
// File the file named by Badger when it names one, Err what Badger reported.
type CorruptError struct {
	Dir, File string
	Err       error
}

func (e *CorruptError) Error() string {
	where := e.Dir
	if e.File != "" {
		where = e.File
	}
	return fmt.Sprintf("store %s is corrupt (%s: %v); %s", e.Dir, where, e.Err, recoveryHint)
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// isChecksumErr reports whether err is Badger's checksum mismatch; Badger wraps it with %v
// in its default build, so only the text is left to tell.
func isChecksumErr(err error) bool {
	return err != nil && (errors.Is(err, y.ErrChecksumMismatch) ||
		strings.Contains(err.Error(), "CHECKSUM_MISMATCH") || strings.Contains(err.Error(), "checksum mismatch"))
}

// fileIn returns the first path under dir that msg names, or "".
func fileIn(dir, msg string) string {
	i := strings.Index(msg, dir+string(filepath.Separator))
	if dir == "" || i < 0 {
		return ""
	}
	rest := msg[i:]
	if j := strings.IndexAny(rest, "\" \t\n,:"); j > 0 {
		rest = rest[:j]
	}
	return rest
}

// ConflictError reports a unique index that already holds the value for another record.
type ConflictError struct {
	Collection, Index, Value, ExistingID string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s %q is already used by %s", e.Collection, e.Index, e.Value, e.ExistingID)
}

// Store is an open Badger database. Close waits for the operations under way (Badger panics
// on a transaction of a closed database) and those that start later fail with ErrClosed: a
// request or a router's handler still running while the controller shuts down gets an error,
// never a crash.
type Store struct {
	db  *badger.DB
	dir string
	log *slog.Logger
	// compression is that of the tables this store writes.
	compression options.CompressionType
	// corrupt, once set, fails every later operation: a checksum mismatch was read.
	corrupt error

	mu     sync.Mutex
	idle   sync.Cond // signalled when active drops to 0
	active int       // operations under way
	closed bool
	// replacing is set while ReplaceFromBackup swaps the content: operations that start
	// then fail with ErrRestoring (Badger must not be read while it drops everything).
	replacing bool
	// rep, when it holds a Replicator, has it take over the commits of Update (see
	// SetReplicator).
	rep atomic.Value
	// wmu serializes the replicated Updates of this member, so that each write set is
	// computed on the state the previous one left.
	wmu sync.Mutex
	// win remembers the keys the recent write sets applied wrote (see rebase).
	win writeWindow

	// id names this open store in the write sets of its Updates; seq numbers them.
	id  string
	seq atomic.Uint64
	// pending holds the write sets this store's Updates wait for, by Seq; pdone is
	// signalled when one stops being applied.
	pmu     sync.Mutex
	pdone   sync.Cond
	pending map[uint64]*pendingWrite
	// abandoned are the Seqs of pending write sets whose Update gave up, oldest first.
	abandoned []uint64
	// watchers are the hooks Watch registered, by collection name.
	watchers sync.Map // string -> func(*Tx, string)
	// hooks runs the after-commit hooks of replayed write sets, and replaced.
	hooks hookQueue
	// replaced are the functions OnReplaced registered.
	rmu      sync.Mutex
	replaced []func()
}

// hookQueue runs batches of functions one after the other, in the order pushed, on a
// goroutine that lives while there are some to run.
type hookQueue struct {
	mu      sync.Mutex
	ran     sync.Cond // signalled when done moves
	batches [][]func()
	running bool
	// pushed and done count the batches pushed and run.
	pushed, done uint64
}

func (q *hookQueue) push(fns []func()) {
	q.mu.Lock()
	q.batches = append(q.batches, fns)
	q.pushed++
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

func (q *hookQueue) run() {
	for {
		q.mu.Lock()
		if len(q.batches) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		fns := q.batches[0]
		q.batches[0] = nil
		q.batches = q.batches[1:]
		q.mu.Unlock()
		for _, f := range fns {
			f()
		}
		q.mu.Lock()
		q.done++
		q.ran.Broadcast()
		q.mu.Unlock()
	}
}

// wait returns once the batches pushed so far have run.
func (q *hookQueue) wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for mark := q.pushed; q.done < mark; {
		q.ran.Wait()
	}
}

// WaitReplayed returns once the after-commit hooks of the replayed write sets this store
// has applied so far have run (see ApplyWrites), and those of the replacements of its
// content (see OnReplaced): a caller that needs what it keeps in
// memory to reflect at least the state its store holds now. It must not be called from
// such a hook, which it would wait for.
func (s *Store) WaitReplayed() { s.hooks.wait() }

// watchedRecord is a record a replayed write set wrote, and the hook of its collection.
type watchedRecord struct {
	id   string
	hook func(*Tx, string)
}

// watchedRecords returns the records ws wrote whose collection has a hook, each once, in
// the order of their first write.
func (s *Store) watchedRecords(ws *WriteSet) []watchedRecord {
	var out []watchedRecord
	var seen map[string]bool
	for _, w := range ws.Writes {
		if !bytes.HasPrefix(w.Key, []byte(recordsPrefix)) {
			continue
		}
		name, id, ok := splitKey(w.Key)
		if !ok {
			continue
		}
		hook, ok := s.watchers.Load(string(name))
		if !ok || seen[string(w.Key)] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[string(w.Key)] = true
		out = append(out, watchedRecord{id: string(id), hook: hook.(func(*Tx, string))})
	}
	return out
}

// enter starts an operation, unless the store is closing. An operation started inside
// another (f using the store again) fails with ErrClosed once Close has begun rather than
// waiting for it, so the two cannot wait for each other.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.corrupt != nil {
		return s.corrupt
	}
	if s.replacing {
		return ErrRestoring
	}
	s.active++
	return nil
}

func (s *Store) leave() {
	s.mu.Lock()
	if s.active--; s.active == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// Options tune the store.
type Options struct {
	// InMemory keeps everything in memory (tests and benchmarks only).
	InMemory bool
	// noVerify turns the checksum verification off: the benchmark's baseline only.
	noVerify bool
}

// Open opens or creates the store in dir and checks its schema version. Every table's
// checksums are verified as it opens and every block's as it is read, and values' in the
// value log too: a corrupt store fails Open with a *CorruptError naming the file. The
// directory is made 0700 and the files in it 0600.
func Open(dir string, log *slog.Logger, o Options) (*Store, error) {
	opts := badgerOptions(dir, log)
	if o.InMemory {
		opts = opts.WithDir("").WithValueDir("").WithInMemory(true)
	}
	if o.noVerify {
		opts = opts.WithChecksumVerificationMode(options.NoVerification).WithVerifyValueChecksum(false)
	}
	if !o.InMemory {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create store directory: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store directory: %w", err)
		}
		if err := verifyTables(dir); err != nil && !o.noVerify {
			return nil, err
		}
		if err := verifyWALs(dir); err != nil && !o.noVerify {
			return nil, err
		}
	}
	db, err := openBadger(opts)
	if err != nil {
		if isChecksumErr(err) {
			return nil, &CorruptError{Dir: dir, File: fileIn(dir, err.Error()), Err: err}
		}
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	s := &Store{db: db, log: log, compression: opts.Compression, id: newStoreID(), pending: map[uint64]*pendingWrite{}}
	s.idle.L = &s.mu
	s.pdone.L = &s.pmu
	s.win.maxSets, s.win.maxBytes, s.win.maxRebaseKeys = windowSets, windowBytes, maxRebaseKeys
	s.hooks.ran.L = &s.hooks.mu
	if !o.InMemory {
		s.dir = dir
		if err := restrictModes(dir); err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := s.checkSchema(); err != nil {
		db.Close()
		if isChecksumErr(err) {
			return nil, &CorruptError{Dir: dir, File: fileIn(dir, err.Error()), Err: err}
		}
		return nil, err
	}
	return s, nil
}

// newStoreID returns a random id for an open store: 128 bits, hex.
func newStoreID() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails: crypto/rand ends the program rather than return an error
	return hex.EncodeToString(b)
}

// badgerOptions are the options the store opens Badger with in dir.
func badgerOptions(dir string, log *slog.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithChecksumVerificationMode(options.OnBlockRead). // tables: verifyTables, before Open
		WithVerifyValueChecksum(true).
		WithLogger(badgerLogger{log}).
		WithSyncWrites(true).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2)
}

// openBadger opens the database; a panic of Badger's on a damaged file (a length read
// from it out of range) becomes an error.
func openBadger(opts badger.Options) (db *badger.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("badger panicked opening the store, %w: %v", y.ErrChecksumMismatch, r)
		}
	}()
	return badger.Open(opts)
}

// restrictModes makes the files directly in dir 0600 (Badger creates some 0644).
func restrictModes(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store directory: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		if info.Mode().Perm() != 0o600 {
			if err := os.Chmod(filepath.Join(dir, e.Name()), 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("store file mode: %w", err)
			}
		}
	}
	return nil
}

// noteErr records err when it is a checksum mismatch, so that every later operation fails
// with it; it returns err, made a *CorruptError in that case.
func (s *Store) noteErr(err error) error {
	if !isChecksumErr(err) {
		return err
	}
	var ce *CorruptError
	if !errors.As(err, &ce) {
		ce = &CorruptError{Dir: s.dir, File: fileIn(s.dir, err.Error()), Err: err}
	}
	s.mu.Lock()
	first := s.corrupt == nil
	if first {
		s.corrupt = ce
	}
	s.mu.Unlock()
	if first {
		s.log.Error("the store is corrupt; refusing every further operation", "dir", s.dir, "err", ce.Err)
	}
	return ce
}

// Verify reads every block of every table from the files (not Badger's cache) and checks
// its checksum. A mismatch fails it with a *CorruptError and every later operation of the
// store with the same error. An in-memory store has nothing to verify.
func (s *Store) Verify() error {
	if err := s.enter(); err != nil {
		return err
	}
	var err error
	if s.dir != "" {
		for _, t := range s.db.Tables() {
			path := table.NewFilename(t.ID, s.dir)
			e := verifyTable(path, s.compression)
			if errors.Is(e, fs.ErrNotExist) { // compacted away since Tables
				continue
			}
			if isChecksumErr(e) {
				err = &CorruptError{Dir: s.dir, File: path, Err: e}
				break
			}
			if e != nil { // an I/O error, not damage: the next run tries again
				err = fmt.Errorf("verify %s: %w", path, e)
				break
			}
		}
	}
	s.leave()
	return s.noteErr(err)
}

func (s *Store) checkSchema() error {
	return s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(schemaKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return txn.Set(schemaKey, fmt.Appendf(nil, "%d", SchemaVersion))
		}
		if err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		var v int
		if err := item.Value(func(b []byte) error { return json.Unmarshal(b, &v) }); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if v != SchemaVersion {
			return fmt.Errorf("%w: the store has schema %d, this zmesh reads schema %d", ErrSchema, v, SchemaVersion)
		}
		return nil
	})
}

// Close waits for the operations under way, then flushes and closes the database; later
// operations fail with ErrClosed. Closing again does nothing.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for s.active > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
	err := s.db.Close()
	if s.dir != "" { // the tables flushed at close are new files
		if merr := restrictModes(s.dir); merr != nil && err == nil {
			err = merr
		}
	}
	return err
}

// RunVerify runs Verify every interval until ctx ends, the store closes or it finds the
// store corrupt; other errors are logged and the next run tries again.
// Badger treats a block whose checksum fails as absent (a Get says not found, an iteration
// ends early): only a full verification tells damage that appears while the store is open
// from a record that is not there, and it then fails every later operation.
func (s *Store) RunVerify(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := s.Verify()
			var ce *CorruptError
			if errors.As(err, &ce) || errors.Is(err, ErrClosed) {
				return
			}
			if err != nil {
				s.log.Warn("cannot verify the store's tables; trying again at the next interval", "err", err)
			}
		}
	}
}

// RunGC reclaims value-log space every interval until ctx ends, and keeps the files Badger
// created since 0600.
func (s *Store) RunGC(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.enter(); errors.Is(err, ErrRestoring) {
				continue
			} else if err != nil {
				return
			}
			for s.db.RunValueLogGC(0.5) == nil {
			}
			if s.dir != "" {
				if err := restrictModes(s.dir); err != nil {
					s.log.Warn("store file modes", "err", err)
				}
			}
			s.leave()
		}
	}
}

// Tx is a transaction: reads see one snapshot, writes commit together or not at all.
type Tx struct {
	txn *badger.Txn
	// after runs once the transaction has committed.
	after []func()
	// capture records every write in writes and every read in reads, for a replicated
	// Update; seen dedupes reads (a kind byte, 'k' or 'p', then the key).
	capture bool
	writes  []Write
	reads   []Read
	seen    map[string]struct{}
	// replayed: the transaction applies a write set of another member (see ApplyWrites);
	// before reads the state the write set replaced, changed are the records it wrote.
	replayed bool
	before   *badger.Txn
	changed  []watchedRecord
}

// errReplayedWrite is the error of a write through a replayed transaction: a write set is
// applied exactly as its member made it, so that every member holds the same.
var errReplayedWrite = errors.New("store: a hook of a replayed write set cannot write")

// Replayed tells whether the transaction applies a write set another member made (or one
// whose Update on this member gave up waiting long ago, see ApplyWrites): its hooks then run for a write they did not
// see being made, and must not write themselves; the member that made it did what follows.
func (tx *Tx) Replayed() bool { return tx.replayed }

// read records that the transaction read key, or every key under it when prefix is set.
// Every read of the store goes through a Collection, which calls it.
func (tx *Tx) read(key []byte, prefix bool) {
	if !tx.capture {
		return
	}
	kind := byte('k')
	if prefix {
		kind = 'p'
	}
	id := string(kind) + string(key)
	if _, ok := tx.seen[id]; ok {
		return
	}
	if tx.seen == nil {
		tx.seen = map[string]struct{}{}
	}
	tx.seen[id] = struct{}{}
	tx.reads = append(tx.reads, Read{Key: key, Prefix: prefix})
}

// set stores value under key in the transaction. Every write of the store goes through set
// and delete, so that a replicated Update sees all of them.
func (tx *Tx) set(key, value []byte) error {
	if tx.replayed {
		return fmt.Errorf("%w: set %q", errReplayedWrite, key)
	}
	if err := tx.txn.Set(key, value); err != nil {
		return err
	}
	if tx.capture {
		tx.writes = append(tx.writes, Write{Key: key, Value: value})
	}
	return nil
}

// delete removes key in the transaction.
func (tx *Tx) delete(key []byte) error {
	if tx.replayed {
		return fmt.Errorf("%w: delete %q", errReplayedWrite, key)
	}
	if err := tx.txn.Delete(key); err != nil {
		return err
	}
	if tx.capture {
		tx.writes = append(tx.writes, Write{Key: key, Delete: true})
	}
	return nil
}

// OnCommit registers f to run after the transaction commits (never if it fails).
func (tx *Tx) OnCommit(f func()) { tx.after = append(tx.after, f) }

// maxAttempts bounds the retries of a transaction that lost a conflict with a concurrent one.
const maxAttempts = 8

// Update runs f in a read-write transaction and commits it. A transaction that conflicts with
// a concurrent one is run again from the start; f must therefore have no effects outside tx
// (use OnCommit for those).
//
// With a replicator set (SetReplicator), the transaction is not committed here: what it
// wrote goes to the replicator as a WriteSet, and Update returns once the replicator has
// had it applied to this store (ApplyWrites) or has failed; the OnCommit hooks run then.
// When it fails while its write set may still be applied (any error but a stale refusal:
// the replicator's wait ended, the reply was lost), the OnCommit hooks run if and when
// ApplyWrites applies it, on the store's hook queue (see WaitReplayed).
// A member's replicated Updates run one at a time, so f must not call Update itself (it
// would wait for itself); an OnCommit hook may. Likewise an OnChange hook called for a
// replayed write set (see ApplyWrites) may View the store but not Update it, as the log
// waits for it; what it defers with OnCommit may, as the log does not wait for that.
func (s *Store) Update(f func(tx *Tx) error) error {
	var after []func()
	var err error
	if rep := s.replicator(); rep != nil {
		after, err = s.replicate(rep, f)
	} else {
		after, err = s.commit(f)
	}
	if err != nil {
		return err
	}
	for _, g := range after { // outside the operation: a hook may use the store
		g()
	}
	return nil
}

// commit runs f in read-write transactions until one commits, and returns its after-commit
// hooks.
func (s *Store) commit(f func(tx *Tx) error) ([]func(), error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	for attempt := 1; ; attempt++ {
		tx := &Tx{txn: s.db.NewTransaction(true)}
		err := f(tx)
		if err == nil {
			err = tx.txn.Commit()
		}
		tx.txn.Discard()
		if errors.Is(err, badger.ErrConflict) && attempt < maxAttempts {
			continue
		}
		if err != nil {
			return nil, s.noteErr(err)
		}
		return tx.after, nil
	}
}

// View runs f in a read-only transaction.
func (s *Store) View(f func(tx *Tx) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.noteErr(s.db.View(func(txn *badger.Txn) error { return f(&Tx{txn: txn}) }))
}

// badgerLogger sends Badger's messages to slog; its chatty info level becomes debug.
type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) Errorf(f string, a ...any) {
	l.log.Error(fmt.Sprintf(f, a...), "component", "badger")
}
func (l badgerLogger) Warningf(f string, a ...any) {
	l.log.Warn(fmt.Sprintf(f, a...), "component", "badger")
}
func (l badgerLogger) Infof(f string, a ...any) {
	l.log.Debug(fmt.Sprintf(f, a...), "component", "badger")
}
func (l badgerLogger) Debugf(f string, a ...any) {
	l.log.Debug(fmt.Sprintf(f, a...), "component", "badger")
}

// Check reads the schema version key in a read transaction: it fails when the database is
// closed or cannot be read. The controller's health check runs it.
func (s *Store) Check() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(schemaKey)
		if err != nil {
			return fmt.Errorf("read %s: %w", schemaKey, err)
		}
		return item.Value(func([]byte) error { return nil })
	})
}

// Counts returns the number of records of every collection that holds at least one, by
// collection name. It reads keys only, in one read transaction.
func (s *Store) Counts() (map[string]int, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	out := map[string]int{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(recordsPrefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if name, _, ok := splitKey(it.Item().Key()); ok {
				out[string(name)]++
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count the store's records: %w", err)
	}
	return out, nil
}

// recordsPrefix starts the key of every record (see Collection.recordKey).
const recordsPrefix = "r/"

// Sizes returns the bytes of the LSM tree and of the value log on disk, as Badger last
// measured them (it does so about every minute).
func (s *Store) Sizes() (lsm, vlog int64) {
	if s.enter() != nil {
		return 0, 0
	}
	defer s.leave()
	return s.db.Size()
}
