package model

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zmesh/zmesh/controlplane/store"
)

// The policy index answers "which services may this identity dial or bind, and through which
// edge routers" without scanning policies per request. It holds every entity that policies
// name as a bit position, and every policy as two bitsets (the identities it applies to and
// the services or routers it grants; a service policy also the posture checks it names).
// It is rebuilt from the store after any change to identities, services, routers, posture
// checks or policies, the first time it is needed.

// bitset is a set of entity positions.
type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) or(o bitset) {
	for i := range b {
		b[i] |= o[i]
	}
}
func (b bitset) and(o bitset) {
	for i := range b {
		b[i] &= o[i]
	}
}
func (b bitset) fill(n int) {
	for i := range b {
		b[i] = ^uint64(0)
	}
	if r := n % 64; r != 0 {
		b[len(b)-1] = 1<<r - 1
	}
}
func (b bitset) each(f func(int)) {
	for w, word := range b {
		for word != 0 {
			t := bits.TrailingZeros64(word)
			f(w*64 + t)
			word &^= 1 << t
		}
	}
}

// population is one entity type as the index sees it: ids by position, positions by id, and
// for each attribute the set of entities that carry it.
type population struct {
	ids   []string
	pos   map[string]int
	attrs map[string]bitset
}

func newPopulation(n int) *population {
	return &population{ids: make([]string, 0, n), pos: make(map[string]int, n), attrs: map[string]bitset{}}
}

func (p *population) add(id string, attrs []string, n int) {
	i := len(p.ids)
	p.ids = append(p.ids, id)
	p.pos[id] = i
	for _, a := range attrs {
		s := p.attrs[a]
		if s == nil {
			s = newBitset(n)
			p.attrs[a] = s
		}
		s.set(i)
	}
}

// match returns the entities that roles select under semantic: @id selects that entity;
// #all selects every one; #attributes select those that carry all of them (AllOf) or any of
// them (AnyOf).
func (p *population) match(roles []string, semantic string) bitset {
	out := newBitset(len(p.ids))
	var attrs []string
	for _, r := range roles {
		switch {
		case r == roleAll:
			out.fill(len(p.ids))
			return out
		case r[0] == '@':
			if i, ok := p.pos[r[1:]]; ok {
				out.set(i)
			}
		case r[0] == '#':
			attrs = append(attrs, r[1:])
		}
	}
	if len(attrs) == 0 {
		return out
	}
	sel := newBitset(len(p.ids))
	if semantic == SemanticAny {
		for _, a := range attrs {
			if s := p.attrs[a]; s != nil {
				sel.or(s)
			}
		}
	} else {
		sel.fill(len(p.ids))
		for _, a := range attrs {
			s := p.attrs[a]
			if s == nil {
				return out
			}
			sel.and(s)
		}
	}
	out.or(sel)
	return out
}

type grant struct {
	id, name   string
	identities bitset
	targets    bitset // services or edge routers
	posture    bitset // the posture checks a service policy names; nil when none
}

type policyIndex struct {
	gen        uint64
	identities *population
	services   *population
	routers    *population
	serviceRec []*Service
	// serviceNames are the positions of services by name.
	serviceNames map[string]int
	routerRec    []*EdgeRouter
	checks       *population // posture checks
	checkRec     []*PostureCheck
	timed        bool // a service policy names a posture check that time alone can fail
	dial, bind   []grant
	erp          []grant // identities -> routers
	serp         []grant // services (in identities' place) -> routers
}

type indexCache struct {
	mu  sync.Mutex
	gen atomic.Uint64 // bumped by every committed change policies depend on
	idx *policyIndex
}

// changed records, on commit, that policy-relevant data changed. A change that may take rights
// away (an update or a delete) also ends the sessions no policy allows any more.
func (m *Model) changed(tx *store.Tx) { m.changedTx(tx, true) }

// added records a change that only adds entities, so no right is lost.
func (m *Model) added(tx *store.Tx) { m.changedTx(tx, false) }

// changedTx is changed or added. The revocation writes: it runs only on the member that
// made the change (see replay.go); the other members bump their index from the records
// replayed (policyDataChanged).
func (m *Model) changedTx(tx *store.Tx, revoke bool) {
	tx.OnCommit(func() {
		m.policyDataChanged()
		if !revoke {
			return
		}
		if n, err := m.RevokeUnauthorized(); err != nil {
			m.log.Error("revoke sessions after a policy change", "err", err)
		} else if n > 0 {
			m.log.Info("ended sessions no policy allows any more", "count", n)
		}
	})
}

// policyDataChanged moves the policy index's generation and the time clients refetch their
// services after: what every member does after a change of policy-relevant data.
func (m *Model) policyDataChanged() {
	m.cache.gen.Add(1)
	m.bumpLastChange()
}

// clientDataChanged records, on commit, a change of what clients see of their services that
// no policy depends on (an identity's service configs): clients refetch, the policy index
// stays.
func (m *Model) clientDataChanged(tx *store.Tx) { tx.OnCommit(m.bumpLastChange) }

// bumpLastChange moves the time of the last change clients refetch their services after.
func (m *Model) bumpLastChange() {
	for {
		last := m.lastChange.Load()
		if m.lastChange.CompareAndSwap(last, max(m.now().UnixNano(), last+1)) {
			return
		}
	}
}

// policies returns the current policy index, rebuilding it if something changed.
func (m *Model) policies() (*policyIndex, error) {
	m.cache.mu.Lock()
	defer m.cache.mu.Unlock()
	gen := m.cache.gen.Load()
	if m.cache.idx != nil && m.cache.idx.gen == gen {
		return m.cache.idx, nil
	}
	idx := &policyIndex{gen: gen}
	err := m.st.View(func(tx *store.Tx) error {
		ids, err := m.c.identities.All(tx)
		if err != nil {
			return err
		}
		idx.identities = newPopulation(len(ids))
		for _, i := range ids {
			idx.identities.add(i.ID, i.RoleAttributes, len(ids))
		}
		if idx.serviceRec, err = m.c.services.All(tx); err != nil {
			return err
		}
		idx.services = newPopulation(len(idx.serviceRec))
		idx.serviceNames = make(map[string]int, len(idx.serviceRec))
		for i, s := range idx.serviceRec {
			idx.services.add(s.ID, s.RoleAttributes, len(idx.serviceRec))
			idx.serviceNames[s.Name] = i
		}
		if idx.routerRec, err = m.c.edgeRouters.All(tx); err != nil {
			return err
		}
		idx.routers = newPopulation(len(idx.routerRec))
		for _, r := range idx.routerRec {
			idx.routers.add(r.ID, r.RoleAttributes, len(idx.routerRec))
		}
		if idx.checkRec, err = m.c.postureChecks.All(tx); err != nil {
			return err
		}
		idx.checks = newPopulation(len(idx.checkRec))
		for _, c := range idx.checkRec {
			idx.checks.add(c.ID, c.RoleAttributes, len(idx.checkRec))
		}
		if err := m.c.servicePolicies.Each(tx, func(p *ServicePolicy) error {
			if idx.namesMissingCheck(p) {
				// A posture check the policy names by id is gone (deleted while the policy
				// was written): the policy grants nothing rather than nothing gated.
				return nil
			}
			g := grant{id: p.ID, name: p.Name, identities: idx.identities.match(p.IdentityRoles, p.Semantic),
				targets: idx.services.match(p.ServiceRoles, p.Semantic), posture: idx.postureOf(p)}
			if p.Type == PolicyDial {
				idx.dial = append(idx.dial, g)
			} else {
				idx.bind = append(idx.bind, g)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := m.c.edgeRouterPolicies.Each(tx, func(p *EdgeRouterPolicy) error {
			idx.erp = append(idx.erp, grant{id: p.ID, identities: idx.identities.match(p.IdentityRoles, p.Semantic),
				targets: idx.routers.match(p.EdgeRouterRoles, p.Semantic)})
			return nil
		}); err != nil {
			return err
		}
		return m.c.serviceEdgeRouterPolicies.Each(tx, func(p *ServiceEdgeRouterPolicy) error {
			idx.serp = append(idx.serp, grant{id: p.ID, identities: idx.services.match(p.ServiceRoles, p.Semantic),
				targets: idx.routers.match(p.EdgeRouterRoles, p.Semantic)})
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	idx.timed = idx.hasTimedChecks()
	m.cache.idx = idx
	return idx, nil
}

// granted returns the targets the grants give to entity position i.
func granted(grants []grant, i, n int) bitset {
	out := newBitset(n)
	for _, g := range grants {
		if g.identities.has(i) {
			out.or(g.targets)
		}
	}
	return out
}

// ServiceAccess is a service an identity may use, with how.
type ServiceAccess struct {
	*Service
	Dial, Bind bool
}

// ServicesFor returns the services the identity may dial or bind, in service id order.
func (m *Model) ServicesFor(identityID string) ([]ServiceAccess, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	i, ok := idx.identities.pos[identityID]
	if !ok {
		return nil, notFound("identity", identityID)
	}
	n := len(idx.services.ids)
	dial, bind := granted(idx.dial, i, n), granted(idx.bind, i, n)
	all := newBitset(n)
	all.or(dial)
	all.or(bind)
	var out []ServiceAccess
	all.each(func(s int) {
		out = append(out, ServiceAccess{Service: idx.serviceRec[s], Dial: dial.has(s), Bind: bind.has(s)})
	})
	return out, nil
}

// Allowed reports whether the identity may use the service for policy type typ (Dial or
// Bind), and the ids of the policies that allow it.
func (m *Model) Allowed(identityID, serviceID, typ string) ([]string, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	return idx.allowed(identityID, serviceID, typ), nil
}

func (idx *policyIndex) allowed(identityID, serviceID, typ string) []string {
	var out []string
	for _, g := range idx.grantsFor(identityID, serviceID, typ) {
		out = append(out, g.id)
	}
	return out
}

// grantsFor returns the service policies of type typ that grant the identity the service,
// whatever posture they ask for.
func (idx *policyIndex) grantsFor(identityID, serviceID, typ string) []*grant {
	i, ok := idx.identities.pos[identityID]
	s, ok2 := idx.services.pos[serviceID]
	if !ok || !ok2 {
		return nil
	}
	grants := idx.dial
	if typ == PolicyBind {
		grants = idx.bind
	}
	var out []*grant
	for gi := range grants {
		if g := &grants[gi]; g.identities.has(i) && g.targets.has(s) {
			out = append(out, g)
		}
	}
	return out
}

// EdgeRoutersFor returns the enrolled, enabled edge routers the identity may connect to that
// may carry the service, in id order; with serviceID "" every router the identity may
// connect to.
func (m *Model) EdgeRoutersFor(identityID, serviceID string) ([]*EdgeRouter, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	i, ok := idx.identities.pos[identityID]
	if !ok {
		return nil, notFound("identity", identityID)
	}
	n := len(idx.routers.ids)
	routers := granted(idx.erp, i, n)
	if serviceID != "" {
		s, ok := idx.services.pos[serviceID]
		if !ok {
			return nil, notFound("service", serviceID)
		}
		routers.and(granted(idx.serp, s, n))
	}
	var out []*EdgeRouter
	routers.each(func(r int) {
		if rec := idx.routerRec[r]; !rec.Disabled && rec.IsVerified {
			out = append(out, idx.routerRec[r])
		}
	})
	slices.SortFunc(out, func(a, b *EdgeRouter) int { return compareStr(a.ID, b.ID) })
	return out, nil
}

// EdgeRouterAllows reports whether the identity may use the edge router for the service: what
// EdgeRoutersFor answers for one router, without listing the others.
func (m *Model) EdgeRouterAllows(identityID, routerID, serviceID string) (bool, error) {
	idx, err := m.policies()
	if err != nil {
		return false, err
	}
	i, s, err := idx.pair(identityID, serviceID)
	if err != nil {
		return false, err
	}
	r, ok := idx.routers.pos[routerID]
	if !ok {
		return false, nil
	}
	if rec := idx.routerRec[r]; rec.Disabled || !rec.IsVerified {
		return false, nil
	}
	return grants(idx.erp, i, r) && grants(idx.serp, s, r), nil
}

// pair returns the positions of an identity and a service in the index; either one missing is
// NOT_FOUND.
func (idx *policyIndex) pair(identityID, serviceID string) (identity, service int, err error) {
	i, ok := idx.identities.pos[identityID]
	if !ok {
		return 0, 0, notFound("identity", identityID)
	}
	s, ok := idx.services.pos[serviceID]
	if !ok {
		return 0, 0, notFound("service", serviceID)
	}
	return i, s, nil
}

// grants reports whether one of the grants gives target t to entity position i.
func grants(list []grant, i, t int) bool {
	for _, g := range list {
		if g.identities.has(i) && g.targets.has(t) {
			return true
		}
	}
	return false
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// AllowedWithoutPosture reports whether a policy that asks for no posture check grants the
// identity the service for typ: what an initiator with no API session, and so no posture
// data (a router's tunnel, a client at a transport listener), needs.
func (m *Model) AllowedWithoutPosture(identityID, serviceID, typ string) (bool, error) {
	idx, err := m.policies()
	if err != nil {
		return false, err
	}
	return ungated(idx.grantsFor(identityID, serviceID, typ)), nil
}
