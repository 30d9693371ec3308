package api

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

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

// clientConfig returns the config of type typ the user's client API shows for the service.
func (f *fixture) clientConfig(t *testing.T, serviceID, typ string) map[string]any {
	t.Helper()
	var list []struct {
		ID     string                    `json:"id"`
		Config map[string]map[string]any `json:"config"`
	}
	rec := f.do("GET", ClientBase+"/services?configTypes=all", f.normal, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("client services: %d %s", rec.Code, rec.Body)
	}
	decodeData(t, rec.Body.Bytes(), &list)
	var one struct {
		Config map[string]map[string]any `json:"config"`
	}
	decodeData(t, f.do("GET", ClientBase+"/services/"+serviceID+"?configTypes=all", f.normal, "").Body.Bytes(), &one)
	for _, s := range list {
		if s.ID == serviceID {
			if fmt.Sprint(s.Config[typ]) != fmt.Sprint(one.Config[typ]) {
				t.Fatalf("list and detail disagree: %v, %v", s.Config[typ], one.Config[typ])
			}
			return s.Config[typ]
		}
	}
	t.Fatalf("service %s not listed: %s", serviceID, rec.Body)
	return nil
}

func TestIdentityServiceConfigs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	user := f.identityID(t, "user")
	intercept := f.create(t, "/configs", `{"name":"web-intercept","configTypeId":"intercept.v1","data":{"protocols":["tcp"],"addresses":["web.zmesh"],"portRanges":[{"low":80,"high":80}]}}`)
	host := f.create(t, "/configs", `{"name":"web-host","configTypeId":"host.v1","data":{"protocol":"tcp","address":"127.0.0.1","port":8080}}`)
	own := f.create(t, "/configs", `{"name":"user-intercept","configTypeId":"intercept.v1","data":{"protocols":["tcp"],"addresses":["mine.zmesh"],"portRanges":[{"low":81,"high":81}]}}`)
	web := f.create(t, "/services", `{"name":"web","configs":["`+intercept+`","`+host+`"]}`)
	f.create(t, "/service-policies", `{"name":"dial","type":"Dial","semantic":"AnyOf","identityRoles":["@`+user+`"],"serviceRoles":["@`+web+`"]}`)
	path := ManagementBase + "/identities/" + user + "/service-configs"

	type pair struct {
		ServiceID string `json:"serviceId"`
		ConfigID  string `json:"configId"`
		Service   struct {
			Name string `json:"name"`
		} `json:"service"`
		Config struct {
			Name string `json:"name"`
		} `json:"config"`
	}
	list := func() []pair {
		t.Helper()
		rec := f.do("GET", path, f.admin, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("list service configs: %d %s", rec.Code, rec.Body)
		}
		var out []pair
		decodeData(t, rec.Body.Bytes(), &out)
		return out
	}
	addresses := func() string { return fmt.Sprint(f.clientConfig(t, web, "intercept.v1")["addresses"]) }

	if l := list(); len(l) != 0 {
		t.Fatalf("before: %+v", l)
	}
	if got := addresses(); got != "[web.zmesh]" {
		t.Fatalf("service's own config: %s", got)
	}
	body := `[{"serviceId":"` + web + `","configId":"` + own + `"}]`
	if rec := f.do("POST", path, f.admin, body); rec.Code != http.StatusOK {
		t.Fatalf("assign: %d %s", rec.Code, rec.Body)
	}
	if l := list(); len(l) != 1 || l[0].ServiceID != web || l[0].ConfigID != own || l[0].Service.Name != "web" || l[0].Config.Name != "user-intercept" {
		t.Fatalf("after assign: %+v", l)
	}
	if got := addresses(); got != "[mine.zmesh]" {
		t.Fatalf("identity's config: %s", got)
	}
	if got := f.clientConfig(t, web, "host.v1")["port"]; fmt.Sprint(got) != "8080" {
		t.Fatalf("the service's config of another type: %v", got)
	}

	for _, bad := range []struct{ body, field string }{
		{`[{"serviceId":"nope","configId":"` + own + `"}]`, "[0].serviceId"},
		{`[{"serviceId":"` + web + `","configId":"nope"}]`, "[0].configId"},
		{`[{"serviceId":"` + web + `"}]`, "[0].configId"},
		{`{"serviceId":"` + web + `"}`, ""},
	} {
		rec := f.do("POST", path, f.admin, bad.body)
		if rec.Code != http.StatusBadRequest || (bad.field != "" && !strings.Contains(rec.Body.String(), bad.field)) {
			t.Errorf("POST %s: %d %s", bad.body, rec.Code, rec.Body)
		}
	}
	if rec := f.do("POST", ManagementBase+"/identities/nope/service-configs", f.admin, body); rec.Code != http.StatusNotFound {
		t.Errorf("unknown identity: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", path, f.normal, ""); rec.Code == http.StatusOK {
		t.Errorf("non-admin read: %d", rec.Code)
	}

	if rec := f.do("DELETE", path, f.admin, body); rec.Code != http.StatusOK {
		t.Fatalf("remove: %d %s", rec.Code, rec.Body)
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("after remove: %+v", l)
	}
	if got := addresses(); got != "[web.zmesh]" {
		t.Fatalf("service's config again: %s", got)
	}

	// No body removes them all; a deleted config stops counting.
	f.do("POST", path, f.admin, body)
	if rec := f.do("DELETE", path, f.admin, ""); rec.Code != http.StatusOK || len(list()) != 0 {
		t.Fatalf("remove all: %d %s", rec.Code, rec.Body)
	}
	f.do("POST", path, f.admin, body)
	if rec := f.do("DELETE", ManagementBase+"/configs/"+own, f.admin, ""); rec.Code != http.StatusOK {
		t.Fatalf("delete config: %d %s", rec.Code, rec.Body)
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("deleted config still listed: %+v", l)
	}
	if got := addresses(); got != "[web.zmesh]" {
		t.Fatalf("after the config's deletion: %s", got)
	}
}

// refProperties returns the property names of a definition of a reference Swagger document,
// following allOf.
func refProperties(t *testing.T, file, name string) []string {
	t.Helper()
	data, err := os.ReadFile(findReference(t, file))
	if err != nil {
		t.Fatal(err)
	}
	type def struct {
		Ref        string         `yaml:"$ref"`
		Properties map[string]any `yaml:"properties"`
		AllOf      []def          `yaml:"allOf"`
	}
	var doc struct {
		Definitions map[string]def `yaml:"definitions"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(d def)
	walk = func(d def) {
		if d.Ref != "" {
			walk(doc.Definitions[strings.TrimPrefix(d.Ref, "#/definitions/")])
		}
		for k := range d.Properties {
			out = append(out, k)
		}
		for _, p := range d.AllOf {
			walk(p)
		}
	}
	d, ok := doc.Definitions[name]
	if !ok {
		t.Fatalf("%s has no definition %s", file, name)
	}
	walk(d)
	return out
}

func TestSignerViewsHaveReferenceFields(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.create(t, "/external-jwt-signers", `{"name":"idp","enabled":true,"issuer":"https://idp.example.com","audience":"zmesh","jwksEndpoint":"https://idp.example.com/jwks","clientId":"cli","scopes":["openid","email"],"externalAuthUrl":"https://idp.example.com/auth"}`)
	var mgmt map[string]any
	decodeData(t, f.do("GET", ManagementBase+"/external-jwt-signers/"+id, f.admin, "").Body.Bytes(), &mgmt)
	var client []map[string]any
	decodeData(t, f.do("GET", ClientBase+"/external-jwt-signers", "", "").Body.Bytes(), &client)
	if len(client) != 1 {
		t.Fatalf("client signers: %v", client)
	}
	for _, c := range []struct {
		file, def string
		view      map[string]any
	}{
		{"management.yml", "externalJwtSignerDetail", mgmt},
		{"client.yml", "clientExternalJwtSignerDetail", client[0]},
	} {
		for _, p := range refProperties(t, c.file, c.def) {
			if _, ok := c.view[p]; !ok {
				t.Errorf("%s: no field %s in %v", c.def, p, c.view)
			}
		}
		if scopes, ok := c.view["scopes"].([]any); !ok || len(scopes) != 2 || scopes[0] != "openid" {
			t.Errorf("%s: scopes %#v, want an array", c.def, c.view["scopes"])
		}
	}
}

func TestIdentityPostureData(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	user := f.identityID(t, "user")
	type base struct {
		PostureCheckID string  `json:"postureCheckId"`
		TimedOut       bool    `json:"timedOut"`
		LastUpdatedAt  *string `json:"lastUpdatedAt"`
	}
	var data struct {
		Mac struct {
			base
			Addresses []string `json:"addresses"`
		} `json:"mac"`
		Domain struct {
			base
			Domain string `json:"domain"`
		} `json:"domain"`
		OS struct {
			base
			Type    string `json:"type"`
			Version string `json:"version"`
		} `json:"os"`
		Processes []struct {
			base
			BinaryHash string `json:"binaryHash"`
			IsRunning  bool   `json:"isRunning"`
		} `json:"processes"`
		Sessions map[string]struct {
			MFA struct {
				APISessionID string `json:"apiSessionId"`
				PassedMFA    bool   `json:"passedMfa"`
			} `json:"mfa"`
			EndpointState struct {
				WokenAt *string `json:"wokenAt"`
			} `json:"endpointState"`
		} `json:"apiSessionPostureData"`
	}
	read := func() {
		t.Helper()
		rec := f.do("GET", ManagementBase+"/identities/"+user+"/posture-data", f.admin, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("posture data: %d %s", rec.Code, rec.Body)
		}
		data.Processes = nil
		decodeData(t, rec.Body.Bytes(), &data)
	}
	read()
	if data.Domain.LastUpdatedAt != nil || len(data.Processes) != 0 || len(data.Sessions) != 1 {
		t.Fatalf("before any report: %+v", data)
	}
	body := `[{"id":"d1","typeId":"DOMAIN","domain":"corp.example"},{"id":"o1","typeId":"OS","type":"Linux","version":"6.1","build":"x"},` +
		`{"id":"m1","typeId":"MAC","macAddresses":["AA:BB:CC:DD:EE:FF"]},{"id":"p1","typeId":"PROCESS","path":"/usr/bin/agent","isRunning":true,"hash":"ABCD"},` +
		`{"id":"e1","typeId":"ENDPOINT_STATE","woken":true}]`
	if rec := f.do("POST", ClientBase+"/posture-response-bulk", f.normal, body); rec.Code != http.StatusOK {
		t.Fatalf("posture responses: %d %s", rec.Code, rec.Body)
	}
	read()
	if data.Domain.Domain != "corp.example" || data.Domain.LastUpdatedAt == nil || data.OS.Type != "Linux" || data.OS.Version != "6.1" ||
		len(data.Mac.Addresses) != 1 || len(data.Processes) != 1 || !data.Processes[0].IsRunning || data.Processes[0].PostureCheckID != "p1" {
		t.Fatalf("after reports: %+v", data)
	}
	for id, s := range data.Sessions {
		if s.MFA.APISessionID != id || s.MFA.PassedMFA || s.EndpointState.WokenAt == nil {
			t.Fatalf("API session %s: %+v", id, s)
		}
	}
	if rec := f.do("GET", ManagementBase+"/identities/nope/posture-data", f.admin, ""); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown identity: %d", rec.Code)
	}
}

func TestFailedServiceRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	user := f.identityID(t, "user")
	web := f.create(t, "/services", `{"name":"web"}`)
	f.enrolledRouter(t, `{"name":"er1"}`)
	f.create(t, "/edge-router-policies", `{"name":"all","semantic":"AnyOf","identityRoles":["#all"],"edgeRouterRoles":["#all"]}`)
	f.create(t, "/service-edge-router-policies", `{"name":"all","semantic":"AnyOf","serviceRoles":["#all"],"edgeRouterRoles":["#all"]}`)
	check := f.create(t, "/posture-checks", `{"name":"corp-domain","typeId":"DOMAIN","domains":["corp.example"],"roleAttributes":["corp"]}`)
	policy := f.create(t, "/service-policies", `{"name":"web-corp","type":"Dial","semantic":"AnyOf","identityRoles":["@`+user+`"],"serviceRoles":["@`+web+`"],"postureCheckRoles":["#corp"]}`)

	type failure struct {
		APISessionID   string `json:"apiSessionId"`
		ServiceID      string `json:"serviceId"`
		ServiceName    string `json:"serviceName"`
		SessionType    string `json:"sessionType"`
		When           string `json:"when"`
		PolicyFailures []struct {
			PolicyID   string `json:"policyId"`
			PolicyName string `json:"policyName"`
			Checks     []struct {
				PostureCheckID   string   `json:"postureCheckId"`
				PostureCheckName string   `json:"postureCheckName"`
				PostureCheckType string   `json:"postureCheckType"`
				ActualValue      string   `json:"actualValue"`
				ExpectedValue    []string `json:"expectedValue"`
			} `json:"checks"`
		} `json:"policyFailures"`
	}
	list := func() []failure {
		t.Helper()
		rec := f.do("GET", ManagementBase+"/identities/"+user+"/failed-service-requests", f.admin, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("failed service requests: %d %s", rec.Code, rec.Body)
		}
		var out []failure
		decodeData(t, rec.Body.Bytes(), &out)
		return out
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("before: %+v", l)
	}
	f.do("POST", ClientBase+"/posture-response", f.normal, `{"id":"`+check+`","typeId":"DOMAIN","domain":"home.example"}`)
	if rec := f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Dial"}`); rec.Code != http.StatusConflict {
		t.Fatalf("dial with a failing posture: %d %s", rec.Code, rec.Body)
	}
	l := list()
	if len(l) != 1 || l[0].ServiceID != web || l[0].ServiceName != "web" || l[0].SessionType != "Dial" || l[0].APISessionID == "" || l[0].When == "" ||
		len(l[0].PolicyFailures) != 1 || l[0].PolicyFailures[0].PolicyID != policy || l[0].PolicyFailures[0].PolicyName != "web-corp" {
		t.Fatalf("failure: %+v", l)
	}
	c := l[0].PolicyFailures[0].Checks
	if len(c) != 1 || c[0].PostureCheckID != check || c[0].PostureCheckType != "DOMAIN" || c[0].ActualValue != "home.example" || len(c[0].ExpectedValue) != 1 {
		t.Fatalf("check failure: %+v", c)
	}
	// A request that passes is not a failure.
	f.do("POST", ClientBase+"/posture-response", f.normal, `{"id":"`+check+`","typeId":"DOMAIN","domain":"corp.example"}`)
	if rec := f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Dial"}`); rec.Code != http.StatusCreated {
		t.Fatalf("dial with a passing posture: %d %s", rec.Code, rec.Body)
	}
	if l := list(); len(l) != 1 {
		t.Fatalf("after a success: %+v", l)
	}
}

func TestRoutersAndTransitRouters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.enrolledRouter(t, `{"name":"er1","roleAttributes":["edge"],"cost":3}`)
	f.s.info.Routers = onlineRouters{id: true}
	want := refProperties(t, "management.yml", "routerDetail")
	for _, base := range []string{"/routers", "/transit-routers"} {
		var list []map[string]any
		decodeData(t, f.do("GET", ManagementBase+base, f.admin, "").Body.Bytes(), &list)
		if len(list) != 1 || list[0]["id"] != id || list[0]["isOnline"] != true || list[0]["isVerified"] != true {
			t.Fatalf("%s: %v", base, list)
		}
		var one map[string]any
		decodeData(t, f.do("GET", ManagementBase+base+"/"+id, f.admin, "").Body.Bytes(), &one)
		for _, p := range want {
			if _, ok := one[p]; !ok {
				t.Errorf("%s/{id}: no field %s", base, p)
			}
		}
	}
	if rec := f.do("PATCH", ManagementBase+"/routers/"+id, f.admin, `{"cost":7,"noTraversal":true}`); rec.Code != http.StatusOK {
		t.Fatalf("patch: %d %s", rec.Code, rec.Body)
	}
	var er struct {
		Cost           int      `json:"cost"`
		NoTraversal    bool     `json:"noTraversal"`
		Name           string   `json:"name"`
		RoleAttributes []string `json:"roleAttributes"`
	}
	decodeData(t, f.do("GET", ManagementBase+"/edge-routers/"+id, f.admin, "").Body.Bytes(), &er)
	if er.Cost != 7 || !er.NoTraversal || len(er.RoleAttributes) != 1 {
		t.Fatalf("edge router after patch: %+v", er)
	}
	if rec := f.do("PUT", ManagementBase+"/transit-routers/"+id, f.admin, `{"name":"r2"}`); rec.Code != http.StatusOK {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	decodeData(t, f.do("GET", ManagementBase+"/edge-routers/"+id, f.admin, "").Body.Bytes(), &er)
	if er.Name != "r2" || er.Cost != 0 || er.NoTraversal || len(er.RoleAttributes) != 1 {
		t.Fatalf("edge router after put: %+v", er)
	}
	if rec := f.do("PATCH", ManagementBase+"/routers/"+id, f.admin, `{"configs":["x"]}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "configs") {
		t.Fatalf("router configs: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", ManagementBase+"/routers", f.admin, `{"name":"r3"}`); rec.Code != http.StatusNotImplemented || errorCode(t, rec) != codeNotImplemented {
		t.Fatalf("create a router: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("DELETE", ManagementBase+"/transit-routers/"+id, f.admin, ""); rec.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ManagementBase+"/edge-routers/"+id, f.admin, ""); rec.Code != http.StatusNotFound {
		t.Fatalf("edge router after delete: %d", rec.Code)
	}
}
