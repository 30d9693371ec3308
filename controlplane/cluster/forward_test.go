package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// threeMembers starts a cluster of three on loopback, with certificates of ca, and returns
// its members once they all know one leader: c1 bootstrapped it and leads at first.
func threeMembers(ctx context.Context, t *testing.T, ca *testutil.CA) []*member {
	t.Helper()
	all := []*member{start(ctx, t, ca, "c1", "", ""), start(ctx, t, ca, "c2", "", ""), start(ctx, t, ca, "c3", "", "")}
	if err := all[0].node.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	if leaderOf(t, all[0]) != all[0] {
		t.Fatal("the bootstrapped member is not the leader")
	}
	for _, m := range all[1:] {
		onLeader(t, "add "+m.id, all[:1], func(l *member) error { return l.node.AddVoter(ctx, m.id, m.node.Addr()) })
	}
	leaderOf(t, all...)
	return all
}

// oneMember starts a cluster of one on loopback, with a certificate of ca, and returns its
// member once it leads.
func oneMember(ctx context.Context, t *testing.T, ca *testutil.CA) *member {
	t.Helper()
	m := start(ctx, t, ca, "c1", "", "")
	if err := m.node.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	leaderOf(t, m)
	return m
}

// TestWriteAfterShutdown checks that a write on a member that has left the cluster is
// refused as an unavailability, naming raft's shutdown.
func TestWriteAfterShutdown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := oneMember(ctx, t, testutil.NewCA(t))
	if err := m.node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := m.node.Replicate(&store.WriteSet{}); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, raft.ErrRaftShutdown) {
		t.Fatalf("a write after the shutdown: %v, want store.ErrUnavailable and raft.ErrRaftShutdown", err)
	}
}

// TestForwardedWrites has writers on every member, followers and leader alike, increment
// one counter concurrently: no increment is lost, and each writer reads its own write on
// its own member as soon as its Update returns.
func TestForwardedWrites(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := threeMembers(ctx, t, testutil.NewCA(t))
	term := func() uint64 {
		h, err := all[0].node.Health()
		if err != nil {
			t.Fatal(err)
		}
		return h.Term
	}
	before := term()
	writers := []*member{all[0], all[1], all[2], all[0], all[1], all[2]}
	done := counted(t, all, writers, 15)
	if after := term(); done != len(writers)*15 && after == before {
		t.Fatalf("%d of %d increments succeeded with a stable leader", done, len(writers)*15)
	}
}

// TestWriteWhileTheLeaderStops has writers on every member put items while the leader is
// shut down, one of the writes forwarded to it left unanswered: each write through a
// surviving member answered with success is then on both survivors, and each answered
// with an error is on neither (a write whose outcome was unknown is looked up in the log
// the new leader settles).
func TestWriteWhileTheLeaderStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := threeMembers(ctx, t, testutil.NewCA(t))
	type outcome struct {
		via *member
		id  string
		err error
	}
	const perWriter = 30
	var wrote atomic.Int64
	outcomes := make(chan outcome, len(all)*perWriter)
	var wg sync.WaitGroup
	for w, m := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := items()
			for i := range perWriter {
				it := &item{ID: fmt.Sprintf("w%d-%03d", w, i), Name: fmt.Sprintf("w%d-%03d", w, i)}
				err := m.st.Update(func(tx *store.Tx) error { return c.Put(tx, it) })
				outcomes <- outcome{m, it.ID, err}
				wrote.Add(1)
			}
		}()
	}
	// Whichever member leads handles one forwarded write and stops before answering: its
	// writer cannot know whether it is in the log.
	var dropper atomic.Pointer[member]
	for _, m := range all {
		drop := func() bool { return dropper.CompareAndSwap(nil, m) }
		m.node.dropReply.Store(&drop)
	}
	testutil.Eventually(t, "a leader leaving a forwarded write unanswered", func() bool { return dropper.Load() != nil })
	leader := dropper.Load()
	leader.stop()
	wg.Wait()
	close(outcomes)
	rest := others(all, leader)

	// The survivors settle on a leader and on one content.
	put(t, rest, 100, 101)
	testutil.EventuallyNil(t, "the same items on both survivors", func() error {
		a, b := rest[0].names(t), rest[1].names(t)
		if !slices.Equal(a, b) {
			return fmt.Errorf("%s holds %d items, %s %d", rest[0].id, len(a), rest[1].id, len(b))
		}
		return nil
	})
	held := map[string]bool{}
	for _, name := range rest[0].names(t) {
		held[name] = true
	}
	failed := 0
	for o := range outcomes {
		if o.via == leader { // its store is closed: nothing to learn from its answers
			continue
		}
		switch {
		case o.err == nil && !held[o.id]:
			t.Errorf("write %s was answered with success but is on no survivor", o.id)
		case o.err != nil && held[o.id]:
			t.Errorf("write %s was answered with %v but is on both survivors", o.id, o.err)
		case o.err != nil:
			failed++
			t.Logf("write %s: %v", o.id, o.err)
			if !errors.Is(o.err, store.ErrUnavailable) && !errors.Is(o.err, store.ErrStaleWrite) {
				t.Errorf("write %s failed with %v, not a refusal wrapping store.ErrUnavailable", o.id, o.err)
			}
		}
	}
	var resolved uint64
	for _, m := range rest {
		resolved += m.node.resolved.Load()
	}
	if resolved == 0 {
		t.Fatal("no write's outcome was looked up")
	}
	t.Logf("%d of %d writes through the survivors failed; %d outcomes were looked up after the leadership was lost", failed, 2*perWriter, resolved)
}

// TestRefusalNamesTheCause stops two members of three, the leader among them: a write on
// the third fails within its apply timeout with a refusal wrapping store.ErrUnavailable
// that says the leader is unknown or unreachable, and it is not applied.
func TestRefusalNamesTheCause(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := threeMembers(ctx, t, testutil.NewCA(t))
	put(t, all, 0, 1)
	holds(t, want(0, 1), all...)
	// The other follower stops first, then the leader: the last member cannot have been
	// elected meanwhile, and cannot be after (one vote of three).
	leader := leaderOf(t, all...)
	followers := others(all, leader)
	last := followers[1]
	followers[0].stop()
	leader.stop()
	last.node.applyTimeout = 2 * time.Second
	err := last.st.Update(func(tx *store.Tx) error { return items().Put(tx, &item{ID: "lost", Name: "lost"}) })
	switch {
	case !errors.Is(err, store.ErrUnavailable):
		t.Fatalf("a write on the last member: %v, want a refusal wrapping store.ErrUnavailable", err)
	case errors.Is(err, ErrNoQuorum):
		// the leadership moved to this member before the others stopped: a leader
		// without a quorum cannot commit
	case !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrLeaderUnreachable):
		t.Fatalf("a write on the last member: %v, want a refusal naming no leader or an unreachable one", err)
	case errors.Is(err, ErrOutcomeUnknown):
		t.Fatalf("a write that could not reach a leader has an unknown outcome: %v", err)
	}
	t.Logf("refusal: %v", err)
	holds(t, want(0, 1), last)
}

// captured is a replicator that keeps the write set it is handed and applies nothing.
type captured struct{ ws *store.WriteSet }

var errCaptured = errors.New("captured")

func (c *captured) Replicate(ws *store.WriteSet) error { c.ws = ws; return errCaptured }

// writeSetOf returns the write set an Update running f makes on an empty store.
func writeSetOf(t *testing.T, f func(tx *store.Tx) error) *store.WriteSet {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "store"), quiet, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep := &captured{}
	st.SetReplicator(rep)
	if err := st.Update(f); !errors.Is(err, errCaptured) {
		t.Fatalf("capture a write set: %v", err)
	}
	return rep.ws
}

// TestForwardedAheadOfTheLeader hands the leader a forwarded write set computed on a state
// it has not applied yet, as a follower that applied an entry before its leader would: the
// leader holds it until it has applied as far (refusing it within the request's deadline
// otherwise, but not as stale), then appends it.
func TestForwardedAheadOfTheLeader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := threeMembers(ctx, t, testutil.NewCA(t))
	put(t, all, 0, 1)
	c := items()
	ws := writeSetOf(t, func(tx *store.Tx) error { return c.Put(tx, &item{ID: "ahead", Name: "ahead"}) })

	l := leaderOf(t, all...)
	ws.Base = l.node.fsm.lastIndex() + 1000
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	r := l.node.acceptForwarded(short, newEntryID(), l.node.raft.CurrentTerm(), ws)
	stop()
	if r.status == stStale || r.status == stApplied {
		t.Fatalf("a write set far ahead of the leader: status %d index %d (%s), want it held, then refused as absent", r.status, r.index, r.msg)
	}

	testutil.EventuallyNil(t, "a write set one entry ahead of the leader, appended once it is reached", func() error {
		l := agreedLeader(all)
		if l == nil {
			return errors.New("no agreed leader")
		}
		ws.Base = l.node.fsm.lastIndex() + 1
		got := make(chan reply, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, testutil.Patience)
			defer cancel()
			got <- l.node.acceptForwarded(ctx, newEntryID(), l.node.raft.CurrentTerm(), ws)
		}()
		put(t, all, 1, 2)
		if r := <-got; r.status != stApplied {
			return fmt.Errorf("status %d index %d (%s)", r.status, r.index, r.msg)
		}
		return nil
	})
	testutil.Eventually(t, "every member holds the forwarded item", func() bool {
		for _, m := range all {
			if err := m.st.View(func(tx *store.Tx) error { _, err := c.Get(tx, "ahead"); return err }); err != nil {
				return false
			}
		}
		return true
	})
}

// TestForwardingOnlyFromMembers checks that a leader answers a forwarded request only from
// a controller whose certificate is valid for the address of another member of the
// cluster's configuration: not before it is added, not with a certificate for another
// host, and not once it is removed.
func TestForwardingOnlyFromMembers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := testutil.NewCA(t)
	l := oneMember(ctx, t, ca)
	dialer := func(cert func() (*tls.Certificate, error)) *streamLayer {
		return listen(t, cert, ca, testutil.Patience)
	}
	dir := t.TempDir()
	otherHost, err := ca.ServerCertAt(filepath.Join(dir, "c"), filepath.Join(dir, "k"), []string{"elsewhere.example"})
	if err != nil {
		t.Fatal(err)
	}
	peer, stranger := dialer(controllerCert(t, ca)), dialer(func() (*tls.Certificate, error) { return &otherHost, nil })
	// resolve asks the leader, through s, to settle the log.
	resolve := func(s *streamLayer) reply {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, testutil.Patience)
		defer cancel()
		conn, err := s.dial(rctx, l.node.Addr(), kindForward)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(testutil.Patience))
		req, err := encodeRequest(opResolve, newEntryID(), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(req); err != nil {
			t.Fatal(err)
		}
		r, err := readReply(bufio.NewReader(conn))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if r := resolve(peer); r.status != stAbsent {
		t.Fatalf("a controller not in the cluster: status %d (%s), want a refusal", r.status, r.msg)
	}
	// The peer joins as a non-voter (it runs no raft, and the leader needs no vote of it).
	if err := l.node.raft.AddNonvoter("peer", raft.ServerAddress(peer.Addr().String()), 0, testutil.Patience).Error(); err != nil {
		t.Fatal(err)
	}
	if r := resolve(peer); r.status != stSettled {
		t.Fatalf("a member: status %d (%s), want the log settled", r.status, r.msg)
	}
	if r := resolve(stranger); r.status != stAbsent {
		t.Fatalf("a controller whose certificate is for another host: status %d (%s), want a refusal", r.status, r.msg)
	}
	if err := l.node.RemoveServer(ctx, "peer"); err != nil {
		t.Fatal(err)
	}
	if r := resolve(peer); r.status != stAbsent {
		t.Fatalf("a removed member: status %d (%s), want a refusal", r.status, r.msg)
	}
}

// TestForwardedBodyReadAsItArrives checks that a request announcing the largest write set
// and sending a few bytes of it costs the reader far less than the size announced, and
// that a whole request reads back as it was encoded.
func TestForwardedBodyReadAsItArrives(t *testing.T) {
	// not parallel: it counts the process's allocations
	req := appendRequestHead(nil, opWrite, newEntryID(), 1, maxForwardedSet)
	req = append(req, "a few bytes"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, _, _, err := readRequest(bufio.NewReader(bytes.NewReader(req)))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("a request cut short: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > maxForwardedSet/8 {
		t.Fatalf("reading a request cut short allocated %d bytes", got)
	}
	ws := &store.WriteSet{Base: 3, Writes: []store.Write{{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 300)}}}
	set, err := ws.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	id := newEntryID()
	whole, err := encodeRequest(opWrite, id, 7, ws)
	if err != nil {
		t.Fatal(err)
	}
	op, gotID, term, payload, err := readRequest(bufio.NewReader(bytes.NewReader(whole)))
	if err != nil || op != opWrite || gotID != id || term != 7 || !bytes.Equal(payload, set) {
		t.Fatalf("a whole request: op %d id %x term %d payload %x (%v), want the set %x", op, gotID, term, payload, err, set)
	}
}

// TestForwardedInAnotherTerm checks that a leader refuses, as absent, a forwarded set sent
// in another term than its own, and takes one sent in its term.
func TestForwardedInAnotherTerm(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := oneMember(ctx, t, testutil.NewCA(t))
	c := items()
	ws := writeSetOf(t, func(tx *store.Tx) error { return c.Put(tx, &item{ID: "x", Name: "x"}) })
	actx, stop := context.WithTimeout(ctx, testutil.Patience)
	defer stop()
	term := l.node.raft.CurrentTerm()
	if r := l.node.acceptForwarded(actx, newEntryID(), term-1, ws); r.status != stAbsent {
		t.Fatalf("a set sent in an earlier term: status %d (%s), want absent", r.status, r.msg)
	}
	if r := l.node.acceptForwarded(actx, newEntryID(), term, ws); r.status != stApplied {
		t.Fatalf("a set sent in the leader's term: status %d (%s)", r.status, r.msg)
	}
}
