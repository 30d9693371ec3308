package api

import (
	"encoding/json"
	"net/url"
	"testing"
)

// idsOf GETs a management list and returns the ids of its page.
func (f *fixture) idsOf(t *testing.T, path string) []string {
	t.Helper()
	rec := f.do("GET", ManagementBase+path, f.admin, "")
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	var items []struct{ ID string }
	refData(t, rec.Body.Bytes(), &items)
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

// TestRelatedFieldFilters checks the filters on the fields of related entities that the ziti
// CLI sends: service.name on terminators, identity (the id) and identity.name on
// authenticators, and the same on API sessions, sessions and enrollments.
func TestRelatedFieldFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	n := newPolicyNet(t, f)
	tWeb := f.create(t, "/terminators", `{"service":"`+n.web+`","router":"`+n.r1+`","binding":"transport","address":"tcp:127.0.0.1:8080"}`)
	tDB := f.create(t, "/terminators", `{"service":"`+n.db+`","router":"`+n.r2+`","binding":"transport","address":"tcp:127.0.0.1:8081"}`)
	carol := f.create(t, "/identities", `{"name":"carol","type":"Default","isAdmin":false,"enrollment":{"ott":true}}`)
	_, user, err := f.m.SessionByToken(f.normal)
	if err != nil {
		t.Fatal(err)
	}
	auths, err := f.m.AuthenticatorsOf(user.ID)
	if err != nil || len(auths) != 1 {
		t.Fatalf("authenticators of user: %v %v", auths, err)
	}
	sess, _, err := f.m.SessionByToken(f.normal)
	if err != nil {
		t.Fatal(err)
	}
	enrollments, err := f.m.EnrollmentsOf(carol)
	if err != nil || len(enrollments) != 1 {
		t.Fatalf("enrollments of carol: %v %v", enrollments, err)
	}
	q := url.QueryEscape
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/terminators?filter=" + q(`service.name="web"`), []string{tWeb}},
		{"/terminators?filter=" + q(`service.name = "db"`), []string{tDB}},
		{"/terminators?filter=" + q(`service.name = "nothing"`), nil},
		{"/terminators?filter=" + q(`router.name = "r2" and service.name in ["db", "web"]`), []string{tDB}},
		{"/services/" + n.web + "/terminators?filter=" + q(`service.name = "web"`), []string{tWeb}},
		// The filter of `ziti edge create authenticator updb` and of a password reset.
		{"/authenticators?filter=" + q(`identity="`+user.ID+`" and method="updb"`), []string{auths[0].ID}},
		{"/authenticators?filter=" + q(`identity="`+user.ID+`" and method="cert"`), nil},
		{"/authenticators?filter=" + q(`identity.name = "user"`), []string{auths[0].ID}},
		{"/api-sessions?filter=" + q(`identity.name = "user"`), []string{sess.ID}},
		{"/api-sessions?filter=" + q(`identity = "`+user.ID+`"`), []string{sess.ID}},
		{"/enrollments?filter=" + q(`identity.name = "carol"`), []string{enrollments[0].ID}},
		{"/enrollments?filter=" + q(`identity = "`+carol+`"`), []string{enrollments[0].ID}},
	} {
		got := f.idsOf(t, c.path)
		if len(got) != len(c.want) || (len(got) == 1 && got[0] != c.want[0]) {
			t.Errorf("GET %s: %v, want %v", c.path, got, c.want)
		}
	}
	rec := f.do("GET", ManagementBase+"/terminators?filter="+q(`service.nope = "x"`), f.admin, "")
	if rec.Code != 400 || errorCode(t, rec) != "INVALID_FILTER" {
		t.Errorf("unknown related field: %d %s", rec.Code, rec.Body)
	}
	var env struct {
		Meta struct{ FilterableFields []string }
	}
	if err := json.Unmarshal(f.do("GET", ManagementBase+"/authenticators", f.admin, "").Body.Bytes(), &env); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"identity", "identity.name"} {
		found := false
		for _, have := range env.Meta.FilterableFields {
			found = found || have == want
		}
		if !found {
			t.Errorf("authenticators' filterable fields %v lack %s", env.Meta.FilterableFields, want)
		}
	}
}
