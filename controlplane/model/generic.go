package model

import (
	"github.com/zmesh/zmesh/controlplane/store"
)

func (b *Base) base() *Base { return b }

// entity is a pointer to an entity struct that embeds Base.
type entity[T any] interface {
	*T
	base() *Base
}

// kind describes one entity type for the generic operations below.
type kind[T any, P entity[T]] struct {
	name string // for messages, e.g. "service"
	coll *store.Collection[T]
	// check validates a record about to be stored; it may read other collections.
	check func(tx *store.Tx, rec P) error
	// referenced reports, before a delete, another entity that needs this one (409).
	referenced func(tx *store.Tx, id string) error
	// deleted removes what belongs to the entity alone, in the delete's transaction.
	deleted func(tx *store.Tx, id string) error
	// policyNeutral: policies neither name nor depend on the entity, so its changes leave
	// the policy index and the sessions alone.
	policyNeutral bool
}

// noteChange tells the policy index of a committed change (revoke: it may take rights away).
func (k kind[T, P]) noteChange(m *Model, tx *store.Tx, revoke bool) {
	if !k.policyNeutral {
		m.changedTx(tx, revoke)
	}
}

func createEntity[T any, P entity[T]](m *Model, k kind[T, P], rec P) error {
	now := m.now()
	b := rec.base()
	if b.ID == "" {
		b.ID = newID()
	}
	b.CreatedAt, b.UpdatedAt = now, now
	return m.st.Update(func(tx *store.Tx) error {
		if k.check != nil {
			if err := k.check(tx, rec); err != nil {
				return err
			}
		}
		if err := k.coll.Create(tx, (*T)(rec)); err != nil {
			return conflict(err)
		}
		k.noteChange(m, tx, false)
		return nil
	})
}

func getEntity[T any, P entity[T]](m *Model, k kind[T, P], id string) (P, error) {
	var out P
	err := m.st.View(func(tx *store.Tx) error {
		rec, err := k.coll.Get(tx, id)
		out = P(rec)
		return missing(err, k.name, id)
	})
	return out, err
}

func allEntities[T any, P entity[T]](m *Model, k kind[T, P]) ([]P, error) {
	var out []P
	err := m.st.View(func(tx *store.Tx) error {
		return k.coll.Each(tx, func(rec *T) error { out = append(out, P(rec)); return nil })
	})
	return out, err
}

// updateEntity applies change to a copy of the record and stores it after check; id and
// creation time cannot change.
func updateEntity[T any, P entity[T]](m *Model, k kind[T, P], id string, change func(P) error) (P, error) {
	var out P
	err := m.st.Update(func(tx *store.Tx) error {
		cur, err := k.coll.Get(tx, id)
		if err != nil {
			return missing(err, k.name, id)
		}
		next := P(cur)
		created := next.base().CreatedAt
		if err := change(next); err != nil {
			return err
		}
		b := next.base()
		b.ID, b.CreatedAt, b.UpdatedAt = id, created, m.now()
		if k.check != nil {
			if err := k.check(tx, next); err != nil {
				return err
			}
		}
		if err := k.coll.Put(tx, (*T)(next)); err != nil {
			return conflict(err)
		}
		k.noteChange(m, tx, true)
		out = next
		return nil
	})
	return out, err
}

func deleteEntity[T any, P entity[T]](m *Model, k kind[T, P], id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		if ok, err := k.coll.Has(tx, id); err != nil {
			return err
		} else if !ok {
			return notFound(k.name, id)
		}
		if k.referenced != nil {
			if err := k.referenced(tx, id); err != nil {
				return err
			}
		}
		if k.deleted != nil {
			if err := k.deleted(tx, id); err != nil {
				return err
			}
		}
		if err := k.coll.Delete(tx, id); err != nil {
			return err
		}
		k.noteChange(m, tx, true)
		return nil
	})
}
