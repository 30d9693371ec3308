package dataplane

import (
	"slices"
	"testing"

	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// The cache reports an API session whose admitted certificates changed, an entry loaded
// from an older edge.db (any certificate) included, and only those.
func TestSessionCacheReportsCertChanges(t *testing.T) {
	var updated [][]string
	var removed []string
	c := newSessionCache(func(apis, _ []string) { removed = append(removed, apis...) }, func(apis []ctrlproto.APISession) {
		for _, a := range apis {
			updated = append(updated, a.CertFingerprints)
		}
	})
	legacy := ctrlproto.APISession{ID: "a1", Token: "t1", IdentityID: "i1"}
	c.apply(&ctrlproto.SessionState{APISessions: []ctrlproto.APISession{legacy}})
	if len(updated) != 0 {
		t.Fatalf("a new API session reported as changed: %v", updated)
	}
	admits := func(fps ...string) ctrlproto.APISession {
		a := legacy
		a.CertFingerprints = append([]string{}, fps...)
		return a
	}
	for _, step := range []struct {
		entry ctrlproto.APISession
		want  bool
	}{
		{admits(), true},           // any certificate → none
		{admits(), false},          // unchanged
		{admits("f1"), true},       // one more
		{admits("f1"), false},      // unchanged
		{admits("f1", "f2"), true}, // another
		{admits("f2"), true},       // one fewer
	} {
		updated = nil
		c.apply(&ctrlproto.SessionState{APISessions: []ctrlproto.APISession{step.entry}})
		if got := len(updated) == 1; got != step.want || (got && !slices.Equal(updated[0], step.entry.CertFingerprints)) {
			t.Fatalf("entry admitting %v: reported %v, want reported %v", step.entry.CertFingerprints, updated, step.want)
		}
		if a, _ := c.apiSession("t1"); !sameCerts(a.CertFingerprints, step.entry.CertFingerprints) {
			t.Fatalf("the cache admits %v after the update to %v", a.CertFingerprints, step.entry.CertFingerprints)
		}
	}
	if a, _ := c.apiSession("t1"); a.AdmitsCert("f1") || !a.AdmitsCert("f2") {
		t.Fatalf("the cached API session admits %v, want f2 only", a.CertFingerprints)
	}
	if len(removed) != 0 {
		t.Fatalf("a certificate change removed %v", removed)
	}
	if !legacy.AdmitsCert("anything") {
		t.Fatal("an entry without the list refuses a certificate")
	}
}
