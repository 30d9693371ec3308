package api

import (
	"encoding/json"
	"testing"
)

// decodeData decodes the data of an enveloped answer.
func decodeData(t *testing.T, body []byte, v any) {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("not an envelope: %s", body)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("data: %v: %s", err, env.Data)
	}
}

func (f *fixture) create(t *testing.T, path, body string) string {
	t.Helper()
	rec := f.do("POST", ManagementBase+path, f.admin, body)
	if rec.Code != 201 {
		t.Fatalf("POST %s %s: %d %s", path, body, rec.Code, rec.Body)
	}
	var out struct {
		ID string `json:"id"`
	}
	decodeData(t, rec.Body.Bytes(), &out)
	return out.ID
}

func TestServicesAndSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// The fixture's "user" gets the attribute staff.
	var users []struct {
		ID string `json:"id"`
	}
	rec := f.do("GET", ManagementBase+`/identities?filter=name%20%3D%20%22user%22`, f.admin, "")
	decodeData(t, rec.Body.Bytes(), &users)
	if rec := f.do("PATCH", ManagementBase+"/identities/"+users[0].ID, f.admin, `{"roleAttributes":["staff"]}`); rec.Code != 200 {
		t.Fatalf("patch identity: %d %s", rec.Code, rec.Body)
	}
	web := f.create(t, "/services", `{"name":"web","encryptionRequired":true,"roleAttributes":["public"]}`)
	db := f.create(t, "/services", `{"name":"db","encryptionRequired":false,"roleAttributes":["internal"]}`)
	dialWeb := f.create(t, "/service-policies", `{"name":"staff-web","type":"Dial","semantic":"AnyOf","identityRoles":["#staff"],"serviceRoles":["#public"]}`)
	f.create(t, "/service-policies", `{"name":"staff-host-db","type":"Bind","semantic":"AllOf","identityRoles":["#staff"],"serviceRoles":["@`+db+`"]}`)

	var services []struct {
		Name        string   `json:"name"`
		Permissions []string `json:"permissions"`
	}
	rec = f.do("GET", ClientBase+"/services?filter="+`name%20!%3D%20%22x%22%20sort%20by%20name`, f.normal, "")
	decodeData(t, rec.Body.Bytes(), &services)
	if len(services) != 2 || services[0].Name != "db" || services[0].Permissions[0] != "Bind" || services[1].Permissions[0] != "Dial" {
		t.Fatalf("services: %s", rec.Body)
	}

	rec = f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Dial"}`)
	if rec.Code != 400 || errorCode(t, rec) != "NO_EDGE_ROUTERS_AVAILABLE" {
		t.Fatalf("session without routers: %d %s", rec.Code, rec.Body)
	}
	f.enrolledRouter(t, `{"name":"er1","roleAttributes":["edge"]}`)
	f.create(t, "/edge-router-policies", `{"name":"all","semantic":"AnyOf","identityRoles":["#all"],"edgeRouterRoles":["#edge"]}`)
	f.create(t, "/service-edge-router-policies", `{"name":"all","semantic":"AnyOf","serviceRoles":["#all"],"edgeRouterRoles":["#all"]}`)

	var before struct {
		LastChangeAt string `json:"lastChangeAt"`
	}
	decodeData(t, f.do("GET", ClientBase+"/current-api-session/service-updates", f.normal, "").Body.Bytes(), &before)

	rec = f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Dial"}`)
	if rec.Code != 201 {
		t.Fatalf("dial session: %d %s", rec.Code, rec.Body)
	}
	var sess struct {
		ID          string `json:"id"`
		Token       string `json:"token"`
		EdgeRouters []struct {
			Name string `json:"name"`
		} `json:"edgeRouters"`
	}
	decodeData(t, rec.Body.Bytes(), &sess)
	if sess.Token == "" || len(sess.EdgeRouters) != 1 {
		t.Fatalf("session: %s", rec.Body)
	}
	if rec := f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Bind"}`); rec.Code != 400 {
		t.Errorf("bind without policy: %d %s", rec.Code, rec.Body)
	}
	// session-token: a valid one is accepted, an invalid one is 401.
	req := func(token string) int {
		r := f.do("GET", ClientBase+"/services/"+web+"/edge-routers", f.normal, "")
		if token != "" {
			hr := newReq("GET", ClientBase+"/services/"+web+"/edge-routers", f.normal)
			hr.Header.Set("session-token", token)
			r = f.serve(hr)
		}
		return r.Code
	}
	if c := req(sess.Token); c != 200 {
		t.Errorf("edge routers with a valid session-token: %d", c)
	}
	if c := req("bogus"); c != 401 {
		t.Errorf("edge routers with a bad session-token: %d", c)
	}

	// Deleting the policy ends the session and moves service-updates; deleting others' is 404.
	if rec := f.do("DELETE", ManagementBase+"/service-policies/"+dialWeb, f.admin, ""); rec.Code != 200 {
		t.Fatalf("delete policy: %d", rec.Code)
	}
	if rec := f.do("GET", ClientBase+"/sessions/"+sess.ID, f.normal, ""); rec.Code != 404 {
		t.Errorf("session after its policy was deleted: %d %s", rec.Code, rec.Body)
	}
	var after struct {
		LastChangeAt string `json:"lastChangeAt"`
	}
	decodeData(t, f.do("GET", ClientBase+"/current-api-session/service-updates", f.normal, "").Body.Bytes(), &after)
	if after.LastChangeAt <= before.LastChangeAt {
		t.Errorf("service-updates did not move: %s then %s", before.LastChangeAt, after.LastChangeAt)
	}
	// encryptionRequired is set at creation only.
	if rec := f.do("PATCH", ManagementBase+"/services/"+web, f.admin, `{"encryptionRequired":false}`); rec.Code != 400 {
		t.Errorf("changing encryptionRequired: %d %s", rec.Code, rec.Body)
	}
	// Client API service changes are for administrators.
	if rec := f.do("PATCH", ClientBase+"/services/"+web, f.normal, `{"name":"w"}`); rec.Code != 403 {
		t.Errorf("non-admin client PATCH: %d", rec.Code)
	}
	if rec := f.do("PATCH", ClientBase+"/services/"+web, f.admin, `{"name":"w"}`); rec.Code != 200 {
		t.Errorf("admin client PATCH: %d %s", rec.Code, rec.Body)
	}
}

// openZitiEncryption defaults to false, is set by create, changed by update and patch (unlike
// encryptionRequired), rendered by both APIs and filterable.
func TestServiceOpenZitiEncryption(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var users []struct {
		ID string `json:"id"`
	}
	decodeData(t, f.do("GET", ManagementBase+`/identities?filter=name%20%3D%20%22user%22`, f.admin, "").Body.Bytes(), &users)
	plain := f.create(t, "/services", `{"name":"plain","encryptionRequired":true}`)
	ziti := f.create(t, "/services", `{"name":"ziti","encryptionRequired":true,"openZitiEncryption":true}`)
	f.create(t, "/service-policies", `{"name":"dial-all","type":"Dial","semantic":"AnyOf","identityRoles":["@`+users[0].ID+`"],"serviceRoles":["#all"]}`)

	type svc struct {
		Name               string `json:"name"`
		OpenZitiEncryption *bool  `json:"openZitiEncryption"`
	}
	get := func(base, token, id string) bool {
		t.Helper()
		rec := f.do("GET", base+"/services/"+id, token, "")
		var s svc
		decodeData(t, rec.Body.Bytes(), &s)
		if s.OpenZitiEncryption == nil {
			t.Fatalf("%s service %s renders no openZitiEncryption: %s", base, id, rec.Body)
		}
		return *s.OpenZitiEncryption
	}
	for _, base := range []string{ManagementBase, ClientBase} {
		token := f.admin
		if base == ClientBase {
			token = f.normal
		}
		if get(base, token, plain) || !get(base, token, ziti) {
			t.Errorf("%s: openZitiEncryption of plain and ziti: %v %v", base, get(base, token, plain), get(base, token, ziti))
		}
	}
	var listed []svc
	decodeData(t, f.do("GET", ManagementBase+"/services?filter=openZitiEncryption%20%3D%20true", f.admin, "").Body.Bytes(), &listed)
	if len(listed) != 1 || listed[0].Name != "ziti" {
		t.Errorf("services filtered by openZitiEncryption = true: %+v", listed)
	}
	if rec := f.do("PATCH", ManagementBase+"/services/"+plain, f.admin, `{"openZitiEncryption":true}`); rec.Code != 200 {
		t.Fatalf("patch openZitiEncryption: %d %s", rec.Code, rec.Body)
	}
	if !get(ManagementBase, f.admin, plain) {
		t.Error("openZitiEncryption not changed by PATCH")
	}
	if rec := f.do("PUT", ManagementBase+"/services/"+ziti, f.admin, `{"name":"ziti","openZitiEncryption":false}`); rec.Code != 200 {
		t.Fatalf("put openZitiEncryption: %d %s", rec.Code, rec.Body)
	}
	if get(ManagementBase, f.admin, ziti) {
		t.Error("openZitiEncryption not changed by PUT")
	}
	if rec := f.do("PATCH", ManagementBase+"/services/"+plain, f.admin, `{"openZitiEncryption":"yes"}`); rec.Code != 400 {
		t.Errorf("openZitiEncryption as a string: %d %s", rec.Code, rec.Body)
	}
}
