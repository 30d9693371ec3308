package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

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
	m1, m2, m3 := start(ctx, t, ca, "c1", "", ""), start(ctx, t, ca, "c2", "", ""), start(ctx, t, ca, "c3", "", "")
	if err := m1.node.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	leaderOf(t, m1)
	all := []*member{m1, m2, m3}
	for _, m := range []*member{m2, m3} {
		onLeader(t, "add "+m.id, all[:1], func(l *member) error { return l.node.AddVoter(ctx, m.id, m.node.Addr()) })
	}
	leaderOf(t, all...)
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
	put(t, two, 40, 45)
	holds(t, want(0, 45), two...)

}
