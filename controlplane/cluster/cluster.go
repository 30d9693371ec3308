// Package cluster makes the controller a member of a cluster of controllers: a raft node
// (hashicorp/raft) per controller, its log and stable state in a raft-boltdb file and its
// snapshots in files of its data directory, its peers reached over TLS with mutual
// authentication by the controllers' certificates of the network's CA. The node replicates
// the controller's store: it is the store's Replicator, so every Update made on any member
// (a follower forwards it to the leader) becomes a log entry that every member applies to
// its own store in the same order, and a snapshot is a store backup. Membership
// (bootstrap, add, remove), leadership transfer, the node's state, statistics and health
// figures are here for the controller's commands and metrics.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Config describes a member.
type Config struct {
	// ID names the member in the cluster: unique, and the same across restarts.
	ID string
	// Dir holds raft's log and stable state (raft.db) and its snapshots.
	Dir string
	// Bind is the address raft listens on; Advertise the address the other members dial,
	// the listener's when empty.
	Bind, Advertise string
	// Certificate returns the member's controller certificate (with the controller's
	// policy), presented when it accepts and when it dials; Roots holds the network's CA.
	Certificate func() (*tls.Certificate, error)
	Roots       *x509.CertPool
	// Store is the member's store; the node becomes its replicator.
	Store *store.Store
	Log   *slog.Logger

	// Raft's timing and log retention; zero keeps hashicorp/raft's defaults.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	SnapshotInterval                                      time.Duration
	SnapshotThreshold, TrailingLogs                       uint64
	// ApplyTimeout bounds the waits of a write: to reach the leader, to be committed and
	// applied on this member, and again to learn its outcome when the leadership was lost
	// meanwhile; 10 s when zero.
	ApplyTimeout time.Duration
	// HandshakeTimeout bounds the TLS handshake of a connection accepted on the raft port;
	// 10 s when zero.
	HandshakeTimeout time.Duration
}

// ErrNotLeader is the error of a membership change or a leadership transfer asked of a
// member that is not the leader (writes go to the leader instead); a *NotLeaderError names
// the leader, when one is known.
var ErrNotLeader = errors.New("not the cluster's leader")

// NotLeaderError is a refusal by a member that is not the leader.
type NotLeaderError struct {
	// Member is the refusing member's ID; LeaderID and LeaderAddress the leader's, empty
	// while none is known.
	Member, LeaderID, LeaderAddress string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return fmt.Sprintf("controller %s is not the cluster's leader and knows of none (an election is under way or there is no quorum)", e.Member)
	}
	return fmt.Sprintf("controller %s is not the cluster's leader; the leader is %s at %s", e.Member, e.LeaderID, e.LeaderAddress)
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// Member is a server of the cluster's configuration.
type Member struct {
	ID, Address string
	Voter       bool
}

// Node is a running member.
type Node struct {
	id           string
	raft         *raft.Raft
	trans        *raft.NetworkTransport
	stream       *streamLayer
	logs         *raftboltdb.BoltStore
	fsm          *fsm
	log          *slog.Logger
	applyTimeout time.Duration
	// retry is how long a write waits for a leader change before trying again.
	retry time.Duration
	// heartbeat is raft's heartbeat timeout: a voter heard from within it is in contact.
	heartbeat time.Duration
	// fwd tracks the writes forwarded to this member while it leads.
	fwd forwards
	// resolved counts the writes whose outcome was looked up after it was unknown.
	resolved atomic.Uint64
	// dropReply, when set and returning true, has this member, leading, not answer a
	// forwarded write it has handled: tests make a leader that stops between appending a
	// write and answering.
	dropReply atomic.Pointer[func() bool]

	// lmu guards leaderChanged, closed and replaced at every leader observation.
	lmu           sync.Mutex
	leaderChanged chan struct{}
	observer      *raft.Observer

	// ctx ends at Shutdown: it bounds the writes' waits.
	ctx      context.Context
	stop     context.CancelFunc
	shutdown sync.Once
	err      error
}

// New starts the member: raft runs until Shutdown or until ctx ends, and the store's
// Updates go through it from now on. A member with no raft state yet waits to be
// bootstrapped (Bootstrap) or added by the leader (AddVoter).
func New(ctx context.Context, c Config) (*Node, error) {
	for _, f := range []struct {
		name    string
		missing bool
	}{{"ID", c.ID == ""}, {"Dir", c.Dir == ""}, {"Store", c.Store == nil}, {"Log", c.Log == nil}} {
		if f.missing {
			return nil, fmt.Errorf("cluster: Config.%s is not set: a member needs an ID, a directory, a store and a logger", f.name)
		}
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: create %s: %w", c.Dir, err)
	}
	hl := newHCLogger(c.Log.With("member", c.ID))
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(c.ID)
	conf.Logger = hl
	setIf(&conf.HeartbeatTimeout, c.HeartbeatTimeout)
	setIf(&conf.ElectionTimeout, c.ElectionTimeout)
	setIf(&conf.LeaderLeaseTimeout, c.LeaderLeaseTimeout)
	setIf(&conf.SnapshotInterval, c.SnapshotInterval)
	setIf(&conf.SnapshotThreshold, c.SnapshotThreshold)
	setIf(&conf.TrailingLogs, c.TrailingLogs)
	if err := raft.ValidateConfig(conf); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}

	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(c.Dir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("cluster: open the raft log in %s: %w", c.Dir, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.Dir, 2, hl)
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("cluster: open the snapshots in %s: %w", c.Dir, err)
	}
	handshake := c.HandshakeTimeout
	if handshake == 0 {
		handshake = 10 * time.Second
	}
	stream, err := newStreamLayer(c.Bind, c.Advertise, c.Certificate, c.Roots, handshake, c.Log.With("member", c.ID))
	if err != nil {
		logs.Close()
		return nil, err
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl,
	})
	cache, err := raft.NewLogCache(512, logs)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	f := newFSM(c.Store, c.Log.With("member", c.ID), c.Dir)
	r, err := raft.NewRaft(conf, f, cache, logs, snaps, trans)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	n := &Node{
		id: c.ID, raft: r, trans: trans, stream: stream, logs: logs, fsm: f,
		log: c.Log.With("member", c.ID), applyTimeout: c.ApplyTimeout, retry: conf.HeartbeatTimeout / 10,
		heartbeat:     conf.HeartbeatTimeout,
		fwd:           forwards{inflight: map[entryID]chan struct{}{}, abandoned: map[entryID]time.Time{}},
		leaderChanged: make(chan struct{}),
	}
	if n.applyTimeout == 0 {
		n.applyTimeout = 10 * time.Second
	}
	n.ctx, n.stop = context.WithCancel(ctx)
	obs := make(chan raft.Observation, 1)
	n.observer = raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(n.observer)
	go n.watchLeader(n.ctx, obs)
	stream.serveForwarded(n.serveForward)
	go func() {
		select {
		case <-n.ctx.Done():
		case <-f.failed: // the fsm logged the entry and the cause
		}
		n.Shutdown()
	}()
	c.Store.SetReplicator(n)
	return n, nil
}

func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// ID returns the member's ID; Addr its advertised raft address.
func (n *Node) ID() string   { return n.id }
func (n *Node) Addr() string { return string(n.trans.LocalAddr()) }

// Bootstrap makes the member the first of a new cluster, of which it becomes the leader. It
// fails on a member that has raft state already.
func (n *Node) Bootstrap() error {
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: n.trans.LocalAddr(),
	}}}).Error()
	if err != nil {
		return fmt.Errorf("cluster: bootstrap %s: %w", n.id, err)
	}
	return nil
}

// timeout is what is left of ctx's deadline, 0 (no limit) without one.
func timeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

// leaderRefusal makes raft's ErrNotLeader a *NotLeaderError naming the leader.
func (n *Node) leaderRefusal(err error) error {
	if errors.Is(err, raft.ErrNotLeader) {
		addr, id := n.raft.LeaderWithID()
		return &NotLeaderError{Member: n.id, LeaderID: string(id), LeaderAddress: string(addr)}
	}
	return err
}

// AddVoter adds the member id, reached at address, as a voter (or updates its address). On
// the leader only.
func (n *Node) AddVoter(ctx context.Context, id, address string) error {
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(address), 0, timeout(ctx)).Error(); err != nil {
		return fmt.Errorf("cluster: add member %s at %s: %w", id, address, n.leaderRefusal(err))
	}
	return nil
}

// RemoveServer removes the member id from the cluster. On the leader only.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, timeout(ctx)).Error(); err != nil {
		return fmt.Errorf("cluster: remove member %s: %w", id, n.leaderRefusal(err))
	}
	return nil
}

// TransferLeadership hands the leadership to the member id, or to the most up-to-date
// follower when id is empty, and returns once it has. On the leader only.
func (n *Node) TransferLeadership(id string) error {
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		members, err := n.Members()
		if err != nil {
			return err
		}
		addr := ""
		for _, m := range members {
			if m.ID == id {
				addr = m.Address
			}
		}
		if addr == "" {
			return fmt.Errorf("cluster: transfer the leadership to %s: no such member", id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("cluster: transfer the leadership from %s: %w", n.id, n.leaderRefusal(err))
	}
	return nil
}

// Members returns the cluster's latest configuration.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("cluster: read the configuration: %w", err)
	}
	return membersOf(f.Configuration().Servers), nil
}

// membersOf returns the members of a raft configuration's servers.
func membersOf(servers []raft.Server) []Member {
	var out []Member
	for _, s := range servers {
		out = append(out, Member{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}

// Leader returns the ID and address of the leader this member knows, empty when none.
func (n *Node) Leader() (id, address string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// State returns the member's raft state: Follower, Candidate, Leader or Shutdown.
func (n *Node) State() string { return n.raft.State().String() }

// Stats returns raft's figures (term, indexes, last contact, configuration...), for metrics.
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// Snapshot takes a snapshot now and compacts the log up to it, keeping the trailing logs.
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("cluster: snapshot on %s: %w", n.id, err)
	}
	return nil
}

// Failed is closed when this member stops because its store could not apply a log entry
// (a disk error...): the member has shut raft down and Err says why. The controller
// watches it to stop or restart; a restart replays the log from the store's applied index.
func (n *Node) Failed() <-chan struct{} { return n.fsm.failed }

// Err returns why this member stopped following the log (see Failed), nil while it follows it.
func (n *Node) Err() error { return n.fsm.faulted() }

// Shutdown stops the member: it leaves the cluster's configuration as it is (use
// RemoveServer on the leader for that), and the store it replicated refuses writes from
// then on (the writes under way end). Calling it again returns the first call's error.
func (n *Node) Shutdown() error {
	n.shutdown.Do(func() {
		n.stop()
		n.raft.DeregisterObserver(n.observer)
		err := n.raft.Shutdown().Error()
		if cerr := n.trans.Close(); err == nil {
			err = cerr
		}
		if cerr := n.logs.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			n.err = fmt.Errorf("cluster: shut %s down: %w", n.id, err)
		}
	})
	return n.err
}
