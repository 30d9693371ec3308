package api

import (
	"net/http"
	"testing"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// onlineRouters reports the routers of its set online.
type onlineRouters map[string]bool

func (o onlineRouters) Online(id string) (bool, string, map[string]string) {
	return o[id], "", map[string]string{}
}

func (onlineRouters) LatestMetrics(string) (*ctrlproto.Metrics, bool) { return nil, false }

// identityID returns the id of the identity named name.
func (f *fixture) identityID(t *testing.T, name string) string {
	t.Helper()
	var list []struct {
		ID string `json:"id"`
	}
	decodeData(t, f.do("GET", ManagementBase+`/identities?filter=name%3D%22`+name+`%22`, f.admin, "").Body.Bytes(), &list)
	if len(list) != 1 {
		t.Fatalf("identity %q: %d found", name, len(list))
	}
	return list[0].ID
}

type policyAdvice struct {
	IdentityID string `json:"identityId"`
	Identity   struct {
		Name string `json:"name"`
	} `json:"identity"`
	ServiceID string `json:"serviceId"`
	Service   struct {
		Name   string `json:"name"`
		Entity string `json:"entity"`
	} `json:"service"`
	IsDialAllowed       bool `json:"isDialAllowed"`
	IsBindAllowed       bool `json:"isBindAllowed"`
	IdentityRouterCount int  `json:"identityRouterCount"`
	ServiceRouterCount  int  `json:"serviceRouterCount"`
	CommonRouters       []struct {
		ID       string `json:"id"`
		Name     string `json:"name"`
		IsOnline *bool  `json:"isOnline"`
	} `json:"commonRouters"`
}

func TestPolicyAdvice(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	user := f.identityID(t, "user")
	other, err := f.m.CreateIdentity(model.IdentityCreate{Name: "other", RoleAttributes: []string{"guest"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := f.do("PATCH", ManagementBase+"/identities/"+user, f.admin, `{"roleAttributes":["staff"]}`); rec.Code != 200 {
		t.Fatalf("patch identity: %d %s", rec.Code, rec.Body)
	}
	web := f.create(t, "/services", `{"name":"web","roleAttributes":["public"]}`)
	f.create(t, "/service-policies", `{"name":"staff-web","type":"Dial","semantic":"AnyOf","identityRoles":["#staff"],"serviceRoles":["#public"]}`)
	er1 := f.enrolledRouter(t, `{"name":"er1","roleAttributes":["edge"]}`)
	er2 := f.create(t, "/edge-routers", `{"name":"er2","roleAttributes":["edge"]}`)
	f.create(t, "/edge-routers", `{"name":"er3","roleAttributes":["far"]}`)
	// Both identities reach er1, er2 and er3; the service only er1 and er2.
	f.create(t, "/edge-router-policies", `{"name":"all","semantic":"AnyOf","identityRoles":["#all"],"edgeRouterRoles":["#all"]}`)
	f.create(t, "/service-edge-router-policies", `{"name":"edge","semantic":"AnyOf","serviceRoles":["#all"],"edgeRouterRoles":["#edge"]}`)
	f.s.info.Routers = onlineRouters{er1: true}

	advice := func(identity string) policyAdvice {
		t.Helper()
		rec := f.do("GET", ManagementBase+"/identities/"+identity+"/policy-advice/"+web, f.admin, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("policy advice: %d %s", rec.Code, rec.Body)
		}
		var a policyAdvice
		decodeData(t, rec.Body.Bytes(), &a)
		return a
	}
	a := advice(user)
	if a.IdentityID != user || a.Identity.Name != "user" || a.ServiceID != web || a.Service.Name != "web" || a.Service.Entity != "services" {
		t.Fatalf("entities: %+v", a)
	}
	if !a.IsDialAllowed || a.IsBindAllowed || a.IdentityRouterCount != 3 || a.ServiceRouterCount != 2 || len(a.CommonRouters) != 2 {
		t.Fatalf("may dial: %+v", a)
	}
	online := map[string]bool{}
	for _, r := range a.CommonRouters {
		if r.IsOnline == nil {
			t.Fatalf("common router without isOnline: %+v", r)
		}
		online[r.ID] = *r.IsOnline
	}
	if !online[er1] || online[er2] || len(online) != 2 {
		t.Fatalf("common routers online: %v", online)
	}

	a = advice(other.ID)
	if a.IsDialAllowed || a.IsBindAllowed || a.IdentityRouterCount != 3 || len(a.CommonRouters) != 2 {
		t.Fatalf("may not dial: %+v", a)
	}

	for _, path := range []string{"/identities/nope/policy-advice/" + web, "/identities/" + user + "/policy-advice/nope"} {
		if rec := f.do("GET", ManagementBase+path, f.admin, ""); rec.Code != http.StatusNotFound || errorCode(t, rec) != "NOT_FOUND" {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if rec := f.do("GET", ManagementBase+"/identities/"+user+"/policy-advice/"+web, f.normal, ""); rec.Code != http.StatusForbidden && rec.Code != http.StatusUnauthorized {
		t.Errorf("non-admin: %d %s", rec.Code, rec.Body)
	}
}
