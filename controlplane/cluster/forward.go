package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
)

// A write made on any member reaches the log through the leader: a follower sends the
// write set, with an id of its own, to the leader over a forwarding connection (a stream
// of kindForward on the raft port, so with the members' mutual TLS), one request and one
// reply per connection; the request carries the follower's raft term, and the leader takes
// the set only in that term. The leader appends it as it appends its own (acceptForwarded) and
// answers with the log index at which it was applied, or a stale refusal carrying the
// index the follower must reach before computing the write again, or a refusal saying
// whether the set may be in the log. A follower that cannot know (the connection broke,
// the leadership was lost) asks the leader of the moment to settle the log (resolve) and
// reads the outcome from its own log by the id.

// Refusals of a write, each wrapping store.ErrUnavailable: the API tells a client which.
var (
	// ErrNoLeader: no leader is known, an election is under way or there is no quorum.
	ErrNoLeader = fmt.Errorf("no leader is known (an election is under way or there is no quorum): %w", store.ErrUnavailable)
	// ErrLeaderUnreachable: the leader is known but this member cannot reach it.
	ErrLeaderUnreachable = fmt.Errorf("the leader cannot be reached: %w", store.ErrUnavailable)
	// ErrNoQuorum: the write was not committed within the apply timeout, the leader has no
	// quorum in contact; it may still be committed (the error wraps ErrOutcomeUnknown too).
	ErrNoQuorum = fmt.Errorf("the write was not committed within the apply timeout (no quorum in contact): %w", store.ErrUnavailable)
	// ErrOutcomeUnknown: the write may or may not have been applied (the leadership was lost
	// while it was in flight, and this member could not learn what became of it).
	ErrOutcomeUnknown = fmt.Errorf("the write may or may not have been applied: %w", store.ErrUnavailable)
)

// ErrNotCaughtUp is the error of a write that the cluster committed and applied but that
// this member had not applied within the apply timeout: it is done, but not visible here yet.
var ErrNotCaughtUp = errors.New("cluster: the write is committed, but this member has not applied it yet")

// Forwarding requests.
const (
	opWrite   byte = 1 // append a write set
	opResolve byte = 2 // settle the log and say up to which index
)

// Reply statuses.
const (
	stApplied byte = iota // in the log at index, the write set applied
	stRefused             // in the log at index, the store refused it (message)
	stStale               // computed on an older state: reach index, then compute it again
	stAbsent              // not in the log, and it will not be (message: why)
	stUnknown             // may be in the log (message: why)
	stSettled             // resolve: everything committed is applied up to index
)

// reply is a leader's answer; cause, on this side, is the error to report.
type reply struct {
	status byte
	index  uint64
	msg    string
	cause  error
}

// maxForwardedSet bounds an encoded write set a leader reads from a member.
const maxForwardedSet = 64 << 20

func newEntryID() entryID {
	var id entryID
	rand.Read(id[:]) // never fails (crypto/rand)
	return id
}

// Replicate is the store's replicator: it appends ws to the log through the leader (this
// member or, forwarded, another) and returns once this member has applied it, with the
// store's answer. A write set computed on a state older than the leader's is refused with
// an error wrapping store.ErrStaleWrite once this member has caught up with the state that
// made it stale, so the Update runs again on it. A write the cluster cannot take fails
// with an error wrapping store.ErrUnavailable and the cause (ErrNoLeader,
// ErrLeaderUnreachable, ErrNoQuorum, ErrOutcomeUnknown). A write whose outcome was unknown
// (the leadership was lost while it was in flight) is looked for in the log once a leader
// has settled it: found, it is answered as it was applied; known absent, it is answered
// like a stale one (the Update runs again). Every wait is bounded by the apply timeout
// and the node's lifetime.
func (n *Node) Replicate(ws *store.WriteSet) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.applyTimeout)
	defer cancel()
	return n.replicate(ctx, ws)
}

func (n *Node) replicate(ctx context.Context, ws *store.WriteSet) error {
	if err := n.Err(); err != nil {
		return fmt.Errorf("cluster: controller %s cannot take a write: %w (%w)", n.id, store.ErrUnavailable, err)
	}
	if n.raft.State() == raft.Shutdown {
		return fmt.Errorf("cluster: controller %s has left the cluster: %w (%w)", n.id, store.ErrUnavailable, raft.ErrRaftShutdown)
	}
	id := newEntryID()
	after := n.fsm.lastIndex() // the entry, if appended, lands after this
	var cause error
	for {
		addr, leader := n.raft.LeaderWithID()
		term := n.raft.CurrentTerm() // the leader's, when this member has heard from it
		var r reply
		switch leader {
		case "":
			r = reply{status: stAbsent, cause: ErrNoLeader}
		case raft.ServerID(n.id):
			r = n.appendEntry(ctx, id, 0, ws)
		default:
			r = n.call(ctx, string(addr), opWrite, id, term, ws)
		}
		switch r.status {
		case stApplied, stRefused:
			return n.applied(ctx, id, r)
		case stStale:
			if err := n.fsm.waitFor(ctx, r.index); err != nil { // not applied, and this member lags
				return fmt.Errorf("cluster: the write was refused as stale, and controller %s has not caught up with the leader's index %d: %w (%w)",
					n.id, r.index, store.ErrUnavailable, err)
			}
			return fmt.Errorf("cluster: %w (the leader is at index %d)", store.ErrStaleWrite, r.index)
		case stUnknown:
			return n.resolve(id, after, r.cause)
		}
		// Not in the log: try the leader of the moment again, until the deadline.
		cause = r.cause
		if err := n.leaderChange(ctx, leader); err != nil {
			return fmt.Errorf("cluster: controller %s cannot take a write: %w", n.id, cause)
		}
	}
}

// applied waits until this member has applied the entry the leader put at r.index, and
// answers from this member's own outcome of it (the leader's when it knows none).
func (n *Node) applied(ctx context.Context, id entryID, r reply) error {
	if err := n.fsm.waitFor(ctx, r.index); err != nil {
		return fmt.Errorf("cluster: the write is at index %d: %w (%w)", r.index, ErrNotCaughtUp, err)
	}
	if o, found, _ := n.fsm.outcomeOf(id, r.index-1); found {
		return o.err
	}
	if r.status == stRefused {
		return fmt.Errorf("cluster: the leader's store refused the write at index %d: %s", r.index, r.msg)
	}
	return nil
}

// resolve learns what became of the entry id, which may be in the log after index after:
// once a leader has settled the log (a barrier of its term applied, so an entry of an
// earlier term is now committed or never will be) and this member has applied as far, the
// entry is found in its log or known absent. cause is why the outcome was unknown.
func (n *Node) resolve(id entryID, after uint64, cause error) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.applyTimeout)
	defer cancel()
	n.resolved.Add(1)
	n.log.Debug("a write's outcome is unknown; waiting for a leader to settle the log", "err", cause)
	for {
		addr, leader := n.raft.LeaderWithID()
		var r reply
		switch leader {
		case "":
			r = reply{status: stAbsent, cause: ErrNoLeader}
		case raft.ServerID(n.id):
			r = n.settle(ctx, id)
		default:
			r = n.call(ctx, string(addr), opResolve, id, 0, nil)
		}
		if r.status == stSettled {
			if err := n.fsm.waitFor(ctx, r.index); err != nil {
				return fmt.Errorf("cluster: %w: %w (%w)", ErrOutcomeUnknown, cause, err)
			}
			o, found, known := n.fsm.outcomeOf(id, after)
			switch {
			case found:
				return o.err
			case known:
				return fmt.Errorf("cluster: the write is not in the log settled by the leader (%v): %w", cause, store.ErrStaleWrite)
			default:
				return fmt.Errorf("cluster: %w: this member installed a snapshot meanwhile: %w", ErrOutcomeUnknown, cause)
			}
		}
		if err := n.leaderChange(ctx, leader); err != nil {
			last := r.cause
			if last == nil {
				last = errors.New(r.msg)
			}
			return fmt.Errorf("cluster: controller %s: %w: %w (then %w)", n.id, ErrOutcomeUnknown, cause, last)
		}
	}
}

// leaderChange returns when a leader other than old is known, or after a short while (the
// same leader may answer now), or with ctx's error.
func (n *Node) leaderChange(ctx context.Context, old raft.ServerID) error {
	n.lmu.Lock()
	changed := n.leaderChanged
	n.lmu.Unlock()
	if _, now := n.raft.LeaderWithID(); now != old && now != "" {
		return nil
	}
	t := time.NewTimer(n.retry)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// watchLeader turns raft's leader observations into a wake-up of the writes waiting for a
// leader, until ctx ends.
func (n *Node) watchLeader(ctx context.Context, obs chan raft.Observation) {
	for {
		select {
		case <-obs:
			n.lmu.Lock()
			close(n.leaderChanged)
			n.leaderChanged = make(chan struct{})
			n.lmu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// appendEntry appends ws under id to the log on this member, the leader, and waits (within
// ctx) for it to be applied here. term, for a forwarded write set, is the term in which
// this member accepted it: every member refuses the entry if it lands in another term.
func (n *Node) appendEntry(ctx context.Context, id entryID, term uint64, ws *store.WriteSet) reply {
	logged := *ws
	logged.Reads = nil // only the leader's rebase reads them, before the append
	data, err := encodeEntry(id, term, &logged)
	if err != nil {
		return reply{status: stAbsent, msg: err.Error(), cause: err}
	}
	f := n.raft.Apply(data, timeout(ctx))
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return reply{status: stUnknown, msg: ErrNoQuorum.Error(), cause: fmt.Errorf("%w: %w", ErrNoQuorum, ErrOutcomeUnknown)}
	}
	switch {
	case err == nil:
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
		return reply{status: stAbsent, msg: err.Error(), cause: fmt.Errorf("%w (%w)", ErrNoLeader, err)}
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrAbortedByRestore):
		return reply{status: stAbsent, msg: err.Error(), cause: fmt.Errorf("%w (%w)", ErrNoQuorum, err)}
	default: // raft.ErrLeadershipLost and whatever else comes after the append
		return reply{status: stUnknown, msg: err.Error(), cause: fmt.Errorf("%w (%w)", ErrOutcomeUnknown, err)}
	}
	resp, _ := f.Response().(error)
	switch {
	case resp == nil:
		return reply{status: stApplied, index: f.Index()}
	case errors.Is(resp, store.ErrStaleWrite):
		return reply{status: stStale, index: max(f.Index(), n.fsm.lastIndex())}
	default:
		return reply{status: stRefused, index: f.Index(), msg: resp.Error(), cause: resp}
	}
}

// forwards tracks, on the leader, the forwarded writes being appended and those whose
// writer has asked for their outcome (abandoned: they must not be appended from then on).
type forwards struct {
	mu        sync.Mutex
	inflight  map[entryID]chan struct{}
	abandoned map[entryID]time.Time
}

// acceptForwarded is the leader's side of a forwarded write: it appends ws under id
// through the same path as this member's own writes and says what became of it. term is
// the raft term of the member that forwarded it, when it sent it: the set is taken only
// if this member leads that term, and its entry is refused by every member if it is
// appended in another (the leadership lost and won back meanwhile), since its writer may
// have been told by the leader of a later term that it is not in the log. A write
// set computed on a state this member has not applied yet is held until it has (within
// ctx); one computed on a state older than this store's is rebased, or refused as stale
// without taking a place in the log.
func (n *Node) acceptForwarded(ctx context.Context, id entryID, term uint64, ws *store.WriteSet) reply {
	if n.raft.State() != raft.Leader {
		return reply{status: stAbsent, msg: "not the leader", cause: ErrNoLeader}
	}
	if now := n.raft.CurrentTerm(); term != now {
		return reply{status: stAbsent, msg: fmt.Sprintf("sent in term %d, the leader is in term %d", term, now), cause: ErrNoLeader}
	}
	n.fwd.mu.Lock()
	if _, gone := n.fwd.abandoned[id]; gone {
		n.fwd.mu.Unlock()
		return reply{status: stAbsent, msg: "its writer has given it up"}
	}
	done := make(chan struct{})
	n.fwd.inflight[id] = done
	n.fwd.mu.Unlock()
	defer func() {
		n.fwd.mu.Lock()
		delete(n.fwd.inflight, id)
		n.fwd.mu.Unlock()
		close(done)
	}()
	// A set computed on a state this member has not reached yet (a follower may apply an
	// entry before its leader does) waits for it rather than being refused as stale with
	// an index the follower has passed already.
	if err := n.fsm.waitFor(ctx, ws.Base); err != nil {
		return reply{status: stAbsent, msg: fmt.Sprintf("the leader has not applied the log as far as the write's base, index %d: %v", ws.Base, err),
			cause: fmt.Errorf("the leader lags behind the write's base, index %d: %w (%w)", ws.Base, store.ErrUnavailable, err)}
	}
	// The store rebases a set computed on an older state when nothing it read or wrote has
	// changed since, one at a time with this member's own writes, and refuses it otherwise.
	var (
		r        reply
		appended bool
	)
	err := n.fsm.st.ReplicateForwarded(replicatorFunc(func(ws *store.WriteSet) error {
		r, appended = n.appendEntry(ctx, id, term, ws), true
		if r.status != stApplied {
			return errNotApplied
		}
		return nil
	}), ws)
	switch {
	case appended:
		return r
	case errors.Is(err, store.ErrStaleWrite):
		return reply{status: stStale, index: n.fsm.lastIndex()}
	case err != nil:
		return reply{status: stAbsent, msg: err.Error(), cause: err}
	}
	return reply{status: stApplied, index: n.fsm.lastIndex()} // nothing to write
}

// replicatorFunc makes a function a store.Replicator.
type replicatorFunc func(*store.WriteSet) error

func (f replicatorFunc) Replicate(ws *store.WriteSet) error { return f(ws) }

// errNotApplied stands for a reply other than stApplied, which acceptForwarded returns as is.
var errNotApplied = errors.New("cluster: the write set was not applied")

// settle is the leader's side of a resolve: the forwarded write id, if it is being
// appended, is waited for, and otherwise will not be appended any more; then a barrier
// makes sure everything committed before it is applied here, and the reply says up to
// which index.
func (n *Node) settle(ctx context.Context, id entryID) reply {
	if n.raft.State() != raft.Leader {
		return reply{status: stAbsent, msg: "not the leader", cause: ErrNoLeader}
	}
	n.fwd.mu.Lock()
	done, busy := n.fwd.inflight[id]
	if !busy {
		now := time.Now()
		for old, at := range n.fwd.abandoned { // forget those no request can still carry
			if now.Sub(at) > 4*n.applyTimeout {
				delete(n.fwd.abandoned, old)
			}
		}
		n.fwd.abandoned[id] = now
	}
	n.fwd.mu.Unlock()
	if busy {
		select {
		case <-done:
		case <-ctx.Done():
			return reply{status: stUnknown, msg: "the write is still being appended", cause: ErrOutcomeUnknown}
		}
	}
	if err := n.raft.Barrier(timeout(ctx)).Error(); err != nil {
		return reply{status: stAbsent, msg: err.Error(), cause: fmt.Errorf("%w (%w)", ErrNoLeader, err)}
	}
	return reply{status: stSettled, index: n.fsm.lastIndex()}
}

// call sends one request to the leader at addr and reads its reply. A request that could
// not be sent is stAbsent (ErrLeaderUnreachable); one sent without a reply, stUnknown.
func (n *Node) call(ctx context.Context, addr string, op byte, id entryID, term uint64, ws *store.WriteSet) reply {
	req, err := encodeRequest(op, id, term, ws)
	if err != nil {
		return reply{status: stAbsent, msg: err.Error(), cause: err}
	}
	conn, err := n.stream.dial(ctx, addr, kindForward)
	if err != nil {
		return reply{status: stAbsent, msg: err.Error(), cause: fmt.Errorf("%w: %w", ErrLeaderUnreachable, err)}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write(req); err != nil {
		unknown := fmt.Errorf("%w: the request to %s broke off: %w", ErrOutcomeUnknown, addr, err)
		if op == opResolve {
			return reply{status: stAbsent, msg: err.Error(), cause: fmt.Errorf("%w: %w", ErrLeaderUnreachable, err)}
		}
		return reply{status: stUnknown, msg: err.Error(), cause: unknown}
	}
	r, err := readReply(bufio.NewReader(conn))
	if err != nil {
		if op == opResolve { // asking again is harmless
			return reply{status: stAbsent, msg: err.Error(), cause: fmt.Errorf("%w: %w", ErrLeaderUnreachable, err)}
		}
		return reply{status: stUnknown, msg: err.Error(), cause: fmt.Errorf("%w: no answer from the leader at %s: %w", ErrOutcomeUnknown, addr, err)}
	}
	switch r.status {
	case stAbsent:
		r.cause = fmt.Errorf("%w: the leader at %s did not take it: %s", ErrNoLeader, addr, r.msg)
	case stUnknown:
		r.cause = fmt.Errorf("%w: the leader at %s: %s", ErrOutcomeUnknown, addr, r.msg)
	}
	return r
}

// serveForward answers one forwarded request on conn, which it closes. The peer must be a
// member of the cluster's current configuration (fromMember).
func (n *Node) serveForward(conn net.Conn) {
	defer conn.Close()
	if err := n.fromMember(conn); err != nil {
		n.log.Warn("a forwarded request from a controller that is no member refused", "remote", conn.RemoteAddr(), "err", err)
		conn.SetWriteDeadline(time.Now().Add(n.applyTimeout))
		conn.Write(appendReply(nil, reply{status: stAbsent, msg: "not a member of the cluster"}))
		return
	}
	conn.SetReadDeadline(time.Now().Add(n.applyTimeout))
	op, id, term, payload, err := readRequest(bufio.NewReader(conn))
	if err != nil {
		n.log.Warn("a forwarded request could not be read", "remote", conn.RemoteAddr(), "err", err)
		return
	}
	conn.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(n.ctx, n.applyTimeout)
	defer cancel()
	var r reply
	switch op {
	case opWrite:
		var ws store.WriteSet
		if err := ws.UnmarshalBinary(payload); err != nil {
			r = reply{status: stAbsent, msg: err.Error()}
			break
		}
		r = n.acceptForwarded(ctx, id, term, &ws)
	case opResolve:
		r = n.settle(ctx, id)
	default:
		r = reply{status: stAbsent, msg: fmt.Sprintf("unknown request %d", op)}
	}
	if drop := n.dropReply.Load(); drop != nil && op == opWrite && (*drop)() {
		return
	}
	conn.SetWriteDeadline(time.Now().Add(n.applyTimeout))
	if _, err := conn.Write(appendReply(nil, r)); err != nil {
		n.log.Debug("a forwarded request's answer could not be sent", "remote", conn.RemoteAddr(), "err", err)
	}
}

// fromMember checks that conn's peer is a member of the cluster's current configuration
// other than this one: a member's certificate is tied to its raft address, so the peer's
// (already verified as a controller's of the network's CA) must be valid for the host of
// the address of one of those members. A controller removed from the cluster is refused
// from then on, unless it shares a host with a member.
func (n *Node) fromMember(conn net.Conn) error {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return errors.New("not a TLS connection")
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return errors.New("no certificate")
	}
	leaf := certs[0]
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if s.ID == raft.ServerID(n.id) {
			continue
		}
		if host, _, err := net.SplitHostPort(string(s.Address)); err == nil && leaf.VerifyHostname(host) == nil {
			return nil
		}
	}
	return fmt.Errorf("its certificate %q (fingerprint %s) is valid for the address of no other member of the cluster",
		leaf.Subject.CommonName, certid.Fingerprint(leaf))
}

// encodeRequest encodes a forwarding request: its head (appendRequestHead), then the
// payload, ws's encoding (none for opResolve: ws nil). The set is encoded after room for
// the longest head, and the head written right before it, so that the request is one
// buffer and the set is not copied a second time.
func encodeRequest(op byte, id entryID, term uint64, ws *store.WriteSet) ([]byte, error) {
	if ws == nil {
		return appendRequestHead(nil, op, id, term, 0), nil
	}
	b, err := ws.AppendBinary(make([]byte, maxRequestHead))
	if err != nil {
		return nil, fmt.Errorf("cluster: encode a write set: %w", err)
	}
	var head [maxRequestHead]byte
	start := maxRequestHead - len(appendRequestHead(head[:0], op, id, term, len(b)-maxRequestHead))
	copy(b[start:], head[:maxRequestHead-start])
	return b[start:], nil
}

// maxRequestHead bounds a request's head: op, the id and two uvarints.
const maxRequestHead = 1 + len(entryID{}) + 2*binary.MaxVarintLen64

// appendRequestHead encodes what comes before a request's payload of size bytes: op, the
// entry's id, the sender's raft term (0 for opResolve) and size as uvarints.
func appendRequestHead(b []byte, op byte, id entryID, term uint64, size int) []byte {
	b = append(b, op)
	b = append(b, id[:]...)
	b = binary.AppendUvarint(b, term)
	return binary.AppendUvarint(b, uint64(size))
}

// readRequest reads what appendRequest encoded. The payload is read as it arrives, so that
// a peer announcing a large one and sending little holds little memory.
func readRequest(br *bufio.Reader) (op byte, id entryID, term uint64, payload []byte, err error) {
	if op, err = br.ReadByte(); err != nil {
		return op, id, 0, nil, err
	}
	if _, err = io.ReadFull(br, id[:]); err != nil {
		return op, id, 0, nil, err
	}
	if term, err = binary.ReadUvarint(br); err != nil {
		return op, id, 0, nil, err
	}
	size, err := binary.ReadUvarint(br)
	if err != nil {
		return op, id, term, nil, err
	}
	if size > maxForwardedSet {
		return op, id, term, nil, fmt.Errorf("a write set of %d bytes, more than %d", size, maxForwardedSet)
	}
	// Grown to the announced size up to 1 MiB: a set of that size is read in one buffer,
	// and a peer announcing more and sending less holds no more than it sent (and 1 MiB).
	var buf bytes.Buffer
	buf.Grow(int(min(size, 1<<20)))
	if _, err := io.CopyN(&buf, br, int64(size)); err != nil {
		return op, id, term, nil, fmt.Errorf("a write set of %d bytes cut short at %d: %w", size, buf.Len(), err)
	}
	return op, id, term, buf.Bytes(), nil
}

// appendReply encodes r: the status, the index and the message's length as uvarints, the
// message.
func appendReply(b []byte, r reply) []byte {
	b = append(b, r.status)
	b = binary.AppendUvarint(b, r.index)
	b = binary.AppendUvarint(b, uint64(len(r.msg)))
	return append(b, r.msg...)
}

// maxReplyMessage bounds a reply's message.
const maxReplyMessage = 64 << 10

func readReply(br *bufio.Reader) (reply, error) {
	var r reply
	var err error
	if r.status, err = br.ReadByte(); err != nil {
		return r, err
	}
	if r.index, err = binary.ReadUvarint(br); err != nil {
		return r, err
	}
	size, err := binary.ReadUvarint(br)
	if err != nil {
		return r, err
	}
	if size > maxReplyMessage || r.status > stSettled {
		return r, fmt.Errorf("not a forwarding reply (status %d, a message of %d bytes)", r.status, size)
	}
	msg := make([]byte, size)
	if _, err := io.ReadFull(br, msg); err != nil {
		return r, err
	}
	r.msg = string(msg)
	return r, nil
}
