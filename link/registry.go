package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Registry holds a router's links, at most one per peer router, and what its listeners and
// dialers share (Options). When two links join the same pair of routers — both dialed each
// other, or a link was redialed — both routers keep the same one without talking about it:
// the link dialed by the router whose id sorts lower, and between two links dialed by the
// same router the one whose link id sorts lower. The other is closed with ErrDuplicate.
type Registry struct {
	opts Options
	// bufs lends the TLS connections of its links the buffers they gather batches in.
	bufs sync.Pool

	addMu sync.Mutex // one link joins at a time: duplicate resolution, then Up, then start
	mu    sync.Mutex
	links map[string]*Link // by peer router id
}

// NewRegistry checks opts and returns an empty registry.
func NewRegistry(opts Options) (*Registry, error) {
	if err := opts.Identity.check(); err != nil {
		return nil, err
	}
	if opts.Handler == nil {
		return nil, errors.New("link registry: no frame handler")
	}
	opts.fill()
	return &Registry{opts: opts, links: map[string]*Link{}}, nil
}

// Get returns the link to router peerID, or nil.
func (r *Registry) Get(peerID string) *Link {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.links[peerID]
}

// Links returns the current links, ordered by peer id.
func (r *Registry) Links() []*Link {
	r.mu.Lock()
	out := make([]*Link, 0, len(r.links))
	for _, l := range r.links {
		out = append(out, l)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b *Link) int { return cmp.Compare(a.peerID, b.peerID) })
	return out
}

// wins reports whether link a is kept over link b between the same two routers.
func wins(a, b *Link) bool {
	if a.dialerID != b.dialerID {
		return a.dialerID < b.dialerID
	}
	return a.id < b.id
}

// add registers a new link and starts it, or closes it when an existing link to the same
// peer wins over it. The link lives until it fails, is closed, or ctx ends.
func (r *Registry) add(ctx context.Context, l *Link) error {
	r.addMu.Lock()
	defer r.addMu.Unlock()
	old := r.Get(l.peerID)
	if old != nil && !old.closing.Load() && !wins(l, old) {
		err := fmt.Errorf("%w: link %s to router %q (dialed by %q) loses to link %s (dialed by %q)",
			ErrDuplicate, l.id, l.peerID, l.dialerID, old.id, old.dialerID)
		l.abandon(err)
		return err
	}
	if old != nil {
		old.shutdown(fmt.Errorf("%w: replaced by link %s dialed by %q", ErrDuplicate, l.id, l.dialerID), abort)
		<-old.done
	}
	// From here the link is visible and may be closed at any time; it is torn down only
	// after start, which newLink's hold on the writers ensures, so Down follows Up.
	r.mu.Lock()
	r.links[l.peerID] = l
	r.mu.Unlock()
	l.up.Store(true)
	r.opts.Log.Info("link up", "link", l.id, "peer", l.peerID, "dialer", l.dialerID, "transport", l.transport, "split", l.split, "remote", l.conns[0].s.RemoteAddr().String())
	if r.opts.Events.Up != nil {
		r.opts.Events.Up(l)
	}
	l.start(ctx)
	return nil
}

// remove forgets l, unless another link has taken its place.
func (r *Registry) remove(l *Link) {
	r.mu.Lock()
	if r.links[l.peerID] == l {
		delete(r.links, l.peerID)
	}
	r.mu.Unlock()
}

// down reports a link that was up as down.
func (r *Registry) down(l *Link, err error) {
	r.opts.Log.Info("link down", "link", l.id, "peer", l.peerID, "reason", err.Error())
	if r.opts.Events.Down != nil {
		r.opts.Events.Down(l, err)
	}
}
