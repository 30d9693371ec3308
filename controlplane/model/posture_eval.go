package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

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
