package main

import (
	"strings"
	"testing"
	"time"
)

// TestEdgeDisableIdentity disables an identity through the CLI until enabled and for a
// number of minutes, enables it, and checks the errors of a negative duration, an unknown
// identity and a missing type.
func TestEdgeDisableIdentity(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	id := edge.object(t, "create", "identity", "bob")["id"].(string)

	if out := edge.must(t, "disable", "identity", "bob"); out != "disabled identity bob ("+id+") until enabled\n" {
		t.Errorf("disable text: %q", out)
	}
	got := edge.object(t, "get", "identity", "bob")
	if got["disabled"] != true || got["disabledAt"] == nil || got["disabledUntil"] != nil {
		t.Errorf("disabled until enabled: disabled %v, disabledAt %v, disabledUntil %v", got["disabled"], got["disabledAt"], got["disabledUntil"])
	}
	if out := edge.must(t, "enable", "identity", id); out != "enabled identity "+id+" ("+id+")\n" {
		t.Errorf("enable text: %q", out)
	}
	if got := edge.object(t, "get", "identity", "bob"); got["disabled"] != false || got["disabledAt"] != nil {
		t.Errorf("enabled: disabled %v, disabledAt %v", got["disabled"], got["disabledAt"])
	}

	got = edge.object(t, "disable", "identity", "bob", "--duration-minutes", "45")
	at, _ := time.Parse(time.RFC3339Nano, got["disabledAt"].(string))
	until, _ := time.Parse(time.RFC3339Nano, got["disabledUntil"].(string))
	if got["disabled"] != true || !until.Equal(at.Add(45*time.Minute)) {
		t.Errorf("disabled for 45 minutes: disabled %v, disabledAt %v, disabledUntil %v", got["disabled"], got["disabledAt"], got["disabledUntil"])
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"disable", "identity", "bob", "--duration-minutes", "-1"}, "durationMinutes"},
		{[]string{"disable", "identity", "nobody"}, "nobody"},
		{[]string{"enable", "identity", "nobody"}, "nobody"},
		{[]string{"disable"}, "allowed: identity"},
		{[]string{"disable", "service", "web"}, "allowed: identity"},
	} {
		if _, _, err := edge(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("zmesh edge %s: %v, want an error naming %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
