package model

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

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
