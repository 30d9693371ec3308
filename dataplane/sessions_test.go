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
	c.apply(nil, &ctrlproto.SessionState{APISessions: []ctrlproto.APISession{legacy}})
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
		c.apply(nil, &ctrlproto.SessionState{APISessions: []ctrlproto.APISession{step.entry}})
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

// Full states from two members, interleaved, remove nothing that either holds; a full state
// that lacks a session still removes it.
func TestSessionCacheFullStatesFromTwoMembers(t *testing.T) {
	var removed []string
	c := newSessionCache(func(_, sess []string) { removed = append(removed, sess...) }, nil)
	s1 := ctrlproto.Session{ID: "s1", Token: "t1"}
	s2 := ctrlproto.Session{ID: "s2", Token: "t2"}
	x, y := "member x", "member y"
	c.apply(x, &ctrlproto.SessionState{Reset: true, Sessions: []ctrlproto.Session{s1}})
	c.apply(y, &ctrlproto.SessionState{Reset: true, Sessions: []ctrlproto.Session{s1}})
	c.apply(x, &ctrlproto.SessionState{Sessions: []ctrlproto.Session{s2}, Complete: true})
	c.apply(y, &ctrlproto.SessionState{Sessions: []ctrlproto.Session{s2}, Complete: true})
	if len(removed) != 0 {
		t.Fatalf("interleaved full states removed %v", removed)
	}
	for _, tok := range []string{"t1", "t2"} {
		if _, ok := c.session(tok); !ok {
			t.Fatalf("session %s missing", tok)
		}
	}
	// x's channel closes in the middle of a full state: y's completes alone.
	c.apply(x, &ctrlproto.SessionState{Reset: true})
	c.forget(x)
	c.apply(y, &ctrlproto.SessionState{Reset: true, Sessions: []ctrlproto.Session{s1}, Complete: true})
	if !slices.Equal(removed, []string{"t2"}) {
		t.Fatalf("a full state without s2 removed %v, want t2", removed)
	}
	if len(c.loads) != 0 {
		t.Fatalf("full states still loading: %v", c.loads)
	}
}
