package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestConfigs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	intercept := f.create(t, "/configs", `{"name":"web-intercept","configTypeId":"intercept.v1","data":{"protocols":["tcp"],"addresses":["web.zmesh"],"portRanges":[{"low":80,"high":80}]}}`)
	host := f.create(t, "/configs", `{"name":"web-host","configTypeId":"host.v1","data":{"protocol":"tcp","address":"127.0.0.1","port":8080}}`)

	for _, tt := range []struct{ body, field string }{
		{`{"name":"bad","configTypeId":"intercept.v1","data":{"addresses":["x"],"portRanges":[{"low":1,"high":2}]}}`, "data"},
		{`{"name":"bad","configTypeId":"host.v1","data":{"protocol":"sctp","address":"h","port":1}}`, "data.protocol"},
		{`{"name":"bad","configTypeId":"nope","data":{}}`, "configTypeId"},
		{`{"name":"bad","configTypeId":"host.v1","data":[1]}`, "data"},
	} {
		rec := f.do("POST", ManagementBase+"/configs", f.admin, tt.body)
		var env struct {
			Error struct {
				Code  string `json:"code"`
				Cause struct {
					Field string `json:"field"`
				} `json:"cause"`
			} `json:"error"`
		}
		json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != 400 || env.Error.Code != "COULD_NOT_VALIDATE" || !strings.HasPrefix(env.Error.Cause.Field, tt.field) {
			t.Errorf("%s: %d %s, want a COULD_NOT_VALIDATE naming %s", tt.body, rec.Code, rec.Body, tt.field)
		}
	}

	svc := f.create(t, "/services", `{"name":"web","encryptionRequired":false,"configs":["`+intercept+`","`+host+`"]}`)
	if rec := f.do("POST", ManagementBase+"/services", f.admin, `{"name":"web2","encryptionRequired":false,"configs":["`+intercept+`","`+intercept+`"]}`); rec.Code != 400 {
		t.Errorf("two configs of one type: %d %s", rec.Code, rec.Body)
	}
	f.create(t, "/service-policies", `{"name":"all-dial","type":"Dial","semantic":"AnyOf","identityRoles":["#all"],"serviceRoles":["#all"]}`)

	var list []struct {
		Config map[string]map[string]any `json:"config"`
	}
	rec := f.do("GET", ClientBase+"/services?configTypes=intercept.v1", f.normal, "")
	decodeData(t, rec.Body.Bytes(), &list)
	if len(list) != 1 || list[0].Config["intercept.v1"]["addresses"] == nil || list[0].Config["host.v1"] != nil {
		t.Errorf("embedded configs: %s", rec.Body)
	}

	// References block deletes.
	if rec := f.do("DELETE", ManagementBase+"/configs/"+intercept, f.admin, ""); rec.Code != 409 || errorCode(t, rec) != "CAN_NOT_DELETE_REFERENCED_ENTITY" {
		t.Errorf("delete a used config: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("DELETE", ManagementBase+"/config-types/host.v1", f.admin, ""); rec.Code != 409 {
		t.Errorf("delete a built-in type: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("PATCH", ManagementBase+"/services/"+svc, f.admin, `{"configs":["`+host+`"]}`); rec.Code != 200 {
		t.Fatalf("detach config: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("DELETE", ManagementBase+"/configs/"+intercept, f.admin, ""); rec.Code != 200 {
		t.Errorf("delete an unused config: %d %s", rec.Code, rec.Body)
	}

	// User config types carry a schema, checked at creation.
	typ := f.create(t, "/config-types", `{"name":"acme.v1","schema":{"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":1}}}}`)
	if rec := f.do("POST", ManagementBase+"/config-types", f.admin, `{"name":"broken","schema":{"type":"nonsense"}}`); rec.Code != 400 {
		t.Errorf("invalid schema: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", ManagementBase+"/config-types", f.admin, `{"name":"remote","schema":{"$ref":"file:///etc/passwd"}}`); rec.Code != 400 {
		t.Errorf("schema reading a file: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", ManagementBase+"/configs", f.admin, `{"name":"a","configTypeId":"`+typ+`","data":{"n":0}}`); rec.Code != 400 {
		t.Errorf("user type violation: %d %s", rec.Code, rec.Body)
	}
	f.create(t, "/configs", `{"name":"a","configTypeId":"`+typ+`","data":{"n":3}}`)
	if rec := f.do("DELETE", ManagementBase+"/config-types/"+typ, f.admin, ""); rec.Code != 409 {
		t.Errorf("delete a used type: %d %s", rec.Code, rec.Body)
	}
}
