package sessionsync

import (
	"context"
	"slices"
	"sync"

	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// update is what one flush read: for each changed id, the entry to add or replace, or nil
// when the record is gone.
type update struct {
	apis     []apiChange
	sessions []sessionChange
}

type apiChange struct {
	id    string
	entry *ctrlproto.APISession // nil: removed
}

type sessionChange struct {
	id    string
	entry *ctrlproto.Session // nil: removed
}

// peer is a connected router: what is queued for it, which its sender goroutine sends.
type peer struct {
	routerID string
	conn     Conn
	cancel   context.CancelFunc // ends the sender
	wake     chan struct{}      // something was queued

	mu sync.Mutex
	// needSnapshot: the router is owed the full state, read after every update it was
	// queued; updates are not queued for it meanwhile (the snapshot will hold them).
	needSnapshot bool
	// snapshot is the full state, sent before the pending updates.
	snapshot []*ctrlproto.SessionState
	// apis and sessions are the pending updates, the latest value per id (nil: removed).
	apis     map[string]*ctrlproto.APISession
	sessions map[string]*ctrlproto.Session
}

func (p *peer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// queue adds u to the pending updates, unless the router waits for a snapshot. When the
// pending ids then exceed limit, they are dropped and the router is owed a snapshot
// instead; queue reports whether that happened.
func (p *peer) queue(u *update, limit int) (overflowed bool) {
	p.mu.Lock()
	if p.needSnapshot {
		p.mu.Unlock()
		return false
	}
	if p.apis == nil {
		p.apis = make(map[string]*ctrlproto.APISession)
		p.sessions = make(map[string]*ctrlproto.Session)
	}
	for _, c := range u.apis {
		p.apis[c.id] = c.entry
	}
	for _, c := range u.sessions {
		p.sessions[c.id] = c.entry
	}
	if len(p.apis)+len(p.sessions) > limit {
		p.oweLocked()
		overflowed = true
	}
	p.mu.Unlock()
	p.signal()
	return overflowed
}

// owe drops what is pending for the router and has its sender send it a fresh snapshot.
func (p *peer) owe() {
	p.mu.Lock()
	p.oweLocked()
	p.mu.Unlock()
	p.signal()
}

// oweLocked is owe under p.mu, without the signal.
func (p *peer) oweLocked() {
	p.needSnapshot, p.snapshot, p.apis, p.sessions = true, nil, nil, nil
}

func (p *peer) waitingForSnapshot() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.needSnapshot
}

// setSnapshot hands the router the full state, replacing whatever was pending.
func (p *peer) setSnapshot(msgs []*ctrlproto.SessionState) {
	p.mu.Lock()
	p.needSnapshot, p.snapshot, p.apis, p.sessions = false, msgs, nil, nil
	p.mu.Unlock()
	p.signal()
}

// take returns what is to be sent, in order: the snapshot if one is pending, then the
// pending updates in messages of at most chunk entries.
func (p *peer) take(chunk int) []*ctrlproto.SessionState {
	p.mu.Lock()
	msgs, apis, sessions := p.snapshot, p.apis, p.sessions
	p.snapshot, p.apis, p.sessions = nil, nil, nil
	p.mu.Unlock()
	if len(apis) == 0 && len(sessions) == 0 {
		return msgs
	}
	b := newBuilder(chunk)
	for id, e := range apis {
		if e == nil {
			b.removeAPISession(id)
		} else {
			b.addAPISession(*e)
		}
	}
	for id, e := range sessions {
		if e == nil {
			b.removeSession(id)
		} else {
			b.addSession(*e)
		}
	}
	return slices.Concat(msgs, b.msgs) // msgs may be shared with other routers: never append to it
}
