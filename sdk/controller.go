package sdk

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// Session types, as the controller names them.
const (
	sessionDial = "Dial"
	sessionBind = "Bind"
)

// Permission is what an identity may do with a service, as the controller names it.
type Permission string

// Permissions.
const (
	PermissionDial Permission = "Dial" // dial the service
	PermissionBind Permission = "Bind" // host the service
)

// pageSize is the page size of lists: the controller's maximum.
const pageSize = 500

// sessionCreateTimeout bounds the creation of a session.
const sessionCreateTimeout = 30 * time.Second

// --- Authentication ---

// apiToken returns the current API session token, authenticating first if there is none.
func (c *Client) apiToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	tok, closed := c.token, c.closed
	c.mu.Unlock()
	if closed {
		return "", ErrClosed
	}
	if tok != "" {
		return tok, nil
	}
	return c.authenticate(ctx, "")
}

// authenticate opens a new API session with the identity's certificate, unless the current
// token is already another than stale (someone else re-authenticated meanwhile). The
// sessions of the previous API session are forgotten: the controller ended them with it.
func (c *Client) authenticate(ctx context.Context, stale string) (string, error) {
	select {
	case c.auth <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.auth }()
	c.mu.Lock()
	cur, closed := c.token, c.closed
	c.mu.Unlock()
	if closed {
		return "", ErrClosed
	}
	if cur != "" && cur != stale {
		return cur, nil
	}
	cl := *c.creds.Load().api
	s, err := cl.AuthenticateCert(ctx)
	if err != nil {
		return "", fmt.Errorf("sdk: authenticate with the identity's certificate: %w", err)
	}
	c.mu.Lock()
	c.token = s.Token
	c.sessions = map[sessionKey]*sessionEntry{}
	c.mu.Unlock()
	c.log.Info("authenticated", "apiSession", s.ID, "expiresAt", s.ExpiresAt, "renewed", stale != "")
	return s.Token, nil
}

// call calls the controller's API as apiclient.Client.Do does, with the current API
// session, authenticating first if needed, and once more if the call answers 401 (the API
// session expired or was deleted).
func (c *Client) call(ctx context.Context, method, path string, body, out any) (*apiclient.Pagination, error) {
	tok, err := c.apiToken(ctx)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		cl := *c.creds.Load().api
		cl.Token = tok
		p, err := cl.Do(ctx, method, path, body, out)
		if attempt > 0 || !unauthorized(err) {
			return p, err
		}
		c.log.Info("the API session is no longer valid; authenticating again", "call", method+" "+path)
		if tok, err = c.authenticate(ctx, tok); err != nil {
			return nil, err
		}
	}
}

func unauthorized(err error) bool {
	var e *apiclient.Error
	return errors.As(err, &e) && e.Status == http.StatusUnauthorized
}

// --- Services ---

// Service is a service the identity may use.
type Service struct {
	ID                 string
	Name               string
	EncryptionRequired bool
	// OpenZitiEncryption: the service allows OpenZiti's end-to-end scheme, for OpenZiti
	// clients; without it a Dial neither offers nor accepts it and a Listener refuses it.
	OpenZitiEncryption bool
	// Permissions are what the identity may do with the service: Dial, Bind or both.
	Permissions []Permission
	// Configs are the service's configs by config type name.
	Configs map[string]json.RawMessage
}

// CanDial reports whether the identity may dial the service.
func (s Service) CanDial() bool { return slices.Contains(s.Permissions, PermissionDial) }

// CanBind reports whether the identity may host the service.
func (s Service) CanBind() bool { return slices.Contains(s.Permissions, PermissionBind) }

// equal reports whether s and o are the same in every field.
func (s Service) equal(o Service) bool {
	if s.ID != o.ID || s.Name != o.Name || s.EncryptionRequired != o.EncryptionRequired || s.OpenZitiEncryption != o.OpenZitiEncryption ||
		!slices.Equal(s.Permissions, o.Permissions) || len(s.Configs) != len(o.Configs) {
		return false
	}
	for k, v := range s.Configs {
		w, ok := o.Configs[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// Services lists the services the identity may dial or bind, with all their configs.
func (c *Client) Services(ctx context.Context) ([]Service, error) {
	var all []Service
	for offset := 0; ; {
		var page []struct {
			ID                 string                     `json:"id"`
			Name               string                     `json:"name"`
			EncryptionRequired bool                       `json:"encryptionRequired"`
			OpenZitiEncryption bool                       `json:"openZitiEncryption"`
			Permissions        []Permission               `json:"permissions"`
			Config             map[string]json.RawMessage `json:"config"`
		}
		q := url.Values{"configTypes": {"all"}, "limit": {fmt.Sprint(pageSize)}, "offset": {fmt.Sprint(offset)}}
		p, err := c.call(ctx, "GET", apiclient.ClientAPI+"/services?"+q.Encode(), nil, &page)
		if err != nil {
			return nil, fmt.Errorf("sdk: list services: %w", err)
		}
		for _, s := range page {
			if s.Config == nil {
				s.Config = map[string]json.RawMessage{}
			}
			all = append(all, Service{ID: s.ID, Name: s.Name, EncryptionRequired: s.EncryptionRequired,
				OpenZitiEncryption: s.OpenZitiEncryption, Permissions: s.Permissions, Configs: s.Config})
		}
		offset += len(page)
		if p == nil || len(page) == 0 || offset >= p.TotalCount {
			break
		}
	}
	byName := make(map[string]Service, len(all))
	for _, s := range all {
		byName[s.Name] = s
	}
	c.mu.Lock()
	c.services = byName
	c.mu.Unlock()
	return all, nil
}

// ServiceByName returns the service with this name. It answers from the last listing when
// the service is in it, and lists the services again when it is not.
func (c *Client) ServiceByName(ctx context.Context, name string) (Service, error) {
	c.mu.Lock()
	s, ok := c.services[name]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	if _, err := c.Services(ctx); err != nil {
		return Service{}, err
	}
	c.mu.Lock()
	s, ok = c.services[name]
	c.mu.Unlock()
	if !ok {
		return Service{}, fmt.Errorf("%w: the identity may not use a service named %q", ErrNoService, name)
	}
	return s, nil
}

// forgetService drops a service from the last listing, so that the next ServiceByName lists
// the services again.
func (c *Client) forgetService(name string) {
	c.mu.Lock()
	delete(c.services, name)
	c.mu.Unlock()
}

// WatchServices calls fn with the services added, changed and removed since its previous
// call, until ctx ends or the Client closes; it returns ctx's error or ErrClosed. Every
// interval it asks the controller when data relevant to the API session last changed
// (current-api-session/service-updates), and lists the services again only when that moved.
// The first call of fn reports every service as added, even when there are none. Failed
// polls are logged and retried at the next interval.
func (c *Client) WatchServices(ctx context.Context, interval time.Duration, fn func(added, changed, removed []Service)) error {
	if interval <= 0 {
		return fmt.Errorf("sdk: watch services: interval %v is not positive", interval)
	}
	var (
		known  map[string]Service // by id
		last   time.Time
		ticker = time.NewTicker(interval)
	)
	defer ticker.Stop()
	for {
		var upd struct {
			LastChangeAt time.Time `json:"lastChangeAt"`
		}
		_, err := c.call(ctx, "GET", apiclient.ClientAPI+"/current-api-session/service-updates", nil, &upd)
		switch {
		case errors.Is(err, ErrClosed):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			c.log.Warn("watch services: service updates", "err", err)
		case known == nil || !upd.LastChangeAt.Equal(last):
			list, err := c.Services(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("watch services", "err", err)
				break
			}
			first := known == nil
			added, changed, removed, now := diffServices(known, list)
			known, last = now, upd.LastChangeAt
			if first || len(added)+len(changed)+len(removed) > 0 {
				fn(added, changed, removed)
			}
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.life.Done():
			return ErrClosed
		}
	}
}

// diffServices compares a listing with the services known before, by id, and returns the
// services added, changed and removed, and the listing by id.
func diffServices(known map[string]Service, list []Service) (added, changed, removed []Service, now map[string]Service) {
	now = make(map[string]Service, len(list))
	for _, s := range list {
		now[s.ID] = s
		old, ok := known[s.ID]
		switch {
		case !ok:
			added = append(added, s)
		case !old.equal(s):
			changed = append(changed, s)
		}
	}
	for id, s := range known {
		if _, ok := now[id]; !ok {
			removed = append(removed, s)
		}
	}
	slices.SortFunc(removed, func(a, b Service) int { return cmp.Compare(a.Name, b.Name) })
	return added, changed, removed, now
}

// --- Sessions ---

// sessionKey names a cached session.
type sessionKey struct{ serviceID, typ string }

// edgeSession is a Dial or Bind session of a service: its token, which routers accept, and
// the routers that may carry the service.
type edgeSession struct {
	id, token string
	key       sessionKey
	routers   []edgeRouter
}

// edgeRouter is an edge router of a session.
type edgeRouter struct {
	id, name string
	url      string // tls://host:port
}

// sessionEntry is a cached session, or one being created: ready is closed once s or err is
// set.
type sessionEntry struct {
	ready chan struct{}
	s     *edgeSession
	err   error
}

// session returns the cached session of type typ for the service, creating it when there is
// none. Concurrent callers share one creation, which runs for the Client (bounded by
// sessionCreateTimeout), so that a caller giving up does not fail the others.
func (c *Client) session(ctx context.Context, serviceID, typ string) (*edgeSession, error) {
	key := sessionKey{serviceID, typ}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	e, ok := c.sessions[key]
	if !ok {
		e = &sessionEntry{ready: make(chan struct{})}
		c.sessions[key] = e
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			cctx, cancel := context.WithTimeout(c.life, sessionCreateTimeout)
			defer cancel()
			e.s, e.err = c.createSession(cctx, key)
			if e.err != nil {
				c.mu.Lock()
				if c.sessions[key] == e {
					delete(c.sessions, key)
				}
				c.mu.Unlock()
			}
			close(e.ready)
		}()
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
		return e.s, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dropSession forgets s, so that the next use creates a new session.
func (c *Client) dropSession(s *edgeSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.sessions[s.key]; ok && e.s == s {
		delete(c.sessions, s.key)
	}
}

// createSession asks the controller for a session.
func (c *Client) createSession(ctx context.Context, key sessionKey) (*edgeSession, error) {
	var out struct {
		ID          string `json:"id"`
		Token       string `json:"token"`
		EdgeRouters []struct {
			ID                 string            `json:"id"`
			Name               string            `json:"name"`
			URLs               map[string]string `json:"urls"`
			SupportedProtocols map[string]string `json:"supportedProtocols"`
		} `json:"edgeRouters"`
	}
	body := map[string]string{"serviceId": key.serviceID, "type": key.typ}
	if _, err := c.call(ctx, "POST", apiclient.ClientAPI+"/sessions", body, &out); err != nil {
		return nil, fmt.Errorf("sdk: create %s session of service %s: %w", key.typ, key.serviceID, err)
	}
	s := &edgeSession{id: out.ID, token: out.Token, key: key}
	for _, r := range out.EdgeRouters {
		// urls is what the API defines for SDKs; supportedProtocols (the SDK listeners an
		// online router announced) says the same.
		u := r.URLs["tls"]
		if u == "" {
			u = r.SupportedProtocols["tls"]
		}
		if u != "" {
			s.routers = append(s.routers, edgeRouter{id: r.ID, name: r.Name, url: u})
		}
	}
	if len(s.routers) == 0 {
		return nil, fmt.Errorf("sdk: %s session of service %s: none of its %d edge routers is online with a tls SDK listener",
			key.typ, key.serviceID, len(out.EdgeRouters))
	}
	c.log.Debug("session created", "session", s.id, "service", key.serviceID, "type", key.typ, "routers", len(s.routers))
	return s, nil
}
