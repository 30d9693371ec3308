package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// TestHealth reads the figures of a cluster of three: the leader and the followers agree
// on the leader and the term, every member is in contact, all can take writes; with both
// followers stopped the former leader cannot.
func TestHealth(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := threeMembers(ctx, t, testutil.NewCA(t))
	put(t, all, 0, 3)
	holds(t, want(0, 3), all...)

	testutil.EventuallyNil(t, "the figures of a healthy cluster", func() error {
		leader := agreedLeader(all)
		if leader == nil {
			return fmt.Errorf("no agreed leader")
		}
		lh, err := leader.node.Health()
		if err != nil {
			return err
		}
		if lh.ID != leader.id || lh.State != "Leader" || lh.LeaderID != leader.id || lh.LeaderAddress != leader.node.Addr() ||
			lh.Term == 0 || lh.CommitIndex == 0 || lh.AppliedIndex > lh.CommitIndex || lh.LastIndex < lh.CommitIndex ||
			!lh.Writable || len(lh.Members) != 3 || !lh.LeaderContact.IsZero() {
			return fmt.Errorf("leader's figures %+v", lh)
		}
		for _, m := range lh.Members {
			if !m.Voter || m.LastContact.IsZero() || time.Since(m.LastContact) > time.Second {
				return fmt.Errorf("the leader's view of %s: %+v", m.ID, m)
			}
		}
		for _, m := range others(all, leader) {
			h, err := m.node.Health()
			if err != nil {
				return err
			}
			if h.State != "Follower" || h.LeaderID != leader.id || h.Term != lh.Term || !h.Writable ||
				h.LeaderContact.IsZero() || h.CommitIndex == 0 || h.ApplyLag != h.CommitIndex-h.AppliedIndex {
				return fmt.Errorf("%s's figures %+v", m.id, h)
			}
		}
		return nil
	})

	leader := leaderOf(t, all...)
	for _, m := range others(all, leader) {
		m.stop()
	}
	testutil.EventuallyNil(t, "a leader without its followers cannot take writes", func() error {
		h, err := leader.node.Health()
		if err != nil {
			return err
		}
		if h.Writable {
			return fmt.Errorf("figures %+v", h)
		}
		return nil
	})
}
