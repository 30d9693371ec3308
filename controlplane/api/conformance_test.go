package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docAbsent reads the table of operations not served from docs/openziti-compatibility.md:
// "METHOD /path" -> "api: reason".
func docAbsent(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "openziti-compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z]+ /[^`]*)` \\| (client|management|both) \\| ([^|]+) \\|$")
	out := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		m := row.FindStringSubmatch(line)
		if m == nil {
			if strings.HasPrefix(line, "| `") {
				t.Errorf("docs/openziti-compatibility.md: row not understood: %s", line)
			}
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/openziti-compatibility.md lists %s twice", m[1])
		}
		out[m[1]] = m[2] + ": " + strings.TrimSpace(m[3])
	}
	return out
}

func apiName(a apiSet) string {
	switch a {
	case client:
		return "client"
	case management:
		return "management"
	}
	return "both"
}

// TestSwaggerWalk walks every operation (method and path) of the reference's client.yml and
// management.yml: each must be served by a route of that API, or be one of the operations the
// documentation lists as not served, which then answer 501 NOT_IMPLEMENTED with their reason.
// The documented list and the server's must be the same, and name no served operation.
func TestSwaggerWalk(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	absent := map[string]absentOp{}
	for _, op := range absentOps() {
		absent[op.method+" "+op.path] = op
	}
	doc := docAbsent(t)
	for key, op := range absent {
		if want := apiName(op.apis) + ": " + op.reason; doc[key] != want {
			t.Errorf("docs/openziti-compatibility.md: %s is %q, the server says %q", key, doc[key], want)
		}
	}
	for key := range doc {
		if _, ok := absent[key]; !ok {
			t.Errorf("docs/openziti-compatibility.md lists %s, which absentOps does not", key)
		}
	}
	refs := map[string]map[string]refOp{}
	for _, spec := range []struct {
		file string
		api  apiSet
		base string
	}{{"client.yml", client, ClientBase}, {"management.yml", management, ManagementBase}} {
		served := map[string]bool{}
		for _, rt := range f.s.routesOf(spec.api) {
			served[opKey(rt.method, rt.path)] = true
		}
		ref := loadReference(t, spec.file)
		refs[spec.file] = ref
		var missing []string
		nAbsent := 0
		for key := range ref {
			method, path, _ := strings.Cut(key, " ")
			op, isAbsent := absent[key]
			isAbsent = isAbsent && op.apis&spec.api != 0
			switch {
			case served[opKey(method, path)] && isAbsent:
				t.Errorf("%s: %s is served but listed as not served: drop it from absentOps and docs/openziti-compatibility.md", spec.file, key)
			case served[opKey(method, path)]:
			case isAbsent:
				nAbsent++
				rec := f.do(method, spec.base+strings.NewReplacer("{", "x", "}", "").Replace(path), f.admin, "")
				if rec.Code != 501 || errorCode(t, rec) != codeNotImplemented || !strings.Contains(rec.Body.String(), op.reason) {
					t.Errorf("%s: %s answers %d %s, want 501 NOT_IMPLEMENTED naming the reason", spec.file, key, rec.Code, rec.Body)
				}
			default:
				missing = append(missing, key)
			}
		}
		slices.Sort(missing)
		for _, key := range missing {
			t.Errorf("%s: %s is neither served nor listed in docs/openziti-compatibility.md", spec.file, key)
		}
		t.Logf("%s: %d operations, %d served", spec.file, len(ref), len(ref)-len(missing)-nAbsent)
	}
	for key, op := range absent {
		ok := false
		for _, ref := range refs {
			if _, in := ref[key]; in {
				ok = true
			}
		}
		if !ok {
			t.Errorf("absentOps lists %s (%s), which no reference document has", key, apiName(op.apis))
		}
	}
}

// TestMountWildcardNames checks that operations naming one path's wildcard differently (as
// routes added by separate groups may) share one answer to other methods instead of
// conflicting on the mux.
func TestMountWildcardNames(t *testing.T) {
	t.Parallel()
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), mux: http.NewServeMux()}
	ok := func(c *call) error { return c.empty() }
	s.handle(management, "GET", "/things/{id}", public, "", ok)
	s.handle(management, "PUT", "/things/{thingId}", public, "", ok)
	s.mount()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("DELETE", ManagementBase+"/things/1", nil))
	if rec.Code != 405 || rec.Header().Get("Allow") != "GET, PUT" {
		t.Errorf("DELETE: %d %v", rec.Code, rec.Header())
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("PUT", ManagementBase+"/things/1", nil))
	if rec.Code != 200 {
		t.Errorf("PUT: %d %s", rec.Code, rec.Body)
	}
}
