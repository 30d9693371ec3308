package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Index is a secondary index of a collection. Keys returns the values a record has for the
// index (empty strings are skipped). A unique index maps each value to one record; a
// non-unique one to any number.
type Index[T any] struct {
	Name   string
	Unique bool
	Keys   func(*T) []string
}

// Collection is a typed set of records stored as JSON under their id.
//
// Keys:
//
//	r/<collection>/<id>                                   the record
//	u/<collection>/<index>/<len><value>                   id of the record holding value
//	m/<collection>/<index>/<len><value><id>               empty: record id holds value
//
// <len> is the value's length as a uvarint, so that no value is a prefix of another.
type Collection[T any] struct {
	name    string
	id      func(*T) string
	indexes []Index[T]

	// OnChange, when set, is called with the record's id after each successful Put (and so
	// Create) or Delete, in the caller's transaction: it may read tx and register
	// tx.OnCommit for effects that must wait for the commit (Update may run a transaction
	// several times, and one that fails never commits). It must not call Update (View is
	// fine); what it defers with OnCommit may. Set it before the collection is used.
	OnChange func(tx *Tx, id string)
}

// Watch has s call OnChange for each record of the collection that a replayed write set
// wrote (one another member made; see Store.ApplyWrites), as the Update that made it called
// it there; tx.Replayed tells such calls apart. Call it once, before s applies write sets.
func (c *Collection[T]) Watch(s *Store) { s.watchers.Store(c.name, c.changed) }

// Before returns the record with id as it was before the replayed write set tx applies
// (ErrNotFound when it did not exist): the hook of a deletion finds what was deleted there.
// It fails on a transaction that is not replayed.
func (c *Collection[T]) Before(tx *Tx, id string) (*T, error) {
	if !tx.replayed {
		return nil, fmt.Errorf("%s %q: Before reads a replayed transaction only", c.name, id)
	}
	item, err := tx.before.Get(c.recordKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%s %q: %w", c.name, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %q: %w", c.name, id, err)
	}
	return c.decode(item)
}

// NewCollection describes a collection; it stores nothing until used in a transaction.
func NewCollection[T any](name string, id func(*T) string, indexes ...Index[T]) *Collection[T] {
	return &Collection[T]{name: name, id: id, indexes: indexes}
}

// Name returns the collection's name.
func (c *Collection[T]) Name() string { return c.name }

func (c *Collection[T]) recordKey(id string) []byte { return []byte("r/" + c.name + "/" + id) }

func (c *Collection[T]) recordPrefix() []byte { return []byte("r/" + c.name + "/") }

func (c *Collection[T]) valueKey(kind string, idx *Index[T], value string) []byte {
	k := []byte(kind + "/" + c.name + "/" + idx.Name + "/")
	k = binary.AppendUvarint(k, uint64(len(value)))
	return append(k, value...)
}

func (c *Collection[T]) index(name string) *Index[T] {
	for i := range c.indexes {
		if c.indexes[i].Name == name {
			return &c.indexes[i]
		}
	}
	panic(fmt.Sprintf("store: collection %s has no index %s", c.name, name))
}

// Get returns the record with id, or an error wrapping ErrNotFound.
func (c *Collection[T]) Get(tx *Tx, id string) (*T, error) {
	key := c.recordKey(id)
	tx.read(key, false)
	item, err := tx.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%s %q: %w", c.name, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %q: %w", c.name, id, err)
	}
	return c.decode(item)
}

func (c *Collection[T]) decode(item *badger.Item) (*T, error) {
	rec := new(T)
	err := item.Value(func(b []byte) error { return json.Unmarshal(b, rec) })
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", item.Key(), err)
	}
	return rec, nil
}

// Has reports whether a record with id exists.
func (c *Collection[T]) Has(tx *Tx, id string) (bool, error) {
	key := c.recordKey(id)
	tx.read(key, false)
	_, err := tx.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Put creates or replaces rec, keeping the indexes in step. A unique index value held by
// another record fails the call with a *ConflictError.
func (c *Collection[T]) Put(tx *Tx, rec *T) error {
	id := c.id(rec)
	if id == "" {
		return fmt.Errorf("put %s: empty id", c.name)
	}
	old, err := c.Get(tx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	for i := range c.indexes {
		idx := &c.indexes[i]
		var before []string
		if old != nil {
			before = values(idx, old)
		}
		after := values(idx, rec)
		for _, v := range before {
			if !slices.Contains(after, v) {
				if err := tx.delete(c.entryKey(idx, v, id)); err != nil {
					return err
				}
			}
		}
		for _, v := range after {
			if idx.Unique {
				if holder, err := c.lookupID(tx, idx, v); err == nil && holder != id {
					return &ConflictError{Collection: c.name, Index: idx.Name, Value: v, ExistingID: holder}
				} else if err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
				if err := tx.set(c.entryKey(idx, v, id), []byte(id)); err != nil {
					return err
				}
			} else if err := tx.set(c.entryKey(idx, v, id), nil); err != nil {
				return err
			}
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode %s %q: %w", c.name, id, err)
	}
	if err := tx.set(c.recordKey(id), data); err != nil {
		return err
	}
	c.changed(tx, id)
	return nil
}

// changed calls OnChange, if set.
func (c *Collection[T]) changed(tx *Tx, id string) {
	if c.OnChange != nil {
		c.OnChange(tx, id)
	}
}

// Create stores rec, which must not exist yet.
func (c *Collection[T]) Create(tx *Tx, rec *T) error {
	if ok, err := c.Has(tx, c.id(rec)); err != nil {
		return err
	} else if ok {
		return &ConflictError{Collection: c.name, Index: "id", Value: c.id(rec), ExistingID: c.id(rec)}
	}
	return c.Put(tx, rec)
}

// Delete removes the record with id and its index entries; an error wrapping ErrNotFound if
// there is none.
func (c *Collection[T]) Delete(tx *Tx, id string) error {
	old, err := c.Get(tx, id)
	if err != nil {
		return err
	}
	for i := range c.indexes {
		idx := &c.indexes[i]
		for _, v := range values(idx, old) {
			if err := tx.delete(c.entryKey(idx, v, id)); err != nil {
				return err
			}
		}
	}
	if err := tx.delete(c.recordKey(id)); err != nil {
		return err
	}
	c.changed(tx, id)
	return nil
}

func (c *Collection[T]) entryKey(idx *Index[T], value, id string) []byte {
	if idx.Unique {
		return c.valueKey("u", idx, value)
	}
	return append(c.valueKey("m", idx, value), id...)
}

// values returns the distinct non-empty values of rec for idx.
func values[T any](idx *Index[T], rec *T) []string {
	var out []string
	for _, v := range idx.Keys(rec) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func (c *Collection[T]) lookupID(tx *Tx, idx *Index[T], value string) (string, error) {
	key := c.valueKey("u", idx, value)
	tx.read(key, false)
	item, err := tx.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return "", fmt.Errorf("%s with %s %q: %w", c.name, idx.Name, value, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	v, err := item.ValueCopy(nil)
	return string(v), err
}

// Lookup returns the record whose unique index holds value.
func (c *Collection[T]) Lookup(tx *Tx, index, value string) (*T, error) {
	id, err := c.lookupID(tx, c.index(index), value)
	if err != nil {
		return nil, err
	}
	return c.Get(tx, id)
}

// IDsWith returns the ids of the records whose index holds value, in id order.
func (c *Collection[T]) IDsWith(tx *Tx, index, value string) ([]string, error) {
	idx := c.index(index)
	if idx.Unique {
		id, err := c.lookupID(tx, idx, value)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	prefix := c.valueKey("m", idx, value)
	tx.read(prefix, true)
	var ids []string
	it := tx.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		ids = append(ids, string(it.Item().Key()[len(prefix):]))
	}
	return ids, nil
}

// With returns the records whose index holds value, in id order.
func (c *Collection[T]) With(tx *Tx, index, value string) ([]*T, error) {
	ids, err := c.IDsWith(tx, index, value)
	if err != nil {
		return nil, err
	}
	out := make([]*T, 0, len(ids))
	for _, id := range ids {
		rec, err := c.Get(tx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// Each calls f for every record in id order until f returns an error.
func (c *Collection[T]) Each(tx *Tx, f func(*T) error) error {
	tx.read(c.recordPrefix(), true)
	it := tx.txn.NewIterator(badger.IteratorOptions{Prefix: c.recordPrefix(), PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		rec, err := c.decode(it.Item())
		if err != nil {
			return err
		}
		if err := f(rec); err != nil {
			return err
		}
	}
	return nil
}

// All returns every record in id order.
func (c *Collection[T]) All(tx *Tx) ([]*T, error) {
	var out []*T
	err := c.Each(tx, func(r *T) error { out = append(out, r); return nil })
	return out, err
}

// Count returns the number of records.
func (c *Collection[T]) Count(tx *Tx) (int, error) {
	n := 0
	tx.read(c.recordPrefix(), true)
	it := tx.txn.NewIterator(badger.IteratorOptions{Prefix: c.recordPrefix()})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n, nil
}
