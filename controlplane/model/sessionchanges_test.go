package model

import (
	"crypto/x509"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// changeLog records what OnAPISessionChange and OnSessionChange report, and whether each
// reported record existed in the store when it was reported (after the commit).
type changeLog struct {
	mu       sync.Mutex
	api, ses []string // "+id": present when reported, "-id": absent
}

func watchChanges(t *testing.T, m *Model) *changeLog {
	l := &changeLog{}
	m.OnAPISessionChange(func(id string) {
		apis, _, err := m.SessionStateOf([]string{id}, nil)
		if err != nil {
			t.Error(err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.api = append(l.api, sign(apis[id] != nil)+id)
	})
	m.OnSessionChange(func(id string) {
		_, ses, err := m.SessionStateOf(nil, []string{id})
		if err != nil {
			t.Error(err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ses = append(l.ses, sign(ses[id] != nil)+id)
	})
	return l
}

func sign(present bool) string {
	if present {
		return "+"
	}
	return "-"
}

// take returns what was reported since the last call, sorted.
func (l *changeLog) take() (api, ses []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	api, ses, l.api, l.ses = l.api, l.ses, nil, nil
	slices.Sort(api)
	slices.Sort(ses)
	return api, ses
}

func (l *changeLog) want(t *testing.T, what string, api, ses []string) {
	t.Helper()
	slices.Sort(api)
	slices.Sort(ses)
	gotAPI, gotSes := l.take()
	if !slices.Equal(gotAPI, api) || !slices.Equal(gotSes, ses) {
		t.Errorf("%s: API sessions %v, sessions %v; want %v, %v", what, gotAPI, gotSes, api, ses)
	}
}

// TestSessionChangeHooks: every path that creates, rewrites or deletes API sessions and
// sessions reports their ids after the commit, and a change that fails reports nothing.
func TestSessionChangeHooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := f.m
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	log := watchChanges(t, m)

	// An identity with a certificate, a service it may dial over an enrolled router.
	alice, err := m.CreateIdentity(IdentityCreate{Name: "alice", RoleAttributes: []string{"staff"}, Enrollment: &EnrollmentRequest{OTT: true}})
	must(err)
	ens, err := m.EnrollmentsOf(alice.ID)
	must(err)
	key := testutil.NewKey(t)
	certPEM, err := m.EnrollOTT(ens[0].Token, testutil.CSR(t, key))
	must(err)
	chain := []*x509.Certificate{parseCert(t, certPEM)}
	web := &Service{Name: "web"}
	db := &Service{Name: "db"}
	must(m.CreateService(web))
	must(m.CreateService(db))
	webPolicy := &ServicePolicy{Name: "staff-web", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + web.ID}}
	must(m.CreateServicePolicy(webPolicy))
	must(m.CreateServicePolicy(&ServicePolicy{Name: "staff-db", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + db.ID}}))
	er := &EdgeRouter{Name: "er1"}
	must(m.CreateEdgeRouter(er))
	must(m.CreateEdgeRouterPolicy(&EdgeRouterPolicy{Name: "all-edge", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	must(m.CreateServiceEdgeRouterPolicy(&ServiceEdgeRouterPolicy{Name: "all-svc", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	enr, err := m.RouterEnrollment(er.ID)
	must(err)
	_, err = m.EnrollErOtt(enr.Token, testutil.CSR(t, key), testutil.CSR(t, testutil.NewKey(t), "router.test"))
	must(err)
	log.want(t, "setup", nil, nil)

	// Login creates an API session.
	api, _, err := m.AuthenticateCert(chain, Login{Source: "127.0.0.1"})
	must(err)
	log.want(t, "login", []string{"+" + api.ID}, nil)

	// Recorded activity rewrites it.
	f.clock.Add(time.Minute)
	_, _, err = m.SessionByToken(api.Token)
	must(err)
	log.want(t, "activity", []string{"+" + api.ID}, nil)

	// A session is created and deleted.
	s1, _, err := m.CreateSession(api, web.ID, PolicyDial, nil)
	must(err)
	log.want(t, "create session", nil, []string{"+" + s1.ID})
	must(m.DeleteSession(s1.ID))
	log.want(t, "delete session", nil, []string{"-" + s1.ID})

	// Deleting the policy that allowed a session revokes it.
	s2, _, err := m.CreateSession(api, web.ID, PolicyDial, nil)
	must(err)
	log.take()
	must(m.DeleteServicePolicy(webPolicy.ID))
	log.want(t, "policy deletion", nil, []string{"-" + s2.ID})

	// Deleting a service ends its sessions.
	s3, _, err := m.CreateSession(api, db.ID, PolicyDial, nil)
	must(err)
	log.take()
	must(m.DeleteService(db.ID))
	log.want(t, "service deletion", nil, []string{"-" + s3.ID})
	db = &Service{Name: "db"}
	must(m.CreateService(db))
	must(m.CreateServicePolicy(&ServicePolicy{Name: "staff-db2", Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + db.ID}}))

	// Logout ends the API session and its sessions.
	s4, _, err := m.CreateSession(api, db.ID, PolicyDial, nil)
	must(err)
	log.take()
	must(m.DeleteAPISession(api.ID))
	log.want(t, "logout", []string{"-" + api.ID}, []string{"-" + s4.ID})

	// A session for an API session that is gone fails and reports nothing.
	if _, _, err := m.CreateSession(api, db.ID, PolicyDial, nil); err == nil {
		t.Fatal("a session was created for a deleted API session")
	}
	log.want(t, "failed session", nil, nil)

	// The sweeper ends idle API sessions.
	api2, _, err := m.AuthenticateCert(chain, Login{Source: "127.0.0.1"})
	must(err)
	s5, _, err := m.CreateSession(api2, db.ID, PolicyDial, nil)
	must(err)
	log.take()
	f.clock.Add(time.Hour)
	n, err := m.ExpireSessions()
	must(err)
	if n != 1 {
		t.Fatalf("expired %d API sessions, want 1", n)
	}
	log.want(t, "expiry", []string{"-" + api2.ID}, []string{"-" + s5.ID})

	// Deleting the identity ends its API sessions and their sessions in one transaction.
	api3, _, err := m.AuthenticateCert(chain, Login{Source: "127.0.0.1"})
	must(err)
	api4, _, err := m.AuthenticateCert(chain, Login{Source: "127.0.0.1"})
	must(err)
	s6, _, err := m.CreateSession(api3, db.ID, PolicyDial, nil)
	must(err)
	s7, _, err := m.CreateSession(api4, db.ID, PolicyDial, nil)
	must(err)
	log.take()
	must(m.DeleteIdentity(alice.ID))
	log.want(t, "identity deletion", []string{"-" + api3.ID, "-" + api4.ID}, []string{"-" + s6.ID, "-" + s7.ID})

	apis, sessions, err := m.SessionState()
	must(err)
	if len(apis) != 0 || len(sessions) != 0 {
		t.Errorf("state after the identity's deletion: %d API sessions, %d sessions", len(apis), len(sessions))
	}
}

// TestSessionState: the snapshot and the lookup by ids read what is stored.
func TestSessionState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := f.m
	id, err := m.CreateIdentity(IdentityCreate{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for range 3 {
		s, _, err := m.openSession(&Authenticator{IdentityID: id.ID}, MethodCertAuth, "", Login{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, s.ID)
	}
	slices.Sort(want)
	apis, sessions, err := m.SessionState()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range apis {
		if s.IdentityID != id.ID || s.Token == "" {
			t.Errorf("API session %+v", s)
		}
		got = append(got, s.ID)
	}
	if !slices.Equal(got, want) || len(sessions) != 0 {
		t.Errorf("snapshot: API sessions %v, %d sessions; want %v, none", got, len(sessions), want)
	}
	byID, ses, err := m.SessionStateOf([]string{want[0], "missing"}, []string{"missing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(byID) != 1 || byID[want[0]] == nil || len(ses) != 0 {
		t.Errorf("lookup: %v %v", byID, ses)
	}
	// An API session that owes MFA stays out until it has passed.
	if err := m.st.Update(func(tx *store.Tx) error {
		a, err := m.c.apiSessions.Get(tx, want[1])
		if err != nil {
			return err
		}
		a.AuthQueries = []AuthQuery{{}}
		return m.c.apiSessions.Put(tx, a)
	}); err != nil {
		t.Fatal(err)
	}
	apis, _, _ = m.SessionState()
	byID, _, _ = m.SessionStateOf([]string{want[1]}, nil)
	if len(apis) != 2 || byID[want[1]] != nil {
		t.Errorf("an API session owing MFA reached the session state: %d in the snapshot, lookup %v", len(apis), byID)
	}
}
