package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const minimalController = "v: 1\ndataDir: data\nadmin:\n  password: secret1\n"

func parseController(t *testing.T, doc string) (*Controller, []string) {
	t.Helper()
	cfg, _, err := ParseController("/etc/zmesh/controller.yml", []byte(doc), testEnv)
	if err != nil {
		return nil, strs(err.(Errors))
	}
	return cfg, nil
}

func TestControllerDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct{ snippet, path, want string }{
		{"", "v", `1`},
		{"", "dataDir", `"/etc/zmesh/data"`},
		{"", "api.listen", `"127.0.0.1:1280"`},
		{"", "api.advertise", `"127.0.0.1:1280"`},
		{"api: {listen: '10.0.0.1:443'}", "api.advertise", `"10.0.0.1:443"`},
		{"", "ctrl.listen", `"tls:127.0.0.1:6262"`},
		{"", "admin.username", `"admin"`},
		{"", "admin.password", `"(hidden)"`},
		{"", "sessionTimeout", `"30m"`},
		{"", "sessionMaxLifetime", `"24h"`},
		{"", "web", `[]`},
		{"", "certificates.routers", `"8760h"`},
		{"", "certificates.identities", `"8760h"`},
		{"certificates: {routers: 2m, identities: 90m}", "certificates", `{"identities":"1h30m","routers":"2m"}`},
		{"", "extJwt", `<absent>`},
		{"extJwt: {caBundle: idp-ca.pem}", "extJwt.caBundle", `"/etc/zmesh/idp-ca.pem"`},
		{"extJwt: {caBundle: /etc/ssl/corp.pem}", "extJwt.caBundle", `"/etc/ssl/corp.pem"`},
		{"web: [{name: ops, bindPoints: [{interface: '127.0.0.1:8081'}], apis: [{binding: health-checks}, {binding: metrics}]}]", "web",
			`[{"apis":[{"binding":"health-checks"},{"binding":"metrics"}],"bindPoints":[{"address":"127.0.0.1:8081","interface":"127.0.0.1:8081"}],"name":"ops"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.path+tt.snippet, func(t *testing.T) {
			t.Parallel()
			cfg, errs := parseController(t, withSnippet(t, minimalController, tt.snippet))
			if errs != nil {
				t.Fatal(errs)
			}
			if got := lookup(t, cfg, tt.path); got != tt.want {
				t.Errorf("%s = %s, want %s", tt.path, got, tt.want)
			}
		})
	}
	cfg, errs := parseController(t, minimalController)
	if errs != nil {
		t.Fatal(errs)
	}
	if cfg.Admin.Password != "secret1" {
		t.Errorf("password = %q, want the file's value", cfg.Admin.Password)
	}
}

func TestControllerBounds(t *testing.T) {
	t.Parallel()
	parse := func(doc string) (any, []string) {
		cfg, errs := parseController(t, withSnippet(t, minimalController, doc))
		if errs != nil {
			return nil, errs
		}
		return cfg, nil
	}
	checkBound(t, durationBound("sessionTimeout: %s", "sessionTimeout", time.Minute, 24*time.Hour), parse)
	checkBound(t, durationBound("sessionTimeout: 1m\nsessionMaxLifetime: %s", "sessionMaxLifetime", time.Minute, 365*24*time.Hour), parse)
	checkBound(t, durationBound("certificates: {routers: %s}", "certificates.routers", time.Minute, 5*365*24*time.Hour), parse)
	checkBound(t, durationBound("certificates: {identities: %s}", "certificates.identities", time.Minute, 5*365*24*time.Hour), parse)

	// Credentials are bounded by their length in characters; the effective password is hidden,
	// so acceptance is what is checked for it.
	for _, tt := range []struct {
		key      string
		min, max int
	}{{"username", MinUsernameLen, MaxUsernameLen}, {"password", MinPasswordLen, MaxPasswordLen}} {
		for _, c := range []struct {
			n  int
			ok bool
		}{{tt.min - 1, false}, {tt.min, true}, {tt.max, true}, {tt.max + 1, false}} {
			value := strings.Repeat("é", c.n)
			_, errs := parse("admin: {" + tt.key + ": " + quote(value) + "}")
			if c.ok && errs != nil {
				t.Errorf("admin.%s of %d characters rejected: %v", tt.key, c.n, errs)
			}
			if !c.ok && (len(errs) != 1 || !strings.HasPrefix(errs[0], "/etc/zmesh/controller.yml:") ||
				!strings.Contains(errs[0], ": admin."+tt.key+": has ")) {
				t.Errorf("admin.%s of %d characters: errors %v, want one naming admin.%s", tt.key, c.n, errs, tt.key)
			}
		}
	}
}

func TestControllerErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"version", "v: 3\n", []string{"c.yml:1: v: version 3 is not supported; supported: 1"}},
		{"required", "v: 1\n", []string{
			"c.yml:1: dataDir: is required: the directory that holds the store and the PKI",
			"c.yml:1: admin.password: is required: the administrator's password, usually ${ZMESH_ADMIN_PASSWORD}",
		}},
		{"unset password variable", "v: 1\ndataDir: d\nadmin: {password: '${ZMESH_ADMIN_PASSWORD}'}\n", []string{
			"c.yml:3: admin.password: environment variable ZMESH_ADMIN_PASSWORD is not set",
			"c.yml:3: admin.password: has 0 characters; allowed: 5 to 100",
		}},
		{"addresses", "v: 1\ndataDir: d\napi: {listen: '0.0.0.0:1280'}\nctrl: {listen: 'quic:0.0.0.0:6262'}\nadmin: {username: bob, password: secret}\n", []string{
			"c.yml:3: api.advertise: is required when api.listen (0.0.0.0:1280) listens on every address: the <host>:<port> clients use",
			`c.yml:4: ctrl.listen: "quic:0.0.0.0:6262": transport "quic" is not allowed here; allowed: tls`,
			"c.yml:5: admin.username: has 3 characters; allowed: 4 to 100",
		}},
		{"sessionMaxLifetime below sessionTimeout", controllerWith("sessionTimeout: 2h\nsessionMaxLifetime: 90m\n"), []string{
			"c.yml:6: sessionMaxLifetime: 1h30m is shorter than sessionTimeout (2h); allowed: sessionTimeout to 8760h",
		}},
		{"bad listen", "v: 1\ndataDir: d\napi: {listen: 'localhost'}\nadmin: {password: secret}\n", []string{
			`c.yml:3: api.listen: "localhost": not <host>:<port>, e.g. 127.0.0.1:1280`,
		}},
		{"extJwt.caBundle not a string", controllerWith("extJwt:\n  caBundle: [a.pem]\n"), []string{
			"c.yml:6: extJwt.caBundle: must be a single value, found a list",
		}},
		{"web binding", controllerWith(`web:
  - name: ops
    bindPoints:
      - interface: 127.0.0.1:8081
    apis:
      - binding: health-checks
      - binding: edge-management
      - binding: health-checks
`), []string{
			`c.yml:11: web[0].apis[1].binding: "edge-management" is not allowed; allowed: health-checks, metrics`,
			`c.yml:12: web[0].apis[2].binding: "health-checks" is already served by web[0].apis[0]`,
		}},
		{"web required keys", controllerWith(`web:
  - bindPoints:
      - address: ops.example.com:8081
      - interface: 0.0.0.0:8081
  - name: b
    bindPoints: []
`), []string{
			"c.yml:6: web[0].name: is required: a name for the web listener",
			"c.yml:6: web[0].apis: is required: at least one {binding}; allowed bindings: health-checks, metrics",
			"c.yml:7: web[0].bindPoints[0].interface: is required: the <host>:<port> to listen on, e.g. 0.0.0.0:8081",
			"c.yml:8: web[0].bindPoints[1].address: is required when interface 0.0.0.0:8081 listens on every address: the <host>:<port> clients use",
			"c.yml:9: web[1].apis: is required: at least one {binding}; allowed bindings: health-checks, metrics",
			"c.yml:10: web[1].bindPoints: is required: at least one {interface, address}",
		}},
		{"web addresses in use", controllerWith(`api: {listen: '127.0.0.1:1280'}
web:
  - name: a
    bindPoints:
      - interface: 127.0.0.1:1280
      - interface: 0.0.0.0:6262
        address: ctrl.example.com:6262
      - interface: '[::1]:8081'
    apis: [{binding: metrics}]
  - name: a
    bindPoints:
      - interface: '[::1]:8081'
    apis: [{binding: health-checks}]
`), []string{
			"c.yml:9: web[0].bindPoints[0].interface: 127.0.0.1:1280 is already bound by api.listen",
			"c.yml:10: web[0].bindPoints[1].interface: 0.0.0.0:6262 is already bound by ctrl.listen",
			"c.yml:14: web[1].name: \"a\" is already the name of web[0]",
			"c.yml:16: web[1].bindPoints[0].interface: [::1]:8081 is already bound by web[0].bindPoints[2].interface",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := ParseController("c.yml", []byte(tt.doc), testEnv)
			if err == nil {
				t.Fatalf("no error; want %v", tt.want)
			}
			if got := strs(err.(Errors)); !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// controllerWith is a valid controller file of four lines followed by extra.
func controllerWith(extra string) string {
	return "v: 1\ndataDir: d\nadmin: {password: secret}\n# the sections under test\n" + extra
}
