package dataplane

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/zmesh/zmesh/internal/atomicfile"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// The router's copy of the controller's API sessions and sessions, with which the edge
// listener authorizes SDK clients. The controller sends it whole after each Hello and then
// every change (ctrlproto.SessionState). It is written, gzipped, to edge.db every
// edge.dbSaveIntervalSeconds and when the router stops, and read at start, so that a router
// restarted while the controller is away still admits the clients it admitted before.
// When an API session or a session goes away, whatever uses it here is closed at once, and so
// is a client connection whose certificate its API session no longer admits.

// sessionCacheVersion is the version of the edge.db file format.
const sessionCacheVersion = 1

// sessionCache is the router's copy of the API sessions and sessions.
type sessionCache struct {
	mu          sync.Mutex
	apiSessions map[string]ctrlproto.APISession // by token
	apiByID     map[string]string               // id → token
	sessions    map[string]ctrlproto.Session    // by token
	sessByID    map[string]string               // id → token
	// loads are the full states being loaded (a Reset arrived, Complete has not yet), by
	// their sender (each cluster member sends its own), with the ids seen since the Reset.
	loads   map[any]map[string]bool
	changed bool                      // since the last save
	applied chan struct{}             // closed and replaced by each apply
	tunnel  []ctrlproto.TunnelService // the tunnel's services, as last listed
	// removed is called, without mu, with the tokens of the API sessions and sessions that
	// went away; updated with the API sessions whose admitted certificates changed.
	removed func(apiSessions, sessions []string)
	updated func(apiSessions []ctrlproto.APISession)
}

func newSessionCache(removed func(apiSessions, sessions []string), updated func([]ctrlproto.APISession)) *sessionCache {
	return &sessionCache{apiSessions: map[string]ctrlproto.APISession{}, apiByID: map[string]string{},
		sessions: map[string]ctrlproto.Session{}, sessByID: map[string]string{}, removed: removed, updated: updated,
		applied: make(chan struct{}), loads: map[any]map[string]bool{}}
}

// apiSession returns the API session with this token.
func (s *sessionCache) apiSession(token string) (ctrlproto.APISession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.apiSessions[token]
	return a, ok
}

// session returns the session with this token.
func (s *sessionCache) session(token string) (ctrlproto.Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.sessions[token]
	return se, ok
}

// stateWait bounds how long a client's unknown token waits for the controller's next
// updates: a client that just made its API session or session reaches the router moments
// before the controller's update does.
const stateWait = 2 * time.Second

// awaitAPISession returns the API session with this token, waiting up to stateWait for it to arrive
// while connected tells that updates can come.
func (s *sessionCache) awaitAPISession(token string, connected func() bool) (ctrlproto.APISession, bool) {
	var a ctrlproto.APISession
	ok := s.await(func() bool { _, ok := s.apiSessions[token]; return ok }, connected)
	if ok {
		a, _ = s.apiSession(token)
	}
	return a, ok
}

// awaitSession is awaitAPISession for sessions.
func (s *sessionCache) awaitSession(token string, connected func() bool) (ctrlproto.Session, bool) {
	var se ctrlproto.Session
	ok := s.await(func() bool { _, ok := s.sessions[token]; return ok }, connected)
	if ok {
		se, _ = s.session(token)
	}
	return se, ok
}

// await waits until has (called with mu) holds, for at most stateWait and only while
// connected.
func (s *sessionCache) await(has func() bool, connected func() bool) bool {
	deadline := time.NewTimer(stateWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok, next := has(), s.applied
		s.mu.Unlock()
		if ok {
			return true
		}
		if !connected() {
			return false
		}
		select {
		case <-next:
		case <-deadline.C:
			return false
		}
	}
}

// apply takes one SessionState message from src (the channel of the member that sent it).
// A full state (Reset … Complete) replaces the copy: what it does not hold, and no message
// from any member added since its Reset, is removed once it is complete. Full states from
// several members may be under way at once, each with its own Reset and Complete.
func (s *sessionCache) apply(src any, m *ctrlproto.SessionState) {
	var goneAPI, goneSess []string
	var changedAPI []ctrlproto.APISession
	s.mu.Lock()
	if m.Reset {
		s.loads[src] = map[string]bool{}
	}
	for _, id := range m.RemovedAPISessions {
		goneAPI = s.dropAPISession(id, goneAPI)
	}
	for _, id := range m.RemovedSessions {
		goneSess = s.dropSession(id, goneSess)
	}
	for _, a := range m.APISessions {
		if old, ok := s.apiByID[a.ID]; ok && old != a.Token {
			goneAPI = s.dropAPISession(a.ID, goneAPI)
		} else if ok && !sameCerts(s.apiSessions[old].CertFingerprints, a.CertFingerprints) {
			changedAPI = append(changedAPI, a)
		}
		s.apiSessions[a.Token], s.apiByID[a.ID] = a, a.Token
		for _, seen := range s.loads {
			seen["a/"+a.ID] = true
		}
	}
	for _, se := range m.Sessions {
		if old, ok := s.sessByID[se.ID]; ok && old != se.Token {
			goneSess = s.dropSession(se.ID, goneSess)
		}
		s.sessions[se.Token], s.sessByID[se.ID] = se, se.Token
		for _, seen := range s.loads {
			seen["s/"+se.ID] = true
		}
	}
	if seen, loading := s.loads[src]; m.Complete && loading {
		for id := range s.apiByID {
			if !seen["a/"+id] {
				goneAPI = s.dropAPISession(id, goneAPI)
			}
		}
		for id := range s.sessByID {
			if !seen["s/"+id] {
				goneSess = s.dropSession(id, goneSess)
			}
		}
		delete(s.loads, src)
	}
	s.changed = true
	close(s.applied)
	s.applied = make(chan struct{})
	s.mu.Unlock()
	if (len(goneAPI) > 0 || len(goneSess) > 0) && s.removed != nil {
		s.removed(goneAPI, goneSess)
	}
	if len(changedAPI) > 0 && s.updated != nil {
		s.updated(changedAPI)
	}
}

// sameCerts tells whether two lists of admitted certificates admit the same; nil (any
// certificate) differs from an empty list (none).
func sameCerts(a, b []string) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// dropAPISession removes an API session, dropSession a session (the sessions made in an
// API session are removed by the controller's own updates); with mu. Each appends the
// removed token to gone.
func (s *sessionCache) dropAPISession(id string, gone []string) []string {
	return dropByID(s.apiByID, s.apiSessions, id, gone)
}

func (s *sessionCache) dropSession(id string, gone []string) []string {
	return dropByID(s.sessByID, s.sessions, id, gone)
}

// dropByID removes the entry id from a table indexed both by id and by token.
func dropByID[T any](byID map[string]string, byToken map[string]T, id string, gone []string) []string {
	token, ok := byID[id]
	if !ok {
		return gone
	}
	delete(byID, id)
	delete(byToken, token)
	return append(gone, token)
}

// sessionCacheFile is the content of edge.db, before gzip.
type sessionCacheFile struct {
	V           int                    `json:"v"`
	Saved       time.Time              `json:"saved"`
	APISessions []ctrlproto.APISession `json:"apiSessions"`
	Sessions    []ctrlproto.Session    `json:"sessions"`
	// TunnelServices are the services of the router's identity its tunnel last listed.
	TunnelServices []ctrlproto.TunnelService `json:"tunnelServices,omitempty"`
}

// setTunnelServices keeps the tunnel's latest list of services, to be saved.
func (s *sessionCache) setTunnelServices(list []ctrlproto.TunnelService) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tunnel, s.changed = list, true
}

// tunnelServices returns the tunnel's services as last listed or loaded, nil if never.
func (s *sessionCache) tunnelServices() []ctrlproto.TunnelService {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tunnel
}

// save writes the state to path, gzipped, atomically, if it changed since the last save.
func (s *sessionCache) save(path string) error {
	s.mu.Lock()
	if !s.changed {
		s.mu.Unlock()
		return nil
	}
	f := sessionCacheFile{V: sessionCacheVersion, Saved: time.Now().UTC(),
		APISessions: make([]ctrlproto.APISession, 0, len(s.apiSessions)), Sessions: make([]ctrlproto.Session, 0, len(s.sessions)),
		TunnelServices: s.tunnel}
	for _, a := range s.apiSessions {
		f.APISessions = append(f.APISessions, a)
	}
	for _, se := range s.sessions {
		f.Sessions = append(f.Sessions, se)
	}
	s.changed = false
	s.mu.Unlock()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(&f); err != nil {
		return fmt.Errorf("edge.db %s: encode: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("edge.db %s: compress: %w", path, err)
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o600); err != nil {
		s.mu.Lock()
		s.changed = true
		s.mu.Unlock()
		return fmt.Errorf("edge.db %s: %w", path, err)
	}
	return nil
}

// load reads the state saved at path; a missing file is an empty state.
func (s *sessionCache) load(path string) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("edge.db %s: %w", path, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("edge.db %s: not a gzip file: %w", path, err)
	}
	var f sessionCacheFile
	if err := json.NewDecoder(io.LimitReader(zr, 1<<30)).Decode(&f); err != nil {
		return fmt.Errorf("edge.db %s: decode: %w", path, err)
	}
	if f.V != sessionCacheVersion {
		return fmt.Errorf("edge.db %s: version %d; this router reads version %d", path, f.V, sessionCacheVersion)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range f.APISessions {
		s.apiSessions[a.Token], s.apiByID[a.ID] = a, a.Token
	}
	for _, se := range f.Sessions {
		s.sessions[se.Token], s.sessByID[se.ID] = se, se.Token
	}
	s.tunnel = f.TunnelServices
	return nil
}

// saveLoop saves the state every interval until ctx ends, and once more then.
func (s *sessionCache) saveLoop(ctx context.Context, path string, interval time.Duration, log func(error)) {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := s.save(path); err != nil {
				log(err)
			}
		case <-ctx.Done():
			if err := s.save(path); err != nil {
				log(err)
			}
			return
		}
	}
}

// forget drops the full state src was sending, if any: its channel closed before Complete.
func (s *sessionCache) forget(src any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.loads, src)
}
