package model

import (
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// postureNet is a small network: one identity with attribute staff, one service, one edge
// router every identity may use and that carries every service, and an API session.
type postureNet struct {
	f   *fixture
	m   *Model
	id  *Identity
	svc *Service
	api *APISession
}

func newPostureNet(t *testing.T) *postureNet {
	t.Helper()
	f := newFixture(t)
	m := f.m
	n := &postureNet{f: f, m: m, svc: &Service{Name: "web"}}
	var err error
	if n.id, err = m.CreateIdentity(IdentityCreate{Name: "alice", RoleAttributes: []string{"staff"}}); err != nil {
		t.Fatal(err)
	}
	n.must(t, m.CreateService(n.svc))
	enrolledRouter(t, m, &EdgeRouter{Name: "er1"})
	n.must(t, m.CreateEdgeRouterPolicy(&EdgeRouterPolicy{Name: "erp", IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	n.must(t, m.CreateServiceEdgeRouterPolicy(&ServiceEdgeRouterPolicy{Name: "serp", ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}))
	if n.api, _, err = m.openSession(&Authenticator{IdentityID: n.id.ID}, MethodPassword, "", Login{}); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *postureNet) must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (n *postureNet) dialPolicy(t *testing.T, name string, posture ...string) *ServicePolicy {
	t.Helper()
	p := &ServicePolicy{Name: name, Type: PolicyDial, IdentityRoles: []string{"#staff"}, ServiceRoles: []string{"@" + n.svc.ID}, PostureCheckRoles: posture}
	n.must(t, n.m.CreateServicePolicy(p))
	return p
}

func (n *postureNet) dial(t *testing.T) (*Session, error) {
	t.Helper()
	api, err := n.m.apiSession(n.api.ID)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := n.m.CreateSession(api, n.svc.ID, PolicyDial, nil)
	return s, err
}

func (n *postureNet) alive(t *testing.T, s *Session) bool {
	t.Helper()
	_, err := n.m.Session(s.ID)
	if err != nil && CodeOf(err) != CodeNotFound {
		t.Fatal(err)
	}
	return err == nil
}

// apiSession re-reads an API session, as a request would.
func (m *Model) apiSession(id string) (*APISession, error) {
	var out *APISession
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.apiSessions.Get(tx, id)
		return err
	})
	return out, err
}

func wantField(t *testing.T, err error, field string) {
	t.Helper()
	var e *Error
	if !errorAs(err, &e) || e.Code != CodeCouldNotValidate || e.Field != field {
		t.Errorf("error %v, want COULD_NOT_VALIDATE naming %s", err, field)
	}
}

func TestPostureCheckValidation(t *testing.T) {
	t.Parallel()
	m := newFixture(t).m
	tests := []struct {
		check PostureCheck
		field string
	}{
		{PostureCheck{Name: "", TypeID: PostureDomain, Domains: []string{"a"}}, "name"},
		{PostureCheck{Name: "x", TypeID: "FINGERPRINT"}, "typeId"},
		{PostureCheck{Name: "x", TypeID: PostureDomain}, "domains"},
		{PostureCheck{Name: "x", TypeID: PostureDomain, Domains: []string{" "}}, "domains[0]"},
		{PostureCheck{Name: "x", TypeID: PostureDomain, Domains: []string{"a"}, MacAddresses: []string{"aa"}}, "macAddresses"},
		{PostureCheck{Name: "x", TypeID: PostureDomain, Domains: []string{"a"}, RoleAttributes: []string{"#x"}}, "roleAttributes[0]"},
		{PostureCheck{Name: "x", TypeID: PostureMAC, MacAddresses: []string{"00:11:22:33:44:55", "nope"}}, "macAddresses[1]"},
		{PostureCheck{Name: "x", TypeID: PostureOS}, "operatingSystems"},
		{PostureCheck{Name: "x", TypeID: PostureOS, OperatingSystems: []OperatingSystem{{Type: "BeOS"}}}, "operatingSystems[0].type"},
		{PostureCheck{Name: "x", TypeID: PostureOS, OperatingSystems: []OperatingSystem{{Type: "Linux", Versions: []string{">=5", "5.x"}}}}, "operatingSystems[0].versions[1]"},
		{PostureCheck{Name: "x", TypeID: PostureProcess}, "process"},
		{PostureCheck{Name: "x", TypeID: PostureProcess, Process: &Process{OSType: "Linux"}}, "process.path"},
		{PostureCheck{Name: "x", TypeID: PostureProcess, Process: &Process{OSType: "Linux", Path: "/bin/av", Hashes: []string{"xyz"}}}, "process.hashes[0]"},
		{PostureCheck{Name: "x", TypeID: PostureProcessMulti, Semantic: "OneOf", Processes: []ProcessMulti{{OSType: "Linux", Path: "/a"}}}, "semantic"},
		{PostureCheck{Name: "x", TypeID: PostureProcessMulti, Processes: []ProcessMulti{{OSType: "Linux", Path: "/a", SignerFingerprints: []string{"q"}}}}, "processes[0].signerFingerprints[0]"},
		{PostureCheck{Name: "x", TypeID: PostureMFA, TimeoutSeconds: -2}, "timeoutSeconds"},
		{PostureCheck{Name: "x", TypeID: PostureMFA, Domains: []string{"a"}}, "domains"},
	}
	for _, tt := range tests {
		c := tt.check
		wantField(t, m.CreatePostureCheck(&c), tt.field)
	}

	c := &PostureCheck{Name: "corp", TypeID: PostureDomain, Domains: []string{"corp.example"}}
	if err := m.CreatePostureCheck(c); err != nil || c.Version != 1 {
		t.Fatalf("create: %v, version %d", err, c.Version)
	}
	_, err := m.UpdatePostureCheck(c.ID, func(p *PostureCheck) error { p.TypeID = PostureMAC; return nil })
	wantField(t, err, "typeId")
	got, err := m.UpdatePostureCheck(c.ID, func(p *PostureCheck) error { p.Domains = []string{"a", "b"}; return nil })
	if err != nil || got.Version != 2 {
		t.Fatalf("update: %v, version %d", err, got.Version)
	}
	// A mistyped @id would open a policy: refused. A named check cannot be deleted.
	err = m.CreateServicePolicy(&ServicePolicy{Name: "p", Type: PolicyDial, PostureCheckRoles: []string{"@nope"}})
	wantField(t, err, "postureCheckRoles[0]")
	if err := m.CreateServicePolicy(&ServicePolicy{Name: "p", Type: PolicyDial, PostureCheckRoles: []string{"@" + c.ID}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, m.DeletePostureCheck(c.ID), CodeCanNotDeleteReferenced)
}

func TestDomainPostureGatesSessions(t *testing.T) {
	t.Parallel()
	n := newPostureNet(t)
	m := n.m
	n.must(t, m.CreatePostureCheck(&PostureCheck{Name: "corp-domain", TypeID: PostureDomain, RoleAttributes: []string{"corp"}, Domains: []string{"corp.example"}}))
	n.dialPolicy(t, "gated", "#corp")

	_, err := n.dial(t)
	wantCode(t, err, CodeInvalidPosture)
	if !strings.Contains(err.Error(), "corp-domain") {
		t.Errorf("the error does not name the failing check: %v", err)
	}
	if _, err := m.SubmitPosture(n.api, []PostureResponse{{ID: "q1", TypeID: PostureDomain, Domain: "CORP.example"}}); err != nil {
		t.Fatal(err)
	}
	s, err := n.dial(t)
	if err != nil {
		t.Fatalf("session with a satisfied domain check: %v", err)
	}
	// A posture that stops holding ends the session at once.
	if _, err := m.SubmitPosture(n.api, []PostureResponse{{ID: "q1", TypeID: PostureDomain, Domain: "evil.example"}}); err != nil {
		t.Fatal(err)
	}
	if n.alive(t, s) {
		t.Error("the session survived a domain that no longer matches")
	}
	// A second policy that needs no posture is enough on its own.
	n.dialPolicy(t, "open")
	if _, err := n.dial(t); err != nil {
		t.Errorf("an ungated policy also grants: %v", err)
	}
	// Invalid responses are refused whole.
	_, err = m.SubmitPosture(n.api, []PostureResponse{{ID: "q", TypeID: PostureDomain, Domain: "corp.example"}, {ID: "q", TypeID: PostureMFA}})
	wantField(t, err, "typeId")
}

func TestPostureCheckChangesRevoke(t *testing.T) {
	t.Parallel()
	n := newPostureNet(t)
	m := n.m
	n.dialPolicy(t, "gated", "#secure")
	// #secure selects no check yet: nothing is asked.
	s, err := n.dial(t)
	if err != nil {
		t.Fatal(err)
	}
	mac := &PostureCheck{Name: "mac", TypeID: PostureMAC, RoleAttributes: []string{"secure"}, MacAddresses: []string{"00-11-22-AA-BB-CC"}}
	n.must(t, m.CreatePostureCheck(mac))
	if n.alive(t, s) {
		t.Fatal("creating a check the policy selects left a session without that posture")
	}
	if _, err := m.SubmitPosture(n.api, []PostureResponse{{ID: "m", TypeID: PostureMAC, MacAddresses: []string{"ff:ff:ff:ff:ff:ff", "00:11:22:aa:bb:cc"}}}); err != nil {
		t.Fatal(err)
	}
	if s, err = n.dial(t); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpdatePostureCheck(mac.ID, func(c *PostureCheck) error { c.MacAddresses = []string{"001122334455"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if n.alive(t, s) {
		t.Error("the session survived a check change its posture fails")
	}
}

func TestMFAPosture(t *testing.T) {
	t.Parallel()
	n := newPostureNet(t)
	m := n.m
	n.must(t, m.CreatePostureCheck(&PostureCheck{Name: "mfa", TypeID: PostureMFA, RoleAttributes: []string{"mfa"}, TimeoutSeconds: 60, PromptOnWake: true}))
	n.dialPolicy(t, "mfa-only", "#mfa")

	// Without MFA the check never holds.
	_, err := n.dial(t)
	wantCode(t, err, CodeInvalidPosture)

	n.must(t, m.RecordMFA(n.api.ID, n.f.clock.Now()))
	s, err := n.dial(t)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := m.PostureQueriesOf(n.api.withMFA(n.f.clock.Now()))
	n.must(t, err)
	if q := pq(n.svc.ID); len(q) != 1 || !q[0].Passing || q[0].Queries[0].Timeout != 60 || q[0].Queries[0].TimeoutRemaining != 60 {
		t.Errorf("posture queries: %+v", q)
	}
	// Waking the device starts the grace period; the response lists the service.
	n.f.clock.Add(10 * time.Second)
	api, err := m.apiSession(n.api.ID)
	n.must(t, err)
	changed, err := m.SubmitPosture(api, []PostureResponse{{ID: "w", TypeID: PostureEndpointState, Woken: true}})
	n.must(t, err)
	if len(changed) != 1 || changed[0].ServiceID != n.svc.ID || changed[0].TimeoutRemaining != 50 {
		t.Errorf("services whose timeout changed: %+v", changed)
	}
	if c, err := m.SweepPosture(); err != nil || c != 0 || !n.alive(t, s) {
		t.Fatalf("sweep within the timeout: %d %v", c, err)
	}
	// Past the timeout the sweep ends the session.
	n.f.clock.Add(51 * time.Second)
	if c, err := m.SweepPosture(); err != nil || c != 1 || n.alive(t, s) {
		t.Errorf("sweep past the timeout: %d %v", c, err)
	}
	_, err = n.dial(t)
	wantCode(t, err, CodeInvalidPosture)
}

func (s *APISession) withMFA(at time.Time) *APISession {
	c := *s
	c.MFACompletedAt = &at
	return &c
}

func TestPostureEvaluation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	data := &postureData{}
	for _, r := range []PostureResponse{
		{ID: "o", TypeID: PostureOS, OSType: "Linux", OSVersion: "5.15.0-91-generic"},
		{ID: "p1", TypeID: PostureProcess, Path: `C:\AV\av.exe`, IsRunning: true, Hash: "ABCD", SignerFingerprints: []string{"01:02"}},
		{ID: "p2", TypeID: PostureProcess, Path: "/usr/bin/stopped", IsRunning: false},
	} {
		if err := CheckPostureResponse(&r); err != nil {
			t.Fatal(err)
		}
		if err := data.apply(&r, now); err != nil {
			t.Fatal(err)
		}
	}
	api := &APISession{}
	osCheck := func(versions ...string) *PostureCheck {
		return &PostureCheck{TypeID: PostureOS, OperatingSystems: []OperatingSystem{{Type: "Windows"}, {Type: "Linux", Versions: versions}}}
	}
	tests := []struct {
		name  string
		check *PostureCheck
		pass  bool
	}{
		{"any linux", osCheck(), true},
		{"range", osCheck(">=5.10 <6"), true},
		{"prefix", osCheck("5.15"), true},
		{"too old", osCheck(">=6.1"), false},
		{"exact other", osCheck("=5.15.1"), false},
		{"one of", osCheck("4", "5"), true},
		{"windows path case", &PostureCheck{TypeID: PostureProcess, Process: &Process{OSType: "Windows", Path: `c:\av\AV.exe`, Hashes: []string{"abcd"}, SignerFingerprint: "0102"}}, true},
		{"wrong hash", &PostureCheck{TypeID: PostureProcess, Process: &Process{OSType: "Windows", Path: `C:\AV\av.exe`, Hashes: []string{"ef"}}}, false},
		{"wrong signer", &PostureCheck{TypeID: PostureProcess, Process: &Process{OSType: "Windows", Path: `C:\AV\av.exe`, SignerFingerprint: "ff"}}, false},
		{"linux path case", &PostureCheck{TypeID: PostureProcess, Process: &Process{OSType: "Linux", Path: `c:\av\AV.exe`}}, false},
		{"not running", &PostureCheck{TypeID: PostureProcess, Process: &Process{OSType: "Linux", Path: "/usr/bin/stopped"}}, false},
		{"multi any", &PostureCheck{TypeID: PostureProcessMulti, Semantic: SemanticAny, Processes: []ProcessMulti{
			{OSType: "Linux", Path: "/usr/bin/stopped"}, {OSType: "Windows", Path: `C:\AV\av.exe`, SignerFingerprints: []string{"ee", "0102"}}}}, true},
		{"multi all", &PostureCheck{TypeID: PostureProcessMulti, Semantic: SemanticAll, Processes: []ProcessMulti{
			{OSType: "Linux", Path: "/usr/bin/stopped"}, {OSType: "Windows", Path: `C:\AV\av.exe`}}}, false},
		{"no domain", &PostureCheck{TypeID: PostureDomain, Domains: []string{"x"}}, false},
		{"mfa never", &PostureCheck{TypeID: PostureMFA}, false},
	}
	for _, tt := range tests {
		why := tt.check.evaluate(api, data, now)
		if (why == "") != tt.pass {
			t.Errorf("%s: failure %q, want pass %v", tt.name, why, tt.pass)
		}
	}
	if why := (&PostureCheck{TypeID: PostureMFA, TimeoutSeconds: -1}).evaluate(api.withMFA(now.Add(-1000*time.Hour)), data, now); why != "" {
		t.Errorf("MFA without timeout: %s", why)
	}
}

// FuzzVersionRange: parsing and matching OS versions never panics, and what the parser
// accepts a check accepts.
func FuzzVersionRange(f *testing.F) {
	for _, s := range []string{">=10.0.19041 <11", "5", "==1.2.3", "!=4", "v1.2", "", " ", ">", "1..2", "99999999999", "1.2.3.4.5.6.7.8.9"} {
		f.Add(s, "10.0.19041")
	}
	f.Fuzz(func(t *testing.T, r, actual string) {
		_, err := parseVersionRange(r)
		versionMatches([]string{r}, actual)
		c := PostureCheck{Name: "x", TypeID: PostureOS, OperatingSystems: []OperatingSystem{{Type: "Linux", Versions: []string{r}}}}
		if verr := c.validate(); (err == nil) != (verr == nil) && len(r) <= maxPostureString {
			t.Errorf("parse %v but validate %v", err, verr)
		}
	})
}
