package model

import (
	"errors"
	"fmt"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Session is an API session's right to dial or bind one service, created when a policy
// allows it; routers accept circuits for it.
type Session struct {
	Base
	Token        string `json:"token"`
	APISessionID string `json:"apiSessionId"`
	IdentityID   string `json:"identityId"`
	ServiceID    string `json:"serviceId"`
	Type         string `json:"type"`
}

// CodeNoEdgeRoutersAvailable: no edge router may carry the service for the identity.
const CodeNoEdgeRoutersAvailable = "NO_EDGE_ROUTERS_AVAILABLE"

// CreateSession opens a session of type typ (Dial or Bind) for the API session on the
// service, when a service policy allows it and at least one edge router may carry it. It
// returns the session and those edge routers.
func (m *Model) CreateSession(api *APISession, serviceID, typ string, tags Tags) (*Session, []*EdgeRouter, error) {
	if typ != PolicyDial && typ != PolicyBind {
		return nil, nil, invalid("type", typ, "allowed: Dial, Bind")
	}
	svc, err := m.Service(serviceID)
	if err != nil {
		if CodeOf(err) == CodeNotFound {
			return nil, nil, invalid("serviceId", serviceID, "no service with this id")
		}
		return nil, nil, err
	}
	idx, err := m.policies()
	if err != nil {
		return nil, nil, err
	}
	grants := idx.grantsFor(api.IdentityID, serviceID, typ)
	if len(grants) == 0 {
		// Not revealing whether the service exists beyond the identity's reach.
		return nil, nil, invalid("serviceId", serviceID, "no service policy allows this identity to %s this service", lower(typ))
	}
	// One granting policy whose posture checks all hold is enough.
	posture := m.c.posture.get(api.ID)
	now := m.now()
	if err := idx.postureAllows(grants, api, posture, now); err != nil {
		m.recordPostureFailure(idx, grants, api, posture, svc, typ, now)
		return nil, nil, err
	}
	routers, err := m.EdgeRoutersFor(api.IdentityID, serviceID)
	if err != nil {
		return nil, nil, err
	}
	if len(routers) == 0 {
		return nil, nil, errorf(CodeNoEdgeRoutersAvailable, "no edge router may carry service %q for this identity", serviceID)
	}
	s := &Session{Base: m.newBase(tags), Token: newToken(), APISessionID: api.ID, IdentityID: api.IdentityID, ServiceID: serviceID, Type: typ}
	err = m.st.Update(func(tx *store.Tx) error {
		if _, err := m.c.apiSessions.Get(tx, api.ID); err != nil {
			return errNoSession
		}
		return m.c.sessions.Create(tx, s)
	})
	if err != nil {
		return nil, nil, err
	}
	// A policy, posture check or posture report that changed while the session was being
	// created was not seen by the revocation that followed the change: check the session
	// against the current state now. In a cluster, another controller's change applied
	// before the session reaches the policy index once its hooks have run.
	m.st.WaitReplayed()
	if latest := m.c.posture.get(api.ID); latest != posture || m.cache.gen.Load() != idx.gen {
		if err := m.recheckSession(api, serviceID, typ, latest); err != nil {
			if derr := m.DeleteSession(s.ID); derr != nil && CodeOf(derr) != CodeNotFound {
				return nil, nil, fmt.Errorf("delete session %s created against outdated policies: %w", s.ID, derr)
			}
			return nil, nil, err
		}
	}
	return s, routers, nil
}

// recheckSession evaluates a new session against a fresh policy index and posture.
func (m *Model) recheckSession(api *APISession, serviceID, typ string, posture *postureData) error {
	idx, err := m.policies()
	if err != nil {
		return err
	}
	grants := idx.grantsFor(api.IdentityID, serviceID, typ)
	if len(grants) == 0 {
		return invalid("serviceId", serviceID, "no service policy allows this identity to %s this service", lower(typ))
	}
	return idx.postureAllows(grants, api, posture, m.now())
}

func lower(s string) string {
	if s == PolicyDial {
		return "dial"
	}
	return "bind"
}

// SessionsOf returns the sessions of an API session.
func (m *Model) SessionsOf(apiSessionID string) ([]*Session, error) {
	var out []*Session
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.sessions.With(tx, "apiSessionId", apiSessionID)
		return err
	})
	return out, err
}

// Sessions returns every session.
func (m *Model) Sessions() ([]*Session, error) {
	var out []*Session
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.sessions.All(tx)
		return err
	})
	return out, err
}

// Session returns the session with id.
func (m *Model) Session(id string) (*Session, error) {
	var out *Session
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.sessions.Get(tx, id)
		return missing(err, "session", id)
	})
	return out, err
}

// DeleteSession ends a session.
func (m *Model) DeleteSession(id string) error {
	return m.st.Update(func(tx *store.Tx) error { return missing(m.c.sessions.Delete(tx, id), "session", id) })
}

// deleteSessionsWhere deletes the sessions whose index holds value.
func (m *Model) deleteSessionsWhere(tx *store.Tx, index, value string) error {
	return m.deleteAll(m.c.sessions.IDsWith, index, m.c.sessions.Delete)(tx, value)
}

// RevokeUnauthorized deletes every session no policy allows any more (after a policy, a
// posture check or an identity's or service's attributes changed, or when time-based
// posture ran out) and returns how many it deleted. A session is allowed while one policy
// grants it whose posture checks all hold for its API session.
func (m *Model) RevokeUnauthorized() (int, error) { return m.revokeSessions("") }

// revokeSessions is RevokeUnauthorized for the sessions of one API session, or of all with
// apiSessionID "".
func (m *Model) revokeSessions(apiSessionID string) (int, error) {
	idx, err := m.policies()
	if err != nil {
		return 0, err
	}
	now := m.now()
	var revoke []string
	err = m.st.View(func(tx *store.Tx) error {
		apis := map[string]*APISession{} // nil: the API session is gone, its sessions with it
		visit := func(s *Session) error {
			grants := idx.grantsFor(s.IdentityID, s.ServiceID, s.Type)
			if len(grants) == 0 {
				revoke = append(revoke, s.ID)
				return nil
			}
			if ungated(grants) {
				return nil
			}
			api, seen := apis[s.APISessionID]
			if !seen {
				rec, err := m.c.apiSessions.Get(tx, s.APISessionID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				api, apis[s.APISessionID] = rec, rec
			}
			if api == nil {
				return nil
			}
			if err := idx.postureAllows(grants, api, m.c.posture.get(api.ID), now); err != nil {
				m.log.Info("ending a session whose posture no longer holds", "sessionId", s.ID, "apiSessionId", api.ID, "reason", err.Error())
				revoke = append(revoke, s.ID)
			}
			return nil
		}
		if apiSessionID == "" {
			return m.c.sessions.Each(tx, visit)
		}
		list, err := m.c.sessions.With(tx, "apiSessionId", apiSessionID)
		if err != nil {
			return err
		}
		for _, s := range list {
			if err := visit(s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("find sessions to revoke: %w", err)
	}
	n := 0
	for _, id := range revoke {
		if err := m.DeleteSession(id); err == nil {
			n++
		} else if !errors.Is(err, store.ErrNotFound) && CodeOf(err) != CodeNotFound {
			return n, err
		}
	}
	return n, nil
}

// LastChange returns when policy-relevant data last changed (service-updates).
func (m *Model) LastChange() int64 { return m.lastChange.Load() }

// SessionByTokenOf returns the session with token if it belongs to the API session.
func (m *Model) SessionByTokenOf(apiSessionID, token string) (*Session, error) {
	var out *Session
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.sessions.Lookup(tx, "token", token)
		if err == nil && out.APISessionID != apiSessionID {
			return notFound("session", "")
		}
		return missing(err, "session", "")
	})
	return out, err
}

// DialSession returns the session with token when it is a session of type typ for the
// service and its API session still exists: what a router checks before it carries a
// client's circuit. Sessions come from a read cache that every committed change of sessions,
// and every deletion of an API session, empties; the session returned is shared with other
// callers and must not be modified.
func (m *Model) DialSession(token, serviceID, typ string) (*Session, error) {
	c := &m.reads.sessions
	s, gen, ok := c.get(token)
	if !ok {
		err := m.st.View(func(tx *store.Tx) (err error) {
			if s, err = m.c.sessions.Lookup(tx, "token", token); err != nil {
				return missing(err, "session", "")
			}
			if ok, err := m.c.apiSessions.Has(tx, s.APISessionID); err != nil {
				return err
			} else if !ok {
				return notFound("session", "")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		c.put(token, s, gen)
	}
	if s.ServiceID != serviceID || s.Type != typ {
		return nil, notFound("session", "")
	}
	return s, nil
}
