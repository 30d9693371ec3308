// Package store keeps the controller's entities in Badger: typed collections of JSON records,
// unique and non-unique secondary indexes maintained in the same transaction as the records,
// and a schema version key. Every change that touches several records is one transaction.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
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
)

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
	log *slog.Logger

	mu     sync.Mutex
	idle   sync.Cond // signalled when active drops to 0
	active int       // operations under way
	closed bool
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
}

// Open opens or creates the store in dir and checks its schema version.
func Open(dir string, log *slog.Logger, o Options) (*Store, error) {
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithSyncWrites(true).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2)
	if o.InMemory {
		opts = opts.WithDir("").WithValueDir("").WithInMemory(true)
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	s := &Store{db: db, log: log}
	s.idle.L = &s.mu
	if err := s.checkSchema(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
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
	return s.db.Close()
}

// RunGC reclaims value-log space every interval until ctx ends.
func (s *Store) RunGC(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.enter() != nil {
				return
			}
			for s.db.RunValueLogGC(0.5) == nil {
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
}

// OnCommit registers f to run after the transaction commits (never if it fails).
func (tx *Tx) OnCommit(f func()) { tx.after = append(tx.after, f) }

// maxAttempts bounds the retries of a transaction that lost a conflict with a concurrent one.
const maxAttempts = 8

// Update runs f in a read-write transaction and commits it. A transaction that conflicts with
// a concurrent one is run again from the start; f must therefore have no effects outside tx
// (use OnCommit for those).
func (s *Store) Update(f func(tx *Tx) error) error {
	after, err := s.commit(f)
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
			return nil, err
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
	return s.db.View(func(txn *badger.Txn) error { return f(&Tx{txn: txn}) })
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
			// r/<collection>/<id>: collection names hold no slash.
			rest := it.Item().Key()[len(recordsPrefix):]
			if i := bytes.IndexByte(rest, '/'); i > 0 {
				out[string(rest[:i])]++
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
