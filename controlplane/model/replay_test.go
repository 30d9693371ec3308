package model

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// sliceLog is a replicated log in one process: it appends each write set to a slice and
// applies it to every member's store in order.
type sliceLog struct {
	mu      sync.Mutex
	sets    []*store.WriteSet
	members []*store.Store
}

func (l *sliceLog) Replicate(ws *store.WriteSet) error {
	b, err := ws.MarshalBinary()
	if err != nil {
		return err
	}
	entry := new(store.WriteSet)
	if err := entry.UnmarshalBinary(b); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sets = append(l.sets, entry)
	var first error
	for i, s := range l.members {
		if err := s.ApplyWrites(entry, uint64(len(l.sets))); i == 0 {
			first = err
		}
	}
	return first
}

// eventually waits until cond holds: another member's hooks run just after its store has
// applied a write set.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen in 30s", what)
		}
		<-tick.C
	}
}

// seen accumulates what a changeLog reported.
type seen struct{ api, ses []string }

func (s *seen) has(l *changeLog, api, ses string) bool {
	a, b := l.take()
	s.api, s.ses = append(s.api, a...), append(s.ses, b...)
	return (api == "" || slices.Contains(s.api, api)) && (ses == "" || slices.Contains(s.ses, ses))
}

// sharedLog returns two models over two stores that share one log, as two members do.
func sharedLog(t *testing.T) (m1, m2 *Model) {
	t.Helper()
	m1, m2 = newFixture(t).m, newFixture(t).m
	l := &sliceLog{members: []*store.Store{m1.st, m2.st}}
	m1.st.SetReplicator(l)
	m2.st.SetReplicator(l)
	return m1, m2
}

// TestReplayedChangesReachAnotherModel has two models over two stores that share one log:
// what is changed through the first reaches the second's policy index, read caches and
// session change hooks (the routers' session sync), and the first's hooks run once.
func TestReplayedChangesReachAnotherModel(t *testing.T) {
	t.Parallel()
	m1, m2 := sharedLog(t)
	log1, log2 := watchChanges(t, m1), watchChanges(t, m2)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	alice, err := m1.CreateIdentity(IdentityCreate{Name: "alice", RoleAttributes: []string{"staff"}})
	must(err)
	web := &Service{Name: "web"}
	must(m1.CreateService(web))
	dial := &ServicePolicy{Name: "staff-web", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + web.ID}}
	must(m1.CreateServicePolicy(dial))
	er := &EdgeRouter{Name: "er1"}
	must(m1.CreateEdgeRouter(er))
	must(m1.CreateEdgeRouterPolicy(&EdgeRouterPolicy{Name: "all-edge", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	must(m1.CreateServiceEdgeRouterPolicy(&ServiceEdgeRouterPolicy{Name: "all-svc", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	enr, err := m1.RouterEnrollment(er.ID)
	must(err)
	_, err = m1.EnrollErOtt(enr.Token, testutil.CSR(t, testutil.NewKey(t)), testutil.CSR(t, testutil.NewKey(t), "router.test"))
	must(err)
	must(m1.CreateTerminator(&Terminator{ServiceID: web.ID, RouterID: er.ID, Binding: "proxy", Address: "127.0.0.1:1"}))

	// The second model builds its policy index and caches from the replicated records.
	got, err := m2.ServicesFor(alice.ID)
	must(err)
	if s := names(t, got); s != "[web:D]" {
		t.Fatalf("alice on the second member: %s", s)
	}
	if _, err := m2.CachedServiceByName("web"); err != nil {
		t.Fatal(err)
	}
	if list, err := m2.CachedTerminatorsOf(web.ID); err != nil || len(list) != 1 {
		t.Fatalf("terminators on the second member: %v, %v", list, err)
	}

	// A service renamed and a terminator added through the first.
	_, err = m1.UpdateService(web.ID, func(s *Service) error { s.Name = "www"; return nil })
	must(err)
	eventually(t, "the rename in the second's policy index", func() bool {
		_, err := m2.CachedServiceByName("www")
		return err == nil
	})
	if _, err := m2.CachedServiceByName("web"); CodeOf(err) != CodeNotFound {
		t.Fatalf("the old name on the second member: %v", err)
	}
	must(m1.CreateTerminator(&Terminator{ServiceID: web.ID, RouterID: er.ID, Binding: "proxy", Address: "127.0.0.1:2"}))
	eventually(t, "the new terminator in the second's read cache", func() bool {
		list, err := m2.CachedTerminatorsOf(web.ID)
		return err == nil && len(list) == 2
	})

	// An API session and a session opened and ended through the first.
	var s1, s2 seen
	api, _, err := m1.openSession(&Authenticator{IdentityID: alice.ID}, "password", "", Login{})
	must(err)
	eventually(t, "the API session's hook on the second", func() bool { return s2.has(log2, "+"+api.ID, "") })
	ses, _, err := m1.CreateSession(api, web.ID, PolicyDial, nil)
	must(err)
	eventually(t, "the session's hook on the second", func() bool { return s2.has(log2, "", "+"+ses.ID) })
	if _, err := m2.DialSession(ses.Token, web.ID, PolicyDial); err != nil {
		t.Fatalf("the session on the second member: %v", err)
	}
	must(m1.DeleteSession(ses.ID))
	eventually(t, "the session's deletion on the second", func() bool {
		_, err := m2.DialSession(ses.Token, web.ID, PolicyDial)
		return CodeOf(err) == CodeNotFound && s2.has(log2, "", "-"+ses.ID)
	})

	// A policy deleted through the first: the second's index loses the service, and the
	// session it allowed ends (the first revokes it; the deletion replicates).
	other, _, err := m1.CreateSession(api, web.ID, PolicyDial, nil)
	must(err)
	must(m1.DeleteServicePolicy(dial.ID))
	eventually(t, "the policy's deletion on the second", func() bool {
		got, err := m2.ServicesFor(alice.ID)
		return err == nil && len(got) == 0 && s2.has(log2, "", "-"+other.ID)
	})

	// The first member's hooks ran once per change, as without replication.
	s1.has(log1, "", "")
	for _, want := range []string{"+" + ses.ID, "-" + ses.ID, "+" + other.ID, "-" + other.ID} {
		if n := countOf(s1.ses, want); n != 1 {
			t.Errorf("the first member reported %s %d times: %v", want, n, s1.ses)
		}
	}
	for _, want := range []string{"+" + ses.ID, "-" + ses.ID, "+" + other.ID, "-" + other.ID} {
		if n := countOf(s2.ses, want); n != 1 {
			t.Errorf("the second member reported %s %d times: %v", want, n, s2.ses)
		}
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestReplayedCredentialChanges: a certificate authenticator deleted, an identity disabled
// and an edge router extended and re-enrolled through the first model reach the second's
// credential, API session and edge router hooks (the circuits, the session sync, the
// control channel); a client's report of its platform moves nothing.
func TestReplayedCredentialChanges(t *testing.T) {
	t.Parallel()
	m1, m2 := sharedLog(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var creds []string
	var routers []RouterChange
	m2.OnCredentialsChange(func(id string) { mu.Lock(); creds = append(creds, id); mu.Unlock() })
	m2.OnEdgeRouterChange(func(id string, c RouterChange) { mu.Lock(); routers = append(routers, c); mu.Unlock() })
	log2 := watchChanges(t, m2)

	alice, err := m1.CreateIdentity(IdentityCreate{Name: "alice", Enrollment: &EnrollmentRequest{OTT: true}})
	must(err)
	ens, err := m1.EnrollmentsOf(alice.ID)
	must(err)
	certPEM, err := m1.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	must(err)
	api, _, err := m1.AuthenticateCert([]*x509.Certificate{parseCert(t, certPEM)}, Login{Source: "127.0.0.1"})
	must(err)
	auths, err := m1.AuthenticatorsOf(alice.ID)
	must(err)
	var s2 seen
	eventually(t, "the login on the second", func() bool { return s2.has(log2, "+"+api.ID, "") })
	mu.Lock()
	creds = nil
	mu.Unlock()

	must(m1.DeleteAuthenticator(auths[0].ID))
	eventually(t, "the deleted certificate on the second", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(creds, alice.ID) && s2.has(log2, "-"+api.ID, "")
	})

	// What a client reports of itself changes nothing the second keeps in memory; disabling
	// the identity changes its credentials.
	gen := m2.cache.gen.Load()
	must(m1.RecordClientInfo(alice.ID, EnvInfo{OS: "linux"}, SDKInfo{}))
	// The hooks of replayed write sets run in the log's order: once the next login's has
	// run, the report's has too.
	again, _, err := m1.openSession(&Authenticator{IdentityID: alice.ID}, "password", "", Login{})
	must(err)
	eventually(t, "the next login on the second", func() bool { return s2.has(log2, "+"+again.ID, "") })
	if got := m2.cache.gen.Load(); got != gen {
		t.Fatalf("the second's policy index moved %d times after a client's report, want none", got-gen)
	}
	mu.Lock()
	creds = nil
	mu.Unlock()
	must(m1.DisableIdentity(alice.ID, 0))
	eventually(t, "the disabled identity on the second", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(creds, alice.ID)
	})

	er := &EdgeRouter{Name: "er1"}
	must(m1.CreateEdgeRouter(er))
	enr, err := m1.RouterEnrollment(er.ID)
	must(err)
	key := testutil.NewKey(t)
	certs, err := m1.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "router.test"))
	must(err)
	first := parseCert(t, certs.Cert)
	extended, err := m1.ExtendRouter([]*x509.Certificate{first}, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "router.test"))
	must(err)
	r, err := m1.EdgeRouter(er.ID)
	must(err)
	want := RouterChange{Extended: true, Previous: certid.Fingerprint(first), Current: [2]string{r.Fingerprint, r.ServerFingerprint}}
	if r.Fingerprint != certid.Fingerprint(parseCert(t, extended.Cert)) {
		t.Fatalf("the router's fingerprint %s is not its extended certificate's", r.Fingerprint)
	}
	eventually(t, "the extension on the second", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(routers, want)
	})
	_, err = m1.ReEnrollEdgeRouter(er.ID)
	must(err)
	eventually(t, "the re-enrollment on the second", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return routers[len(routers)-1] == RouterChange{}
	})
}

// TestContentReplaced: a member whose store's content is replaced from a backup (a
// snapshot installed) forgets what it kept in memory of the old content: a service policy
// and a terminator deleted in the backup are gone from its policy index and read caches,
// and the hooks of OnContentReplaced are told.
func TestContentReplaced(t *testing.T) {
	t.Parallel()
	f1, f2 := newFixture(t), newFixture(t)
	m1, m2 := f1.m, f2.m
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	alice, err := m1.CreateIdentity(IdentityCreate{Name: "alice", RoleAttributes: []string{"staff"}})
	must(err)
	web := &Service{Name: "web", RoleAttributes: []string{"public"}}
	must(m1.CreateService(web))
	policy := &ServicePolicy{Name: "staff-web", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"#public"}}
	must(m1.CreateServicePolicy(policy))
	er := &EdgeRouter{Name: "er1"}
	must(m1.CreateEdgeRouter(er))
	term := &Terminator{ServiceID: web.ID, RouterID: er.ID, Binding: "transport", Address: "tcp:web:80"}
	must(m1.CreateTerminator(term))

	replace := func() {
		t.Helper()
		path := filepath.Join(t.TempDir(), "snapshot")
		out, err := os.Create(path)
		must(err)
		must(m1.st.Backup(out))
		must(out.Close())
		must(m2.st.ReplaceFromBackup(path))
		m2.st.WaitReplayed()
	}
	var told atomic.Int32
	m2.OnContentReplaced(func() { told.Add(1) })
	replace()
	// Model 2 reads the copied content into its policy index and read caches.
	if ok, err := m2.AllowedWithoutPosture(alice.ID, web.ID, PolicyDial); err != nil || !ok {
		t.Fatalf("before the deletion: dial allowed %v (%v), want true", ok, err)
	}
	if list, err := m2.CachedTerminatorsOf(web.ID); err != nil || len(list) != 1 {
		t.Fatalf("before the deletion: %d terminators (%v), want 1", len(list), err)
	}

	must(m1.DeleteServicePolicy(policy.ID))
	must(m1.DeleteTerminator(term.ID))
	replace()
	if ok, err := m2.AllowedWithoutPosture(alice.ID, web.ID, PolicyDial); err != nil || ok {
		t.Fatalf("after the policy was deleted in the installed backup: dial allowed %v (%v), want false", ok, err)
	}
	if list, err := m2.CachedTerminatorsOf(web.ID); err != nil || len(list) != 0 {
		t.Fatalf("after the terminator was deleted in the installed backup: %d terminators (%v), want 0", len(list), err)
	}
	if n := told.Load(); n != 2 {
		t.Fatalf("OnContentReplaced hooks ran %d times, want 2", n)
	}
}

// TestReplayedCAChanges: a third-party CA renamed through the first model tells the
// second's credential hooks nothing; its authentication turned off, then its deletion, tell
// them of the identity enrolled with it. A certificate authenticator rewritten without a
// change of its certificates tells nothing either.
func TestReplayedCAChanges(t *testing.T) {
	t.Parallel()
	m1, m2 := sharedLog(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var creds []string
	m2.OnCredentialsChange(func(id string) { mu.Lock(); creds = append(creds, id); mu.Unlock() })
	// told returns what the second's credential hooks were told since the last call, once
	// the write sets applied so far have run their hooks there.
	told := func() []string {
		m2.st.WaitReplayed()
		mu.Lock()
		defer mu.Unlock()
		out := creds
		creds = nil
		return out
	}

	corp := testutil.NewAuthority(t, "corp CA")
	ca, err := m1.CreateCA(CACreate{Name: "corp", CertPEM: certPEM(corp.Cert), IsAutoCaEnrollmentEnabled: true, IsAuthEnabled: true})
	must(err)
	must(m1.VerifyCA(ca.ID, certPEM(corp.Issue(t, ca.VerificationToken, nil))))
	dev, err := m1.EnrollCA([]*x509.Certificate{corp.Issue(t, "dev1", nil)})
	must(err)
	told()

	_, err = m1.UpdateCA(ca.ID, func(c *CA) error { c.Name = "corporate"; return nil })
	must(err)
	if got := told(); len(got) != 0 {
		t.Fatalf("renaming the CA told the second of %v, want nothing", got)
	}
	auths, err := m1.AuthenticatorsOf(dev.ID)
	must(err)
	must(m1.st.Update(func(tx *store.Tx) error {
		a, err := m1.c.authenticators.Get(tx, auths[0].ID)
		if err != nil {
			return err
		}
		a.UpdatedAt = a.UpdatedAt.Add(time.Second)
		return m1.c.authenticators.Put(tx, a)
	}))
	if got := told(); len(got) != 0 {
		t.Fatalf("rewriting the authenticator's time told the second of %v, want nothing", got)
	}

	_, err = m1.UpdateCA(ca.ID, func(c *CA) error { c.IsAuthEnabled = false; return nil })
	must(err)
	if got := told(); !slices.Contains(got, dev.ID) {
		t.Fatalf("turning the CA's authentication off told the second of %v, want %s", got, dev.ID)
	}
	_, err = m1.UpdateCA(ca.ID, func(c *CA) error { c.IsAuthEnabled = true; return nil })
	must(err)
	told()
	must(m1.DeleteCA(ca.ID))
	if got := told(); !slices.Contains(got, dev.ID) {
		t.Fatalf("deleting the CA told the second of %v, want %s", got, dev.ID)
	}
}
