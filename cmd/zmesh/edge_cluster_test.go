package main

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// serveMemberAPI serves c's API on one more loopback HTTPS listener, as another member of a
// cluster sharing its store would, and returns its URL and server.
func serveMemberAPI(t *testing.T, c *ctrltest.Controller) (string, *http.Server) {
	t.Helper()
	srv := &http.Server{}
	return c.ServeAPI(t, srv), srv
}

// TestEdgeLoginCluster logs in with several controller URLs, the first dead, learns the
// members the controller lists, and goes on in the same session as controllers close, each
// command starting at the one that answered last; when none answers, the error names each.
func TestEdgeLoginCluster(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	dead, dead2 := "https://"+testutil.ClosedAddr(t), "https://"+testutil.ClosedAddr(t)
	a, srvA := serveMemberAPI(t, c)
	b, srvB := serveMemberAPI(t, c)
	session := filepath.Join(t.TempDir(), "session.json")
	edge := edgeFunc(func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"edge", "--session-file", session}, args...)...)
	})
	if _, _, err := edge("login", dead, dead2, "-u", "admin", "-p", "admin-pass", "--yes"); err == nil ||
		!strings.Contains(err.Error(), "no controller gave its CAs") || !strings.Contains(err.Error(), dead+": ") || !strings.Contains(err.Error(), dead2+": ") {
		t.Errorf("login with every controller dead: %v; want each named", err)
	}
	out, stderr, err := edge("login", dead, a, b, "-u", "admin", "-p", "admin-pass", "--yes")
	if err != nil {
		t.Fatalf("login with the first controller dead: %v (%s)", err, stderr)
	}
	if !strings.HasPrefix(out, "logged in to "+a+" as admin") {
		t.Errorf("login: %q, want it logged in at %s", out, a)
	}
	profile := func() edgeSession {
		t.Helper()
		l, err := loadLogins(session)
		if err != nil {
			t.Fatal(err)
		}
		return l.Profiles[defaultProfile]
	}
	s := profile()
	// The controller lists itself at its advertised address: learned after the three.
	if want := []string{dead, a, b, c.URL}; s.URL != a || !slices.Equal(s.URLs, want) {
		t.Errorf("login kept %s of %v, want %s of %v", s.URL, s.URLs, a, want)
	}
	token := s.Token
	edge.must(t, "create", "identity", "before")

	srvA.Close()
	if out := edge.must(t, "list", "identities"); !strings.Contains(out, "before") {
		t.Errorf("after A closed, list identities:\n%s", out)
	}
	if s := profile(); s.URL != b || s.Token != token {
		t.Errorf("after A closed the login starts at %s (token kept: %v), want %s", s.URL, s.Token == token, b)
	}
	srvB.Close()
	edge.must(t, "create", "identity", "after")
	if s := profile(); s.URL != c.URL || s.Token != token {
		t.Errorf("after B closed the login starts at %s (token kept: %v), want the learned %s", s.URL, s.Token == token, c.URL)
	}
	if use := edge.object(t, "use")["data"].([]any)[0].(map[string]any); len(use["urls"].([]any)) != 4 {
		t.Errorf("edge use lists %v, want the 4 controllers", use)
	}

	c.Stop()
	_, _, err = edge("list", "identities")
	if err == nil {
		t.Fatal("list with every controller gone succeeded")
	}
	for _, u := range []string{dead, a, b, c.URL} {
		if !strings.Contains(err.Error(), u+": cannot reach it") {
			t.Errorf("%v: does not name %s as unreachable", err, u)
		}
	}
}
