package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

type item struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func items() *store.Collection[item] {
	return store.NewCollection("items", func(i *item) string { return i.ID },
		store.Index[item]{Name: "name", Unique: true, Keys: func(i *item) []string { return []string{i.Name} }})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// member is a running node with its store, both in dir.
type member struct {
	id   string
	dir  string
	node *Node
	st   *store.Store
}

// controllerCert issues a controller certificate for 127.0.0.1, as a controller's own.
func controllerCert(t *testing.T, ca *testutil.CA) func() (*tls.Certificate, error) {
	t.Helper()
	dir := t.TempDir()
	cert, err := ca.ServerCertAt(filepath.Join(dir, "raft.cert"), filepath.Join(dir, "raft.key"), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return func() (*tls.Certificate, error) { return &cert, nil }
}

// start runs the member id with its data in dir (a new one when empty), listening on bind
// (a new port when empty).
func start(ctx context.Context, t *testing.T, ca *testutil.CA, id, dir, bind string) *member {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	st, err := store.Open(filepath.Join(dir, "store"), quiet, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(ctx, Config{
		ID: id, Dir: filepath.Join(dir, "raft"), Bind: bind,
		Certificate: controllerCert(t, ca), Roots: ca.Pool(), Store: st, Log: quiet,
		TrailingLogs: 4, SnapshotThreshold: 1 << 20, // snapshots when the test asks only
	})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	m := &member{id: id, dir: dir, node: n, st: st}
	t.Cleanup(m.stop)
	return m
}

// listen starts a stream layer on a loopback port presenting cert and trusting ca's
// certificates, its handshakes bounded by handshake; it is closed at the test's end.
func listen(t *testing.T, cert func() (*tls.Certificate, error), ca *testutil.CA, handshake time.Duration) *streamLayer {
	t.Helper()
	s, err := newStreamLayer("127.0.0.1:0", "", cert, ca.Pool(), handshake, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openStore opens a store in a new directory, closed at the test's end.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "store"), quiet, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func (m *member) stop() {
	m.node.Shutdown()
	m.st.Close()
}

// agreedLeader returns the member of ms that leads with every one of them knowing it, or nil.
func agreedLeader(ms []*member) *member {
	var leader *member
	for _, m := range ms {
		if m.node.State() == "Leader" {
			leader = m
		}
	}
	if leader == nil {
		return nil
	}
	for _, m := range ms {
		if id, addr := m.node.Leader(); id != leader.id || addr != leader.node.Addr() {
			return nil
		}
	}
	return leader
}

// leaderOf waits until one of ms is the leader every one of them knows, and returns it.
func leaderOf(t *testing.T, ms ...*member) *member {
	t.Helper()
	var leader *member
	testutil.Eventually(t, "one leader that every member knows", func() bool {
		leader = agreedLeader(ms)
		return leader != nil
	})
	return leader
}

// others returns the members of all other than leader, in their order.
func others(all []*member, leader *member) []*member {
	var out []*member
	for _, m := range all {
		if m != leader {
			out = append(out, m)
		}
	}
	return out
}

// putOnFollower writes it through a member of ms that is not the leader of the moment,
// again until it succeeds (the leadership may move meanwhile), and returns that member:
// the write goes through the leader, and the member answers once it has applied it.
func putOnFollower(t *testing.T, ms []*member, it *item) *member {
	t.Helper()
	c := items()
	var follower *member
	testutil.EventuallyNil(t, "write "+it.Name+" through a member that is not the leader", func() error {
		l := agreedLeader(ms)
		if l == nil {
			return errors.New("no agreed leader")
		}
		follower = others(ms, l)[0]
		if err := follower.st.Update(func(tx *store.Tx) error { return c.Put(tx, it) }); err != nil {
			return fmt.Errorf("a write on %s: %w", follower.id, err)
		}
		return nil
	})
	return follower
}

// onLeader runs f on the leader of ms until it succeeds: on a loaded machine the leadership
// may move at any time, and f then runs again on the next leader.
func onLeader(t *testing.T, what string, ms []*member, f func(l *member) error) {
	t.Helper()
	testutil.EventuallyNil(t, what, func() error {
		l := agreedLeader(ms)
		if l == nil {
			return errors.New("no agreed leader")
		}
		return f(l)
	})
}

// names returns the names of the items in m's store, in id order.
func (m *member) names(t *testing.T) []string {
	t.Helper()
	var out []string
	c := items()
	if err := m.st.View(func(tx *store.Tx) error {
		return c.Each(tx, func(i *item) error { out = append(out, i.Name); return nil })
	}); err != nil && !errors.Is(err, store.ErrRestoring) {
		t.Fatal(err)
	}
	return out
}

// put writes items ids from..to-1 through the leader's store, one Update each (a Put
// again when a write's outcome was unknown).
func put(t *testing.T, ms []*member, from, to int) {
	t.Helper()
	c := items()
	for i := from; i < to; i++ {
		it := &item{ID: fmt.Sprintf("%04d", i), Name: "item-" + strconv.Itoa(i)}
		onLeader(t, "write "+it.Name+" on the leader", ms, func(l *member) error {
			return l.st.Update(func(tx *store.Tx) error { return c.Put(tx, it) })
		})
	}
}

type counter struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

// counted has one goroutine per member of writers add 1 to a counter n times through that
// member's store (a read and a write in one Update, which also records the value it wrote
// under a key of the writer's own), and checks that each writer reads its write back on
// its own member as soon as its Update returns. Then every member must count every
// increment answered with success, and at most as many more as were answered with an
// unknown outcome. A writer stops at its first error but for a stale refusal, after which
// it tries the increment again for a while (as a client told of a conflict would). It
// returns the number of increments that succeeded.
func counted(t *testing.T, ms []*member, writers []*member, n int) int {
	t.Helper()
	c := store.NewCollection("counters", func(c *counter) string { return c.ID })
	type result struct {
		done, stale int
		err         error
	}
	// a writer gives up on Updates refused as stale after a while
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Patience/2)
	defer cancel()
	results := make(chan result, len(writers))
	for w, m := range writers {
		go func() {
			var r result
			mine := fmt.Sprintf("last-%d", w)
			for i := 0; i < n; i++ {
				var wrote int
				r.err = m.st.Update(func(tx *store.Tx) error {
					cur, err := c.Get(tx, "hits")
					if errors.Is(err, store.ErrNotFound) {
						cur, err = &counter{ID: "hits"}, nil
					}
					if err != nil {
						return err
					}
					cur.N++
					wrote = cur.N
					if err := c.Put(tx, cur); err != nil {
						return err
					}
					return c.Put(tx, &counter{ID: mine, N: cur.N})
				})
				if errors.Is(r.err, store.ErrStaleWrite) && ctx.Err() == nil {
					// lost every race to other members' writes: the client tries again
					r.stale++
					i--
					continue
				}
				if r.err != nil {
					break
				}
				var got *counter
				if err := m.st.View(func(tx *store.Tx) (err error) { got, err = c.Get(tx, mine); return err }); err != nil || got.N != wrote {
					r.err = fmt.Errorf("%s reads %v (%v) under %s right after writing %d there", m.id, got, err, mine, wrote)
					break
				}
				r.done++
			}
			results <- r
		}()
	}
	done, unknown, stale := 0, 0, 0
	for range writers {
		r := <-results
		done += r.done
		stale += r.stale
		if r.err != nil {
			t.Logf("a writer stopped after %d increments: %v", r.done, r.err)
		}
		switch {
		case r.err == nil:
		case errors.Is(r.err, ErrOutcomeUnknown), errors.Is(r.err, ErrNotCaughtUp):
			unknown++
		case errors.Is(r.err, store.ErrUnavailable), errors.Is(r.err, store.ErrStaleWrite):
			// not in the log: the leadership moved, or the Update lost every race for long
		default:
			t.Fatalf("an increment: %v", r.err)
		}
	}
	if done == 0 {
		t.Fatal("no increment succeeded")
	}
	for _, m := range ms {
		var got *counter
		testutil.Eventually(t, fmt.Sprintf("%s counts %d increments (and at most %d more)", m.id, done, unknown), func() bool {
			err := m.st.View(func(tx *store.Tx) (err error) { got, err = c.Get(tx, "hits"); return err })
			return err == nil && got.N >= done
		})
		if got.N > done+unknown {
			t.Fatalf("%s counts %d increments, %d succeeded and %d had an unknown outcome", m.id, got.N, done, unknown)
		}
	}
	if done != len(writers)*n {
		t.Logf("%d of %d increments succeeded", done, len(writers)*n)
	}
	t.Logf("%d Updates were refused as stale and tried again", stale)
	return done
}

func want(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, "item-"+strconv.Itoa(i))
	}
	return out
}

func holds(t *testing.T, names []string, ms ...*member) {
	t.Helper()
	for _, m := range ms {
		testutil.Eventually(t, fmt.Sprintf("%s holds %d items", m.id, len(names)), func() bool {
			return slices.Equal(m.names(t), names)
		})
	}
}

// TestThreeMembers runs a cluster of three through a leader's death and a member's removal
// and return with an empty directory. The leadership may move at any step on a loaded
// machine, so every write and membership change goes to the leader of the moment.
func TestThreeMembers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := testutil.NewCA(t)
	all := threeMembers(ctx, t, ca)
	leader := leaderOf(t, all...)
	if members, err := leader.node.Members(); err != nil || len(members) != 3 {
		t.Fatalf("members %v (%v), want three", members, err)
	}

	// Writes through the leader reach every member.
	put(t, all, 0, 10)
	holds(t, want(0, 10), all...)

	// Concurrent writers on the leader lose no update: each write set is computed on the
	// state the previous one left.
	l := leaderOf(t, all...)
	counted(t, all, []*member{l, l, l, l}, 10)

	// A follower's write goes through the leader, and the follower reads it at once.
	follower := putOnFollower(t, all, &item{ID: "0010", Name: "item-10"})
	if got := follower.names(t); !slices.Equal(got, want(0, 11)) {
		t.Fatalf("follower %s reads %v after its write, want %v", follower.id, got, want(0, 11))
	}
	holds(t, want(0, 11), all...)

	// The leader stops: one of the other two leads and writes go on.
	leader = leaderOf(t, all...)
	leader.stop()
	rest := others(all, leader)
	put(t, rest, 11, 20)
	holds(t, want(0, 20), rest...)
	if err := leader.st.Update(func(tx *store.Tx) error { return items().Put(tx, &item{ID: "y", Name: "on-stopped"}) }); !errors.Is(err, raft.ErrRaftShutdown) && !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a write on the stopped member: %v", err)
	}

	// The stopped member is removed, writes go on and both logs are compacted into
	// snapshots; it comes back with an empty directory and catches up from the snapshot of
	// whichever leads, then from the log.
	onLeader(t, "remove "+leader.id, rest, func(l *member) error { return l.node.RemoveServer(ctx, leader.id) })
	put(t, rest, 20, 40)
	holds(t, want(0, 40), rest...)
	for _, m := range rest {
		if err := m.node.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	back := start(ctx, t, ca, leader.id, "", "")
	onLeader(t, "add "+back.id+" back", rest, func(l *member) error { return l.node.AddVoter(ctx, back.id, back.node.Addr()) })
	holds(t, want(0, 40), back)
	// raft notes the installed snapshot once the store has loaded it, a moment later
	testutil.Eventually(t, "the returning member caught up from a snapshot", func() bool {
		s := back.node.Stats()["last_snapshot_index"]
		return s != "0" && s != ""
	})
	all = append(slices.Clone(rest), back)
	put(t, all, 40, 45)
	holds(t, want(0, 45), all...)

	// A member restarted on its directory and address keeps its store (the snapshot it
	// installed is not loaded again) and follows the log on.
	back.stop()
	again := start(ctx, t, ca, back.id, back.dir, back.node.Addr())
	all = append(slices.Clone(rest), again)
	put(t, all, 45, 50)
	holds(t, want(0, 50), all...)

	// The leadership is handed to a member named, then to whichever follower is readiest.
	target := again
	if agreedLeader(all) == again {
		target = rest[0]
	}
	onLeader(t, "hand the leadership to "+target.id, all, func(l *member) error {
		if l == target {
			return nil
		}
		return l.node.TransferLeadership(target.id)
	})
	testutil.Eventually(t, target.id+" leads", func() bool { return agreedLeader(all) == target })
	if err := target.node.TransferLeadership(""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "another member than "+target.id+" leads", func() bool {
		l := agreedLeader(all)
		return l != nil && l != target
	})
	put(t, all, 50, 55)
	holds(t, want(0, 55), all...)
}

// TestOnlyControllersJoin checks that the raft transport refuses a peer whose certificate is
// the network CA's but not a controller's (a router's), in either direction.
func TestOnlyControllersJoin(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	ctrl := controllerCert(t, ca)
	router := ca.Cert(t, "router", pki.ClientServer, "127.0.0.1")
	routerCert := func() (*tls.Certificate, error) { return &router, nil }

	member := listen(t, ctrl, ca, testutil.Patience)
	impostor := listen(t, routerCert, ca, testutil.Patience)
	peer := listen(t, controllerCert(t, ca), ca, testutil.Patience)
	for _, ln := range []*streamLayer{member, impostor, peer} {
		go func() { // serve raft's connections, handshake done, until the dialer closes
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer conn.Close()
					io.Copy(io.Discard, conn)
				}()
			}
		}()
	}
	// handshake dials from a to b and returns the first read's error once the handshake is
	// over: the dialer learns the acceptor's refusal then (TLS 1.3 client certificates).
	handshake := func(a, b *streamLayer) error {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Patience)
		defer cancel()
		conn, err := a.dial(ctx, b.Addr().String(), kindRaft)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("x")); err != nil {
			return err
		}
		conn.(*tls.Conn).CloseWrite()
		_, err = conn.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if err := handshake(member, peer); err != nil {
		t.Fatalf("two controllers: %v", err)
	}
	if err := handshake(member, impostor); !errors.Is(err, certid.ErrNotController) {
		t.Fatalf("a member dialing a router's certificate: %v, want a refusal", err)
	}
	if err := handshake(impostor, member); err == nil {
		t.Fatal("a router's certificate was accepted as a member")
	}
}
