package model

import (
	"fmt"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// DisableIdentity disables an identity for d, or until EnableIdentity when d is 0: it can
// no longer authenticate by any method nor enroll. Its API sessions are refused from the
// commit on, and end right after it with their sessions (endStaleSessions), so routers close
// its edge connections and circuits as the change reaches them. Disabling again restarts the
// period. The default administrator and the identities of edge routers cannot be disabled.
func (m *Model) DisableIdentity(id string, d time.Duration) error {
	if d < 0 {
		return invalid("durationMinutes", int64(d/time.Minute), "must be 0 (until enabled) or a positive number of minutes")
	}
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
		m.credentialHooks.watch(tx, id)
		return m.c.identities.Put(tx, cur)
	})
	if err != nil {
		return err
	}
	ended, err := m.endStaleSessions(id)
	if err != nil {
		return fmt.Errorf("identity %s is disabled, but ending its API sessions failed (the controller refuses them; the next sweep ends them): %w", id, err)
	}
	m.log.Info("identity disabled; its API sessions ended", "identity", id, "apiSessions", ended, "for", d)
	return nil
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
