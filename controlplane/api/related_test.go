package api

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// listNames GETs a management list and returns the names (or, for role attribute lists,
// the strings) of its page, sorted, with the total count.
func (f *fixture) listNames(t *testing.T, path string) ([]string, int) {
	t.Helper()
	rec := f.do("GET", ManagementBase+path, f.admin, "")
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	var env struct {
		Data []json.RawMessage
		Meta struct{ Pagination struct{ TotalCount int } }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
		t.Fatalf("GET %s: %v %s", path, err, rec.Body)
	}
	var out []string
	for _, d := range env.Data {
		var named struct{ Name string }
		var s string
		if json.Unmarshal(d, &s) == nil {
			out = append(out, s)
		} else if err := json.Unmarshal(d, &named); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		} else {
			out = append(out, named.Name)
		}
	}
	slices.Sort(out)
	return out, env.Meta.Pagination.TotalCount
}

// policyNet is a small network of policies for the list tests: identities alice (#eng) and
// bob (#ops), services web (#web, with a host.v1 config) and db (#db), edge routers r1 (#r1)
// and r2; alice may dial web (by attributes), bob may bind db (by id); alice may use r1, and
// every service r2.
type policyNet struct {
	alice, bob, web, db, r1, r2, cfg, dial, bind, erp, serp string
}

func newPolicyNet(t *testing.T, f *fixture) policyNet {
	t.Helper()
	var n policyNet
	n.alice = f.create(t, "/identities", `{"name":"alice","type":"Default","isAdmin":false,"roleAttributes":["eng"]}`)
	n.bob = f.create(t, "/identities", `{"name":"bob","type":"Default","isAdmin":false,"roleAttributes":["ops"]}`)
	n.cfg = f.create(t, "/configs", `{"name":"web-host","configTypeId":"host.v1","data":{"protocol":"tcp","address":"localhost","port":80}}`)
	n.web = f.create(t, "/services", `{"name":"web","roleAttributes":["web"],"configs":["`+n.cfg+`"]}`)
	n.db = f.create(t, "/services", `{"name":"db","roleAttributes":["db"]}`)
	n.r1 = f.create(t, "/edge-routers", `{"name":"r1","roleAttributes":["r1"]}`)
	n.r2 = f.create(t, "/edge-routers", `{"name":"r2"}`)
	n.dial = f.create(t, "/service-policies", `{"name":"dial-web","type":"Dial","semantic":"AnyOf","identityRoles":["#eng"],"serviceRoles":["#web"]}`)
	n.bind = f.create(t, "/service-policies", `{"name":"bind-db","type":"Bind","semantic":"AllOf","identityRoles":["@`+n.bob+`"],"serviceRoles":["@`+n.db+`"]}`)
	n.erp = f.create(t, "/edge-router-policies", `{"name":"eng-r1","semantic":"AllOf","identityRoles":["#eng"],"edgeRouterRoles":["#r1"]}`)
	n.serp = f.create(t, "/service-edge-router-policies", `{"name":"all-r2","semantic":"AllOf","serviceRoles":["#all"],"edgeRouterRoles":["@`+n.r2+`"]}`)
	return n
}

// TestRelatedLists checks every related-entity list of the management API on a network
// whose answers are known, with filters and paging.
func TestRelatedLists(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	n := newPolicyNet(t, f)
	for _, c := range []struct {
		path string
		want string
	}{
		{"/identities/" + n.alice + "/services", "web"},
		{"/identities/" + n.alice + "/services?policyType=bind", ""},
		{"/identities/" + n.bob + "/services?policyType=Bind", "db"},
		{"/identities/" + n.alice + "/edge-routers", "r1"},
		{"/identities/" + n.bob + "/edge-routers", ""},
		{"/identities/" + n.alice + "/service-policies", "dial-web"},
		{"/identities/" + n.bob + "/service-policies", "bind-db"},
		{"/identities/" + n.alice + "/edge-router-policies", "eng-r1"},
		{"/services/" + n.web + "/identities", "alice"},
		{"/services/" + n.db + "/identities?policyType=dial", ""},
		{"/services/" + n.db + "/identities", "bob"},
		{"/services/" + n.web + "/edge-routers", "r2"},
		{"/services/" + n.web + "/service-policies", "dial-web"},
		{"/services/" + n.db + "/service-edge-router-policies", "all-r2"},
		{"/services/" + n.web + "/configs", "web-host"},
		{"/services/" + n.db + "/configs", ""},
		{"/services/" + n.web + "/terminators", ""},
		{"/edge-routers/" + n.r1 + "/identities", "alice"},
		{"/edge-routers/" + n.r2 + "/identities", ""},
		{"/edge-routers/" + n.r2 + "/services", "db web"},
		{"/edge-routers/" + n.r2 + "/services?filter=" + url.QueryEscape(`name = "db"`), "db"},
		{"/edge-routers/" + n.r1 + "/services", ""},
		{"/edge-routers/" + n.r1 + "/edge-router-policies", "eng-r1"},
		{"/edge-routers/" + n.r2 + "/service-edge-router-policies", "all-r2"},
		{"/service-policies/" + n.dial + "/identities", "alice"},
		{"/service-policies/" + n.dial + "/services", "web"},
		{"/service-policies/" + n.bind + "/services", "db"},
		{"/service-policies/" + n.dial + "/posture-checks", ""},
		{"/edge-router-policies/" + n.erp + "/identities", "alice"},
		{"/edge-router-policies/" + n.erp + "/edge-routers", "r1"},
		{"/service-edge-router-policies/" + n.serp + "/services", "db web"},
		{"/service-edge-router-policies/" + n.serp + "/edge-routers", "r2"},
		{"/config-types/host.v1/configs", "web-host"},
		{"/config-types/intercept.v1/configs", ""},
		{"/configs/" + n.cfg + "/services", "web"},
	} {
		got, total := f.listNames(t, c.path)
		if strings.Join(got, " ") != c.want || total != len(got) {
			t.Errorf("GET %s: %v (total %d), want %q", c.path, got, total, c.want)
		}
	}
	// Paging: one of two, with the total.
	if got, total := f.listNames(t, "/edge-routers/"+n.r2+"/services?limit=1"); len(got) != 1 || total != 2 {
		t.Errorf("paged related list: %v total %d", got, total)
	}
	for _, c := range []struct {
		path, code, field string
	}{
		{"/identities/nobody/services", "NOT_FOUND", ""},
		{"/service-policies/none/identities", "NOT_FOUND", ""},
		{"/config-types/none/configs", "NOT_FOUND", ""},
		{"/identities/" + n.alice + "/services?policyType=listen", "COULD_NOT_VALIDATE", "policyType"},
		{"/edge-routers/" + n.r1 + "/services?policyType=dial", "COULD_NOT_VALIDATE", "policyType"},
		{"/services/" + n.web + "/identities?filter=" + url.QueryEscape(`nope = 1`), "INVALID_FILTER", ""},
	} {
		rec := f.do("GET", ManagementBase+c.path, f.admin, "")
		if code := errorCode(t, rec); code != c.code || !strings.Contains(rec.Body.String(), c.field) {
			t.Errorf("GET %s: %d %s, want %s naming %q", c.path, rec.Code, rec.Body, c.code, c.field)
		}
	}
}
