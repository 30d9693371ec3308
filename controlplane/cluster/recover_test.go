package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestRecoverFromOneSurvivor loses two members of three for good: the survivor, stopped,
// is recovered as a cluster of itself alone, leads once started again with everything it
// held, takes writes, and a new member added from an empty directory catches up.
func TestRecoverFromOneSurvivor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := testutil.NewCA(t)
	all := threeMembers(ctx, t, ca)
	m1, m2, m3 := all[0], all[1], all[2]
	// A snapshot with log entries after it: recovery replays both.
	put(t, all, 0, 20)
	holds(t, want(0, 20), all...)
	for _, m := range all {
		if err := m.node.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	put(t, all, 20, 30)
	holds(t, want(0, 30), all...)

	// Two members are lost; the survivor is stopped for its recovery (its running node
	// holds the raft log: refused).
	survivor := m3
	addr := survivor.node.Addr()
	cfg := Config{ID: survivor.id, Dir: filepath.Join(survivor.dir, "raft"), Bind: addr, Store: survivor.st, Log: quiet}
	if _, err := Recover(cfg); err == nil || !strings.Contains(err.Error(), "stop the controller first") {
		t.Fatalf("recover a running member: %v", err)
	}
	m1.stop()
	m2.stop()
	if err := survivor.node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	st, err := ReadState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 3 || st.LastIndex < st.AppliedIndex || st.AppliedIndex == 0 || st.LastTerm == 0 {
		t.Fatalf("the survivor's state before its recovery: %+v, want three members and its last entry at or past its applied index", st)
	}

	// Refused: another member's id, a directory without raft state.
	other := cfg
	other.ID = "c9"
	if _, err := Recover(other); err == nil || !strings.Contains(err.Error(), "not in the configuration") {
		t.Fatalf("recover as a member not in the configuration: %v", err)
	}
	empty := cfg
	empty.Dir = t.TempDir()
	if _, err := Recover(empty); err == nil || !strings.Contains(err.Error(), "no raft state") {
		t.Fatalf("recover a directory without raft state: %v", err)
	}

	before, err := Recover(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Members) != 3 || before.AppliedIndex < st.AppliedIndex {
		t.Fatalf("recover returned %+v, want the three members found and an applied index of at least %d", before, st.AppliedIndex)
	}
	if after, err := ReadState(cfg); err != nil || len(after.Members) != 1 || after.Members[0].ID != survivor.id || after.Members[0].Address != addr {
		t.Fatalf("the state after recovery: %+v (%v), want %s at %s alone", after, err, survivor.id, addr)
	}
	// A new log history: the stores of the lost members, which applied as far under the
	// old one, may not join.
	history, err := survivor.st.History()
	if err != nil || history == "" {
		t.Fatalf("the store's history after recovery: %q (%v), want a new one", history, err)
	}
	if err := NeedsFreshStore(st.AppliedIndex, "", history); err == nil {
		t.Fatal("a lost member's store may join the recovered cluster")
	}

	// Started again, it leads alone with everything it held and takes writes.
	n, err := New(ctx, Config{ID: survivor.id, Dir: cfg.Dir, Bind: addr, Certificate: controllerCert(t, ca), Roots: ca.Pool(),
		Store: survivor.st, Log: quiet, TrailingLogs: 4, SnapshotThreshold: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	survivor.node = n
	alone := []*member{survivor}
	if leaderOf(t, alone...) != survivor {
		t.Fatal("the recovered member does not lead")
	}
	holds(t, want(0, 30), survivor)
	put(t, alone, 30, 40)
	holds(t, want(0, 40), survivor)
	if ms, err := survivor.node.Members(); err != nil || len(ms) != 1 {
		t.Fatalf("members after recovery: %v (%v)", ms, err)
	}

	// A new member from an empty directory joins and catches up; writes go on with two.
	fresh := start(ctx, t, ca, "c4", "", "")
	onLeader(t, "add "+fresh.id, alone, func(l *member) error { return l.node.AddVoter(ctx, fresh.id, fresh.node.Addr()) })
	two := []*member{survivor, fresh}
	holds(t, want(0, 40), fresh)
	if h, err := fresh.st.History(); err != nil || h != history {
		t.Fatalf("the new member's history %q (%v), want the cluster's %q", h, err, history)
	}
	put(t, two, 40, 45)
	holds(t, want(0, 45), two...)

}

// memSink is a snapshot sink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// TestRestoreOfAnotherHistory: a store ahead of a snapshot is kept only when it follows the
// snapshot's log history; one of another history (a member lost before a recovery) is
// replaced, though its applied index is higher.
func TestRestoreOfAnotherHistory(t *testing.T) {
	t.Parallel()
	c := items()
	fill := func(st *store.Store, f *fsm, prefix string, n int) {
		t.Helper()
		st.SetReplicator(&applyAt{f: f, next: 1})
		for i := range n {
			id := fmt.Sprintf("%s%d", prefix, i)
			if err := st.Update(func(tx *store.Tx) error { return c.Put(tx, &item{ID: id, Name: id}) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	src := openStore(t)
	f := newFSM(src, quiet, t.TempDir())
	fill(src, f, "new-", 3)
	if err := src.SetHistory("recovered"); err != nil {
		t.Fatal(err)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	image := sink.Bytes()

	names := func(st *store.Store) (out []string) {
		t.Helper()
		if err := st.View(func(tx *store.Tx) error {
			return c.Each(tx, func(i *item) error { out = append(out, i.Name); return nil })
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		history string
		want    []string
	}{
		{"", []string{"new-0", "new-1", "new-2"}},                            // another history: replaced
		{"recovered", []string{"old-0", "old-1", "old-2", "old-3", "old-4"}}, // the same, ahead: kept
	} {
		dst := openStore(t)
		g := newFSM(dst, quiet, t.TempDir())
		fill(dst, g, "old-", 5)
		if tc.history != "" {
			if err := dst.SetHistory(tc.history); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Restore(io.NopCloser(bytes.NewReader(image))); err != nil {
			t.Fatal(err)
		}
		if got := names(dst); !slices.Equal(got, tc.want) {
			t.Errorf("a store at index 5 of history %q after the restore of a snapshot at 3 of history %q: %v, want %v", tc.history, "recovered", got, tc.want)
		}
		idx, _, _ := dst.AppliedIndex()
		h, _ := dst.History()
		if want := uint64(len(tc.want)); idx != want || g.lastIndex() != want || h != "recovered" {
			t.Errorf("history %q: applied index %d, fsm at %d, history %q after the restore; want %d and %q", tc.history, idx, g.lastIndex(), h, want, "recovered")
		}
	}
	if err := NeedsFreshStore(5, "", "recovered"); err == nil {
		t.Error("a store of another history may join")
	}
	for _, ok := range []struct {
		index   uint64
		history string
	}{{0, ""}, {0, "x"}, {5, "recovered"}} {
		if err := NeedsFreshStore(ok.index, ok.history, "recovered"); err != nil {
			t.Errorf("store at %d of history %q: %v", ok.index, ok.history, err)
		}
	}
}
