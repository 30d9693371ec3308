package sessionsync_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/sessionsync"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestSnapshotOnConnect: a router that connects gets the stored API sessions and sessions,
// with their fields, in one message with Reset and Complete.
func TestSnapshotOnConnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sessionsync.Options{})
	routerID, cert := enrollRouter(t, e.m, "er1")
	grantAll(t, e.m)
	svc := &model.Service{Name: "web"}
	must(t, e.m.CreateService(svc))
	alice, chain := enrollIdentity(t, e.m, "alice")
	apis := login(t, e.m, chain, 2)
	s, _, err := e.m.CreateSession(apis[0], svc.ID, model.PolicyDial, nil)
	must(t, err)

	r := newEdgeRouter()
	r.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r, e.m)
	// The snapshot of a small state is one message. The session was created moments before
	// the router connected: when the model's flush of it comes after the snapshot, the
	// router gets it once more as an update, which changes nothing.
	msgs := r.messages()
	if len(msgs) == 0 || !msgs[0].Reset || !msgs[0].Complete {
		t.Fatalf("snapshot of a small state: %d messages, first %+v", len(msgs), msgs)
	}
	for i, m := range msgs[1:] {
		if m.Reset {
			t.Fatalf("message %d after the snapshot starts another snapshot: %+v", i+1, m)
		}
	}
	r.mu.Lock()
	gotAPI, gotSession := r.apis[apis[0].ID], r.sessions[s.ID]
	r.mu.Unlock()
	if !reflect.DeepEqual(gotAPI, ctrlproto.APISession{ID: apis[0].ID, Token: apis[0].Token, IdentityID: alice.ID, CertFingerprints: []string{certid.Fingerprint(chain[0])}}) {
		t.Errorf("API session %+v", gotAPI)
	}
	want := ctrlproto.Session{ID: s.ID, Token: s.Token, APISessionID: apis[0].ID, IdentityID: alice.ID, ServiceID: svc.ID, Type: model.PolicyDial}
	if gotSession != want {
		t.Errorf("session %+v, want %+v", gotSession, want)
	}
	r.check(t)
}

// TestEmptySnapshot: an empty state is one message with both Reset and Complete.
func TestEmptySnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sessionsync.Options{})
	routerID, cert := enrollRouter(t, e.m, "er1")
	r := newEdgeRouter()
	r.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	testutil.Eventually(t, "a snapshot", func() bool { return len(r.messages()) > 0 })
	time.Sleep(100 * time.Millisecond) // nothing else follows
	msgs := r.messages()
	if len(msgs) != 1 || !msgs[0].Reset || !msgs[0].Complete || len(msgs[0].APISessions)+len(msgs[0].Sessions) != 0 {
		t.Fatalf("empty snapshot: %d messages, first %+v", len(msgs), msgs[0])
	}
}

// TestUpdates: changes reach a connected router as updates: logins, sessions, logout,
// revocation by a policy's deletion, and an identity's deletion, each within 1 s (in
// practice one flush interval); activity that rewrites an API session sends nothing.
func TestUpdates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sessionsync.Options{})
	routerID, cert := enrollRouter(t, e.m, "er1")
	svc := &model.Service{Name: "web"}
	must(t, e.m.CreateService(svc))
	policy := &model.ServicePolicy{Name: "dial-web", Type: model.PolicyDial, IdentityRoles: []string{"#all"}, ServiceRoles: []string{"@" + svc.ID}}
	must(t, e.m.CreateServicePolicy(policy))
	must(t, e.m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "all-routers", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	must(t, e.m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "all-services", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	alice, chain := enrollIdentity(t, e.m, "alice")

	r := newEdgeRouter()
	r.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r, e.m)

	// inSync waits for the router to hold what the store holds, within 3 s of the change
	// (about 20 ms on an idle machine; the time taken is logged).
	inSync := func(what string) {
		t.Helper()
		start := time.Now()
		waitInSync(t, r, e.m)
		t.Logf("%s reached the router in %s", what, time.Since(start).Round(time.Millisecond))
	}
	has := func(apiID, sessionID string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, a := r.apis[apiID]
		_, s := r.sessions[sessionID]
		return a && (sessionID == "" || s)
	}

	api := login(t, e.m, chain, 1)[0]
	inSync("login")
	if !has(api.ID, "") {
		t.Fatal("the new API session is not on the router")
	}
	s1, _, err := e.m.CreateSession(api, svc.ID, model.PolicyDial, nil)
	must(t, err)
	inSync("session creation")
	if !has(api.ID, s1.ID) {
		t.Fatal("the new session is not on the router")
	}
	must(t, e.m.DeleteSession(s1.ID))
	inSync("session deletion")

	// Activity rewrites the API session; routers are not told.
	before := len(r.messages())
	e.clock.Add(time.Minute)
	if _, _, err := e.m.SessionByToken(api.Token); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if n := len(r.messages()); n != before {
		t.Errorf("recording activity sent %d messages", n-before)
	}

	// Deleting the policy revokes the session it allowed.
	s2, _, err := e.m.CreateSession(api, svc.ID, model.PolicyDial, nil)
	must(t, err)
	inSync("session creation")
	must(t, e.m.DeleteServicePolicy(policy.ID))
	inSync("revocation by policy deletion")
	if has(api.ID, s2.ID) {
		t.Fatal("the revoked session is still on the router")
	}
	must(t, e.m.CreateServicePolicy(&model.ServicePolicy{Name: "dial-web-2", Type: model.PolicyDial, IdentityRoles: []string{"#all"}, ServiceRoles: []string{"@" + svc.ID}}))

	// Logout ends the API session and its sessions.
	if _, _, err := e.m.CreateSession(api, svc.ID, model.PolicyDial, nil); err != nil {
		t.Fatal(err)
	}
	inSync("session creation")
	must(t, e.m.DeleteAPISession(api.ID))
	inSync("logout")

	// Deleting the identity removes its API sessions and their sessions.
	apis := login(t, e.m, chain, 2)
	s4, _, err := e.m.CreateSession(apis[0], svc.ID, model.PolicyDial, nil)
	must(t, err)
	s5, _, err := e.m.CreateSession(apis[1], svc.ID, model.PolicyDial, nil)
	must(t, err)
	inSync("logins and sessions")
	if !has(apis[0].ID, s4.ID) || !has(apis[1].ID, s5.ID) {
		t.Fatal("the new API sessions and sessions are not on the router")
	}
	mark := len(r.messages())
	must(t, e.m.DeleteIdentity(alice.ID))
	inSync("identity deletion")
	gotA, gotS, _ := r.state()
	if len(gotA) != 0 || len(gotS) != 0 {
		t.Fatalf("after the identity's deletion the router has %v, %v", gotA, gotS)
	}
	var removedA, removedS []string
	for _, m := range r.messages()[mark:] {
		if m.Reset {
			t.Error("an update came as a snapshot")
		}
		removedA = append(removedA, m.RemovedAPISessions...)
		removedS = append(removedS, m.RemovedSessions...)
	}
	for _, id := range []string{apis[0].ID, apis[1].ID} {
		if !slices.Contains(removedA, id) {
			t.Errorf("API session %s was not removed: %v", id, removedA)
		}
	}
	for _, id := range []string{s4.ID, s5.ID} {
		if !slices.Contains(removedS, id) {
			t.Errorf("session %s was not removed: %v", id, removedS)
		}
	}
	r.check(t)
}

// TestChunkedSnapshot: a state larger than a message spans several: Reset on the first,
// Complete on the last, none larger than the chunk size, and together they are the state.
func TestChunkedSnapshot(t *testing.T) {
	t.Parallel()
	const chunk = 1000
	e := newEnv(t, sessionsync.Options{ChunkEntries: chunk})
	routerID, cert := enrollRouter(t, e.m, "er1")
	grantAll(t, e.m)
	svc := &model.Service{Name: "web"}
	must(t, e.m.CreateService(svc))
	_, chain := enrollIdentity(t, e.m, "alice")
	apis := login(t, e.m, chain, 5000)
	for _, a := range apis[:10] {
		_, _, err := e.m.CreateSession(a, svc.ID, model.PolicyDial, nil)
		must(t, err)
	}

	r := newEdgeRouter()
	r.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r, e.m)
	// Updates of the last logins may follow the snapshot (marked before the router
	// connected, flushed after): they hold what the snapshot held.
	msgs := r.messages()
	end := slices.IndexFunc(msgs, func(m *ctrlproto.SessionState) bool { return m.Complete })
	for _, m := range msgs[end+1:] {
		if m.Reset {
			t.Error("a second snapshot followed")
		}
	}
	msgs = msgs[:end+1]
	if len(msgs) != 6 { // 5,010 entries in messages of 1,000
		t.Errorf("the snapshot came in %d messages, want 6", len(msgs))
	}
	var gotA, gotS []string
	for _, m := range msgs {
		for _, a := range m.APISessions {
			gotA = append(gotA, a.ID)
		}
		for _, s := range m.Sessions {
			gotS = append(gotS, s.ID)
		}
	}
	slices.Sort(gotA)
	slices.Sort(gotS)
	if wantA, wantS := storeState(t, e.m); !slices.Equal(gotA, wantA) || !slices.Equal(gotS, wantS) {
		t.Errorf("the snapshot holds %d API sessions and %d sessions, the store %d and %d", len(gotA), len(gotS), len(wantA), len(wantS))
	}
	for i, m := range msgs {
		if n := len(m.APISessions) + len(m.Sessions); n > chunk {
			t.Errorf("message %d holds %d entries", i, n)
		}
		if m.Reset != (i == 0) || m.Complete != (i == len(msgs)-1) {
			t.Errorf("message %d of %d: reset %v, complete %v", i, len(msgs), m.Reset, m.Complete)
		}
	}
	r.check(t)
}

// TestReconnect: a router that connects again gets a fresh snapshot with Reset, holding
// what changed while it was away and nothing deleted meanwhile; the older connection,
// replaced, is sent nothing more.
func TestReconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sessionsync.Options{})
	routerID, cert := enrollRouter(t, e.m, "er1")
	_, chain := enrollIdentity(t, e.m, "alice")
	apis := login(t, e.m, chain, 3)

	r1 := newEdgeRouter()
	r1.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r1, e.m)
	r1.ch.Close()

	must(t, e.m.DeleteAPISession(apis[0].ID))
	login(t, e.m, chain, 1)

	r2 := newEdgeRouter()
	r2.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r2, e.m)
	if msgs := r2.messages(); !msgs[0].Reset {
		t.Fatal("the reconnected router's first message is not a Reset")
	}

	// A third connection replaces the second while it is open.
	r3 := newEdgeRouter()
	r3.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r3, e.m)
	select {
	case <-r2.ch.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced connection is still open")
	}
	n := len(r2.messages())
	must(t, e.m.DeleteAPISession(apis[1].ID))
	waitInSync(t, r3, e.m)
	if len(r2.messages()) != n {
		t.Error("the replaced connection was sent an update")
	}
	r2.check(t)
	r3.check(t)
}

// TestSlowRouterGetsSnapshot: a router that does not read while its queue overflows is
// sent a fresh snapshot once it reads again, and ends up with the store's state; other
// routers meanwhile get their updates.
func TestSlowRouterGetsSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sessionsync.Options{ChunkEntries: 1, QueueLimit: 5})
	_, chain := enrollIdentity(t, e.m, "alice")
	// Enough one-entry messages to fill the channel's queue and buffers while the router
	// waits on its first.
	login(t, e.m, chain, 2000)

	// A fast router over loopback TLS.
	routerID, cert := enrollRouter(t, e.m, "fast")
	fast := newEdgeRouter()
	fast.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, fast, e.m)

	// A slow router on a pipe: it holds its first message until the gate opens.
	ctrlEnd, routerEnd := net.Pipe()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctrlCh := ctrlproto.New(context.Background(), ctrlEnd, quiet, ctrlproto.Options{})
	t.Cleanup(func() { ctrlCh.Close() })
	slow := newEdgeRouter()
	gate := make(chan struct{})
	slow.gate = gate
	slow.ch = ctrlproto.New(context.Background(), routerEnd, quiet, ctrlproto.Options{})
	slow.ch.Handle(ctrlproto.TypeSessionState, slow.handle)
	t.Cleanup(func() { slow.ch.Close() })
	ctrlCh.Start()
	slow.ch.Start()
	e.sync.Connected("slow", ctrlCh)

	// Changes while it is stuck overflow its queue; one at a time, each reaching the fast
	// router, whose queue never holds more than one. (Its snapshot may have been followed
	// by a flush of the earlier logins, larger than the limit: the log is read from here.)
	logStart := len(e.logs.String())
	var extra []*model.APISession
	for range 10 {
		extra = append(extra, login(t, e.m, chain, 1)...)
		waitInSync(t, fast, e.m)
	}
	overflowed := func(router string) bool {
		for line := range strings.Lines(e.logs.String()[logStart:]) {
			if strings.Contains(line, "does not keep up") && strings.Contains(line, "router="+router+" ") {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, "an overflow logged", func() bool { return overflowed("slow") })
	if overflowed(routerID) {
		t.Error("the fast router overflowed")
	}

	slow.mu.Lock()
	slow.gate = nil
	slow.mu.Unlock()
	close(gate)
	waitInSync(t, slow, e.m)
	slow.mu.Lock()
	resets := slow.resets
	slow.mu.Unlock()
	if resets != 2 {
		t.Errorf("the slow router got %d snapshots, want 2", resets)
	}
	// It keeps receiving updates afterwards.
	must(t, e.m.DeleteAPISession(extra[0].ID))
	waitInSync(t, slow, e.m)
	waitInSync(t, fast, e.m)
	slow.check(t)
	fast.check(t)
}

// TestContentReplacedSendsSnapshot: when the store's whole content is replaced (a snapshot
// installed), every connected router is sent the full state again, starting with Reset,
// and ends up with the new content: API sessions deleted since are back, one created since
// is gone.
func TestContentReplacedSendsSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sessionsync.Options{})
	routerID, cert := enrollRouter(t, e.m, "er1")
	_, chain := enrollIdentity(t, e.m, "alice")
	apis := login(t, e.m, chain, 3)
	r := newEdgeRouter()
	r.connect(t, e.ctrlAddr, e.ca.Pool(), routerID, cert)
	waitInSync(t, r, e.m)

	path := filepath.Join(t.TempDir(), "snapshot")
	out, err := os.Create(path)
	must(t, err)
	must(t, e.st.Backup(out))
	must(t, out.Close())
	must(t, e.m.DeleteAPISession(apis[0].ID))
	login(t, e.m, chain, 1)
	waitInSync(t, r, e.m)
	resets := 0
	for _, m := range r.messages() {
		if m.Reset {
			resets++
		}
	}

	must(t, e.st.ReplaceFromBackup(path))
	waitInSync(t, r, e.m)
	gotA, _, _ := r.state()
	if !slices.Contains(gotA, apis[0].ID) {
		t.Fatalf("the router's API sessions %v lack %s, back with the replaced content", gotA, apis[0].ID)
	}
	n := 0
	for _, m := range r.messages() {
		if m.Reset {
			n++
		}
	}
	if n != resets+1 {
		t.Fatalf("the router was sent %d snapshots after the replacement, want 1", n-resets)
	}
	r.check(t)
}
