package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// testFile is where the test documents claim to live; relative paths resolve against /etc/zmesh.
const testFile = "/etc/zmesh/router.yml"

// minimalRouter has only the required sections.
const minimalRouter = `v: 3
ctrl:
  endpoint: tls:127.0.0.1:6262
identity:
  cert: certs/client.cert
  key: certs/key.pem
  ca: certs/ca.pem
`

// testEnv is the environment of the tests: ZITI_DATA and HOST are set, nothing else.
func testEnv(name string) (string, bool) {
	switch name {
	case "ZITI_DATA":
		return "/var/lib/zmesh", true
	case "HOST":
		return "edge.example.com", true
	}
	return "", false
}

// withSnippet deep-merges the YAML mapping snippet into base: mappings merge key by key, any
// other value in snippet replaces the one in base.
func withSnippet(t testing.TB, base, snippet string) string {
	t.Helper()
	var b, s map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatalf("base: %v", err)
	}
	if err := yaml.Unmarshal([]byte(snippet), &s); err != nil {
		t.Fatalf("snippet %q: %v", snippet, err)
	}
	out, err := yaml.Marshal(merge(b, s))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func merge(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = merge(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// parseRouter parses doc as testFile and fails the test on errors.
func parseRouter(t testing.TB, doc string) (*Router, []Diagnostic) {
	t.Helper()
	cfg, warns, err := ParseRouter(testFile, []byte(doc), testEnv)
	if err != nil {
		t.Fatalf("unexpected errors:\n%v\ndocument:\n%s", err, doc)
	}
	return cfg, warns
}

func strs(ds []Diagnostic) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

// lookup finds path ("a.b[0].c") in the JSON form of v and returns it as compact JSON, or
// "<absent>".
func lookup(t testing.TB, v any, path string) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var cur any
	if err := json.Unmarshal(data, &cur); err != nil {
		t.Fatal(err)
	}
	for _, part := range splitPath(path) {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[part]
			if !ok {
				return "<absent>"
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i >= len(c) {
				return "<absent>"
			}
			cur = c[i]
		default:
			return "<absent>"
		}
	}
	out, err := json.Marshal(cur)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var pathPartRE = regexp.MustCompile(`[^.\[\]]+`)

func splitPath(path string) []string { return pathPartRE.FindAllString(path, -1) }

// placeholder fills %s in a template.
func placeholder(tmpl, value string) string { return strings.ReplaceAll(tmpl, "%s", value) }

func quote(s string) string { return fmt.Sprintf("%q", s) }
