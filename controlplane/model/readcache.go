package model

import (
	"sync"
	"sync/atomic"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Read caches for the circuit path, so that a router's circuit request is answered without a
// store transaction: the terminators of a service and dial sessions by token. (Services come
// from the policy index, which every change of a service rebuilds.) Each cache is valid for
// one generation of what it was read from; the generation moves once a transaction that
// changed those records has committed, whatever made the change (API, cascade, revocation),
// before the call that made it returns. A reader loads the generation before it opens its
// store transaction, and keeps what it read only under that generation: a value read before a
// commit is never served after it.

// maxCached bounds the entries of one read cache; a full cache starts over.
const maxCached = 100_000

// genCache is a map valid for one generation.
type genCache[V any] struct {
	gen atomic.Uint64 // moved after each committed change of the source

	mu sync.Mutex
	at uint64 // the generation of entries
	m  map[string]V
}

// bump records a committed change of the source.
func (c *genCache[V]) bump() { c.gen.Add(1) }

// bumpOnCommit moves the generation once tx commits.
func (c *genCache[V]) bumpOnCommit(tx *store.Tx) { tx.OnCommit(c.bump) }

// get returns the entry for key if it is of the current generation. It also returns the
// generation to read the store under on a miss.
func (c *genCache[V]) get(key string) (v V, gen uint64, ok bool) {
	gen = c.gen.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == gen {
		v, ok = c.m[key]
	}
	return v, gen, ok
}

// put keeps v, read from the store after gen was loaded, unless the source changed since.
func (c *genCache[V]) put(key string, v V, gen uint64) {
	if c.gen.Load() != gen {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.at > gen:
		return // entries of a newer generation are already kept
	case c.at < gen || c.m == nil || len(c.m) >= maxCached:
		c.at, c.m = gen, make(map[string]V)
	}
	c.m[key] = v
}

// readCaches are the model's read caches.
type readCaches struct {
	terminators genCache[[]*Terminator] // by service id
	// sessions holds dial and bind sessions by token whose API session existed when read; its
	// generation moves with every change of sessions and every deletion of an API session.
	sessions genCache[*Session]
}

// watchReads hooks the read caches to the collections they read. These hooks only update
// memory: they run on every member, for its own writes and the others' (replayed).
// A replayed change reaches the caches just after the store applied it, not before.
func (m *Model) watchReads() {
	m.c.terminators.OnChange = func(tx *store.Tx, _ string) { m.reads.terminators.bumpOnCommit(tx) }
	m.c.sessions.OnChange = func(tx *store.Tx, id string) {
		m.reads.sessions.bumpOnCommit(tx)
		m.sessionHooks.watch(tx, id)
	}
	m.c.apiSessions.OnChange = func(tx *store.Tx, id string) {
		// Writes of activity leave the cached sessions alone: only a deletion ends them.
		if ok, err := m.c.apiSessions.Has(tx, id); err != nil || !ok {
			m.reads.sessions.bumpOnCommit(tx)
		}
		m.apiSessionHooks.watch(tx, id)
	}
}

// CachedTerminatorsOf is TerminatorsOf from the read cache. The terminators are shared with
// other callers: they must not be modified.
func (m *Model) CachedTerminatorsOf(serviceID string) ([]*Terminator, error) {
	c := &m.reads.terminators
	list, gen, ok := c.get(serviceID)
	if ok {
		return list, nil
	}
	list, err := m.TerminatorsOf(serviceID)
	if err != nil {
		return nil, err
	}
	c.put(serviceID, list, gen)
	return list, nil
}

// CachedService returns the service with id from the policy index, which reflects every
// committed change of services. The service is shared with other callers: it must not be
// modified.
func (m *Model) CachedService(id string) (*Service, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	if i, ok := idx.services.pos[id]; ok {
		return idx.serviceRec[i], nil
	}
	return nil, notFound("service", id)
}

// CachedServiceByName is CachedService for the service named name.
func (m *Model) CachedServiceByName(name string) (*Service, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	if i, ok := idx.serviceNames[name]; ok {
		return idx.serviceRec[i], nil
	}
	return nil, notFound("service", name)
}
