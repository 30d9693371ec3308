package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestEdgeTerminators creates, lists, gets, updates and deletes a terminator, which has no
// name: commands take its id.
func TestEdgeTerminators(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	svc := edge.object(t, "create", "service", "db", "--encryption", "off")["id"].(string)
	router := edge.object(t, "create", "edge-router", "east-1")["id"].(string)

	out := edge.must(t, "create", "terminator", "db", "east-1", "tcp:127.0.0.1:5432", "--cost", "5", "-p", "Required")
	m := regexp.MustCompile(`^created terminator (\S+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create: %q", out)
	}
	id := m[1]
	got := edge.object(t, "get", "terminator", id)
	hasFields(t, "terminator", got, map[string]any{"serviceId": svc, "routerId": router, "address": "tcp:127.0.0.1:5432",
		"binding": "transport", "cost": 5, "precedence": "required"})

	table, footer, err := edge("list", "terminators", `service.name = "db"`)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "SERVICE") ||
		!strings.Contains(lines[1], id) || !strings.Contains(lines[1], "db") || !strings.Contains(lines[1], "east-1") || footer != "(1 of 1 shown)\n" {
		t.Errorf("list (%v):\n%s\nstderr %q", err, table, footer)
	}
	if items := edge.list(t, "terminators"); len(items) != 1 || items[0]["id"] != id {
		t.Errorf("list json: %v", items)
	}
	if out := edge.must(t, "update", "terminator", id, "--cost", "9", "--address", "tcp:127.0.0.1:5433"); out != "updated terminator "+id+"\n" {
		t.Errorf("update: %q", out)
	}
	hasFields(t, "updated", edge.object(t, "get", "terminator", id), map[string]any{"cost": 9, "address": "tcp:127.0.0.1:5433"})
	if _, _, err := edge("update", "terminator", id, "--name", "x"); err == nil || !strings.Contains(err.Error(), "unknown flag: --name") {
		t.Errorf("update --name of a terminator: %v", err)
	}
	// A terminator has no name: a name does not find it.
	if _, _, err := edge("get", "terminator", "db"); err == nil || !strings.Contains(err.Error(), `no terminator has id "db"`) {
		t.Errorf("get by a name: %v", err)
	}
	if _, _, err := edge("create", "terminator", "db", "east-1"); err == nil || !strings.Contains(err.Error(), "missing argument ADDRESS or --address") {
		t.Errorf("create without an address: %v", err)
	}
	if out := edge.must(t, "delete", "terminator", id); out != "deleted terminator "+id+"\n" {
		t.Errorf("delete: %q", out)
	}
	if items := edge.list(t, "terminators"); len(items) != 0 {
		t.Errorf("list after delete: %v", items)
	}
}

// TestEdgeCA adds a third-party CA, changes it, verifies it with a certificate its key
// signed for the verification token, and deletes it.
func TestEdgeCA(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	corp := testutil.NewAuthority(t, "Corp Root")
	pemFile := writeFile(t, "corp.pem", string(corp.PEM()))

	out := edge.must(t, "create", "ca", "corp", pemFile, "--autoca", "-a", "staff,laptops", "--identity-name-format", "[caName]-[commonName]")
	if !regexp.MustCompile(`^created CA corp \(\S+\)\n$`).MatchString(out) {
		t.Errorf("create: %q", out)
	}
	got := edge.object(t, "get", "ca", "corp")
	hasFields(t, "CA", got, map[string]any{"isAutoCaEnrollmentEnabled": true, "isAuthEnabled": false, "isOttCaEnrollmentEnabled": false,
		"identityRoles": []string{"staff", "laptops"}, "isVerified": false, "identityNameFormat": "[caName]-[commonName]"})
	token, _ := got["verificationToken"].(string)
	if token == "" {
		t.Fatalf("no verification token: %v", got)
	}
	table, _, err := edge("list", "cas")
	if err != nil || !strings.Contains(table, "VERIFIED") || !strings.Contains(table, "corp") || !strings.Contains(table, "staff,laptops") {
		t.Errorf("list (%v):\n%s", err, table)
	}
	edge.must(t, "update", "ca", "corp", "--auth", "--location", "common_name", "--matcher", "ALL", "--parser", "none",
		"--matcher-criteria", "", "--parser-criteria", "", "--index", "0")
	hasFields(t, "updated", edge.object(t, "get", "ca", "corp"), map[string]any{"isAuthEnabled": true,
		"externalIdClaim": map[string]any{"location": "COMMON_NAME", "matcher": "ALL", "parser": "NONE", "index": 0}})

	wrong := writeFile(t, "wrong.pem", string(testutil.CertPEM(corp.Issue(t, "not-the-token", nil))))
	if _, _, err := edge("verify", "ca", "corp", "--cert", wrong); err == nil || !strings.Contains(err.Error(), "verification token") {
		t.Errorf("verify with another common name: %v", err)
	}
	other := testutil.NewAuthority(t, "Other")
	if _, _, err := edge("verify", "ca", "corp", "--cert", writeFile(t, "other.pem", string(testutil.CertPEM(other.Issue(t, token, nil))))); err == nil ||
		!strings.Contains(err.Error(), "not signed") {
		t.Errorf("verify with a certificate of another key: %v", err)
	}
	right := writeFile(t, "right.pem", string(testutil.CertPEM(corp.Issue(t, token, nil))))
	if out := edge.must(t, "verify", "ca", "corp", "--cert", right); !strings.HasPrefix(out, "verified CA corp (") {
		t.Errorf("verify: %q", out)
	}
	hasFields(t, "verified", edge.object(t, "get", "ca", "corp"), map[string]any{"isVerified": true})
	if _, _, err := edge("verify", "ca", "corp"); err == nil || !strings.Contains(err.Error(), `"cert" not set`) {
		t.Errorf("verify without --cert: %v", err)
	}
	if out := edge.must(t, "delete", "ca", "corp"); !strings.HasPrefix(out, "deleted CA corp (") {
		t.Errorf("delete: %q", out)
	}
}

// TestEdgeEnrollmentsAndAuthenticators lists, shows and cancels pending enrollments, and
// changes and deletes authenticators.
func TestEdgeEnrollmentsAndAuthenticators(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	edge.must(t, "create", "identity", "laptop", "--ott")
	items := edge.list(t, "enrollments", `identity.name = "laptop"`)
	if len(items) != 1 || items[0]["method"] != "ott" {
		t.Fatalf("enrollments of laptop: %v", items)
	}
	id := items[0]["id"].(string)
	table, _, err := edge("list", "enrollments")
	if err != nil || !strings.Contains(table, "METHOD") || !strings.Contains(table, id) || !strings.Contains(table, "laptop") {
		t.Errorf("list table (%v):\n%s", err, table)
	}
	hasFields(t, "enrollment", edge.object(t, "get", "enrollment", id), map[string]any{"method": "ott"})
	if out := edge.must(t, "delete", "enrollment", id); out != "deleted enrollment "+id+"\n" {
		t.Errorf("delete: %q", out)
	}
	if items := edge.list(t, "enrollments", `identity.name = "laptop"`); len(items) != 0 {
		t.Errorf("enrollments after delete: %v", items)
	}
	// Enrollments cannot be created or updated here: the commands do not exist.
	for _, verb := range []string{"create", "update"} {
		if _, _, err := edge(verb, "enrollment", id); err == nil || !strings.Contains(err.Error(), "is not an entity type") {
			t.Errorf("%s enrollment: %v", verb, err)
		}
	}

	auths := edge.list(t, "authenticators", `username = "admin"`)
	if len(auths) != 1 || auths[0]["method"] != "updb" {
		t.Fatalf("the administrator's authenticator: %v", auths)
	}
	auth := auths[0]["id"].(string)
	if out := edge.must(t, "update", "authenticator", auth, "--password", "another-pass-1"); out != "updated authenticator "+auth+"\n" {
		t.Errorf("update: %q", out)
	}
	// The new password logs in; the old one no longer does.
	url := edge.object(t, "use")["data"].([]any)[0].(map[string]any)["url"].(string)
	if _, _, err := edge("login", url, "-u", "admin", "-p", "admin-pass", "--yes", "--profile", "old"); err == nil {
		t.Error("the old password still logs in")
	}
	edge.must(t, "login", url, "-u", "admin", "-p", "another-pass-1", "--yes", "--profile", "new")
	table, _, err = edge("list", "authenticators", `username = "admin"`)
	if err != nil || !strings.Contains(table, "ISSUED BY NETWORK") || !strings.Contains(table, auth) {
		t.Errorf("list table (%v):\n%s", err, table)
	}
	if out := edge.must(t, "delete", "authenticator", auth); out != "deleted authenticator "+auth+"\n" {
		t.Errorf("delete: %q", out)
	}
	if _, _, err := edge("login", url, "-u", "admin", "-p", "another-pass-1", "--yes", "--profile", "gone"); err == nil {
		t.Error("a deleted authenticator still logs in")
	}
}

// TestEdgeAPISessions lists API sessions and ends one, whose login then fails.
func TestEdgeAPISessions(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	url := edge.object(t, "use")["data"].([]any)[0].(map[string]any)["url"].(string)
	edge.must(t, "login", url, "-u", "admin", "-p", "admin-pass", "--yes", "--profile", "second")
	items := edge.list(t, "api-sessions")
	if len(items) != 2 {
		t.Fatalf("api sessions: %v", items)
	}
	table, _, err := edge("list", "api-sessions")
	if err != nil || !strings.Contains(table, "LAST ACTIVITY") || strings.Count(table, "Default Admin") < 2 {
		t.Errorf("list table (%v):\n%s", err, table)
	}
	// The session of the current profile, second, is the one whose token it holds.
	var mine, other string
	for _, it := range items {
		if tok, _ := it["token"].(string); tok != "" {
			mine = it["id"].(string)
		} else {
			other = it["id"].(string)
		}
	}
	if mine == "" || other == "" {
		t.Fatalf("cannot tell the sessions apart: %v", items)
	}
	hasFields(t, "api session", edge.object(t, "get", "api-session", other), map[string]any{"id": other})
	if out := edge.must(t, "delete", "api-session", other); out != "deleted API session "+other+"\n" {
		t.Errorf("delete: %q", out)
	}
	if _, _, err := edge("list", "identities", "--profile", "default"); err == nil {
		t.Error("the ended API session still works")
	}
	if items := edge.list(t, "sessions"); len(items) != 0 {
		t.Errorf("sessions: %v", items)
	}
	if _, _, err := edge("delete", "session", "no-such-id"); err == nil || !strings.Contains(err.Error(), `no session has id "no-such-id"`) {
		t.Errorf("delete of a session that does not exist: %v", err)
	}
}

// TestEdgeSessions lists, shows and ends a session an API session holds to dial a service.
func TestEdgeSessions(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	edge := loggedInTo(t, c)
	svc := edge.object(t, "create", "service", "db")["id"].(string)
	edge.must(t, "create", "service-policy", "admin-dial-db", "Dial", "-i", "@Default Admin", "-s", "@db")
	edge.must(t, "create", "edge-router-policy", "all", "-i", "#all", "-e", "#all")
	edge.must(t, "create", "service-edge-router-policy", "all", "-s", "#all", "-e", "#all")
	onlineRouter(t, c, edge, "east-1")

	admin := c.Admin(t)
	var created struct {
		ID string `json:"id"`
	}
	if _, err := admin.Do(t.Context(), "POST", apiclient.ClientAPI+"/sessions", map[string]any{"serviceId": svc, "type": "Dial"}, &created); err != nil {
		t.Fatalf("create a session: %v", err)
	}
	items := edge.list(t, "sessions")
	if len(items) != 1 || items[0]["id"] != created.ID || items[0]["type"] != "Dial" {
		t.Fatalf("sessions: %v", items)
	}
	table, _, err := edge("list", "sessions")
	if err != nil || !strings.Contains(table, "API SESSION ID") || !strings.Contains(table, created.ID) || !strings.Contains(table, "db") {
		t.Errorf("list table (%v):\n%s", err, table)
	}
	hasFields(t, "session", edge.object(t, "get", "session", created.ID), map[string]any{"serviceId": svc, "type": "Dial"})
	if out := edge.must(t, "delete", "session", created.ID); out != "deleted session "+created.ID+"\n" {
		t.Errorf("delete: %q", out)
	}
	if items := edge.list(t, "sessions"); len(items) != 0 {
		t.Errorf("sessions after delete: %v", items)
	}
}
