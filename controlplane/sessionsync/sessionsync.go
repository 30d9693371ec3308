// Package sessionsync keeps every connected router's copy of the session state current: the API
// sessions and sessions routers authorize SDK clients with (channel.SessionState). When a
// router's Hello is accepted it is sent the full state in chunks (Reset … Complete); then
// every committed change of an API session or a session reaches it as an update within a
// flush interval (20 ms).
//
// Updates are built from state, not from events: the model reports the ids of changed
// records after each commit, and a flush re-reads them, so an id present in the store is
// sent as an entry to add or replace and an absent one as removed. Flushes, and the reading
// of snapshots, hold one lock while they read the store and queue what they read, so every
// router receives the values in the order they were read and a late message never brings a
// deleted entry back. An API session rewritten without a change routers see (activity,
// MFA: token, identity and admitted certificates unchanged since it was last sent) is not
// sent again; sessions are never rewritten, so each of their changes is sent. A change of an
// identity's certificates reports each of its API sessions as changed.
//
// Each router has a sender goroutine and a queue that never blocks the flusher: pending
// updates coalesce per id (the latest value wins). A router whose queue grows past
// Options.QueueLimit ids (a router that does not keep up) has its queue dropped and is sent
// a fresh full snapshot, starting with Reset, once it has taken what was already on its
// channel. So does every router when the store's whole content is replaced (a cluster
// member installing a snapshot of the log).
package sessionsync

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Defaults for zero Options fields.
const (
	// DefaultFlushInterval: a change is sent at once when nothing was sent for this long,
	// otherwise with the changes that follow it within this interval.
	DefaultFlushInterval = 20 * time.Millisecond
	// DefaultChunkEntries bounds the entries (API sessions, sessions, removed ids) of one
	// message.
	DefaultChunkEntries = 2000
	// DefaultQueueLimit is the number of distinct ids a router's queue holds before the
	// router is sent a fresh snapshot instead.
	DefaultQueueLimit = 100_000
)

// maxChunkBytes bounds the estimated JSON body of one message, well below the channel's
// limit of 4 MiB whatever the lengths of ids and tokens.
const maxChunkBytes = 1 << 20

// retryDelay is the wait before reading the store again after a read failed.
const retryDelay = time.Second

// Options tune the syncer; zero fields take the defaults.
type Options struct {
	FlushInterval time.Duration
	ChunkEntries  int
	QueueLimit    int
}

func (o Options) withDefaults() Options {
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.ChunkEntries <= 0 {
		o.ChunkEntries = DefaultChunkEntries
	}
	if o.QueueLimit <= 0 {
		o.QueueLimit = DefaultQueueLimit
	}
	return o
}

// Conn is a router's control channel as the syncer uses it; *ctrlproto.Channel is one.
type Conn interface {
	// Send queues msg, waiting while the channel's queue is full.
	Send(ctx context.Context, msg ctrlproto.Message) error
	// Done is closed once the channel is closed.
	Done() <-chan struct{}
}

// apiKey is what routers know of an API session besides its id. Activity rewrites an API
// session's record without changing it; such a rewrite is not sent.
type apiKey struct{ token, identityID, certs string }

func keyOf(a *model.RoutedAPISession) apiKey {
	return apiKey{a.Token, a.IdentityID, strings.Join(a.CertFingerprints, ",")}
}

func apiEntry(a *model.RoutedAPISession) ctrlproto.APISession {
	return ctrlproto.APISession{ID: a.ID, Token: a.Token, IdentityID: a.IdentityID, CertFingerprints: a.CertFingerprints}
}

// Syncer sends the session state to the connected routers. Create it with New before the model
// is used (it registers the model's change hooks), call Connected for each router whose
// Hello was accepted, and Run it until the controller stops.
type Syncer struct {
	model *model.Model
	log   *slog.Logger
	opts  Options

	// wake tells the flusher that ids were marked dirty.
	wake chan struct{}
	// dmu guards the ids of the records changed since the last flush.
	dmu                     sync.Mutex
	dirtyAPIs, dirtySession map[string]struct{}

	// mu serializes the reading of the store with the queuing of what was read (flushes
	// and snapshots), so that each router's queue holds values in the order they were read.
	// It also guards the fields below.
	mu    sync.Mutex
	peers map[*peer]struct{}
	// sent holds, for API sessions, what every router not waiting for a snapshot was sent
	// last (or will be, once its queue drains); an update that changes neither token nor
	// identity is not sent. An entry is dropped whenever that may not hold.
	sent    map[string]apiKey
	stopped bool
	wg      sync.WaitGroup // the routers' sender goroutines
}

// New returns a syncer of m's session state and registers for m's changes of API sessions and
// sessions; changes committed before New are in the snapshots routers get on connecting.
func New(m *model.Model, log *slog.Logger, opts Options) *Syncer {
	s := &Syncer{
		model:        m,
		log:          log.With("component", "sessionsync"),
		opts:         opts.withDefaults(),
		wake:         make(chan struct{}, 1),
		dirtyAPIs:    make(map[string]struct{}),
		dirtySession: make(map[string]struct{}),
		peers:        make(map[*peer]struct{}),
		sent:         make(map[string]apiKey),
	}
	m.OnAPISessionChange(func(id string) { s.mark(s.dirtyAPIs, id) })
	m.OnSessionChange(func(id string) { s.mark(s.dirtySession, id) })
	m.OnContentReplaced(s.resync)
	return s
}

// resync has every connected router sent the full state again, as when it connected: the
// store's content was replaced at once, and no change of a record tells what differs.
func (s *Syncer) resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.peers {
		p.owe()
	}
	if len(s.peers) > 0 {
		s.log.Info("the store's content was replaced; sending every router the full session state again", "routers", len(s.peers))
	}
}

// mark records a changed id, after its transaction committed, and wakes the flusher.
func (s *Syncer) mark(set map[string]struct{}, id string) {
	s.dmu.Lock()
	set[id] = struct{}{}
	s.dmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run sends the changes to the connected routers until ctx ends, then stops every router's
// sender and returns once they have stopped.
func (s *Syncer) Run(ctx context.Context) {
	defer s.stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		// A burst of changes is sent together, one flush interval after the previous one.
		if wait := s.opts.FlushInterval - time.Since(last); wait > 0 && !sleep(ctx, wait) {
			return
		}
		last = time.Now()
		if err := s.flush(); err != nil {
			s.log.Error("send session state updates; retrying", "err", err, "retryIn", retryDelay)
			if !sleep(ctx, retryDelay) { // the ids marked again have woken the loop
				return
			}
		}
	}
}

// sleep waits for d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// stop ends every sender and waits for them.
func (s *Syncer) stop() {
	s.mu.Lock()
	s.stopped = true
	for p := range s.peers {
		p.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Connected starts sending the session state to a router whose Hello was accepted, on conn:
// the full state first, then updates, until conn is done or the syncer stops. It does not
// block. A router that connects again gets a new Connected; the older connection's sender
// ends with that connection.
func (s *Syncer) Connected(routerID string, conn Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{
		routerID:     routerID,
		conn:         conn,
		cancel:       cancel,
		wake:         make(chan struct{}, 1),
		needSnapshot: true,
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		cancel()
		return
	}
	s.peers[p] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer s.remove(p)
		s.serve(ctx, p)
	}()
}

func (s *Syncer) remove(p *peer) {
	p.cancel()
	s.mu.Lock()
	delete(s.peers, p)
	s.mu.Unlock()
}

// takeDirty returns the ids marked since the last call.
func (s *Syncer) takeDirty() (apis, sessions []string) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	for id := range s.dirtyAPIs {
		apis = append(apis, id)
	}
	for id := range s.dirtySession {
		sessions = append(sessions, id)
	}
	clear(s.dirtyAPIs)
	clear(s.dirtySession)
	return apis, sessions
}

// flush re-reads the records marked dirty and queues the result for every router that is
// not waiting for a snapshot. On failure the ids are marked dirty again.
func (s *Syncer) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	apiIDs, sessionIDs := s.takeDirty()
	if len(apiIDs) == 0 && len(sessionIDs) == 0 {
		return nil
	}
	if len(s.peers) == 0 {
		// Nobody to tell: a router that connects gets the state as it is then. s.sent is
		// checked against that state when it does.
		return nil
	}
	apis, sessions, err := s.model.SessionStateOf(apiIDs, sessionIDs)
	if err != nil {
		for _, id := range apiIDs {
			s.mark(s.dirtyAPIs, id)
		}
		for _, id := range sessionIDs {
			s.mark(s.dirtySession, id)
		}
		return fmt.Errorf("read changed API sessions and sessions: %w", err)
	}
	var u update
	for _, id := range apiIDs {
		rec, ok := apis[id]
		if !ok {
			delete(s.sent, id)
			u.apis = append(u.apis, apiChange{id: id})
			continue
		}
		key := keyOf(rec)
		if last, ok := s.sent[id]; ok && last == key {
			continue // activity, MFA: nothing routers know changed
		}
		s.sent[id] = key
		e := apiEntry(rec)
		u.apis = append(u.apis, apiChange{id: id, entry: &e})
	}
	for _, id := range sessionIDs {
		// Sessions are only ever created and deleted, never rewritten: each mark is news.
		rec, ok := sessions[id]
		if !ok {
			u.sessions = append(u.sessions, sessionChange{id: id})
			continue
		}
		e := edgeSession(rec)
		u.sessions = append(u.sessions, sessionChange{id: id, entry: &e})
	}
	if len(u.apis) == 0 && len(u.sessions) == 0 {
		return nil
	}
	for p := range s.peers {
		if p.queue(&u, s.opts.QueueLimit) {
			s.log.Warn("a router does not keep up with session state updates; it will be sent the full state instead",
				"router", p.routerID, "queueLimit", s.opts.QueueLimit)
		}
	}
	return nil
}

// snapshot reads the full state and gives it to every router waiting for one, ahead of
// any update flushed after the read.
func (s *Syncer) snapshot() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var waiting []*peer
	for p := range s.peers {
		if p.waitingForSnapshot() {
			waiting = append(waiting, p)
		}
	}
	if len(waiting) == 0 {
		return nil // another router's sender already gave it one
	}
	apis, sessions, err := s.model.SessionState()
	if err != nil {
		return fmt.Errorf("read the session state: %w", err)
	}
	b := newBuilder(s.opts.ChunkEntries)
	state := make(map[string]apiKey, len(apis))
	for _, a := range apis {
		state[a.ID] = keyOf(a)
		b.addAPISession(apiEntry(a))
	}
	for _, r := range sessions {
		b.addSession(edgeSession(r))
	}
	msgs := b.snapshot()
	// From now on these routers hold state, not what the others were sent: what was sent
	// may no longer be suppressed where the two differ.
	for id, key := range s.sent {
		if state[id] != key {
			delete(s.sent, id)
		}
	}
	for _, p := range waiting {
		p.setSnapshot(msgs)
		s.log.Debug("sending the session state to a router", "router", p.routerID,
			"apiSessions", len(apis), "sessions", len(sessions), "messages", len(msgs))
	}
	return nil
}

func edgeSession(s *model.Session) ctrlproto.Session {
	return ctrlproto.Session{ID: s.ID, Token: s.Token, APISessionID: s.APISessionID,
		IdentityID: s.IdentityID, ServiceID: s.ServiceID, Type: s.Type}
}

// serve is a router's sender: the snapshot first, then the updates queued for it, until its
// channel is done or ctx ends.
func (s *Syncer) serve(ctx context.Context, p *peer) {
	for {
		if p.waitingForSnapshot() {
			if err := s.snapshot(); err != nil {
				s.log.Error("send the session state to a router; retrying", "router", p.routerID, "err", err, "retryIn", retryDelay)
				select {
				case <-ctx.Done():
					return
				case <-p.conn.Done():
					return
				case <-time.After(retryDelay):
				}
			}
			continue
		}
		msgs := p.take(s.opts.ChunkEntries)
		if len(msgs) == 0 {
			select {
			case <-p.wake:
				continue
			case <-ctx.Done():
				return
			case <-p.conn.Done():
				return
			}
		}
		for _, m := range msgs {
			if err := p.conn.Send(ctx, m); err != nil {
				s.log.Debug("session state not sent: the router's channel closed", "router", p.routerID, "err", err)
				return
			}
		}
	}
}
