package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestApplyFaultStopsTheMember closes a follower's store under its running node, so that
// the next entry fails to apply there: that member stops (raft shut down, Failed closed,
// Err and Health say why, it takes no write), and the other two go on, writes through the
// leader and through the other member succeeding.
func TestApplyFaultStopsTheMember(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := threeMembers(ctx, t, testutil.NewCA(t))
	put(t, all, 0, 1)
	holds(t, want(0, 1), all...)
	bad := others(all, leaderOf(t, all...))[0]
	rest := others(all, bad)
	if err := bad.st.Close(); err != nil {
		t.Fatal(err)
	}
	put(t, rest, 1, 5)
	testutil.Eventually(t, bad.id+" stops after failing to apply an entry", func() bool {
		select {
		case <-bad.node.Failed():
			return bad.node.State() == "Shutdown"
		default:
			return false
		}
	})
	if err := bad.node.Err(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("%s's error: %v, want the store's", bad.id, err)
	}
	h, err := bad.node.Health()
	if err != nil || h.Failure == "" || h.Writable {
		t.Fatalf("%s's figures %+v (%v), want a failure and no writes", bad.id, h, err)
	}
	if err := bad.node.Replicate(&store.WriteSet{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a write on the failed member: %v, want a refusal", err)
	}

	holds(t, want(0, 5), rest...)
	putOnFollower(t, rest, &item{ID: "0005", Name: "item-5"})
	holds(t, want(0, 6), rest...)
}

// TestFSMFault checks that an entry that does not decode is refused on its own (every
// member refuses it alike) while a store that cannot apply an entry is a fault: the fsm
// processes nothing more, its waiters and snapshots get the fault.
func TestFSMFault(t *testing.T) {
	t.Parallel()
	st, err := store.Open(filepath.Join(t.TempDir(), "store"), quiet, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM(st, quiet, t.TempDir())
	if res, _ := f.Apply(&raft.Log{Index: 1, Data: []byte{entryKind, 1}}).(error); !errors.Is(res, store.ErrBadWriteSet) || f.faulted() != nil || f.lastIndex() != 1 {
		t.Fatalf("an entry that does not decode: %v, fault %v, last %d", res, f.faulted(), f.lastIndex())
	}
	st.Close()
	b, err := encodeEntry(newEntryID(), 0, &store.WriteSet{Base: 0, Writes: []store.Write{{Key: []byte("r/k"), Value: []byte("v")}}})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := f.Apply(&raft.Log{Index: 2, Data: b}).(error); !errors.Is(res, store.ErrClosed) {
		t.Fatalf("an entry on a closed store: %v", res)
	}
	select {
	case <-f.failed:
	default:
		t.Fatal("the fault did not close failed")
	}
	if res, _ := f.Apply(&raft.Log{Index: 3, Data: b}).(error); !errors.Is(res, store.ErrClosed) || f.lastIndex() != 1 {
		t.Fatalf("an entry after the fault: %v, last %d, want the fault and 1", res, f.lastIndex())
	}
	if err := f.waitFor(context.Background(), 2); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a wait past the fault: %v", err)
	}
	if _, err := f.Snapshot(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a snapshot after the fault: %v", err)
	}
}
