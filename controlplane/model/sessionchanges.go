package model

import (
	"errors"
	"sync"

	"github.com/zmesh/zmesh/controlplane/store"
)

// changeHooks are the functions registered for the committed changes of one collection.
type changeHooks struct {
	mu  sync.Mutex
	fns []func(id string)
}

func (h *changeHooks) add(f func(id string)) {
	h.mu.Lock()
	h.fns = append(h.fns, f)
	h.mu.Unlock()
}

// watch is a collection's OnChange: it reports id to the hooks once tx has committed, never
// for an attempt that failed or was run again.
func (h *changeHooks) watch(tx *store.Tx, id string) {
	h.mu.Lock()
	fns := h.fns
	h.mu.Unlock()
	if len(fns) == 0 {
		return
	}
	tx.OnCommit(func() {
		for _, f := range fns {
			f(id)
		}
	})
}

// tell reports id to the hooks now: a change committed already.
func (h *changeHooks) tell(id string) {
	h.mu.Lock()
	fns := h.fns
	h.mu.Unlock()
	for _, f := range fns {
		f(id)
	}
}

// OnAPISessionChange registers f to be called with an API session's id after a committed
// transaction created, rewrote (activity, MFA) or deleted it, whatever the path: login,
// logout, expiry, identity deletion. f runs on the goroutine that made the change, after the
// commit, and must not block; changes made before it was registered are not reported.
func (m *Model) OnAPISessionChange(f func(apiSessionID string)) { m.apiSessionHooks.add(f) }

// OnCredentialsChange registers f to be called with an identity's id after a committed
// change of what it may authenticate with: a certificate authenticator added, replaced or
// deleted, a CA's trust or claim withdrawn, the identity disabled, its external id changed,
// or the identity deleted. Its API sessions are taken care of; f is for what holds a
// certificate outside them (the circuits of transport listeners). f runs on the goroutine
// that made the change, after the commit, and must not block.
func (m *Model) OnCredentialsChange(f func(identityID string)) { m.credentialHooks.add(f) }

// OnSessionChange is OnAPISessionChange for sessions: creation, and deletion by the client,
// by logout or expiry of their API session, by identity or service deletion, or by
// revocation after a policy or posture change.
func (m *Model) OnSessionChange(f func(sessionID string)) { m.sessionHooks.add(f) }

// SessionState returns every API session (but those owing MFA) and every session, read in one transaction, in id
// order: the session state routers receive when they connect.
func (m *Model) SessionState() (apiSessions []*RoutedAPISession, sessions []*Session, err error) {
	err = m.st.View(func(tx *store.Tx) error {
		all, err := m.c.apiSessions.All(tx)
		if err != nil {
			return err
		}
		idents := map[string][]string{}
		for _, a := range all {
			if routable(a) {
				r, err := m.routedAPISession(tx, a, idents)
				if err != nil {
					return err
				}
				apiSessions = append(apiSessions, r)
			}
		}
		sessions, err = m.c.sessions.All(tx)
		return err
	})
	return apiSessions, sessions, err
}

// SessionStateOf returns the API sessions and sessions with these ids that exist, read in
// one transaction, by id; an id that is absent was deleted (or never existed).
func (m *Model) SessionStateOf(apiSessionIDs, sessionIDs []string) (map[string]*RoutedAPISession, map[string]*Session, error) {
	apis := make(map[string]*RoutedAPISession, len(apiSessionIDs))
	sessions := make(map[string]*Session, len(sessionIDs))
	err := m.st.View(func(tx *store.Tx) error {
		idents := map[string][]string{}
		for _, id := range apiSessionIDs {
			s, err := m.c.apiSessions.Get(tx, id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if routable(s) {
				if apis[id], err = m.routedAPISession(tx, s, idents); err != nil {
					return err
				}
			}
		}
		for _, id := range sessionIDs {
			s, err := m.c.sessions.Get(tx, id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			sessions[id] = s
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return apis, sessions, nil
}

// routable tells whether routers may admit clients with an API session: not while it owes
// an authentication query (MFA). Such a session reaches routers, as an update, once it has
// passed.
func routable(a *APISession) bool { return len(a.AuthQueries) == 0 }
