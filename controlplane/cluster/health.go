package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Health is what a controller's health check and metrics read of its member.
type Health struct {
	// ID is this member's; State its raft state (Follower, Candidate, Leader, Shutdown).
	ID, State string
	// LeaderID and LeaderAddress name the leader this member knows, empty when none.
	LeaderID, LeaderAddress string
	Term                    uint64
	// CommitIndex is the last log index known committed; AppliedIndex the last handed to
	// the store; ApplyLag the difference. LastIndex is the last index in this member's log.
	CommitIndex, AppliedIndex, ApplyLag, LastIndex uint64
	// LeaderContact is when this member, a follower, last heard from the leader (zero on
	// the leader, and before any contact).
	LeaderContact time.Time
	// Members is the cluster's configuration with each member's last contact.
	Members []MemberHealth
	// Writable is whether this member can take a write now: a leader with a quorum of
	// voters (itself included) in contact within the heartbeat timeout, or a follower that
	// knows a leader (its writes go there).
	Writable bool
	// Failure is why this member stopped following the log (Node.Err), empty while it
	// follows it; a failed member is shut down and cannot take writes.
	Failure string
}

// MemberHealth is a member of the configuration and when it was last heard from: by the
// leader, the last answer it sent over raft's connections; by a follower, the leader's
// last contact. Zero when unknown (a follower does not hear from the other followers).
type MemberHealth struct {
	Member
	LastContact time.Time
}

// Health returns the member's figures now. The raft state is read once, so that State and
// Writable agree.
func (n *Node) Health() (Health, error) {
	state := n.raft.State()
	addr, leader := n.raft.LeaderWithID()
	applied := n.raft.AppliedIndex() // before the commit index, which is never behind it
	h := Health{
		ID: n.id, State: state.String(), LeaderID: string(leader), LeaderAddress: string(addr),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: applied,
		LastIndex: n.raft.LastIndex(),
	}
	if h.CommitIndex > h.AppliedIndex {
		h.ApplyLag = h.CommitIndex - h.AppliedIndex
	}
	members, err := n.Members()
	if err != nil {
		return h, fmt.Errorf("cluster: health of %s: %w", n.id, err)
	}
	now := time.Now()
	isLeader := state == raft.Leader
	if !isLeader && leader != "" {
		h.LeaderContact = n.raft.LastContact()
	}
	voters, inContact := 0, 0
	for _, m := range members {
		mh := MemberHealth{Member: m}
		switch {
		case m.ID == n.id:
			mh.LastContact = now
		case isLeader:
			mh.LastContact = n.stream.lastContact(m.Address)
		case raft.ServerID(m.ID) == leader:
			mh.LastContact = h.LeaderContact
		}
		if m.Voter {
			voters++
			if !mh.LastContact.IsZero() && now.Sub(mh.LastContact) <= n.heartbeat {
				inContact++
			}
		}
		h.Members = append(h.Members, mh)
	}
	if err := n.Err(); err != nil {
		h.Failure = err.Error()
		return h, nil // Writable stays false
	}
	switch state {
	case raft.Leader:
		h.Writable = voters > 0 && inContact > voters/2
	case raft.Follower:
		h.Writable = leader != ""
	}
	return h, nil
}
