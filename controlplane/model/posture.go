package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Versions of OS checks. An entry of versions is one or more space-separated comparators
// that must all hold, each an operator (>=, <=, >, <, =, ==, !=) and a dotted version, e.g.
// ">=10.0.19041 <11". A version without operator matches itself and the versions it is a
// prefix of: "10" matches "10.0.19041".

type comparator struct {
	op string
	v  []int
}

const maxVersionParts = 8

func parseVersionRange(s string) ([]comparator, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("is empty; write a version such as 10.0.19041 or a range such as >=10 <11")
	}
	out := make([]comparator, 0, len(fields))
	for _, f := range fields {
		op := ""
		for _, o := range []string{">=", "<=", "==", "!=", ">", "<", "="} {
			if strings.HasPrefix(f, o) {
				op = o
				break
			}
		}
		v, err := parseVersion(strings.TrimPrefix(strings.TrimPrefix(f, op), "v"))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, comparator{op, v})
	}
	return out, nil
}

func parseVersion(s string) ([]int, error) {
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > maxVersionParts {
		return nil, fmt.Errorf("a version is 1 to %d dot-separated numbers", maxVersionParts)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 31)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number of a version", p)
		}
		out[i] = int(n)
	}
	return out, nil
}

// reportedVersion reads the leading numeric parts of a version as clients report it, e.g.
// 5.15.0 of "5.15.0-91-generic"; nil when it starts with no number.
func reportedVersion(s string) []int {
	var out []int
	for _, p := range strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".") {
		end := 0
		for end < len(p) && end < 9 && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		if end == 0 || len(out) == maxVersionParts {
			break
		}
		n, _ := strconv.Atoi(p[:end])
		out = append(out, n)
		if end < len(p) {
			break
		}
	}
	return out
}

func compareVersions(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func versionMatches(ranges []string, actual string) bool {
	if len(ranges) == 0 {
		return true
	}
	v := reportedVersion(actual)
	if v == nil {
		return false
	}
	for _, r := range ranges {
		cmps, err := parseVersionRange(r)
		if err != nil {
			continue
		}
		ok := true
		for _, c := range cmps {
			d := compareVersions(v, c.v)
			switch c.op {
			case "":
				ok = ok && len(v) >= len(c.v) && slices.Equal(v[:len(c.v)], c.v)
			case "=", "==":
				ok = ok && d == 0
			case "!=":
				ok = ok && d != 0
			case ">":
				ok = ok && d > 0
			case ">=":
				ok = ok && d >= 0
			case "<":
				ok = ok && d < 0
			case "<=":
				ok = ok && d <= 0
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// PostureResponse is one posture fact a client reports. ID names the posture query it
// answers (a posture check's id); which other fields count depends on TypeID.
type PostureResponse struct {
	ID     string
	TypeID string
	// DOMAIN
	Domain string
	// OS
	OSType, OSVersion, OSBuild string
	// PROCESS
	Path               string
	IsRunning          bool
	Hash               string
	SignerFingerprints []string
	// MAC
	MacAddresses []string
	// ENDPOINT_STATE
	Woken, Unlocked bool
}

// CheckPostureResponse validates a posture response, naming the field at fault.
func CheckPostureResponse(r *PostureResponse) error {
	if err := checkPostureString("id", r.ID); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"domain", r.Domain}, {"type", r.OSType}, {"version", r.OSVersion}, {"build", r.OSBuild}, {"path", r.Path}, {"hash", r.Hash},
	} {
		if len(f.value) > maxPostureString {
			return invalid(f.name, nil, "is longer than %d bytes", maxPostureString)
		}
	}
	for _, l := range []struct {
		name string
		list []string
	}{{"signerFingerprints", r.SignerFingerprints}, {"macAddresses", r.MacAddresses}} {
		if err := checkList(l.name, len(l.list), 0); err != nil {
			return err
		}
		for i, s := range l.list {
			if len(s) > maxPostureString {
				return invalid(fmt.Sprintf("%s[%d]", l.name, i), nil, "is longer than %d bytes", maxPostureString)
			}
		}
	}
	switch r.TypeID {
	case PostureDomain, PostureMAC, PostureEndpointState:
	case PostureOS:
		if err := checkPostureString("type", r.OSType); err != nil {
			return err
		}
	case PostureProcess:
		if err := checkPostureString("path", r.Path); err != nil {
			return err
		}
	case PostureMFA:
		return invalid("typeId", r.TypeID, "MFA is proven by passing MFA authentication, not by a posture response")
	case PostureProcessMulti:
		return invalid("typeId", r.TypeID, "report each process of a PROCESS_MULTI query as a PROCESS response")
	default:
		return invalid("typeId", r.TypeID, "allowed: DOMAIN, OS, PROCESS, MAC, ENDPOINT_STATE")
	}
	return nil
}

// postureData is what one API session reported, with when. A stored value never changes (a
// response stores a changed copy), so readers hold it without a lock.
type postureData struct {
	domain     string
	domainAt   time.Time // zero: never reported
	osType     string
	osVersion  string
	osBuild    string
	osAt       time.Time
	macs       []string // normalised; reports that are not MAC addresses are dropped
	macsAt     time.Time
	processes  []processState
	wokenAt    time.Time
	unlockedAt time.Time
}

type processState struct {
	checkID            string
	path               string
	isRunning          bool
	hash               string // normalised
	signerFingerprints []string
	at                 time.Time
}

// size approximates the memory the data holds, in bytes.
func (d *postureData) size() int {
	n := len(d.domain) + len(d.osType) + len(d.osVersion) + len(d.osBuild)
	for _, m := range d.macs {
		n += len(m) + 16
	}
	for _, p := range d.processes {
		n += len(p.checkID) + len(p.path) + len(p.hash) + 64
		for _, f := range p.signerFingerprints {
			n += len(f) + 16
		}
	}
	return n
}

func (d *postureData) clone() *postureData {
	if d == nil {
		return &postureData{}
	}
	c := *d
	c.processes = slices.Clone(d.processes)
	return &c
}

func (d *postureData) apply(r *PostureResponse, now time.Time) error {
	switch r.TypeID {
	case PostureDomain:
		d.domain, d.domainAt = r.Domain, now
	case PostureOS:
		d.osType, d.osVersion, d.osBuild, d.osAt = r.OSType, r.OSVersion, r.OSBuild, now
	case PostureMAC:
		d.macs = make([]string, 0, len(r.MacAddresses))
		for _, a := range r.MacAddresses {
			if n := normMAC(a); n != "" {
				d.macs = append(d.macs, n)
			}
		}
		d.macsAt = now
	case PostureProcess:
		p := processState{checkID: r.ID, path: r.Path, isRunning: r.IsRunning, hash: normHex(r.Hash), at: now}
		for _, f := range r.SignerFingerprints {
			if n := normHex(f); n != "" {
				p.signerFingerprints = append(p.signerFingerprints, n)
			}
		}
		i := slices.IndexFunc(d.processes, func(q processState) bool { return q.path == p.path })
		switch {
		case i >= 0:
			d.processes[i] = p
		case len(d.processes) >= maxPostureProcesses:
			return invalid("path", r.Path, "this API session already reported %d processes", maxPostureProcesses)
		default:
			d.processes = append(d.processes, p)
		}
	case PostureEndpointState:
		if r.Woken {
			d.wokenAt = now
		}
		if r.Unlocked {
			d.unlockedAt = now
		}
	}
	return nil
}

// process returns what was reported of a process path (compared without case on Windows),
// or of the posture check id when no report names the path.
func (d *postureData) process(checkID, osType, path string) (processState, bool) {
	if d == nil {
		return processState{}, false
	}
	windows := strings.HasPrefix(osType, "Windows")
	for _, p := range d.processes {
		if p.path == path || (windows && strings.EqualFold(p.path, path)) {
			return p, true
		}
	}
	for _, p := range d.processes {
		if checkID != "" && p.checkID == checkID {
			return p, true
		}
	}
	return processState{}, false
}

// postureStore holds the posture data of every API session that reported some.
type postureStore struct {
	mu   sync.Mutex
	data map[string]*postureData
}

func newPostureStore() *postureStore { return &postureStore{data: map[string]*postureData{}} }

// get returns the API session's posture data; nil when it reported none.
func (s *postureStore) get(apiSessionID string) *postureData {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[apiSessionID]
}

// update stores a copy of the API session's data changed by f.
func (s *postureStore) update(apiSessionID string, f func(*postureData) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.data[apiSessionID].clone()
	if err := f(next); err != nil {
		return err
	}
	if n := next.size(); n > maxPostureBytes {
		return invalid("posture", nil, "this API session's posture data would take %d bytes, more than %d", n, maxPostureBytes)
	}
	s.data[apiSessionID] = next
	return nil
}

func (s *postureStore) sessions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.data))
	for id := range s.data {
		out = append(out, id)
	}
	return out
}

func (s *postureStore) forget(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.data, id)
	}
}

// mfaState evaluates an MFA check: why it fails ("" when it holds) and how long it has
// left before time alone fails it (-1: no deadline; 0 when it fails).
func (c *PostureCheck) mfaState(api *APISession, d *postureData, now time.Time) (string, time.Duration) {
	if api.MFACompletedAt == nil {
		return "MFA has not been passed in this API session", 0
	}
	passed := *api.MFACompletedAt
	left := time.Duration(-1)
	deadline := func(at time.Time, what string) string {
		if now.After(at) {
			return what
		}
		if rem := at.Sub(now); left < 0 || rem < left {
			left = rem
		}
		return ""
	}
	if c.TimeoutSeconds > 0 {
		if why := deadline(passed.Add(time.Duration(c.TimeoutSeconds)*time.Second),
			fmt.Sprintf("MFA was passed at %s, more than %d seconds ago", passed.Format(time.RFC3339), c.TimeoutSeconds)); why != "" {
			return why, 0
		}
	}
	if d != nil && c.PromptOnWake && d.wokenAt.After(passed) {
		if why := deadline(d.wokenAt.Add(MFAPromptGrace),
			fmt.Sprintf("the device woke at %s and MFA was not passed again within %s", d.wokenAt.Format(time.RFC3339), MFAPromptGrace)); why != "" {
			return why, 0
		}
	}
	if d != nil && c.PromptOnUnlock && d.unlockedAt.After(passed) {
		if why := deadline(d.unlockedAt.Add(MFAPromptGrace),
			fmt.Sprintf("the device was unlocked at %s and MFA was not passed again within %s", d.unlockedAt.Format(time.RFC3339), MFAPromptGrace)); why != "" {
			return why, 0
		}
	}
	return "", left
}

// evaluate says why the check fails for the API session and its posture data, or "" when
// it holds.
func (c *PostureCheck) evaluate(api *APISession, d *postureData, now time.Time) string {
	if c.TypeID == PostureMFA {
		why, _ := c.mfaState(api, d, now)
		return why
	}
	switch c.TypeID {
	case PostureDomain:
		if d == nil || d.domainAt.IsZero() {
			return "no domain has been reported"
		}
		if !slices.ContainsFunc(c.Domains, func(s string) bool { return strings.EqualFold(s, d.domain) }) {
			return fmt.Sprintf("domain %q is not one of %s", d.domain, strings.Join(c.Domains, ", "))
		}
	case PostureMAC:
		if d == nil || d.macsAt.IsZero() {
			return "no MAC addresses have been reported"
		}
		for _, a := range c.MacAddresses {
			if slices.Contains(d.macs, normMAC(a)) {
				return ""
			}
		}
		return "none of the reported MAC addresses is allowed"
	case PostureOS:
		if d == nil || d.osAt.IsZero() {
			return "no operating system has been reported"
		}
		for _, o := range c.OperatingSystems {
			if strings.EqualFold(o.Type, d.osType) && versionMatches(o.Versions, d.osVersion) {
				return ""
			}
		}
		return fmt.Sprintf("operating system %s %s is not allowed", d.osType, d.osVersion)
	case PostureProcess:
		p := c.Process
		return processFailure(d, c.ID, p.OSType, p.Path, p.Hashes, nonEmpty(p.SignerFingerprint))
	case PostureProcessMulti:
		var fails []string
		for _, p := range c.Processes {
			why := processFailure(d, c.ID, p.OSType, p.Path, p.Hashes, p.SignerFingerprints)
			if why == "" && c.Semantic == SemanticAny {
				return ""
			}
			if why != "" {
				if c.Semantic == SemanticAll {
					return why
				}
				fails = append(fails, why)
			}
		}
		if c.Semantic == SemanticAny {
			return "none of the processes holds: " + strings.Join(fails, "; ")
		}
	}
	return ""
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func processFailure(d *postureData, checkID, osType, path string, hashes, signers []string) string {
	p, ok := d.process(checkID, osType, path)
	switch {
	case !ok:
		return fmt.Sprintf("process %s has not been reported", path)
	case !p.isRunning:
		return fmt.Sprintf("process %s is not running", path)
	case len(hashes) > 0 && !slices.ContainsFunc(hashes, func(h string) bool { return normHex(h) == p.hash }):
		return fmt.Sprintf("the binary of process %s does not have an allowed hash", path)
	case len(signers) > 0 && !slices.ContainsFunc(signers, func(s string) bool { return slices.Contains(p.signerFingerprints, normHex(s)) }):
		return fmt.Sprintf("process %s is not signed by an allowed signer", path)
	}
	return ""
}

// Posture in the policy index: each grant holds the posture checks its policy names (nil
// when none), and the index knows whether any of them depends on time.

func (b bitset) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

// postureOf returns the posture checks a service policy's postureCheckRoles select, nil when
// they select none.
func (idx *policyIndex) postureOf(p *ServicePolicy) bitset {
	if len(p.PostureCheckRoles) == 0 {
		return nil
	}
	b := idx.checks.match(p.PostureCheckRoles, p.Semantic)
	if b.empty() {
		return nil
	}
	return b
}

// namesMissingCheck reports whether the policy names, by @id, a posture check that does not
// exist.
func (idx *policyIndex) namesMissingCheck(p *ServicePolicy) bool {
	for _, r := range p.PostureCheckRoles {
		if strings.HasPrefix(r, "@") {
			if _, ok := idx.checks.pos[r[1:]]; !ok {
				return true
			}
		}
	}
	return false
}

// hasTimedChecks reports whether a policy names a check that time alone can fail.
func (idx *policyIndex) hasTimedChecks() bool {
	for _, grants := range [][]grant{idx.dial, idx.bind} {
		for _, g := range grants {
			timed := false
			g.posture.each(func(c int) { timed = timed || idx.checkRec[c].timed() })
			if timed {
				return true
			}
		}
	}
	return false
}

// ungated reports whether one of the grants needs no posture.
func ungated(grants []*grant) bool {
	return slices.ContainsFunc(grants, func(g *grant) bool { return g.posture == nil })
}

// postureAllows returns nil when one of the grants needs no posture or has every posture
// check satisfied, and otherwise an INVALID_POSTURE error naming the first failing check.
func (idx *policyIndex) postureAllows(grants []*grant, api *APISession, d *postureData, now time.Time) error {
	if ungated(grants) {
		return nil
	}
	var first error
	for _, g := range grants {
		var failed error
		g.posture.each(func(i int) {
			if failed != nil {
				return
			}
			c := idx.checkRec[i]
			if why := c.evaluate(api, d, now); why != "" {
				failed = errorf(CodeInvalidPosture, "posture check %q (%s) of service policy %q is not satisfied: %s", c.Name, c.TypeID, g.name, why)
			}
		})
		if failed == nil {
			return nil
		}
		if first == nil {
			first = failed
		}
	}
	return first
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
