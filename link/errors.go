package link

import "errors"

// Errors callers tell apart with errors.Is.
var (
	// ErrLinkClosed is returned by Send once the link is closing or down.
	ErrLinkClosed = errors.New("link closed")
	// ErrDuplicate says a link lost against another link between the same two routers.
	ErrDuplicate = errors.New("duplicate link")
	// ErrRefused says the other router refused the link handshake.
	ErrRefused = errors.New("link refused")
	// ErrWrongPeer says the router reached is not the one dialed.
	ErrWrongPeer = errors.New("wrong router")
	// ErrQueueFull says the dial queue has no room.
	ErrQueueFull = errors.New("link dial queue full")
	// ErrNoCommonGroup says no dialer shares a group with the target's listener.
	ErrNoCommonGroup = errors.New("no common link group")
)
