package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

type edgeFunc func(args ...string) (stdout, stderr string, err error)

// loggedIn starts a controller and logs the CLI in to it as its administrator.
func loggedIn(t *testing.T) edgeFunc {
	t.Helper()
	return loggedInTo(t, ctrltest.Start(t))
}

// loggedInTo runs edge commands with a session file of its own, logged in to c as the
// administrator.
func loggedInTo(t *testing.T, c *ctrltest.Controller) edgeFunc {
	t.Helper()
	session := filepath.Join(t.TempDir(), "session.json")
	edge := func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"edge", "--session-file", session}, args...)...)
	}
	if _, _, err := edge("login", c.URL, "-u", "admin", "-p", "admin-pass", "--yes"); err != nil {
		t.Fatal(err)
	}
	return edge
}

// must runs an edge command that must succeed and returns its stdout.
func (edge edgeFunc) must(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := edge(args...)
	if err != nil {
		t.Fatalf("zmesh edge %s: %v (stderr %q)", strings.Join(args, " "), err, stderr)
	}
	return out
}

// object runs an edge command with JSON output and decodes its object.
func (edge edgeFunc) object(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out := edge.must(t, append(args, "-o", "json")...)
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("zmesh edge %s: output is not a JSON object: %v\n%s", strings.Join(args, " "), err, out)
	}
	return obj
}

// listJSON is what a list command prints with -o json.
type listJSON struct {
	Data []map[string]any `json:"data"`
	Meta struct {
		Pagination *struct {
			Limit, Offset, TotalCount *int
		} `json:"pagination"`
	} `json:"meta"`
}

// decodeList decodes a list command's JSON output, which must carry its pagination.
func decodeList(t *testing.T, what, out string) []map[string]any {
	t.Helper()
	var l listJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.Data == nil {
		t.Fatalf("%s: output is not {\"data\": [...]}: %v\n%s", what, err, out)
	}
	if p := l.Meta.Pagination; p == nil || p.Limit == nil || p.Offset == nil || p.TotalCount == nil || *p.TotalCount < len(l.Data) {
		t.Fatalf("%s: meta.pagination is missing or wrong:\n%s", what, out)
	}
	return l.Data
}

// list runs an edge list command with JSON output and decodes its items.
func (edge edgeFunc) list(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out := edge.must(t, append([]string{"list"}, append(args, "-o", "json")...)...)
	return decodeList(t, "zmesh edge list "+strings.Join(args, " "), out)
}

// hasFields reports the fields of want whose values got does not have. Objects in want
// need only be part of those in got.
func hasFields(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		// Compare through JSON so that []string and []any, int and float64 agree.
		wj, _ := json.Marshal(w)
		var wv any
		json.Unmarshal(wj, &wv)
		if !contains(got[k], wv) {
			t.Errorf("%s: %s = %#v, want %#v", what, k, got[k], wv)
		}
	}
}

func contains(got, want any) bool {
	wm, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(got, want)
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, w := range wm {
		if !contains(gm[k], w) {
			return false
		}
	}
	return true
}

// crudCase is the life of one entity through the CLI: create, get by name and by id, list
// with a filter as JSON and as a table, update by name and by id, delete.
type crudCase struct {
	typ     string   // the CLI type name
	kind    string   // the variant, for types that have them
	name    string   // of the entity the test creates
	create  []string // arguments after "create"
	created map[string]any
	update  []string // flags of update
	updated map[string]any
}

func (c crudCase) updateCmd() []string {
	if c.kind != "" {
		return []string{"update", c.typ, c.kind}
	}
	return []string{"update", c.typ}
}

func (c crudCase) run(t *testing.T, edge edgeFunc) {
	out := edge.must(t, append([]string{"create"}, c.create...)...)
	if !strings.HasPrefix(out, "created ") || !strings.Contains(out, " "+c.name+" (") {
		t.Errorf("create: %q", out)
	}
	// get by name, then by id.
	got := edge.object(t, "get", c.typ, c.name)
	id, _ := got["id"].(string)
	if id == "" || got["name"] != c.name {
		t.Fatalf("get %s: %v", c.name, got)
	}
	hasFields(t, "created", got, c.created)
	if !strings.Contains(out, "("+id+")") {
		t.Errorf("create reports another id than %s: %q", id, out)
	}
	text := edge.must(t, "get", c.typ, id)
	if !strings.Contains(text, "id ") || !strings.Contains(text, c.name) || strings.Contains(text, "_links") {
		t.Errorf("get text:\n%s", text)
	}

	items := edge.list(t, c.typ, `name = "`+c.name+`"`)
	if len(items) != 1 || items[0]["id"] != id {
		t.Errorf("list with a filter: %v", items)
	}
	table, footer, err := edge("list", c.typ, "--filter", "id = \""+id+"\"")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[1], id) || footer != "(1 of 1 shown)\n" {
		t.Errorf("list table (%v):\n%s\nstderr %q, want the table alone and (1 of 1 shown) on stderr", err, table, footer)
	}

	after := edge.object(t, append(append(c.updateCmd(), c.name), c.update...)...)
	if after["id"] != id {
		t.Fatalf("update: %v", after)
	}
	hasFields(t, "updated", after, c.updated)
	name, _ := after["name"].(string)
	what := strings.ReplaceAll(c.typ, "-", " ")
	for _, et := range edgeTypes() {
		if et.name == c.typ {
			what = et.what
		}
	}
	if out := edge.must(t, append(c.updateCmd(), id, "--tags-json", `{"k":"v"}`)...); out != "updated "+what+" "+name+" ("+id+")\n" {
		t.Errorf("update text: %q", out)
	}

	if out := edge.must(t, "delete", c.typ, name); !strings.HasPrefix(out, "deleted ") || !strings.Contains(out, id) {
		t.Errorf("delete: %q", out)
	}
	if _, _, err := edge("get", c.typ, id); err == nil || !strings.Contains(err.Error(), "is named or has id") {
		t.Errorf("get after delete: %v", err)
	}
}

// TestEdgeCRUD creates, lists, gets, updates and deletes an entity of every type through the
// CLI, with text and JSON output, naming entities by name and by id.
func TestEdgeCRUD(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)

	alice := edge.object(t, "create", "identity", "alice", "--type", "User", "-a", "staff")["id"].(string)
	east := edge.object(t, "create", "edge-router", "east-1", "-a", "east")["id"].(string)
	hostCfg := edge.object(t, "create", "config", "db-host", "host.v1", `{"protocol":"tcp","address":"127.0.0.1","port":5432}`)["id"].(string)
	interceptCfg := edge.object(t, "create", "config", "db-intercept", "intercept.v1",
		`{"protocols":["tcp"],"addresses":["db.internal"],"portRanges":[{"low":5432,"high":5432}]}`)["id"].(string)
	db := edge.object(t, "create", "service", "db", "-c", "db-host")["id"].(string)
	schemaFile := writeFile(t, "schema.json", `{"type":"object","properties":{"level":{"type":"integer"}}}`)
	dataFile := writeFile(t, "data.json", `{"protocols":["udp"],"addresses":["dns.internal"],"portRanges":[{"low":53,"high":53}]}`)

	cases := []crudCase{
		{
			typ: "service", name: "web",
			create: []string{"service", "web", "-a", "web,prod", "--configs", "db-intercept," + hostCfg, "--encryption", "OFF",
				"--openziti-encryption", "on", "--terminator-strategy", "Random", "--max-idle-time", "90s", "--tags-json", `{"team":"ops"}`},
			created: map[string]any{"roleAttributes": []string{"web", "prod"}, "configs": []string{interceptCfg, hostCfg},
				"encryptionRequired": false, "openZitiEncryption": true, "terminatorStrategy": "random", "maxIdleTimeMillis": 90000,
				"tags": map[string]any{"team": "ops"}},
			update: []string{"-a", "web", "--terminator-strategy", "weighted", "--openziti-encryption", "off"},
			updated: map[string]any{"roleAttributes": []string{"web"}, "terminatorStrategy": "weighted", "encryptionRequired": false,
				"openZitiEncryption": false, "maxIdleTimeMillis": 90000},
		},
		{
			typ: "config", name: "dns-intercept",
			create:  []string{"config", "dns-intercept", "intercept.v1", "--json-file", dataFile},
			created: map[string]any{"configTypeId": "intercept.v1", "data": map[string]any{"protocols": []string{"udp"}, "addresses": []string{"dns.internal"}, "portRanges": []any{map[string]any{"low": 53, "high": 53}}}},
			update:  []string{"--data", `{"protocols":["tcp","udp"],"addresses":["dns.internal"],"portRanges":[{"low":53,"high":53}]}`},
			updated: map[string]any{"configTypeId": "intercept.v1", "data": map[string]any{"protocols": []string{"tcp", "udp"}, "addresses": []string{"dns.internal"}, "portRanges": []any{map[string]any{"low": 53, "high": 53}}}},
		},
		{
			typ: "config-type", name: "logging.v1",
			create:  []string{"config-type", "logging.v1", "--schema-file", schemaFile},
			created: map[string]any{"schema": map[string]any{"type": "object", "properties": map[string]any{"level": map[string]any{"type": "integer"}}}},
			update:  []string{"--schema", `{"type":"object"}`, "--tags-json", `{"v":"2"}`},
			updated: map[string]any{"schema": map[string]any{"type": "object"}, "tags": map[string]any{"v": "2"}},
		},
		{
			typ: "service-policy", name: "staff-dial-db",
			create:  []string{"service-policy", "staff-dial-db", "dial", "--identity-roles", "#staff,@alice", "--service-roles", "@db"},
			created: map[string]any{"type": "Dial", "semantic": "AllOf", "identityRoles": []string{"#staff", "@" + alice}, "serviceRoles": []string{"@" + db}},
			update:  []string{"-s", "#all", "--semantic", "anyof"},
			updated: map[string]any{"type": "Dial", "semantic": "AnyOf", "identityRoles": []string{"#staff", "@" + alice}, "serviceRoles": []string{"#all"}},
		},
		{
			typ: "edge-router", name: "west-1",
			create: []string{"edge-router", "west-1", "-a", "west", "--tunneler-enabled", "--cost", "7", "--app-data-json", `{"rack":"r4"}`,
				"--jwt-output-file", filepath.Join(t.TempDir(), "west-1.jwt")},
			created: map[string]any{"roleAttributes": []string{"west"}, "isTunnelerEnabled": true, "cost": 7, "appData": map[string]any{"rack": "r4"}, "noTraversal": false},
			update:  []string{"--tunneler-enabled=false", "--no-traversal", "--name", "west-2"},
			updated: map[string]any{"name": "west-2", "isTunnelerEnabled": false, "noTraversal": true, "cost": 7},
		},
		{
			typ: "edge-router-policy", name: "staff-east",
			create:  []string{"edge-router-policy", "staff-east", "-i", "#staff", "-e", "@east-1,#east", "--semantic", "AnyOf"},
			created: map[string]any{"semantic": "AnyOf", "identityRoles": []string{"#staff"}, "edgeRouterRoles": []string{"@" + east, "#east"}},
			update:  []string{"-i", "@" + alice},
			updated: map[string]any{"semantic": "AnyOf", "identityRoles": []string{"@" + alice}, "edgeRouterRoles": []string{"@" + east, "#east"}},
		},
		{
			typ: "service-edge-router-policy", name: "db-everywhere",
			create:  []string{"service-edge-router-policy", "db-everywhere", "-s", "@db", "-e", "#all"},
			created: map[string]any{"semantic": "AllOf", "serviceRoles": []string{"@" + db}, "edgeRouterRoles": []string{"#all"}},
			update:  []string{"-e", "#east"},
			updated: map[string]any{"serviceRoles": []string{"@" + db}, "edgeRouterRoles": []string{"#east"}},
		},
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) { c.run(t, edge) })
	}

	// Deleting through JSON output reports the id.
	if got := edge.object(t, "delete", "service", "db"); got["id"] != db {
		t.Errorf("delete json: %v", got)
	}
}

// TestEdgePostureChecks runs every kind of posture check through the CLI, and a service
// policy that requires one by name.
func TestEdgePostureChecks(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	sha512 := strings.Repeat("ab", 64)
	cases := []crudCase{
		{
			typ: "posture-check", kind: "domain", name: "corp-domain",
			create:  []string{"posture-check", "domain", "corp-domain", "--domains", "corp.example,lab.example", "-a", "desk"},
			created: map[string]any{"typeId": "DOMAIN", "domains": []string{"corp.example", "lab.example"}, "roleAttributes": []string{"desk"}},
			update:  []string{"-d", "corp.example"},
			updated: map[string]any{"typeId": "DOMAIN", "domains": []string{"corp.example"}, "roleAttributes": []string{"desk"}},
		},
		{
			typ: "posture-check", kind: "mac", name: "known-nics",
			create:  []string{"pc", "mac", "known-nics", "-m", "00:11:22:33:44:55"},
			created: map[string]any{"typeId": "MAC", "macAddresses": []string{"00:11:22:33:44:55"}},
			update:  []string{"--mac-addresses", "00:11:22:33:44:55,66:77:88:99:aa:bb", "-a", "lab"},
			updated: map[string]any{"typeId": "MAC", "macAddresses": []string{"00:11:22:33:44:55", "66:77:88:99:aa:bb"}, "roleAttributes": []string{"lab"}},
		},
		{
			typ: "posture-check", kind: "mfa", name: "recent-mfa",
			create:  []string{"posture-check", "mfa", "recent-mfa", "--seconds", "600", "--wake"},
			created: map[string]any{"typeId": "MFA", "timeoutSeconds": 600, "promptOnWake": true, "promptOnUnlock": false},
			update:  []string{"--unlock", "--seconds", "-1"},
			updated: map[string]any{"typeId": "MFA", "timeoutSeconds": -1, "promptOnWake": true, "promptOnUnlock": true},
		},
		{
			typ: "posture-check", kind: "os", name: "modern-os",
			create: []string{"posture-check", "os", "modern-os", "--os", "windows:10.0.19041:10.0.22000", "--os", "Linux"},
			created: map[string]any{"typeId": "OS", "operatingSystems": []any{
				map[string]any{"type": "Windows", "versions": []string{"10.0.19041", "10.0.22000"}},
				map[string]any{"type": "Linux", "versions": []string{}}}},
			update:  []string{"--os", "macOS:14.0"},
			updated: map[string]any{"typeId": "OS", "operatingSystems": []any{map[string]any{"type": "macOS", "versions": []string{"14.0"}}}},
		},
		{
			typ: "posture-check", kind: "process", name: "edr-agent",
			create:  []string{"posture-check", "process", "edr-agent", "linux", "/opt/edr/agent"},
			created: map[string]any{"typeId": "PROCESS", "process": map[string]any{"osType": "Linux", "path": "/opt/edr/agent"}},
			// Changing one field of the process keeps the others.
			update:  []string{"--hash-sigs", sha512},
			updated: map[string]any{"typeId": "PROCESS", "process": map[string]any{"osType": "Linux", "path": "/opt/edr/agent", "hashes": []string{sha512}}},
		},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) { c.run(t, edge) })
	}

	mfa := edge.object(t, "create", "posture-check", "mfa", "mfa-now")["id"].(string)
	if got := edge.object(t, "get", "posture-check", mfa); got["timeoutSeconds"] != -1.0 {
		t.Errorf("the MFA check's timeout defaults to %v, want -1", got["timeoutSeconds"])
	}
	sp := edge.object(t, "create", "service-policy", "mfa-dial", "Dial", "-i", "#all", "-s", "#all", "-p", "@mfa-now")
	hasFields(t, "service policy", sp, map[string]any{"postureCheckRoles": []string{"@" + mfa}})
	edge.must(t, "update", "service-policy", "mfa-dial", "-p", "#mfa")

	_, _, err := edge("update", "posture-check", "domain", "mfa-now", "-d", "x.example")
	if err == nil || !strings.Contains(err.Error(), "posture check mfa-now is of kind MFA, not DOMAIN; use update posture-check mfa") {
		t.Errorf("update with the wrong kind: %v", err)
	}
	if _, _, err := edge("update", "posture-check", "mfa", "mfa-now", "--seconds", "-2"); err == nil ||
		!strings.Contains(err.Error(), "--seconds -2 is out of range") {
		t.Errorf("seconds below -1: %v", err)
	}
}

// TestEdgeRouterJWT checks that creating an edge router hands out its enrollment token: on
// stdout alone with text output, in a private file with --jwt-output-file, in the detail
// with JSON output.
func TestEdgeRouterJWT(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)

	out, stderr, err := edge("create", "edge-router", "r1")
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(out)
	if strings.Count(token, ".") != 2 || strings.ContainsAny(token, " \n") || !strings.Contains(stderr, "created edge router r1") {
		t.Fatalf("create: stdout %q stderr %q", out, stderr)
	}
	if detail := edge.object(t, "get", "edge-router", "r1"); detail["enrollmentJwt"] != token {
		t.Errorf("the printed token is not the router's: %v", detail["enrollmentJwt"])
	}

	file := filepath.Join(t.TempDir(), "r2.jwt")
	if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = edge.must(t, "create", "er", "r2", "--jwt-output-file", file)
	if !strings.Contains(out, "created edge router r2") || !strings.Contains(out, "written to "+file) {
		t.Errorf("create with a file: %q", out)
	}
	data, err := os.ReadFile(file)
	fi, _ := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi.Mode(), err)
	}
	if detail := edge.object(t, "get", "er", "r2"); detail["enrollmentJwt"] != string(data) {
		t.Errorf("the token file does not hold the router's token: %q", data)
	}

	detail := edge.object(t, "create", "edge-router", "r3")
	if s, _ := detail["enrollmentJwt"].(string); strings.Count(s, ".") != 2 {
		t.Errorf("create json has no enrollmentJwt: %v", detail)
	}
}

// TestIdentityJWTFileMeansOTT: --jwt-output-file alone enrolls with a one-time token, as
// OpenZiti's CLI does; with --updb it keeps the method given.
func TestIdentityJWTFileMeansOTT(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	for _, tc := range []struct {
		name   string
		flags  []string
		method string
	}{
		{"device-1", nil, "ott"},
		{"bob", []string{"--updb", "bob-the-user"}, "updb"},
	} {
		file := filepath.Join(t.TempDir(), tc.name+".jwt")
		edge.must(t, append([]string{"create", "identity", tc.name, "--jwt-output-file", file}, tc.flags...)...)
		data, err := os.ReadFile(file)
		if err != nil || strings.Count(string(data), ".") != 2 {
			t.Fatalf("%s: token file %q, %v", tc.name, data, err)
		}
		en, _ := edge.object(t, "get", "identity", tc.name)["enrollment"].(map[string]any)
		if len(en) != 1 || en[tc.method] == nil {
			t.Errorf("%s: enrollment %v, want %s alone", tc.name, en, tc.method)
		}
	}
}

// TestEdgeErrors checks one error of each kind: those the CLI finds before calling the
// controller name the flag and the allowed values; those of the controller show its code
// and message.
func TestEdgeErrors(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	edge.must(t, "create", "config", "web-host", "host.v1", `{"protocol":"tcp","address":"127.0.0.1","port":80}`)
	edge.must(t, "create", "service", "web", "-c", "web-host")

	// The cases that are command lines the CLI cannot run, which exit with status 2; the
	// others ran and failed.
	usage := map[string]bool{
		"unknown type": true, "no type": true, "unknown posture kind": true, "no name": true,
		"too many arguments": true, "output": true, "choice": true, "semantic": true, "on off": true,
		"number": true, "range": true, "duration": true, "missing argument": true, "missing data": true,
		"missing flag": true, "exclusive": true, "argument and flag": true, "filter twice": true,
		"create only": true,
	}
	for _, c := range []struct {
		name string
		args []string
		want string // in the error
		code string // the API error code, when the controller refused
	}{
		{"unknown type", []string{"create", "servce", "x"}, `"servce" is not an entity type; allowed: identity, service, config`, ""},
		{"no type", []string{"list"}, "list needs an entity type; allowed: identities, services", ""},
		{"unknown posture kind", []string{"create", "posture-check", "bios", "x"}, `"bios" is not a kind of posture check; allowed: domain, mac, mfa, os, process`, ""},
		{"no name", []string{"create", "service"}, "wrong number of arguments (0); usage: zmesh edge create service NAME", ""},
		{"too many arguments", []string{"get", "service", "a", "b"}, "wrong number of arguments (2)", ""},
		{"output", []string{"list", "services", "-o", "yaml"}, `--output "yaml" is not allowed; allowed: text, json`, ""},
		{"choice", []string{"create", "service-policy", "p", "Sometimes"}, `--type "Sometimes" is not allowed; allowed: Dial, Bind`, ""},
		{"semantic", []string{"create", "erp", "p", "--semantic", "Most"}, `--semantic "Most" is not allowed; allowed: AllOf, AnyOf`, ""},
		{"on off", []string{"create", "service", "s", "--encryption", "maybe"}, `--encryption "maybe" is not allowed; allowed: on, off`, ""},
		{"number", []string{"create", "edge-router", "r", "--cost", "cheap"}, `--cost "cheap" is not a whole number`, ""},
		{"range", []string{"create", "edge-router", "r", "--cost", "70000"}, "--cost 70000 is out of range; allowed: 0 to 65535", ""},
		{"duration", []string{"create", "service", "s", "--max-idle-time", "soon"}, `--max-idle-time "soon" is not a duration`, ""},
		{"json", []string{"create", "config", "c", "host.v1", "{"}, "--data is not a JSON object", ""},
		{"json file", []string{"create", "config", "c", "host.v1", "--json-file", "/nonexistent/c.json"}, "--json-file: open /nonexistent/c.json", ""},
		{"missing argument", []string{"create", "config", "c"}, "missing argument TYPE or --config-type", ""},
		{"missing data", []string{"create", "config", "c", "host.v1"}, "missing argument JSON or --data or --json-file", ""},
		{"missing flag", []string{"create", "posture-check", "domain", "d"}, "missing --domains", ""},
		{"exclusive", []string{"create", "config", "c", "host.v1", "{}", "--json-file", "x.json"}, "--data and --json-file cannot be used together", ""},
		{"argument and flag", []string{"create", "sp", "p", "Dial", "--type", "Bind"}, "argument Dial|Bind and --type are both given", ""},
		{"role", []string{"create", "sp", "p", "Dial", "-i", "staff"}, `--identity-roles "staff" is not a role; write #attribute, #all or @name-or-id`, ""},
		{"role name", []string{"create", "sp", "p", "Dial", "-i", "@nobody"}, `--identity-roles: no identity is named or has id "nobody"`, ""},
		{"reference", []string{"create", "service", "s", "-c", "nothing"}, `--configs: no config is named or has id "nothing"`, ""},
		{"os", []string{"create", "pc", "os", "o", "--os", "Plan9:4"}, `"Plan9" is not an operating system; allowed: Windows, WindowsServer, Android, iOS, Linux, macOS`, ""},
		{"not found", []string{"get", "service", "nothing"}, `no service is named or has id "nothing"`, ""},
		{"nothing to update", []string{"update", "service", "web"}, "nothing to change: give one or more of --name, --role-attributes, --configs", ""},
		{"create only", []string{"update", "service", "web", "--encryption", "off"}, "unknown flag: --encryption", ""},
		{"filter twice", []string{"list", "services", "true", "--filter", "true"}, "the filter is given twice", ""},
		{"invalid config", []string{"create", "config", "c", "host.v1", `{"protocol":"sctp"}`}, "COULD_NOT_VALIDATE (HTTP 400)", "COULD_NOT_VALIDATE"},
		{"invalid filter", []string{"list", "services", "name ="}, "INVALID_FILTER (HTTP 400): the filter is not valid", "INVALID_FILTER"},
		{"referenced", []string{"delete", "config", "web-host"}, "CAN_NOT_DELETE_REFERENCED_ENTITY (HTTP 409)", "CAN_NOT_DELETE_REFERENCED_ENTITY"},
	} {
		_, _, err := edge(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: zmesh edge %s: got %v, want an error with %q", c.name, strings.Join(c.args, " "), err, c.want)
			continue
		}
		if code := apiclient.CodeOf(err); code != c.code {
			t.Errorf("%s: code %q, want %q", c.name, code, c.code)
		}
		if want := map[bool]int{true: exitUsage, false: exitFailure}[usage[c.name]]; exitCode(err) != want {
			t.Errorf("%s: exit status %d, want %d", c.name, exitCode(err), want)
		}
	}
}

// TestEdgeNames checks names that need quoting in filters and names shared by two entities.
func TestEdgeNames(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	odd := `say "hi" \ there`
	id := edge.object(t, "create", "service", odd)["id"].(string)
	if got := edge.object(t, "get", "service", odd); got["id"] != id {
		t.Errorf("get %q: %v", odd, got)
	}
	// A service named like another's id: the id wins.
	edge.must(t, "create", "service", id)
	if got := edge.object(t, "get", "service", id); got["name"] != odd {
		t.Errorf("get by id %s found %v", id, got["name"])
	}
}

func TestFilterQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":       `"plain"`,
		`a"b\c`:       `"a\"b\\c"`,
		"tab\tnl\n":   `"tab\tnl\n"`,
		"bell\a":      `"bell\u0007"`,
		"unicode é ✓": `"unicode é ✓"`,
	} {
		if got := filterQuote(in); got != want {
			t.Errorf("filterQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
