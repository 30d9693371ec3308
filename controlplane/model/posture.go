package model

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Posture checks are conditions on a client's device (its Windows domain, operating system,
// MAC addresses, running processes) or on its API session (MFA passed recently enough) that
// service policies name through postureCheckRoles. Clients report the facts as posture
// responses; the controller keeps them in memory per API session (clients report them
// again after a restart) and only creates a session when, among the policies that grant
// it, one has all its posture checks satisfied. A session whose posture stops holding is
// deleted: after new posture data, after a change to checks or policies, and periodically
// for the checks that depend on time (MFA timeouts and wake/unlock prompts).

// Posture check types. ENDPOINT_STATE is a response type only: the device woke or unlocked.
const (
	PostureOS            = "OS"
	PostureProcess       = "PROCESS"
	PostureDomain        = "DOMAIN"
	PostureMAC           = "MAC"
	PostureMFA           = "MFA"
	PostureProcessMulti  = "PROCESS_MULTI"
	PostureEndpointState = "ENDPOINT_STATE"
)

// CodeInvalidPosture: the API session's posture does not satisfy the posture checks of any
// policy that grants the service (the reference answers 409 with this code).
const CodeInvalidPosture = "INVALID_POSTURE"

// MFAPromptGrace is how long after a device woke or unlocked a client has to pass MFA again
// when an MFA check prompts on wake or unlock.
const MFAPromptGrace = 5 * time.Minute

// maxMFATimeoutSeconds bounds an MFA check's timeout: 10 years.
const maxMFATimeoutSeconds = 10 * 365 * 24 * 3600

// Bounds of posture data, so that one client cannot make the controller hold much memory.
const (
	maxPostureString    = 1024
	maxPostureList      = 64
	maxPostureProcesses = 256
	// maxPostureBytes bounds all the posture data of one API session.
	maxPostureBytes = 64 << 10
)

// OSTypes are the operating system types posture checks and responses name.
func OSTypes() []string {
	return []string{"Windows", "WindowsServer", "Android", "iOS", "Linux", "macOS"}
}

// OperatingSystem is an operating system type and the versions an OS check allows.
type OperatingSystem struct {
	Type     string   `json:"type"`
	Versions []string `json:"versions"`
}

// Process is the process a PROCESS check requires to run.
type Process struct {
	OSType            string   `json:"osType"`
	Path              string   `json:"path"`
	Hashes            []string `json:"hashes,omitempty"`
	SignerFingerprint string   `json:"signerFingerprint,omitempty"`
}

// ProcessMulti is one of the processes of a PROCESS_MULTI check.
type ProcessMulti struct {
	OSType             string   `json:"osType"`
	Path               string   `json:"path"`
	Hashes             []string `json:"hashes,omitempty"`
	SignerFingerprints []string `json:"signerFingerprints,omitempty"`
}

// PostureCheck is a condition on a client's posture that service policies can require. The
// fields after Version belong to one type each.
type PostureCheck struct {
	Base
	Name           string   `json:"name"`
	TypeID         string   `json:"typeId"`
	RoleAttributes []string `json:"roleAttributes"`
	// Version counts the changes of the check, starting at 1.
	Version int64 `json:"version"`

	Domains          []string          `json:"domains,omitempty"`          // DOMAIN
	MacAddresses     []string          `json:"macAddresses,omitempty"`     // MAC
	OperatingSystems []OperatingSystem `json:"operatingSystems,omitempty"` // OS
	Process          *Process          `json:"process,omitempty"`          // PROCESS
	Semantic         string            `json:"semantic,omitempty"`         // PROCESS_MULTI
	Processes        []ProcessMulti    `json:"processes,omitempty"`        // PROCESS_MULTI

	// MFA: TimeoutSeconds -1 or 0 means MFA passed once holds for the API session's life.
	// IgnoreLegacyEndpoints is kept and shown; every client here counts as current.
	TimeoutSeconds        int64 `json:"timeoutSeconds,omitempty"`
	PromptOnWake          bool  `json:"promptOnWake,omitempty"`
	PromptOnUnlock        bool  `json:"promptOnUnlock,omitempty"`
	IgnoreLegacyEndpoints bool  `json:"ignoreLegacyEndpoints,omitempty"`
}

// PostureCheckType describes a posture check type and the operating systems it applies to.
type PostureCheckType struct {
	ID               string
	OperatingSystems []OperatingSystem
}

// PostureCheckTypes returns the posture check types, in the reference's order.
func PostureCheckTypes() []PostureCheckType {
	os := func(types ...string) []OperatingSystem {
		out := make([]OperatingSystem, 0, len(types))
		for _, t := range types {
			out = append(out, OperatingSystem{Type: t, Versions: []string{}})
		}
		return out
	}
	return []PostureCheckType{
		{PostureOS, os(OSTypes()...)},
		{PostureProcess, os("Windows", "WindowsServer", "macOS", "Linux")},
		{PostureDomain, os("Windows", "WindowsServer")},
		{PostureMAC, os("Windows", "WindowsServer", "macOS", "Linux")},
		{PostureMFA, os(OSTypes()...)},
		{PostureProcessMulti, os("Windows", "WindowsServer", "macOS", "Linux")},
	}
}

func isCheckType(t string) bool {
	return slices.ContainsFunc(PostureCheckTypes(), func(pt PostureCheckType) bool { return pt.ID == t })
}

// timed reports whether the check can stop holding by the passing of time alone.
func (c *PostureCheck) timed() bool {
	return c.TypeID == PostureMFA && (c.TimeoutSeconds > 0 || c.PromptOnWake || c.PromptOnUnlock)
}

// checkTypeFields refuses the fields of other types than the check's.
func (c *PostureCheck) checkTypeFields() error {
	for _, f := range []struct {
		name, typ string
		set       bool
	}{
		{"domains", PostureDomain, len(c.Domains) > 0},
		{"macAddresses", PostureMAC, len(c.MacAddresses) > 0},
		{"operatingSystems", PostureOS, len(c.OperatingSystems) > 0},
		{"process", PostureProcess, c.Process != nil},
		{"semantic", PostureProcessMulti, c.Semantic != ""},
		{"processes", PostureProcessMulti, len(c.Processes) > 0},
		{"timeoutSeconds", PostureMFA, c.TimeoutSeconds != 0},
		{"promptOnWake", PostureMFA, c.PromptOnWake},
		{"promptOnUnlock", PostureMFA, c.PromptOnUnlock},
		{"ignoreLegacyEndpoints", PostureMFA, c.IgnoreLegacyEndpoints},
	} {
		if f.set && f.typ != c.TypeID {
			return invalid(f.name, nil, "is a field of %s posture checks, not of %s", f.typ, c.TypeID)
		}
	}
	return nil
}

func checkOSType(field, t string) error {
	if !slices.Contains(OSTypes(), t) {
		return invalid(field, t, "allowed: %s", strings.Join(OSTypes(), ", "))
	}
	return nil
}

func checkPostureString(field, s string) error {
	if strings.TrimSpace(s) == "" {
		return invalid(field, s, "must not be empty")
	}
	if len(s) > maxPostureString {
		return invalid(field, nil, "is longer than %d bytes", maxPostureString)
	}
	return nil
}

// checkList bounds a list's length; min 1 for the lists a type requires.
func checkList(field string, n, min int) error {
	if n < min {
		return invalid(field, nil, "needs at least %d entries", min)
	}
	if n > maxPostureList {
		return invalid(field, nil, "has more than %d entries", maxPostureList)
	}
	return nil
}

// normHex returns a hash or fingerprint in lower case without colons, or "" when it is not
// hexadecimal.
func normHex(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, ":", ""))
	if s == "" || strings.Trim(s, "0123456789abcdef") != "" {
		return ""
	}
	return s
}

func checkHexList(field string, list []string) error {
	if err := checkList(field, len(list), 0); err != nil {
		return err
	}
	for i, h := range list {
		if normHex(h) == "" {
			return invalid(fmt.Sprintf("%s[%d]", field, i), h, "must be hexadecimal")
		}
	}
	return nil
}

// normMAC returns a MAC address as lower-case hex digits without separators, or "" when it
// is not 12 hex digits.
func normMAC(s string) string {
	s = strings.ToLower(strings.NewReplacer(":", "", "-", "", ".", "").Replace(s))
	if len(s) != 12 || strings.Trim(s, "0123456789abcdef") != "" {
		return ""
	}
	return s
}

// validate checks the type-specific fields of a check.
func (c *PostureCheck) validate() error {
	if !isCheckType(c.TypeID) {
		ids := make([]string, 0, 6)
		for _, t := range PostureCheckTypes() {
			ids = append(ids, t.ID)
		}
		return invalid("typeId", c.TypeID, "allowed: %s", strings.Join(ids, ", "))
	}
	if err := c.checkTypeFields(); err != nil {
		return err
	}
	switch c.TypeID {
	case PostureDomain:
		if err := checkList("domains", len(c.Domains), 1); err != nil {
			return err
		}
		for i, d := range c.Domains {
			if err := checkPostureString(fmt.Sprintf("domains[%d]", i), d); err != nil {
				return err
			}
		}
	case PostureMAC:
		if err := checkList("macAddresses", len(c.MacAddresses), 1); err != nil {
			return err
		}
		for i, a := range c.MacAddresses {
			if normMAC(a) == "" {
				return invalid(fmt.Sprintf("macAddresses[%d]", i), a, "is not a MAC address (6 hexadecimal bytes)")
			}
		}
	case PostureOS:
		if err := checkList("operatingSystems", len(c.OperatingSystems), 1); err != nil {
			return err
		}
		for i := range c.OperatingSystems {
			o := &c.OperatingSystems[i]
			if err := checkOSType(fmt.Sprintf("operatingSystems[%d].type", i), o.Type); err != nil {
				return err
			}
			o.Versions = nonNil(o.Versions)
			if err := checkList(fmt.Sprintf("operatingSystems[%d].versions", i), len(o.Versions), 0); err != nil {
				return err
			}
			for j, v := range o.Versions {
				if _, err := parseVersionRange(v); err != nil {
					return invalid(fmt.Sprintf("operatingSystems[%d].versions[%d]", i, j), v, "%v", err)
				}
			}
		}
	case PostureProcess:
		p := c.Process
		if p == nil {
			return invalid("process", nil, "is required for PROCESS posture checks")
		}
		if err := checkOSType("process.osType", p.OSType); err != nil {
			return err
		}
		if err := checkPostureString("process.path", p.Path); err != nil {
			return err
		}
		if err := checkHexList("process.hashes", p.Hashes); err != nil {
			return err
		}
		if p.SignerFingerprint != "" && normHex(p.SignerFingerprint) == "" {
			return invalid("process.signerFingerprint", p.SignerFingerprint, "must be hexadecimal")
		}
	case PostureProcessMulti:
		if err := checkSemantic(&c.Semantic); err != nil {
			return err
		}
		if err := checkList("processes", len(c.Processes), 1); err != nil {
			return err
		}
		for i, p := range c.Processes {
			f := fmt.Sprintf("processes[%d]", i)
			if err := checkOSType(f+".osType", p.OSType); err != nil {
				return err
			}
			if err := checkPostureString(f+".path", p.Path); err != nil {
				return err
			}
			if err := checkHexList(f+".hashes", p.Hashes); err != nil {
				return err
			}
			if err := checkHexList(f+".signerFingerprints", p.SignerFingerprints); err != nil {
				return err
			}
		}
	case PostureMFA:
		if c.TimeoutSeconds < -1 || c.TimeoutSeconds > maxMFATimeoutSeconds {
			return invalid("timeoutSeconds", c.TimeoutSeconds, "must be -1 (no timeout) to %d (10 years)", maxMFATimeoutSeconds)
		}
	}
	return nil
}

// postureCheckKind describes posture checks for the generic operations. Creating a check can
// take rights away (a policy's #attribute role starts selecting it), so creating one, like
// changing one, ends the sessions that no longer hold.
func (m *Model) postureCheckKind(creating bool) kind[PostureCheck, *PostureCheck] {
	return kind[PostureCheck, *PostureCheck]{
		name: "posture check", coll: m.c.postureChecks,
		check: func(tx *store.Tx, c *PostureCheck) error {
			if err := checkName("name", c.Name); err != nil {
				return err
			}
			c.RoleAttributes = nonNil(c.RoleAttributes)
			if err := checkAttributes("roleAttributes", c.RoleAttributes); err != nil {
				return err
			}
			if err := c.validate(); err != nil {
				return err
			}
			if creating {
				m.changed(tx)
			}
			return nil
		},
		referenced: func(tx *store.Tx, id string) error {
			var users []string
			err := m.c.servicePolicies.Each(tx, func(p *ServicePolicy) error {
				if slices.Contains(p.PostureCheckRoles, "@"+id) {
					users = append(users, p.Name)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if len(users) > 0 {
				return errorf(CodeCanNotDeleteReferenced, "posture check %q is named by service policies %s", id, strings.Join(users, ", "))
			}
			return nil
		},
	}
}

// checkPostureRoles refuses @id roles that name no posture check: postureCheckRoles that
// select nothing ask for no posture, so a mistyped id would open the policy.
func (m *Model) checkPostureRoles(tx *store.Tx, roles []string) error {
	for i, r := range roles {
		if !strings.HasPrefix(r, "@") {
			continue
		}
		ok, err := m.c.postureChecks.Has(tx, r[1:])
		if err != nil {
			return err
		}
		if !ok {
			return invalid(fmt.Sprintf("postureCheckRoles[%d]", i), r, "no posture check has id %q", r[1:])
		}
	}
	return nil
}

// CreatePostureCheck stores a new posture check.
func (m *Model) CreatePostureCheck(c *PostureCheck) error {
	c.Version = 1
	return createEntity(m, m.postureCheckKind(true), c)
}

// PostureCheck returns the posture check with id.
func (m *Model) PostureCheck(id string) (*PostureCheck, error) {
	return getEntity(m, m.postureCheckKind(false), id)
}

// PostureChecks returns every posture check.
func (m *Model) PostureChecks() ([]*PostureCheck, error) {
	return allEntities(m, m.postureCheckKind(false))
}

// UpdatePostureCheck changes a posture check; its type cannot change.
func (m *Model) UpdatePostureCheck(id string, f func(*PostureCheck) error) (*PostureCheck, error) {
	return updateEntity(m, m.postureCheckKind(false), id, func(c *PostureCheck) error {
		typ, version := c.TypeID, c.Version
		if err := f(c); err != nil {
			return err
		}
		if c.TypeID != typ {
			return invalid("typeId", c.TypeID, "is %s; the type of a posture check cannot change", typ)
		}
		c.Version = version + 1
		return nil
	})
}

// DeletePostureCheck deletes a posture check no service policy names by id.
func (m *Model) DeletePostureCheck(id string) error {
	return deleteEntity(m, m.postureCheckKind(false), id)
}

// SubmitPosture records posture responses of an API session (validated first, all or
// none), ends the API session's sessions whose posture no longer holds, and returns the
// services whose MFA timeout the responses changed (a wake or unlock that MFA checks prompt
// on).
func (m *Model) SubmitPosture(api *APISession, responses []PostureResponse) ([]ServiceTimeout, error) {
	for i := range responses {
		if err := CheckPostureResponse(&responses[i]); err != nil {
			return nil, err
		}
	}
	now := m.now()
	err := m.c.posture.update(api.ID, func(d *postureData) error {
		for i := range responses {
			if err := d.apply(&responses[i], now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n, err := m.revokeSessions(api.ID); err != nil {
		return nil, fmt.Errorf("re-evaluate the sessions of API session %s: %w", api.ID, err)
	} else if n > 0 {
		m.log.Info("ended sessions whose posture no longer holds", "apiSessionId", api.ID, "count", n)
	}
	var woken, unlocked bool
	for _, r := range responses {
		woken = woken || (r.TypeID == PostureEndpointState && r.Woken)
		unlocked = unlocked || (r.TypeID == PostureEndpointState && r.Unlocked)
	}
	if !woken && !unlocked {
		return nil, nil
	}
	return m.promptedServices(api, woken, unlocked, now)
}

// ServiceTimeout is a service whose posture query timeout changed; seconds, -1 for none.
type ServiceTimeout struct {
	ServiceID, Name  string
	QueryType        string
	Timeout          int64
	TimeoutRemaining int64
}

// promptedServices lists the services of the identity gated by MFA checks that prompt on
// the wake or unlock just reported, with the time left before MFA must be passed again.
func (m *Model) promptedServices(api *APISession, woken, unlocked bool, now time.Time) ([]ServiceTimeout, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	i, ok := idx.identities.pos[api.IdentityID]
	if !ok {
		return nil, nil
	}
	d := m.c.posture.get(api.ID)
	best := map[int]ServiceTimeout{}
	for _, grants := range [][]grant{idx.dial, idx.bind} {
		for gi := range grants {
			g := &grants[gi]
			if g.posture == nil || !g.identities.has(i) {
				continue
			}
			g.posture.each(func(ci int) {
				c := idx.checkRec[ci]
				if c.TypeID != PostureMFA || !(woken && c.PromptOnWake || unlocked && c.PromptOnUnlock) {
					return
				}
				_, left := c.mfaState(api, d, now)
				st := ServiceTimeout{QueryType: PostureMFA, Timeout: max(c.TimeoutSeconds, -1), TimeoutRemaining: seconds(left)}
				if st.Timeout == 0 {
					st.Timeout = -1
				}
				g.targets.each(func(s int) {
					if cur, ok := best[s]; !ok || earlier(st.TimeoutRemaining, cur.TimeoutRemaining) {
						st.ServiceID, st.Name = idx.serviceRec[s].ID, idx.serviceRec[s].Name
						best[s] = st
					}
				})
			})
		}
	}
	out := make([]ServiceTimeout, 0, len(best))
	for _, st := range best {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ServiceTimeout) int { return compareStr(a.ServiceID, b.ServiceID) })
	return out, nil
}

// seconds rounds a remaining time up to whole seconds; -1 stays -1.
func seconds(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64((d + time.Second - 1) / time.Second)
}

// earlier reports whether remaining time a ends before b (-1 is never).
func earlier(a, b int64) bool { return a >= 0 && (b < 0 || a < b) }

// RecordMFA notes that the API session passed MFA at the given time; MFA posture checks
// count from it. TOTP MFA authentication calls it once it verifies a code.
func (m *Model) RecordMFA(apiSessionID string, at time.Time) error {
	return m.st.Update(func(tx *store.Tx) error {
		s, err := m.c.apiSessions.Get(tx, apiSessionID)
		if err != nil {
			return missing(err, "API session", apiSessionID)
		}
		at = at.UTC()
		s.MFACompletedAt = &at
		return m.c.apiSessions.Put(tx, s)
	})
}

// SweepPosture forgets the posture data of API sessions that ended and, when a policy names
// a check that time alone can fail (MFA timeouts and prompts), ends the sessions whose
// posture stopped holding. It returns how many sessions it ended; the controller calls it
// periodically.
func (m *Model) SweepPosture() (int, error) {
	var gone []string
	ids := m.c.posture.sessions()
	if len(ids) > 0 {
		err := m.st.View(func(tx *store.Tx) error {
			for _, id := range ids {
				ok, err := m.c.apiSessions.Has(tx, id)
				if err != nil {
					return err
				}
				if !ok {
					gone = append(gone, id)
				}
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("find the posture data of ended API sessions: %w", err)
		}
		m.c.posture.forget(gone)
	}
	idx, err := m.policies()
	if err != nil {
		return 0, err
	}
	if !idx.timed {
		return 0, nil
	}
	return m.RevokeUnauthorized()
}

// PostureQuery is a posture check a policy asks of a client, with whether it holds now.
type PostureQuery struct {
	Check   *PostureCheck
	Passing bool
	// Timeout is the check's timeout and TimeoutRemaining what is left of it, in seconds;
	// -1 when the check has none (only MFA checks have one). TimeoutAt is when a passing
	// check stops holding, nil when never.
	Timeout, TimeoutRemaining int64
	TimeoutAt                 *time.Time
}

// PolicyPosture is the posture a policy that grants a service asks of the client.
type PolicyPosture struct {
	PolicyID, PolicyType string
	Passing              bool
	Queries              []PostureQuery
}

// PostureQueriesOf returns a function that gives, for a service, each policy that grants
// the API session's identity the service with the posture checks it names and whether they
// hold for the API session now. The function works on one snapshot of the policies and of
// the posture data, so that listing many services costs one index lookup.
func (m *Model) PostureQueriesOf(api *APISession) (func(serviceID string) []PolicyPosture, error) {
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	d, now := m.c.posture.get(api.ID), m.now()
	return func(serviceID string) []PolicyPosture {
		var out []PolicyPosture
		for _, typ := range []string{PolicyDial, PolicyBind} {
			for _, g := range idx.grantsFor(api.IdentityID, serviceID, typ) {
				pp := PolicyPosture{PolicyID: g.id, PolicyType: typ, Passing: true, Queries: []PostureQuery{}}
				g.posture.each(func(i int) {
					pp.Queries = append(pp.Queries, postureQuery(idx.checkRec[i], api, d, now))
					pp.Passing = pp.Passing && pp.Queries[len(pp.Queries)-1].Passing
				})
				out = append(out, pp)
			}
		}
		return out
	}, nil
}

func postureQuery(c *PostureCheck, api *APISession, d *postureData, now time.Time) PostureQuery {
	q := PostureQuery{Check: c, Timeout: -1, TimeoutRemaining: -1}
	if c.TypeID != PostureMFA {
		q.Passing = c.evaluate(api, d, now) == ""
		return q
	}
	why, left := c.mfaState(api, d, now)
	q.Passing = why == ""
	if c.TimeoutSeconds > 0 {
		q.Timeout = c.TimeoutSeconds
	}
	switch {
	case !q.Passing:
		q.TimeoutRemaining = 0
	case left >= 0:
		q.TimeoutRemaining = seconds(left)
		at := now.Add(left)
		q.TimeoutAt = &at
	}
	return q
}
