package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// TestEdgePolicyAdvisor reports on identities and services: the policies that grant dial and
// bind, the edge router policies of the common edge routers, whether those are online, and a
// verdict with its reason.
func TestEdgePolicyAdvisor(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	edge := loggedInTo(t, c)

	// on-1 is online: its control channel is connected. off-1 never connects.
	onlineRouter(t, c, edge, "on-1")
	edge.must(t, "update", "edge-router", "on-1", "-a", "east")
	edge.must(t, "create", "edge-router", "off-1", "-a", "east")

	edge.must(t, "create", "identity", "alice", "-a", "staff")
	edge.must(t, "create", "identity", "carol")
	edge.must(t, "create", "identity", "dave")
	edge.must(t, "create", "service", "db")
	edge.must(t, "create", "service", "web")
	edge.must(t, "create", "service-policy", "staff-dial-db", "Dial", "-i", "#staff,@dave", "-s", "@db")
	edge.must(t, "create", "service-policy", "alice-bind-web", "Bind", "-i", "@alice", "-s", "@web")
	edge.must(t, "create", "edge-router-policy", "staff-east", "-i", "#staff", "-e", "#east")
	edge.must(t, "create", "edge-router-policy", "dave-off", "-i", "@dave", "-e", "@off-1")
	edge.must(t, "create", "service-edge-router-policy", "db-east", "-s", "@db", "-e", "#east")

	advise := func(args ...string) []map[string]any {
		t.Helper()
		return decodeAdvice(t, edge.must(t, append([]string{"policy-advisor"}, append(args, "-o", "json")...)...))
	}
	pairs := advise("identities", "alice")
	if len(pairs) != 2 {
		t.Fatalf("alice: %v", pairs)
	}
	byService := map[string]map[string]any{}
	for _, p := range pairs {
		byService[p["service"].(map[string]any)["name"].(string)] = p
	}
	hasFields(t, "alice -> db", byService["db"], map[string]any{"verdict": "OKAY",
		"dialPolicies": []any{"staff-dial-db"}, "bindPolicies": []any{},
		"identityEdgeRouterCount": 2, "serviceEdgeRouterCount": 2,
		"edgeRouterPolicies": []any{"staff-east"}, "serviceEdgeRouterPolicies": []any{"db-east"}})
	online := map[string]bool{}
	for _, r := range byService["db"]["commonEdgeRouters"].([]any) {
		online[r.(map[string]any)["name"].(string)] = r.(map[string]any)["isOnline"].(bool)
	}
	if len(online) != 2 || !online["on-1"] || online["off-1"] {
		t.Errorf("common edge routers of alice and db: %v", byService["db"]["commonEdgeRouters"])
	}
	hasFields(t, "alice -> web", byService["web"], map[string]any{"verdict": "ERROR",
		"reason": "no service edge router policy gives the service an edge router", "bindPolicies": []any{"alice-bind-web"}})

	hasFields(t, "dave -> db", advise("identities", "dave", "db")[0], map[string]any{"verdict": "ERROR",
		"reason": "none of their common edge routers is online", "edgeRouterPolicies": []any{"dave-off"}})
	hasFields(t, "carol -> db", advise("identities", "carol", "db")[0], map[string]any{"verdict": "ERROR",
		"reason": "no service policy lets the identity dial or bind the service"})
	if pairs := advise("services", "db"); len(pairs) != 2 {
		t.Errorf("services db: %v", pairs)
	}
	if pairs := advise("services", "-q"); len(pairs) != 2 { // alice -> web, dave -> db
		t.Errorf("services -q: %v", pairs)
	}

	text := edge.must(t, "policy-advisor", "identities", "alice", "db")
	for _, want := range []string{"OKAY  alice -> db\n", "dial policies", "staff-dial-db", "on-1 (online)", "off-1 (offline)", "db-east"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if text := edge.must(t, "policy-advisor", "identities", "carol"); text != "ERROR  identity carol: no service policy relates it to any service\n" {
		t.Errorf("carol: %q", text)
	}
	if _, _, err := edge("policy-advisor", "routers"); err == nil || !strings.Contains(err.Error(), "allowed: identities, services") {
		t.Errorf("policy-advisor routers: %v", err)
	}
}

// onlineRouter enrolls an edge router named name and connects its control channel, as the
// router would, until the end of the test; it returns once the API shows it online.
func onlineRouter(t *testing.T, c *ctrltest.Controller, edge edgeFunc, name string) {
	t.Helper()
	r := ctrltest.EnrollRouter(t, c.Model, name, name+".example")
	conn, err := tls.Dial("tcp", c.CtrlAddr, &tls.Config{Certificates: []tls.Certificate{r.Client}, RootCAs: c.Ctrl.CA().Pool(),
		ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	ch := ctrlproto.New(t.Context(), conn, slog.New(slog.NewTextHandler(io.Discard, nil)), ctrlproto.Options{RequestTimeout: 10 * time.Second})
	ch.Start()
	t.Cleanup(func() { ch.Close() })
	if _, err := ctrlproto.Call[*ctrlproto.HelloReply](t.Context(), ch, &ctrlproto.Hello{RouterID: r.ID, Version: "test",
		Protocol: ctrlproto.ProtocolVersion, Hostname: name + ".example"}); err != nil {
		t.Fatalf("hello of %s: %v", name, err)
	}
	testutil.Eventually(t, name+" online", func() bool {
		return edge.object(t, "get", "edge-router", name)["isOnline"] == true
	})
}

// decodeAdvice decodes the JSON advice, with its lists of policies as lists of their names.
func decodeAdvice(t *testing.T, out string) []map[string]any {
	t.Helper()
	var l struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.Data == nil {
		t.Fatalf("advice is not {\"data\": [...]}: %v\n%s", err, out)
	}
	for _, ad := range l.Data {
		for _, k := range []string{"dialPolicies", "bindPolicies", "edgeRouterPolicies", "serviceEdgeRouterPolicies"} {
			refs, ok := ad[k].([]any)
			if !ok {
				t.Fatalf("%s is not a list: %v", k, ad)
			}
			names := []any{}
			for _, r := range refs {
				names = append(names, r.(map[string]any)["name"])
			}
			ad[k] = names
		}
	}
	return l.Data
}
