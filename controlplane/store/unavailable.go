package store

import "errors"

// ErrUnavailable is the refusal of a write that a replicated store cannot take now: its
// cluster has no leader (an election is under way or there is no quorum), the leader cannot
// be reached, or the leadership was lost while the write was in flight. The replicator's
// error wrapping it says which, and whether the write may still have been applied.
var ErrUnavailable = errors.New("store: the cluster cannot take a write now")
