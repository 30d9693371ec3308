package api

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// TestListParameters drives the management lists with asIdentity, roleFilter and
// roleSemantic and checks that exactly the entities they select come back, and that bad or
// misplaced values are refused naming the parameter.
func TestListParameters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	n := newPolicyNet(t, f)
	// api is granted to alice with web (#web); admin-ui to nobody.
	f.create(t, "/services", `{"name":"api","roleAttributes":["web","internal"]}`)
	f.create(t, "/services", `{"name":"admin-ui","roleAttributes":["internal"]}`)
	f.create(t, "/posture-checks", `{"name":"os","typeId":"OS","roleAttributes":["desk"],"operatingSystems":[{"type":"Linux","versions":[]}]}`)
	q := url.QueryEscape
	for _, c := range []struct {
		path string
		want string
	}{
		{"/services?limit=100", "admin-ui api db web"},
		{"/services?asIdentity=" + n.alice, "api web"},
		{"/services?asIdentity=alice", "api web"},
		{"/services?asIdentity=" + n.bob, "db"},
		{"/services?asIdentity=" + n.alice + "&roleFilter=" + q("#internal"), "api"},
		{"/services?asIdentity=" + n.alice + "&roleFilter=" + q("#db"), ""},
		{"/services?asIdentity=" + n.alice + "&filter=" + q(`name = "web"`), "web"},
		{"/services?roleFilter=" + q("#internal"), "admin-ui api"},
		{"/services?roleFilter=" + q("#web") + "&roleFilter=" + q("#internal"), "api"},
		{"/services?roleFilter=" + q("#web") + "&roleFilter=" + q("#internal") + "&roleSemantic=AllOf", "api"},
		{"/services?roleFilter=" + q("#web") + "&roleFilter=" + q("#internal") + "&roleSemantic=AnyOf", "admin-ui api web"},
		{"/services?roleFilter=" + q("@"+n.db) + "&roleFilter=" + q("#internal") + "&roleSemantic=AnyOf", "admin-ui api db"},
		{"/services?roleFilter=" + q("#all"), "admin-ui api db web"},
		{"/identities?roleFilter=" + q("#eng"), "alice"},
		{"/identities?roleFilter=" + q("#eng") + "&roleFilter=" + q("#ops") + "&roleSemantic=AnyOf", "alice bob"},
		{"/identities?roleFilter=" + q("#eng") + "&roleFilter=" + q("#ops"), ""},
		{"/edge-routers?roleFilter=" + q("#r1"), "r1"},
		{"/edge-routers?roleFilter=" + q("@"+n.r2), "r2"},
		{"/posture-checks?roleFilter=" + q("#desk"), "os"},
		{"/posture-checks?roleFilter=" + q("#lap"), ""},
	} {
		got, total := f.listNames(t, c.path)
		if strings.Join(got, " ") != c.want || total != len(got) {
			t.Errorf("GET %s: %v (total %d), want %q", c.path, got, total, c.want)
		}
	}
	// As an identity, a service carries that identity's permissions.
	rec := f.do("GET", ManagementBase+"/services?asIdentity="+n.bob, f.admin, "")
	var svcs []struct {
		Name        string
		Permissions []string
	}
	refData(t, rec.Body.Bytes(), &svcs)
	if len(svcs) != 1 || strings.Join(svcs[0].Permissions, ",") != "Bind" {
		t.Errorf("services as bob: %s", rec.Body)
	}
	for _, c := range []struct {
		path, field string
	}{
		{"/services?asIdentity=nobody", "asIdentity"},
		{"/services?asIdentity=", "asIdentity"},
		{"/services?roleFilter=web", "roleFilter[0]"},
		{"/services?roleFilter=" + q("#web") + "&roleSemantic=OneOf", "roleSemantic"},
		{"/identities?roleSemantic=any", "roleSemantic"},
		{"/identities?asIdentity=" + n.alice, "asIdentity"},
		{"/edge-routers?asIdentity=" + n.alice, "asIdentity"},
		{"/configs?roleFilter=" + q("#web"), "roleFilter"},
		{"/service-policies?roleSemantic=AnyOf", "roleSemantic"},
	} {
		rec := f.do("GET", ManagementBase+c.path, f.admin, "")
		var env struct {
			Error struct {
				Code  string
				Cause struct{ Field string }
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || rec.Code != 400 || env.Error.Code != "COULD_NOT_VALIDATE" || env.Error.Cause.Field != c.field {
			t.Errorf("GET %s: %d %s, want 400 COULD_NOT_VALIDATE naming %s", c.path, rec.Code, rec.Body, c.field)
		}
	}
}

// TestRoleAttributesAndSummary checks the role attribute lists (each attribute in use once,
// filtered and paged) and the entity counts of the summary.
func TestRoleAttributesAndSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	newPolicyNet(t, f)
	f.create(t, "/services", `{"name":"api","roleAttributes":["web","internal"]}`)
	f.create(t, "/posture-checks", `{"name":"os","typeId":"OS","roleAttributes":["desk"],"operatingSystems":[{"type":"Linux","versions":[]}]}`)
	q := url.QueryEscape
	for _, c := range []struct {
		path string
		want string
	}{
		{"/identity-role-attributes", "eng ops"},
		{"/service-role-attributes", "db internal web"},
		{"/service-role-attributes?filter=" + q(`id contains "e"`), "internal web"},
		{"/service-role-attributes?filter=" + q(`id = "db"`), "db"},
		{"/edge-router-role-attributes", "r1"},
		{"/posture-check-role-attributes", "desk"},
	} {
		got, total := f.listNames(t, c.path)
		if strings.Join(got, " ") != c.want || total != len(got) {
			t.Errorf("GET %s: %v (total %d), want %q", c.path, got, total, c.want)
		}
	}
	if got, total := f.listNames(t, "/service-role-attributes?limit=2&offset=1"); strings.Join(got, " ") != "internal web" || total != 3 {
		t.Errorf("paged role attributes: %v total %d", got, total)
	}
	rec := f.do("GET", ManagementBase+"/summary", f.admin, "")
	var counts map[string]int
	refData(t, rec.Body.Bytes(), &counts)
	// The fixture's admin and user, plus alice and bob; web, db and api; r1 and r2.
	for k, want := range map[string]int{
		"identities": 4, "services": 3, "services.edge": 3, "routers": 2, "routers.edge": 2,
		"servicePolicies": 2, "edgeRouterPolicies": 1, "serviceEdgeRouterPolicies": 1,
		"configs": 1, "configTypes": 4, "postureChecks": 1, "authPolicies": 1,
		"terminators": 0, "cas": 0, "mfas": 0, "externalJwtSigners": 0,
	} {
		if got, ok := counts[k]; !ok || got != want {
			t.Errorf("summary %s = %d (present %v), want %d: %s", k, got, ok, want, rec.Body)
		}
	}
	// The types count what their lists hold.
	for key, path := range map[string]string{"identityTypes": "/identity-types?limit=100", "postureCheckTypes": "/posture-check-types?limit=100"} {
		if _, total := f.listNames(t, path); counts[key] != total || total == 0 {
			t.Errorf("summary %s = %d, GET %s holds %d", key, counts[key], path, total)
		}
	}
	if counts["apiSessions"] < 2 || counts["authenticators"] < 2 {
		t.Errorf("summary counts the fixture's sessions and authenticators: %s", rec.Body)
	}
	if rec := f.do("GET", ManagementBase+"/summary", f.normal, ""); rec.Code != 403 {
		t.Errorf("summary as non-admin: %d", rec.Code)
	}
}
