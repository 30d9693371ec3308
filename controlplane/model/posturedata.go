package model

import (
	"slices"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// IdentityPosture is the posture data an identity's API sessions reported: of each kind the
// latest report of any of them, and per API session its MFA and endpoint state. Zero times:
// never reported.
type IdentityPosture struct {
	Domain                     string
	DomainAt                   time.Time
	OSType, OSVersion, OSBuild string
	OSAt                       time.Time
	MACs                       []string
	MACsAt                     time.Time
	Processes                  []ProcessPosture
	Sessions                   map[string]SessionPosture // by API session id
}

// ProcessPosture is the latest report of a process path.
type ProcessPosture struct {
	CheckID, Path, Hash string
	IsRunning           bool
	SignerFingerprints  []string
	At                  time.Time
}

// SessionPosture is what one API session proved: when it passed MFA (nil: never), and when
// its endpoint last reported waking and unlocking.
type SessionPosture struct {
	MFAPassedAt         *time.Time
	WokenAt, UnlockedAt time.Time
}

// PostureDataOf returns the posture data of the identity's current API sessions. The data
// lives in memory: it is volatile, as in the reference.
func (m *Model) PostureDataOf(identityID string) (*IdentityPosture, error) {
	var apis []*APISession
	err := m.st.View(func(tx *store.Tx) error {
		if _, err := m.c.identities.Get(tx, identityID); err != nil {
			return missing(err, "identity", identityID)
		}
		var err error
		apis, err = m.c.apiSessions.With(tx, "identityId", identityID)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &IdentityPosture{Sessions: map[string]SessionPosture{}}
	procs := map[string]ProcessPosture{}
	for _, a := range apis {
		sp := SessionPosture{MFAPassedAt: a.MFACompletedAt}
		if d := m.c.posture.get(a.ID); d != nil {
			sp.WokenAt, sp.UnlockedAt = d.wokenAt, d.unlockedAt
			if d.domainAt.After(out.DomainAt) {
				out.Domain, out.DomainAt = d.domain, d.domainAt
			}
			if d.osAt.After(out.OSAt) {
				out.OSType, out.OSVersion, out.OSBuild, out.OSAt = d.osType, d.osVersion, d.osBuild, d.osAt
			}
			if d.macsAt.After(out.MACsAt) {
				out.MACs, out.MACsAt = slices.Clone(d.macs), d.macsAt
			}
			for _, p := range d.processes {
				if cur, ok := procs[p.path]; !ok || p.at.After(cur.At) {
					procs[p.path] = ProcessPosture{CheckID: p.checkID, Path: p.path, Hash: p.hash, IsRunning: p.isRunning,
						SignerFingerprints: slices.Clone(p.signerFingerprints), At: p.at}
				}
			}
		}
		out.Sessions[a.ID] = sp
	}
	for _, p := range procs {
		out.Processes = append(out.Processes, p)
	}
	slices.SortFunc(out.Processes, func(a, b ProcessPosture) int { return compareStr(a.Path, b.Path) })
	return out, nil
}
