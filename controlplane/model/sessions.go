package model

import (
	"errors"

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
	if _, err := m.Service(serviceID); err != nil {
		if CodeOf(err) == CodeNotFound {
			return nil, nil, invalid("serviceId", serviceID, "no service with this id")
		}
		return nil, nil, err
	}
	policies, err := m.Allowed(api.IdentityID, serviceID, typ)
	if err != nil {
		return nil, nil, err
	}
	if len(policies) == 0 {
		// Not revealing whether the service exists beyond the identity's reach.
		return nil, nil, invalid("serviceId", serviceID, "no service policy allows this identity to %s this service", lower(typ))
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
	return s, routers, nil
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

// RevokeUnauthorized deletes every session no policy allows any more (after a policy or an
// identity's or service's attributes changed) and returns how many it deleted.
func (m *Model) RevokeUnauthorized() (int, error) {
	idx, err := m.policies()
	if err != nil {
		return 0, err
	}
	var revoke []string
	err = m.st.View(func(tx *store.Tx) error {
		return m.c.sessions.Each(tx, func(s *Session) error {
			if len(idx.allowed(s.IdentityID, s.ServiceID, s.Type)) == 0 {
				revoke = append(revoke, s.ID)
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
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
