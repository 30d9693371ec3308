package model

import (
	"errors"
	"fmt"

	"github.com/zmesh/zmesh/controlplane/store"
)

// IntegrityIssue is one record that names another that does not exist. Fixed: the scan that
// found it also repaired it (the record, which belongs to the missing one, was deleted, or
// the dangling reference dropped).
type IntegrityIssue struct {
	Description string
	Fixed       bool
}

// CheckIntegrity scans the store for records that name records which do not exist; with fix,
// it repairs what belongs to a missing record (authenticators, enrollments, API sessions and
// sessions of a missing identity, API session or service, a service's missing configs, the
// service configs of a missing identity, terminators of a missing service), at most
// integrityBatch repairs per transaction, scanning again until a scan completes. Configs of a
// missing config type are reported, never repaired: their data would be lost. It returns at
// most MaxIntegrityIssues issues, and whether it found more.
func (m *Model) CheckIntegrity(fix bool) (issues []IntegrityIssue, more bool, err error) {
	run := m.st.View
	if fix {
		run = m.st.Update
	}
	keep := func(list []IntegrityIssue) {
		for _, is := range list {
			if len(issues) == MaxIntegrityIssues {
				more = true
				return
			}
			issues = append(issues, is)
		}
	}
	for {
		var fixed, unfixed []IntegrityIssue
		full := false
		err := run(func(tx *store.Tx) error {
			fixed, unfixed, full = nil, nil, false
			err := m.scanIntegrity(tx, fix, &fixed, &unfixed)
			if errors.Is(err, errIntegrityBatchFull) {
				full = true
				return nil // commit this batch of repairs
			}
			return err
		})
		if err != nil {
			return issues, more, err
		}
		keep(fixed)
		if !full {
			keep(unfixed)
			return issues, more, nil
		}
	}
}

// integrityBatch bounds the repairs of one transaction, so that a store with any number of
// broken records stays within Badger's limit on a transaction's size.
const integrityBatch = 1000

// MaxIntegrityIssues bounds the issues a scan reports.
const MaxIntegrityIssues = 10_000

var errIntegrityBatchFull = errors.New("integrity: batch of repairs full")

// scanIntegrity is one scan of CheckIntegrity in tx: repaired issues go to fixed, the others
// to unfixed; it stops with errIntegrityBatchFull once integrityBatch repairs are made.
func (m *Model) scanIntegrity(tx *store.Tx, fix bool, fixed, unfixed *[]IntegrityIssue) error {
	report := func(fixable bool, repair func() error, format string, args ...any) error {
		is := IntegrityIssue{Description: fmt.Sprintf(format, args...)}
		if !fix || !fixable {
			*unfixed = append(*unfixed, is)
			return nil
		}
		if len(*fixed) == integrityBatch {
			return errIntegrityBatchFull
		}
		if err := repair(); err != nil {
			return err
		}
		if len(*fixed) == 0 {
			m.changed(tx) // repairs may take rights away
		}
		is.Fixed = true
		*fixed = append(*fixed, is)
		return nil
	}
	has := func(c interface {
		Has(*store.Tx, string) (bool, error)
	}, id string) (bool, error) {
		if id == "" {
			return false, nil
		}
		return c.Has(tx, id)
	}
	authenticatorsList, err := m.c.authenticators.All(tx)
	if err != nil {
		return err
	}
	for _, a := range authenticatorsList {
		if ok, err := has(m.c.identities, a.IdentityID); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if err := report(true, func() error { return m.c.authenticators.Delete(tx, a.ID) },
			"authenticator %s belongs to identity %s, which does not exist", a.ID, a.IdentityID); err != nil {
			return err
		}
	}
	enrollmentsList, err := m.c.enrollments.All(tx)
	if err != nil {
		return err
	}
	for _, e := range enrollmentsList {
		owner, kind := e.IdentityID, "identity"
		ok, err := has(m.c.identities, owner)
		if e.EdgeRouterID != "" {
			owner, kind = e.EdgeRouterID, "edge router"
			ok, err = has(m.c.edgeRouters, owner)
		}
		if err != nil {
			return err
		}
		if !ok {
			if err := report(true, func() error { return m.c.enrollments.Delete(tx, e.ID) },
				"enrollment %s belongs to %s %s, which does not exist", e.ID, kind, owner); err != nil {
				return err
			}
		}
	}
	apiSessionsList, err := m.c.apiSessions.All(tx)
	if err != nil {
		return err
	}
	for _, a := range apiSessionsList {
		if ok, err := has(m.c.identities, a.IdentityID); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if err := report(true, func() error { return m.deleteAPISessionTx(tx, a.ID) },
			"API session %s belongs to identity %s, which does not exist", a.ID, a.IdentityID); err != nil {
			return err
		}
	}
	sessionsList, err := m.c.sessions.All(tx)
	if err != nil {
		return err
	}
	for _, s := range sessionsList {
		okAPI, err := has(m.c.apiSessions, s.APISessionID)
		if err != nil {
			return err
		}
		okSvc, err := has(m.c.services, s.ServiceID)
		if err != nil {
			return err
		}
		if okAPI && okSvc {
			continue
		}
		if ok, err := m.c.sessions.Has(tx, s.ID); err != nil || !ok { // gone with its API session
			if err != nil {
				return err
			}
			continue
		}
		if err := report(true, func() error { return m.c.sessions.Delete(tx, s.ID) },
			"session %s names API session %s and service %s, not both of which exist", s.ID, s.APISessionID, s.ServiceID); err != nil {
			return err
		}
	}
	servicesList, err := m.c.services.All(tx)
	if err != nil {
		return err
	}
	for _, sv := range servicesList {
		var kept []string
		for _, id := range sv.Configs {
			ok, err := has(m.c.configs, id)
			if err != nil {
				return err
			}
			if ok {
				kept = append(kept, id)
				continue
			}
			if err := report(true, func() error { return nil }, "service %s names config %s, which does not exist", sv.Name, id); err != nil {
				return err
			}
		}
		if fix && len(kept) != len(sv.Configs) {
			sv.Configs = kept
			if err := m.c.services.Put(tx, sv); err != nil {
				return err
			}
		}
	}
	configsList, err := m.c.configs.All(tx)
	if err != nil {
		return err
	}
	for _, c := range configsList {
		if ok, err := has(m.c.configTypes, c.ConfigTypeID); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if err := report(false, nil, "config %s has config type %s, which does not exist", c.Name, c.ConfigTypeID); err != nil {
			return err
		}
	}
	identityServiceConfigsList, err := m.c.identityServiceConfigs.All(tx)
	if err != nil {
		return err
	}
	for _, sc := range identityServiceConfigsList {
		if ok, err := has(m.c.identities, sc.IdentityID); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if err := report(true, func() error { return m.c.identityServiceConfigs.Delete(tx, sc.IdentityID) },
			"service configs of identity %s, which does not exist", sc.IdentityID); err != nil {
			return err
		}
	}
	terminatorsList, err := m.c.terminators.All(tx)
	if err != nil {
		return err
	}
	for _, t := range terminatorsList {
		if ok, err := has(m.c.services, t.ServiceID); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if err := report(true, func() error { return m.c.terminators.Delete(tx, t.ID) },
			"terminator %s belongs to service %s, which does not exist", t.ID, t.ServiceID); err != nil {
			return err
		}
	}
	return nil
}
