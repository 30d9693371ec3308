package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// zitiCLI runs the ziti CLI with its own configuration directory, so that its logins are
// the suite's alone, and records each command as a step of the ledger.
type zitiCLI struct {
	t   *testing.T
	l   *ledger
	bin string
	dir string // working directory and HOME of the CLI
	env []string
}

func newZitiCLI(t *testing.T, l *ledger, bin string) *zitiCLI {
	dir := t.TempDir()
	env := append(os.Environ(), "HOME="+dir, "ZITI_CONFIG_DIR="+filepath.Join(dir, "ziti-cli"), "NO_COLOR=1")
	return &zitiCLI{t: t, l: l, bin: bin, dir: dir, env: env}
}

// path is a file in the CLI's directory.
func (z *zitiCLI) path(name string) string { return filepath.Join(z.dir, name) }

// run runs the CLI with args and returns its standard output; a non-zero exit is an error
// carrying what the CLI printed.
func (z *zitiCLI) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(z.t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, z.bin, args...)
	cmd.Dir, cmd.Env = z.dir, z.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, brief(stderr.String()+stdout.String()))
	}
	return stdout.String(), nil
}

// cmd is one scripted command, the step name: it must exit 0 and check (when not nil) must
// accept its standard output.
func (z *zitiCLI) cmd(name string, check func(out string) error, args ...string) bool {
	z.t.Helper()
	return z.l.step(z.t, "cli", name, func() error {
		out, err := z.run(args...)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(out); err != nil {
				return fmt.Errorf("exit 0, but %w", err)
			}
		}
		return nil
	})
}

// brief folds what a command printed into one line of at most 700 bytes: its beginning
// (where the CLI names the error) and its end.
func brief(s string) string {
	s = oneLine(s)
	if len(s) <= 700 {
		return s
	}
	return s[:450] + " ... " + s[len(s)-240:]
}

// lastLines keeps the last n non-empty lines of s.
func lastLines(s string, n int) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// jsonData decodes the JSON answer the CLI prints with -j and returns its "data".
func jsonData(out string) (any, error) {
	i := strings.IndexAny(out, "{[")
	if i < 0 {
		return nil, fmt.Errorf("no JSON in the output %q", lastLines(out, 3))
	}
	var body struct {
		Data any `json:"data"`
	}
	if err := json.NewDecoder(strings.NewReader(out[i:])).Decode(&body); err != nil {
		return nil, fmt.Errorf("the JSON output: %w", err)
	}
	return body.Data, nil
}

// jsonList decodes the list the CLI prints with -j.
func jsonList(out string) ([]map[string]any, error) {
	data, err := jsonData(out)
	if err != nil {
		return nil, err
	}
	raw, ok := data.([]any)
	if !ok {
		return nil, fmt.Errorf("the JSON output's data is %T, not a list", data)
	}
	list := make([]map[string]any, 0, len(raw))
	for _, v := range raw {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("the JSON output's list holds a %T", v)
		}
		list = append(list, m)
	}
	return list, nil
}

// names checks that the -j list holds exactly want, by name, in any order.
func names(want ...string) func(string) error {
	return func(out string) error {
		list, err := jsonList(out)
		if err != nil {
			return err
		}
		var got []string
		for _, m := range list {
			got = append(got, str(m, "name"))
		}
		slices.Sort(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			return fmt.Errorf("listed %q, want %q", got, w)
		}
		return nil
	}
}

// including checks that the -j list holds at least the names want.
func including(want ...string) func(string) error {
	return func(out string) error {
		list, err := jsonList(out)
		if err != nil {
			return err
		}
		var got []string
		for _, m := range list {
			got = append(got, str(m, "name"))
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				return fmt.Errorf("listed %q, which lacks %q", got, w)
			}
		}
		return nil
	}
}

// atLeast checks that the -j list has at least n entries.
func atLeast(n int) func(string) error {
	return func(out string) error {
		list, err := jsonList(out)
		if err != nil {
			return err
		}
		if len(list) < n {
			return fmt.Errorf("listed %d entries, want at least %d", len(list), n)
		}
		return nil
	}
}

// matches checks that the output matches the regular expression re.
func matches(re string) func(string) error {
	rx := regexp.MustCompile(re)
	return func(out string) error {
		if !rx.MatchString(out) {
			return fmt.Errorf("the output %q does not match %q", lastLines(out, 4), re)
		}
		return nil
	}
}

// then runs check on the output, then verify against the controller.
func then(check func(string) error, verify func() error) func(string) error {
	return func(out string) error {
		if check != nil {
			if err := check(out); err != nil {
				return err
			}
		}
		return verify()
	}
}

// field checks that the entity typ/name has the field key equal to want (compared as JSON).
func field(r *rest, typ, name, key string, want any) func() error {
	return func() error {
		e, err := r.byName(typ, name)
		if err != nil {
			return err
		}
		return sameJSON(fmt.Sprintf("%s %q's %s", typ, name, key), dig(e, key), want)
	}
}

// dig follows a dotted key ("primary.cert.allowed") into a decoded entity.
func dig(m map[string]any, key string) any {
	var v any = m
	for part := range strings.SplitSeq(key, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[part]
	}
	return v
}

func sameJSON(what string, got, want any) error {
	g, err1 := json.Marshal(got)
	w, err2 := json.Marshal(want)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if !bytes.Equal(g, w) {
		return fmt.Errorf("%s is %s, want %s", what, g, w)
	}
	return nil
}

// created checks that the controller has an entity typ named name.
func created(r *rest, typ, name string) func(string) error {
	return func(string) error {
		_, err := r.byName(typ, name)
		return err
	}
}

// deleted checks that the controller no longer has an entity typ named name.
func deleted(r *rest, typ, name string) func(string) error {
	return func(string) error { return r.gone(typ, name) }
}

// The names of what the scripted session creates.
const (
	ioDialer   = "io-dialer"   // may dial io-svc
	ioOutsider = "io-outsider" // may dial nothing
	ioUser     = "io-user"     // enrolls by username and password
	ioSvc      = "io-svc"
	ioPassword = "Interop-Pass-4821"
)

// runCLISession is the scripted admin session: what an operator does daily with the ziti
// CLI, each command checked for its exit code and its answer.
func runCLISession(t *testing.T, l *ledger, n *network, bin string) {
	z := newZitiCLI(t, l, bin)
	r := adminREST(t, n)
	idp := startJWKS(t)
	caPEM := testutil.NewAuthority(t, "io-ca").PEM()
	if err := os.WriteFile(z.path("io-ca.pem"), caPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	// Logging in: without --ca the CLI fetches the CA bundle from the server root and asks
	// (-y answers) whether to trust it; with --ca it trusts the file.
	z.cmd("edge login without --ca", matches(`(?m)^Token: \S+`),
		"edge", "login", n.api, "-u", "admin", "-p", n.password, "-y")
	z.cmd("edge login --ca", matches(`(?m)^Token: \S+`),
		"edge", "login", n.api, "-u", "admin", "-p", n.password, "--ca", n.caFile, "-y")
	z.cmd("edge list identities", including("Default Admin", clientName), "edge", "list", "identities", "-j")
	z.cmd("edge list edge-routers", including("router-1", "router-2"), "edge", "list", "edge-routers", "-j")

	// Creating what a service needs.
	z.cmd("edge create identity io-dialer -a io-dialers -o jwt",
		then(nil, func() error {
			return errors.Join(field(r, "identities", ioDialer, "roleAttributes", []string{"io-dialers"})(), fileExists(z.path("dialer.jwt")))
		}),
		"edge", "create", "identity", ioDialer, "-a", "io-dialers", "-o", z.path("dialer.jwt"))
	z.cmd("edge create identity io-outsider -o jwt",
		then(nil, func() error { return fileExists(z.path("outsider.jwt")) }),
		"edge", "create", "identity", ioOutsider, "-o", z.path("outsider.jwt"))
	z.cmd("edge create identity io-user --updb io-user",
		then(nil, func() error { return fileExists(z.path("user.jwt")) }),
		"edge", "create", "identity", ioUser, "--updb", ioUser, "-o", z.path("user.jwt"))
	z.cmd("edge create config-type io-type", created(r, "config-types", "io-type"),
		"edge", "create", "config-type", "io-type", `{"type":"object","properties":{"port":{"type":"integer"}}}`)
	z.cmd("edge create config io-config io-type", then(nil, field(r, "configs", "io-config", "data", map[string]any{"port": 1})),
		"edge", "create", "config", "io-config", "io-type", `{"port":1}`)
	z.cmd("edge create config io-override io-type", created(r, "configs", "io-override"),
		"edge", "create", "config", "io-override", "io-type", `{"port":2}`)
	z.cmd("edge create service io-svc -c io-config -a io-services",
		then(nil, field(r, "services", ioSvc, "roleAttributes", []string{"io-services"})),
		"edge", "create", "service", ioSvc, "-c", "io-config", "-a", "io-services")
	z.cmd("edge create service-policy io-dial Dial", then(nil, field(r, "service-policies", "io-dial", "identityRoles", []string{"#io-dialers"})),
		"edge", "create", "service-policy", "io-dial", "Dial", "--identity-roles", "#io-dialers", "--service-roles", "@"+ioSvc)
	z.cmd("edge create edge-router-policy io-erp", then(nil, field(r, "edge-router-policies", "io-erp", "edgeRouterRoles", []string{"#all"})),
		"edge", "create", "edge-router-policy", "io-erp", "--identity-roles", "#io-dialers", "--edge-router-roles", "#all")
	z.cmd("edge create service-edge-router-policy io-serp", then(nil, field(r, "service-edge-router-policies", "io-serp", "serviceRoles", []string{"#io-services"})),
		"edge", "create", "service-edge-router-policy", "io-serp", "--service-roles", "#io-services", "--edge-router-roles", "#all")
	z.cmd("edge create posture-check mac io-mac", then(nil, field(r, "posture-checks", "io-mac", "macAddresses", []string{"001122334455"})),
		"edge", "create", "posture-check", "mac", "io-mac", "-m", "00:11:22:33:44:55")
	z.cmd("edge create auth-policy io-ap", then(nil, field(r, "auth-policies", "io-ap", "primary.updb.allowed", true)),
		"edge", "create", "auth-policy", "io-ap", "--primary-cert-allowed", "--primary-updb-allowed")
	z.cmd("edge create ca io-ca", created(r, "cas", "io-ca"),
		"edge", "create", "ca", "io-ca", z.path("io-ca.pem"), "--auth", "--ottca", "-a", "io-ca-role")
	z.cmd("edge create ext-jwt-signer io-signer", then(nil, field(r, "external-jwt-signers", "io-signer", "audience", "io-aud")),
		"edge", "create", "ext-jwt-signer", "io-signer", "https://issuer.interop.example", "-u", idp.url, "-a", "io-aud")

	// Listing them.
	z.cmd("edge list services io-svc", names(ioSvc), "edge", "list", "services", `name="io-svc"`, "-j")
	z.cmd("edge list configs", including("io-config", "io-override"), "edge", "list", "configs", "-j")
	z.cmd("edge list config-types", including("io-type", "host.v1", "intercept.v1"), "edge", "list", "config-types", "-j")
	z.cmd("edge list service-policies", including("io-dial"), "edge", "list", "service-policies", "-j")
	z.cmd("edge list edge-router-policies", including("io-erp"), "edge", "list", "edge-router-policies", "-j")
	z.cmd("edge list service-edge-router-policies", including("io-serp"), "edge", "list", "service-edge-router-policies", "-j")
	z.cmd("edge list posture-checks", including("io-mac"), "edge", "list", "posture-checks", "-j")
	z.cmd("edge list auth-policies", including("io-ap"), "edge", "list", "auth-policies", "-j")
	z.cmd("edge list cas", including("io-ca"), "edge", "list", "cas", "-j")
	z.cmd("edge list ext-jwt-signers", including("io-signer"), "edge", "list", "ext-jwt-signers", "-j")
	z.cmd("edge list identity-role-attributes", roleAttributes("io-dialers"), "edge", "list", "identity-role-attributes", "-j")

	z.cmd("edge list service-role-attributes", roleAttributes("io-services"), "edge", "list", "service-role-attributes", "-j")
	z.cmd("edge list edge-router-role-attributes", roleAttributes(), "edge", "list", "edge-router-role-attributes", "-j")
	z.cmd("edge list posture-check-role-attributes", roleAttributes(), "edge", "list", "posture-check-role-attributes", "-j")
	z.cmd("edge list enrollments", atLeast(2), "edge", "list", "enrollments", "-j")
	z.cmd("edge list terminators", atLeast(1), "edge", "list", "terminators", "-j")
	z.cmd("edge list transit-routers", func(out string) error { _, err := jsonList(out); return err }, "edge", "list", "transit-routers", "-j")
	z.cmd("edge list summary", func(out string) error {
		data, err := jsonData(out)
		if err != nil {
			return err
		}
		m, _ := data.(map[string]any)
		for _, k := range []string{"identities", "services", "servicePolicies"} {
			if _, ok := m[k]; !ok {
				return fmt.Errorf("the summary %v has no %q", m, k)
			}
		}
		return nil
	}, "edge", "list", "summary", "-j")

	// Updating them.
	z.cmd("edge update identity io-outsider -a io-nobody", then(nil, field(r, "identities", ioOutsider, "roleAttributes", []string{"io-nobody"})),
		"edge", "update", "identity", ioOutsider, "-a", "io-nobody")
	z.cmd("edge update config io-config -d", then(nil, field(r, "configs", "io-config", "data", map[string]any{"port": 3})),
		"edge", "update", "config", "io-config", "-d", `{"port":3}`)
	z.cmd("edge update config-type io-type -n", then(nil, field(r, "config-types", "io-type-2", "name", "io-type-2")),
		"edge", "update", "config-type", "io-type", "-n", "io-type-2")
	z.cmd("edge update service io-svc -a", then(nil, field(r, "services", ioSvc, "roleAttributes", []string{"io-services", "io-more"})),
		"edge", "update", "service", ioSvc, "-a", "io-services,io-more")
	z.cmd("edge update service-policy io-dial --service-roles", then(nil, func() error {
		p, err := r.byName("service-policies", "io-dial")
		if err != nil {
			return err
		}
		if roles := strs(p, "serviceRoles"); len(roles) != 2 || !slices.Contains(roles, "#io-more") {
			return fmt.Errorf("io-dial's serviceRoles are %q, want @<io-svc's id> and #io-more", roles)
		}
		return nil
	}), "edge", "update", "service-policy", "io-dial", "--service-roles", "@"+ioSvc+",#io-more")
	z.cmd("edge update edge-router-policy io-erp --edge-router-roles", then(nil, field(r, "edge-router-policies", "io-erp", "edgeRouterRoles", []string{"#all"})),
		"edge", "update", "edge-router-policy", "io-erp", "--edge-router-roles", "#all", "--identity-roles", "#io-dialers")
	z.cmd("edge update service-edge-router-policy io-serp --edge-router-roles", then(nil, field(r, "service-edge-router-policies", "io-serp", "edgeRouterRoles", []string{"#all"})),
		"edge", "update", "service-edge-router-policy", "io-serp", "--edge-router-roles", "#all")
	z.cmd("edge update posture-check mac io-mac -m", then(nil, field(r, "posture-checks", "io-mac", "macAddresses", []string{"66:55:44:33:22:11"})),
		"edge", "update", "posture-check", "mac", "io-mac", "-m", "66:55:44:33:22:11")
	z.cmd("edge update auth-policy io-ap --primary-ext-jwt-allowed", then(nil, field(r, "auth-policies", "io-ap", "primary.extJwt.allowed", true)),
		"edge", "update", "auth-policy", "io-ap", "--primary-ext-jwt-allowed")
	z.cmd("edge update ca io-ca --identity-name-format", then(nil, field(r, "cas", "io-ca", "identityNameFormat", "[caName]-[commonName]")),
		"edge", "update", "ca", "io-ca", "-f", "[caName]-[commonName]")
	z.cmd("edge update ca io-ca external id claim", then(nil, field(r, "cas", "io-ca", "externalIdClaim.location", "COMMON_NAME")),
		"edge", "update", "ca", "io-ca", "-l", "COMMON_NAME", "-m", "ALL", "-p", "NONE")
	z.cmd("edge update ext-jwt-signer io-signer -a", then(nil, field(r, "external-jwt-signers", "io-signer", "audience", "io-aud-2")),
		"edge", "update", "ext-jwt-signer", "io-signer", "-a", "io-aud-2")

	// Enrolling identities with the CLI: by one-time token, and by username and password.
	z.cmd("edge enroll ott", then(nil, func() error { return fileExists(z.path("dialer.json")) }),
		"edge", "enroll", z.path("dialer.jwt"), "-o", z.path("dialer.json"))
	z.cmd("edge enroll updb", func(string) error {
		return newREST(n).do("POST", clientAPI+"/authenticate?method=password", map[string]string{"username": ioUser, "password": ioPassword}, nil)
	}, "edge", "enroll", z.path("user.jwt"), "-u", ioUser, "-p", ioPassword)

	// Logging in by certificate (the quickstart client's, from the file zmesh wrote) and by
	// an external JWT (of io-signer, whose identities are matched by external id), without
	// replacing the administrator's login.
	if err := writeClientPEM(n, z.path("client.cert"), z.path("client.key")); err != nil {
		t.Fatal(err)
	}
	z.cmd("edge login --client-cert", matches(`(?m)^Token: \S+`),
		"edge", "login", n.api, "-c", z.path("client.cert"), "-k", z.path("client.key"), "--ca", n.caFile, "--ignore-config")
	z.cmd("edge update identity io-dialer --external-id", then(nil, field(r, "identities", ioDialer, "externalId", "io-dialer-ext")),
		"edge", "update", "identity", ioDialer, "--external-id", "io-dialer-ext")
	tok, err := idp.token("https://issuer.interop.example", "io-aud-2", "io-dialer-ext")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(z.path("ext.jwt"), []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	z.cmd("edge login --ext-jwt", matches(`(?m)^Token: \S+`),
		"edge", "login", n.api, "--ext-jwt", z.path("ext.jwt"), "--ca", n.caFile, "--ignore-config")

	// Related entities.
	z.cmd("edge list identity services io-dialer", names(ioSvc), "edge", "list", "identity", "services", ioDialer, "-j")
	z.cmd("edge list service identities io-svc", names(ioDialer), "edge", "list", "service", "identities", ioSvc, "-j")
	z.cmd("edge list service-policy identities io-dial", names(ioDialer), "edge", "list", "service-policy", "identities", "io-dial", "-j")
	z.cmd("edge list config-type configs io-type-2", names("io-config", "io-override"), "edge", "list", "config-type", "configs", "io-type-2", "-j")
	z.cmd("edge list identity service-policies io-dialer", names("io-dial"), "edge", "list", "identity", "service-policies", ioDialer, "-j")
	z.cmd("edge list service configs io-svc", names("io-config"), "edge", "list", "service", "configs", ioSvc, "-j")
	z.cmd("edge list edge-router identities router-1", including(ioDialer, clientName), "edge", "list", "edge-router", "identities", "router-1", "-j")
	z.cmd("edge list service terminators echo", atLeast(1), "edge", "list", "service", "terminators", echoService, "-j")
	z.cmd("edge update identity-configs io-dialer io-svc io-override", func(string) error {
		var out struct {
			Data []map[string]any `json:"data"`
		}
		id, err := r.byName("identities", ioDialer)
		if err != nil {
			return err
		}
		if err := r.do("GET", managementAPI+"/identities/"+str(id, "id")+"/service-configs", nil, &out); err != nil {
			return err
		}
		if len(out.Data) != 1 {
			return fmt.Errorf("io-dialer has %d service configs, want 1", len(out.Data))
		}
		return nil
	}, "edge", "update", "identity-configs", ioDialer, ioSvc, "io-override")

	// Policy advice and the services an identity sees.
	z.cmd("edge policy-advisor identities io-dialer io-svc", matches(`OKAY *: io-dialer .* Dial: Y`),
		"edge", "policy-advisor", "identities", ioDialer, ioSvc, "-q")
	z.cmd("edge policy-advisor identities io-outsider io-svc", matches(`ERROR: io-outsider .* Dial: N`),
		"edge", "policy-advisor", "identities", ioOutsider, ioSvc, "-q")
	z.cmd("edge policy-advisor services io-svc io-dialer", matches(`OKAY *: io-dialer .* Dial: Y`),
		"edge", "policy-advisor", "services", ioSvc, ioDialer, "-q")
	z.cmd("edge list services --as-identity io-dialer", names(ioSvc), "edge", "list", "services", "--as-identity", ioDialer, "-j")
	z.cmd("edge list services --as-identity io-outsider", names(), "edge", "list", "services", "--as-identity", ioOutsider, "-j")
	z.cmd("edge list services --role-filters #io-more", names(ioSvc), "edge", "list", "services", "--role-filters", "#io-more", "-j")

	// Authenticators: a password for an identity that had none, and an administrator's reset.
	z.cmd("edge create authenticator updb io-outsider", func(string) error {
		return newREST(n).do("POST", clientAPI+"/authenticate?method=password", map[string]string{"username": "io-outsider-login", "password": ioPassword}, nil)
	}, "edge", "create", "authenticator", "updb", ioOutsider, "io-outsider-login", ioPassword)
	z.cmd("edge update authenticator updb --identity io-user (password reset)", func(string) error {
		return newREST(n).do("POST", clientAPI+"/authenticate?method=password", map[string]string{"username": ioUser, "password": ioPassword + "-reset"}, nil)
	}, "edge", "update", "authenticator", "updb", "--identity", ioUser, "-p", ioPassword+"-reset")
	z.cmd("edge list authenticators", atLeast(3), "edge", "list", "authenticators", "-j")

	// A live circuit through the mesh: router-2's tunnel proxy to the echo service, hosted
	// by router-1.
	conn, err := net.Dial("tcp", n.echoProxy(2))
	if err != nil {
		t.Fatalf("the echo service through router-2: %v", err)
	}
	defer conn.Close()
	if err := echoOnce(conn, "interop\n"); err != nil {
		t.Fatalf("the echo service through router-2: %v", err)
	}
	z.cmd("edge list api-sessions", atLeast(1), "edge", "list", "api-sessions", "-j")
	sessionID, err := clientSession(n, echoServiceID(t, r))
	if err != nil {
		t.Errorf("a session of the quickstart's client: %v", err)
	}
	z.cmd("edge list sessions", func(out string) error {
		list, err := jsonList(out)
		if err != nil {
			return err
		}
		var ids []string
		for _, s := range list {
			ids = append(ids, str(s, "id"))
		}
		if !slices.Contains(ids, sessionID) {
			return fmt.Errorf("listed the sessions %q, without the client's %q", ids, sessionID)
		}
		return nil
	}, "edge", "list", "sessions", "-j")
	z.cmd("edge delete session", func(string) error {
		err := r.do("GET", managementAPI+"/sessions/"+sessionID, nil, nil)
		var ae *apiError
		if errors.As(err, &ae) && ae.status == 404 {
			return nil
		}
		return fmt.Errorf("GET the deleted session: %v, want 404", err)
	}, "edge", "delete", "session", sessionID)
	spare := adminREST(t, n)
	var current struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := spare.do("GET", managementAPI+"/current-api-session", nil, &current); err != nil {
		t.Errorf("the spare administrator session: %v", err)
	}
	z.cmd("edge delete api-session", func(string) error {
		err := spare.do("GET", managementAPI+"/current-api-session", nil, nil)
		var ae *apiError
		if errors.As(err, &ae) && ae.status == 401 {
			return nil
		}
		return fmt.Errorf("the deleted API session's token: %v, want 401", err)
	}, "edge", "delete", "api-session", current.Data.ID)
	z.cmd("fabric list routers", including("router-1", "router-2"), "fabric", "list", "routers", "-j")
	z.cmd("fabric list links", atLeast(1), "fabric", "list", "links", "-j")
	z.cmd("fabric list services", including(echoService, ioSvc), "fabric", "list", "services", "-j")
	z.cmd("fabric list terminators", atLeast(1), "fabric", "list", "terminators", "-j")
	var circuits []string
	z.cmd("fabric list circuits", func(out string) error {
		list, err := jsonList(out)
		if err != nil {
			return err
		}
		for _, c := range list {
			circuits = append(circuits, str(c, "id"))
		}
		if len(circuits) != 1 {
			return fmt.Errorf("listed %d circuits, want the 1 live one", len(circuits))
		}
		return nil
	}, "fabric", "list", "circuits", "-j")
	if len(circuits) == 1 {
		z.cmd("fabric delete circuit", func(string) error {
			return circuitEnded(conn)
		}, "fabric", "delete", "circuit", circuits[0])
	} else {
		l.step(t, "cli", "fabric delete circuit", func() error { return errors.New("no circuit listed to delete") })
	}

	// Enrolling a router with the CLI.
	z.cmd("edge create edge-router io-er", then(nil, func() error { return fileExists(z.path("er.jwt")) }),
		"edge", "create", "edge-router", "io-er", "-o", z.path("er.jwt"))
	if err := writeRouterConfig(z.path("er"), z.path("er.yml"), n); err != nil {
		t.Fatal(err)
	}
	z.cmd("router enroll", then(nil, func() error {
		return errors.Join(fileExists(z.path("er/client.cert")), field(r, "edge-routers", "io-er", "isVerified", true)())
	}), "router", "enroll", z.path("er.yml"), "--jwt", z.path("er.jwt"))

	// Deleting everything the session created.
	for _, d := range []struct{ typ, cliType, name string }{
		{"service-policies", "service-policy", "io-dial"},
		{"edge-router-policies", "edge-router-policy", "io-erp"},
		{"service-edge-router-policies", "service-edge-router-policy", "io-serp"},
		{"services", "service", ioSvc},
		{"configs", "config", "io-config"},
		{"configs", "config", "io-override"},
		{"config-types", "config-type", "io-type-2"},
		{"posture-checks", "posture-check", "io-mac"},
		{"cas", "ca", "io-ca"},
		{"external-jwt-signers", "ext-jwt-signer", "io-signer"},
		{"identities", "identity", ioOutsider},
		{"auth-policies", "auth-policy", "io-ap"},
		{"edge-routers", "edge-router", "io-er"},
	} {
		z.cmd("edge delete "+d.cliType+" "+d.name, deleted(r, d.typ, d.name), "edge", "delete", d.cliType, d.name)
	}
}

// roleAttributes checks that the -j list of role attributes includes want.
func roleAttributes(want ...string) func(string) error {
	return func(out string) error {
		data, err := jsonData(out)
		if err != nil {
			return err
		}
		got := anyStrings(data)
		if _, ok := data.([]any); !ok {
			return fmt.Errorf("the role attributes are %T, not a list", data)
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				return fmt.Errorf("the role attributes %q lack %q", got, w)
			}
		}
		return nil
	}
}

// anyStrings returns the strings of a decoded JSON list.
func anyStrings(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		switch e := e.(type) {
		case string:
			out = append(out, e)
		case map[string]any:
			out = append(out, str(e, "name"), str(e, "id"))
		}
	}
	return out
}

// echoOnce writes msg and reads it back.
func echoOnce(conn net.Conn, msg string) error {
	if err := conn.SetDeadline(time.Now().Add(testutil.Patience)); err != nil {
		return err
	}
	defer conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echoed %q, want %q", buf, msg)
	}
	return nil
}

// circuitEnded waits for conn, whose circuit was deleted, to be closed by its router.
func circuitEnded(conn net.Conn) error {
	if err := conn.SetReadDeadline(time.Now().Add(testutil.Patience)); err != nil {
		return err
	}
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil:
		return errors.New("the circuit's connection still carries data")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("the circuit's connection is still open %v after the delete", testutil.Patience)
	default:
		return nil
	}
}

// writeRouterConfig writes an OpenZiti router configuration for `ziti router enroll`: where
// the enrolled router's key and certificates go, and what its server certificate names.
func writeRouterConfig(dir, path string, n *network) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`v: 3
identity:
  cert: %[1]s/client.cert
  server_cert: %[1]s/server.cert
  key: %[1]s/key.pem
  ca: %[1]s/ca.cert
ctrl:
  endpoint: tls:127.0.0.1:%[2]d
link:
  dialers:
    - binding: transport
listeners:
  - binding: edge
    address: tls:127.0.0.1:%[3]d
    options:
      advertise: 127.0.0.1:%[3]d
edge:
  csr:
    country: US
    province: NC
    locality: Charlotte
    organization: zmesh
    organizationalUnit: interop
    sans:
      dns: [localhost]
      ip: [127.0.0.1]
`, dir, 6262+n.offset, n.freePort(1))
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// writeClientPEM writes the certificate and key of the quickstart client's identity file
// (zmesh's format: PEM fields with a "pem:" prefix) to certFile and keyFile.
func writeClientPEM(n *network, certFile, keyFile string) error {
	data, err := os.ReadFile(n.client)
	if err != nil {
		return err
	}
	var file struct {
		ID struct {
			Cert string `json:"cert"`
			Key  string `json:"key"`
		} `json:"id"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return fmt.Errorf("%s: %w", n.client, err)
	}
	return errors.Join(os.WriteFile(certFile, []byte(strings.TrimPrefix(file.ID.Cert, "pem:")), 0o600),
		os.WriteFile(keyFile, []byte(strings.TrimPrefix(file.ID.Key, "pem:")), 0o600))
}
