package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// State is what a stopped member's raft state holds, as ReadState and Recover see it.
type State struct {
	// Members is the latest configuration in the member's raft state (Recover: before it
	// was rewritten).
	Members []Member
	// LastIndex and LastTerm are the member's last log entry, or the snapshot's when the log
	// after it is empty. Of several survivors, the one with the highest LastTerm, then
	// LastIndex, holds the most of the log.
	LastIndex, LastTerm uint64
	// AppliedIndex is the store's applied index (Recover: after the log was replayed).
	AppliedIndex uint64
}

// Includes tells whether the member id is in the configuration.
func (st State) Includes(id string) bool {
	return slices.ContainsFunc(st.Members, func(m Member) bool { return m.ID == id })
}

// ReadState reads the raft state of the stopped member c describes (c.Dir, and c.Store
// for the applied index), changing nothing.
func ReadState(c Config) (State, error) {
	var st State
	err := withRaftState(c, func(logs *raftboltdb.BoltStore, snaps *raft.FileSnapshotStore) error {
		var err error
		st, err = readState(c, logs, snaps)
		return err
	})
	return st, err
}

// Recover makes the stopped member c describes, the survivor of a cluster that lost its
// quorum for good, a cluster of itself alone: hashicorp/raft's RecoverCluster applies every
// entry of its log to its store and rewrites its raft state to a configuration of this
// member alone, at c.Advertise (c.Bind when empty). Started again (New), it elects itself
// and takes writes; other members are added afresh, from empty directories. What only the
// lost members had is lost; what this member had that the cluster had not yet committed is
// committed now. The store starts a new log history (store.SetHistory), so that a store of
// a lost member, whose indexes may name other entries, is told apart (see NeedsFreshStore).
// The member must be in the configuration its raft state holds (not a removed member, nor
// another member's directory). It returns the state found before.
func Recover(c Config) (State, error) {
	addr := c.Advertise
	if addr == "" {
		addr = c.Bind
	}
	if addr == "" {
		return State{}, errors.New("cluster: recover: Config.Advertise and Config.Bind are empty: the member's raft address is needed")
	}
	tcp, err := net.ResolveTCPAddr("tcp", addr) // as the transport advertises it
	if err != nil {
		return State{}, fmt.Errorf("cluster: recover: the member's raft address %q (check cluster.advertise, or cluster.listen without it): %w", addr, err)
	}
	addr = tcp.String()
	var before State
	err = withRaftState(c, func(logs *raftboltdb.BoltStore, snaps *raft.FileSnapshotStore) error {
		var err error
		if before, err = readState(c, logs, snaps); err != nil {
			return err
		}
		if !before.Includes(c.ID) {
			return fmt.Errorf("cluster: recover: member %s is not in the configuration its raft state in %s holds (%s): it was removed from the cluster, or the directory is another member's",
				c.ID, c.Dir, memberList(before.Members))
		}
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(c.ID)
		conf.Logger = newHCLogger(c.Log.With("member", c.ID))
		_, trans := raft.NewInmemTransport(raft.ServerAddress(addr)) // for the snapshot's peers only
		defer trans.Close()
		f := &recoveryFSM{fsm: newFSM(c.Store, c.Log.With("member", c.ID), c.Dir)}
		alone := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(c.ID), Address: raft.ServerAddress(addr)}}}
		if err := raft.RecoverCluster(conf, f, logs, logs, snaps, trans, alone); err != nil {
			if fault := f.faulted(); fault != nil {
				return fmt.Errorf("cluster: recover %s: %w", c.ID, fault)
			}
			if f.restoreErr != nil {
				err = fmt.Errorf("%w: %w", err, f.restoreErr)
			}
			return fmt.Errorf("cluster: recover %s: %w", c.ID, err)
		}
		return nil
	})
	if err != nil {
		return before, err
	}
	idx, _, err := c.Store.AppliedIndex()
	if err != nil {
		return before, fmt.Errorf("cluster: recover %s: %w", c.ID, err)
	}
	before.AppliedIndex = idx
	return before, nil
}

// recoveryFSM is the fsm of a recovery: its snapshot, taken once the log is replayed, starts
// a new log history; it keeps the last snapshot's restore error, which raft does not report.
type recoveryFSM struct {
	*fsm
	restoreErr error
}

func (f *recoveryFSM) Restore(rc io.ReadCloser) error {
	err := f.fsm.Restore(rc)
	if err != nil {
		f.restoreErr = err
	}
	return err
}

func (f *recoveryFSM) Snapshot() (raft.FSMSnapshot, error) {
	var b [16]byte
	rand.Read(b[:])
	if err := f.st.SetHistory(hex.EncodeToString(b[:])); err != nil {
		return nil, fmt.Errorf("cluster: recover: start a new log history: %w", err)
	}
	return f.fsm.Snapshot()
}

// NeedsFreshStore tells why a controller whose store applied the log up to index joiner in
// history joinerHistory cannot join a cluster whose store follows history (nil when it
// can): a store of another history (a member lost before a recovery, come back on its old
// directory) holds entries under indexes the cluster gave to others, and would skip the
// cluster's. A store that applied nothing joins any cluster.
func NeedsFreshStore(joiner uint64, joinerHistory, history string) error {
	if joiner == 0 || joinerHistory == history {
		return nil
	}
	return fmt.Errorf("its store applied up to index %d of another log history than the cluster's (it was a member before the cluster was recovered from the loss of a majority)", joiner)
}

// withRaftState opens the raft log and snapshots of c.Dir for fn, refusing a directory
// without raft state: recovery starts from a member's state, never from nothing.
func withRaftState(c Config, fn func(*raftboltdb.BoltStore, *raft.FileSnapshotStore) error) error {
	if c.ID == "" || c.Dir == "" || c.Store == nil || c.Log == nil {
		return errors.New("cluster: Config.ID, Dir, Store and Log are needed to read a member's raft state")
	}
	path := filepath.Join(c.Dir, "raft.db")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cluster: no raft state in %s (no raft.db): this controller was never a member of a cluster, or cluster.dataDir names another directory than the one it used", c.Dir)
	} else if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	// A running member holds the file's lock: give up on it soon rather than wait.
	logs, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: 2 * time.Second}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("cluster: the raft log %s is in use: stop the controller first", path)
	}
	if err != nil {
		return fmt.Errorf("cluster: open the raft log %s: %w", path, err)
	}
	defer logs.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.Dir, 2, newHCLogger(c.Log.With("member", c.ID)))
	if err != nil {
		return fmt.Errorf("cluster: open the snapshots in %s: %w", c.Dir, err)
	}
	return fn(logs, snaps)
}

// readState reads the latest configuration (the newest snapshot's, replaced by any
// configuration entry of the log after it), the last entry and the store's applied index.
func readState(c Config, logs *raftboltdb.BoltStore, snaps *raft.FileSnapshotStore) (State, error) {
	var st State
	var conf raft.Configuration
	var snapIndex uint64
	metas, err := snaps.List()
	if err != nil {
		return st, fmt.Errorf("cluster: list the snapshots in %s: %w", c.Dir, err)
	}
	if len(metas) > 0 { // raft reads configuration entries after the snapshot's index
		conf, snapIndex = metas[0].Configuration, metas[0].Index
		st.LastIndex, st.LastTerm = metas[0].Index, metas[0].Term
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return st, fmt.Errorf("cluster: read the raft log in %s: %w", c.Dir, err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return st, fmt.Errorf("cluster: read the raft log in %s: %w", c.Dir, err)
	}
	if first > 0 {
		for i := max(first, snapIndex+1); i <= last; i++ {
			var e raft.Log
			if err := logs.GetLog(i, &e); err != nil {
				return st, fmt.Errorf("cluster: read raft log entry %d in %s: %w", i, c.Dir, err)
			}
			if e.Type == raft.LogConfiguration {
				if conf, err = decodeConfiguration(e.Data); err != nil {
					return st, fmt.Errorf("cluster: raft log entry %d in %s: %w", i, c.Dir, err)
				}
			}
			if e.Index > st.LastIndex {
				st.LastIndex, st.LastTerm = e.Index, e.Term
			}
		}
	}
	if len(metas) == 0 && first == 0 {
		return st, fmt.Errorf("cluster: the raft state in %s holds no log and no snapshot: this controller never joined a cluster", c.Dir)
	}
	st.Members = membersOf(conf.Servers)
	if st.AppliedIndex, _, err = c.Store.AppliedIndex(); err != nil {
		return st, fmt.Errorf("cluster: %w", err)
	}
	return st, nil
}

// decodeConfiguration decodes a configuration entry; raft's decoder panics on bad bytes.
func decodeConfiguration(b []byte) (conf raft.Configuration, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("a configuration entry that does not decode: %v", p)
		}
	}()
	return raft.DecodeConfiguration(b), nil
}

// memberList names members for a message.
func memberList(ms []Member) string {
	if len(ms) == 0 {
		return "no member"
	}
	out := ""
	for i, m := range ms {
		if i > 0 {
			out += ", "
		}
		out += m.ID + " at " + m.Address
	}
	return out
}
