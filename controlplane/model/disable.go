package model

import (
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// DisableIdentity disables an identity for d, or until EnableIdentity when d is 0: it can
// no longer authenticate by any method nor enroll. In the same transaction every API
// session of the identity ends with its sessions, so routers close its edge connections
// and circuits as the change reaches them. Disabling again restarts the period. The
// default administrator and the identities of edge routers cannot be disabled.
func (m *Model) DisableIdentity(id string, d time.Duration) error {
	if d < 0 {
		return invalid("durationMinutes", int64(d/time.Minute), "must be 0 (until enabled) or a positive number of minutes")
	}
	var ended int
	err := m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.identities.Get(tx, id)
		if err != nil {
			return missing(err, "identity", id)
		}
		if cur.IsDefaultAdmin {
			return errorf(CodeCannotUpdateDefaultAdmin, "the default administrator cannot be disabled")
		}
		if ok, err := m.c.edgeRouters.Has(tx, id); err != nil {
			return err
		} else if ok {
			return invalid("id", id, "identity %q is the identity of edge router %s, which authenticates with its router certificate; delete the router or re-enroll it instead", cur.Name, id)
		}
		now := m.now()
		cur.DisabledAt, cur.DisabledUntil = &now, nil
		if d > 0 {
			until := now.Add(d)
			cur.DisabledUntil = &until
		}
		cur.UpdatedAt = now
		if err := m.c.identities.Put(tx, cur); err != nil {
			return err
		}
		ended, err = m.endSessionsOf(tx, id)
		return err
	})
	if err != nil {
		return err
	}
	// A login whose transaction read the identity before this commit and committed first
	// made an API session the scan above could not see; from now on every login sees the
	// identity disabled, so one more pass ends any such session.
	err = m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.identities.Get(tx, id)
		if err != nil || !cur.IsDisabled(m.now()) {
			return missing(err, "identity", id)
		}
		n, err := m.endSessionsOf(tx, id)
		ended += n
		return err
	})
	if err != nil && CodeOf(err) != CodeNotFound {
		return err
	}
	m.log.Info("identity disabled; its API sessions ended", "identity", id, "apiSessions", ended, "for", d)
	return nil
}

// endSessionsOf deletes, in tx, every API session of the identity and every session, and
// returns how many API sessions it deleted.
func (m *Model) endSessionsOf(tx *store.Tx, identityID string) (int, error) {
	apis, err := m.c.apiSessions.IDsWith(tx, "identityId", identityID)
	if err != nil {
		return 0, err
	}
	for _, sid := range apis {
		if err := m.deleteAPISessionTx(tx, sid); err != nil {
			return 0, err
		}
	}
	return len(apis), m.deleteSessionsWhere(tx, "identityId", identityID)
}

// EnableIdentity clears an identity's disabled state: it may authenticate and enroll again.
func (m *Model) EnableIdentity(id string) error {
	return m.st.Update(func(tx *store.Tx) error {
		cur, err := m.c.identities.Get(tx, id)
		if err != nil {
			return missing(err, "identity", id)
		}
		if cur.DisabledAt == nil && cur.DisabledUntil == nil {
			return nil
		}
		cur.DisabledAt, cur.DisabledUntil, cur.UpdatedAt = nil, nil, m.now()
		return m.c.identities.Put(tx, cur)
	})
}

// errDisabled refuses the enrollment of a disabled identity.
var errDisabled = &Error{Code: CodeUnauthorized, Message: "the identity is disabled; an administrator must enable it before it enrolls"}

// checkEnabled refuses, in tx, to let a disabled identity enroll.
func (m *Model) checkEnabled(tx *store.Tx, identityID string) error {
	id, err := m.c.identities.Get(tx, identityID)
	if err != nil {
		return missing(err, "identity", identityID)
	}
	if id.IsDisabled(m.now()) {
		return errDisabled
	}
	return nil
}
