package model

import (
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Writes made on another member of a controller cluster reach this member's store as
// replayed write sets: the store calls the OnChange of each collection (watchReplays has it
// watch them all) for every record the write set wrote, with tx.Replayed() true, and runs
// what they defer with OnCommit after the commit. What the model does after a change is of
// two kinds:
//   - keeping memory in step: the policy index, the read caches, the JWKS cache, the
//     refused session requests kept for an identity, and the change hooks that feed the
//     routers' session sync, the control channel and the circuits. It runs on every member: on the member that
//     made the change its model functions call it (changed, routerChanged, certsChanged, the
//     hooks' watch), and on the others the hooks below derive it from the records written;
//   - writing after a change: ending the sessions no policy allows any more
//     (RevokeUnauthorized) and the API sessions whose certificate is no longer current
//     (endStaleSessions). It runs only on the member that made the change, from its
//     Update's OnCommit (which a replayed write set does not carry), and its own writes
//     then reach every member like any other; running it on every member would repeat it.
//
// A member whose store's content is replaced at once (a snapshot of the log installed
// because it lagged too far) learns of no record's change: contentReplaced then drops
// everything kept in memory of the content, and tells the hooks of OnContentReplaced.

// replayedOnly makes f the OnChange of a collection whose hooks on the member that made a
// change are called by the model's functions: on that member it does nothing.
func replayedOnly(f func(tx *store.Tx, id string)) func(tx *store.Tx, id string) {
	return func(tx *store.Tx, id string) {
		if tx.Replayed() {
			f(tx, id)
		}
	}
}

// watchReplays has the store call the collections' hooks for other members' write sets, and
// sets the hooks of the collections whose effects the model's functions call themselves.
func (m *Model) watchReplays() {
	c := &m.c
	// The policy index reads these; a change through the API also bumps the time clients
	// refetch their services after.
	policy := func(tx *store.Tx, _ string) { tx.OnCommit(m.policyDataChanged) }
	c.services.OnChange = replayedOnly(policy)
	c.servicePolicies.OnChange = replayedOnly(policy)
	c.edgeRouterPolicies.OnChange = replayedOnly(policy)
	c.serviceEdgeRouterPolicies.OnChange = replayedOnly(policy)
	c.postureChecks.OnChange = replayedOnly(policy)
	// What clients see of their services, beside the policy index.
	clientData := func(tx *store.Tx, _ string) { m.clientDataChanged(tx) }
	c.configs.OnChange = replayedOnly(clientData)
	c.configTypes.OnChange = replayedOnly(clientData)
	c.identityServiceConfigs.OnChange = replayedOnly(clientData)

	c.identities.OnChange = replayedOnly(func(tx *store.Tx, id string) {
		cur, curErr := c.identities.Get(tx, id)
		old, oldErr := c.identities.Before(tx, id)
		both := curErr == nil && oldErr == nil
		if both && clientInfoOnly(old, cur) {
			return // RecordClientInfo: nothing in memory depends on it
		}
		policy(tx, id)
		// Disabling, enabling, deletion and a new external id change what the identity
		// may authenticate with.
		if !both || old.ExternalID != cur.ExternalID || !sameTime(old.DisabledAt, cur.DisabledAt) ||
			!sameTime(old.DisabledUntil, cur.DisabledUntil) {
			m.identityCertsReplayed(tx, id)
		}
		if errors.Is(curErr, store.ErrNotFound) {
			tx.OnCommit(func() { c.failed.forget(id) })
		}
	})
	c.edgeRouters.OnChange = replayedOnly(func(tx *store.Tx, id string) {
		policy(tx, id)
		// The control channel decides on the router's record as it is; a connection made
		// with the certificate an extension replaced stays the router's while the record
		// names it as the previous one, as it does on the member that made the extension.
		change := RouterChange{}
		if r, err := c.edgeRouters.Get(tx, id); err == nil {
			change = r.RecordedChange()
		}
		m.routerChanged(tx, id, change)
	})
	c.authenticators.OnChange = replayedOnly(func(tx *store.Tx, id string) {
		// A certificate added, replaced or deleted; a password changed or a certificate
		// authenticator's other fields rewritten change no certificate admitted.
		cur, curErr := c.authenticators.Get(tx, id)
		old, oldErr := c.authenticators.Before(tx, id)
		a := cur
		if curErr != nil {
			a = old
		}
		if a == nil || a.Method != MethodCert || curErr == nil && oldErr == nil && sameCerts(old, cur) {
			return
		}
		m.identityCertsReplayed(tx, a.IdentityID)
	})
	c.apiSessionCerts.OnChange = replayedOnly(func(tx *store.Tx, id string) {
		// Routers learn which ephemeral certificates an API session's clients may present.
		if cert := replayedRecord(tx, c.apiSessionCerts, id); cert != nil {
			m.apiSessionHooks.watch(tx, cert.APISessionID)
		}
	})
	c.cas.OnChange = replayedOnly(func(tx *store.Tx, id string) {
		// What caTrustChanged follows on the member that made the change: a CA created, or
		// changed otherwise, changes no certificate admitted.
		old, err := c.cas.Before(tx, id)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				m.log.Error("read a CA changed on another controller", "ca", id, "err", err)
			}
			return
		}
		cur, err := c.cas.Get(tx, id)
		if err == nil && !caTrustMoved(old, cur) {
			return
		}
		fp := old.Fingerprint
		tx.OnCommit(func() { m.caCertsReplayed(fp) })
	})
	// The key sets of a signer changed here or on another member, once the change is
	// applied, whether or not its Update still waits for it.
	m.auth.signers.OnChange = func(tx *store.Tx, id string) {
		tx.OnCommit(func() { m.auth.jwks.forget(id) })
	}

	m.st.OnReplaced(m.contentReplaced)
	for _, w := range []interface{ Watch(*store.Store) }{
		c.identities, c.authenticators, c.apiSessions, c.apiSessionCerts, c.cas,
		c.services, c.servicePolicies, c.edgeRouters, c.edgeRouterPolicies, c.serviceEdgeRouterPolicies,
		c.sessions, c.postureChecks, c.configTypes, c.configs, c.terminators, c.identityServiceConfigs,
		m.auth.signers,
	} {
		w.Watch(m.st)
	}
}

// contentReplaced follows a replacement of the store's whole content: every read cache's
// generation and the policy index's move, clients refetch their services, the key sets of
// external JWT signers are fetched again. The store runs the hooks of OnContentReplaced
// after it (New registers it first).
func (m *Model) contentReplaced() {
	m.cache.gen.Add(1)
	m.reads.terminators.bump()
	m.reads.sessions.bump()
	m.bumpLastChange()
	m.auth.jwks.forgetAll()
	m.schemas.mu.Lock()
	clear(m.schemas.m)
	m.schemas.mu.Unlock()
}

// OnContentReplaced registers f to be called after the store's whole content was replaced
// (a cluster member installing a snapshot): no change of a record is reported for it, so
// what is kept of the content outside the model must be read again (the routers' session
// state is sent in full again). f runs on the store's hook goroutine and must not block.
func (m *Model) OnContentReplaced(f func()) { m.st.OnReplaced(f) }

// clientInfoOnly tells whether an identity's record changed in what its clients reported
// alone.
func clientInfoOnly(old, cur *Identity) bool {
	o := *old
	o.EnvInfo, o.SDKInfo = cur.EnvInfo, cur.SDKInfo
	return reflect.DeepEqual(&o, cur)
}

func sameTime(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}

// sameCerts tells whether two versions of an authenticator admit the same certificates.
func sameCerts(a, b *Authenticator) bool {
	return a.Fingerprint == b.Fingerprint && a.UnverifiedFingerprint == b.UnverifiedFingerprint &&
		a.PreviousFingerprint == b.PreviousFingerprint && a.CAFingerprint == b.CAFingerprint
}

// replayedRecord returns the record with id as the replayed write set left it or, deleted,
// as it was before; nil when neither can be read.
func replayedRecord[T any](tx *store.Tx, c *store.Collection[T], id string) *T {
	rec, err := c.Get(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		rec, err = c.Before(tx, id)
	}
	if err != nil {
		return nil
	}
	return rec
}

// identityCertsReplayed is certsChanged's memory part for another member's change of what
// the identity authenticates with: the credential hooks, and its API sessions sent to
// routers again (the certificates they admit may have changed). Ending the API sessions
// that are no longer valid is the other member's, whose deletions replicate.
func (m *Model) identityCertsReplayed(tx *store.Tx, identityID string) {
	m.credentialHooks.watch(tx, identityID)
	ids, err := m.c.apiSessions.IDsWith(tx, "identityId", identityID)
	if err != nil {
		m.log.Error("read the API sessions of an identity changed on another controller", "identity", identityID, "err", err)
		return
	}
	for _, id := range ids {
		m.apiSessionHooks.watch(tx, id)
	}
}

// caCertsReplayed is caTrustChanged's memory part for another member's deletion of a
// third-party CA or change of its trust: the identities with certificates of it, or with API
// sessions opened through its external id claim, and their API sessions. It runs after the
// commit, in a read transaction of its own: the log's apply does not wait for the scan of
// every authenticator.
func (m *Model) caCertsReplayed(fingerprint string) {
	var idents, sessions []string
	err := m.st.View(func(tx *store.Tx) error {
		idents, sessions = nil, nil
		err := m.c.authenticators.Each(tx, func(a *Authenticator) error {
			if a.Method == MethodCert && a.CAFingerprint == fingerprint {
				idents = append(idents, a.IdentityID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		claimed, err := m.identitiesClaimedThrough(tx, fingerprint)
		if err != nil {
			return err
		}
		idents = append(idents, claimed...)
		slices.Sort(idents)
		idents = slices.Compact(idents)
		for _, id := range idents {
			ids, err := m.c.apiSessions.IDsWith(tx, "identityId", id)
			if err != nil {
				return err
			}
			sessions = append(sessions, ids...)
		}
		return nil
	})
	if err != nil {
		m.log.Error("read the identities of a CA changed on another controller", "ca", fingerprint, "err", err)
		return
	}
	for _, id := range idents {
		m.credentialHooks.tell(id)
	}
	for _, id := range sessions {
		m.apiSessionHooks.tell(id)
	}
}
