package model

import (
	"slices"
	"sync"
	"time"
)

// maxFailedRequests is how many failed service requests are kept per identity, the latest.
const maxFailedRequests = 50

// FailedServiceRequest is a session request that posture checks refused: every policy that
// would have granted it, with the checks of each that failed.
type FailedServiceRequest struct {
	APISessionID   string
	ServiceID      string
	ServiceName    string
	SessionType    string
	When           time.Time
	PolicyFailures []PolicyFailure
}

// PolicyFailure is a service policy whose posture checks did not all hold.
type PolicyFailure struct {
	PolicyID, PolicyName string
	Checks               []CheckFailure
}

// CheckFailure is a posture check that did not hold: why, and for the checks that compare
// one reported value with allowed ones, the value and the allowed ones (nil otherwise).
type CheckFailure struct {
	CheckID, CheckName, CheckType string
	Reason                        string
	Actual, Expected              any
}

// failedStore keeps the latest failed service requests of each identity, in memory.
type failedStore struct {
	mu   sync.Mutex
	byID map[string][]FailedServiceRequest
}

func newFailedStore() *failedStore { return &failedStore{byID: map[string][]FailedServiceRequest{}} }

func (s *failedStore) add(identityID string, r FailedServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := append(s.byID[identityID], r)
	if len(list) > maxFailedRequests {
		list = slices.Clone(list[len(list)-maxFailedRequests:])
	}
	s.byID[identityID] = list
}

func (s *failedStore) of(identityID string) []FailedServiceRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byID[identityID])
}

func (s *failedStore) forget(identityID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, identityID)
}

// FailedServiceRequests returns the identity's latest session requests that posture checks
// refused, oldest first. They live in memory: a restart forgets them.
func (m *Model) FailedServiceRequests(identityID string) ([]FailedServiceRequest, error) {
	if _, err := m.Identity(identityID); err != nil {
		return nil, err
	}
	return m.c.failed.of(identityID), nil
}

// recordPostureFailure keeps a session request that the grants' posture checks refused.
func (m *Model) recordPostureFailure(idx *policyIndex, grants []*grant, api *APISession, d *postureData, svc *Service, typ string, now time.Time) {
	r := FailedServiceRequest{APISessionID: api.ID, ServiceID: svc.ID, ServiceName: svc.Name, SessionType: typ, When: now}
	for _, g := range grants {
		pf := PolicyFailure{PolicyID: g.id, PolicyName: g.name}
		g.posture.each(func(i int) {
			c := idx.checkRec[i]
			why := c.evaluate(api, d, now)
			if why == "" {
				return
			}
			cf := CheckFailure{CheckID: c.ID, CheckName: c.Name, CheckType: c.TypeID, Reason: why}
			switch c.TypeID {
			case PostureDomain:
				cf.Expected = c.Domains
				if d != nil {
					cf.Actual = d.domain
				}
			case PostureMAC:
				cf.Expected = c.MacAddresses
				if d != nil {
					cf.Actual = d.macs
				}
			case PostureOS:
				cf.Expected = c.OperatingSystems
				if d != nil {
					cf.Actual = map[string]string{"type": d.osType, "version": d.osVersion}
				}
			}
			pf.Checks = append(pf.Checks, cf)
		})
		r.PolicyFailures = append(r.PolicyFailures, pf)
	}
	m.c.failed.add(api.IdentityID, r)
}
