package api

import (
	"encoding/json"
	"errors"
	"net/url"
	"testing"

	"github.com/zmesh/zmesh/controlplane/model"
)

// fieldOf returns the code and the field named by an error envelope.
func fieldOf(t *testing.T, body []byte) (code, field string) {
	t.Helper()
	var env struct {
		Error struct {
			Code  string `json:"code"`
			Cause struct {
				Field string `json:"field"`
			} `json:"cause"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	return env.Error.Code, env.Error.Cause.Field
}

func TestPostureCheckCRUD(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const base = ManagementBase + "/posture-checks"
	invalid := []struct{ body, field string }{
		{`{"typeId":"DOMAIN","domains":["a"]}`, "name"},
		{`{"name":"d","domains":["a"]}`, "typeId"},
		{`{"name":"d","typeId":"SMELL"}`, "typeId"},
		{`{"name":"d","typeId":"DOMAIN"}`, "domains"},
		{`{"name":"d","typeId":"DOMAIN","domains":["a"],"macAddresses":["00:11:22:33:44:55"]}`, "macAddresses"},
		{`{"name":"d","typeId":"MAC","macAddresses":["zz"]}`, "macAddresses[0]"},
		{`{"name":"d","typeId":"OS","operatingSystems":[{"type":"Linux","versions":["~1"]}]}`, "operatingSystems[0].versions[0]"},
		{`{"name":"d","typeId":"OS","operatingSystems":[{"type":"Linux","colour":"red"}]}`, "operatingSystems[0].colour"},
		{`{"name":"d","typeId":"PROCESS","process":{"osType":"Plan9","path":"/x"}}`, "process.osType"},
		{`{"name":"d","typeId":"MFA","timeoutSeconds":"soon"}`, "timeoutSeconds"},
	}
	for _, tt := range invalid {
		rec := f.do("POST", base, f.admin, tt.body)
		if code, field := fieldOf(t, rec.Body.Bytes()); rec.Code != 400 || code != "COULD_NOT_VALIDATE" || field != tt.field {
			t.Errorf("%s: %d %s, want 400 COULD_NOT_VALIDATE naming %s", tt.body, rec.Code, rec.Body, tt.field)
		}
	}

	domain := f.create(t, "/posture-checks", `{"name":"corp","typeId":"DOMAIN","domains":["corp.example"],"roleAttributes":["corp"],"tags":{"k":"v"}}`)
	f.create(t, "/posture-checks", `{"name":"mfa","typeId":"MFA","timeoutSeconds":300,"promptOnWake":true}`)
	f.create(t, "/posture-checks", `{"name":"os","typeId":"OS","operatingSystems":[{"type":"Windows","versions":[">=10.0.19041"]},{"type":"macOS","versions":[]}]}`)
	f.create(t, "/posture-checks", `{"name":"av","typeId":"PROCESS","process":{"osType":"Windows","path":"C:\\av.exe","hashes":["ab12"],"signerFingerprint":"ff00"}}`)
	f.create(t, "/posture-checks", `{"name":"mac","typeId":"MAC","macAddresses":["00:11:22:33:44:55"]}`)
	f.create(t, "/posture-checks", `{"name":"multi","typeId":"PROCESS_MULTI","semantic":"AnyOf","processes":[{"osType":"Linux","path":"/a"},{"osType":"Linux","path":"/b","signerFingerprints":["aa"]}]}`)

	var got map[string]any
	rec := f.do("GET", base+"/"+domain, f.admin, "")
	decodeData(t, rec.Body.Bytes(), &got)
	if rec.Code != 200 || got["typeId"] != "DOMAIN" || got["version"] != 1.0 || got["domains"].([]any)[0] != "corp.example" || got["tags"].(map[string]any)["k"] != "v" {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	var list []map[string]any
	rec = f.do("GET", base+"?filter="+url.QueryEscape(`typeId in ["MFA", "PROCESS"] sort by name`), f.admin, "")
	decodeData(t, rec.Body.Bytes(), &list)
	if len(list) != 2 || list[0]["name"] != "av" || list[0]["process"].(map[string]any)["signerFingerprint"] != "ff00" ||
		list[1]["timeoutSeconds"] != 300.0 || list[1]["promptOnWake"] != true {
		t.Fatalf("list: %s", rec.Body)
	}

	// The type cannot change; fields of other types are refused; patch and replace work.
	for _, tt := range []struct{ method, body, field string }{
		{"PATCH", `{"typeId":"MAC","macAddresses":["00:11:22:33:44:55"]}`, "typeId"},
		{"PATCH", `{"timeoutSeconds":5}`, "timeoutSeconds"},
		{"PUT", `{"name":"corp","typeId":"DOMAIN"}`, "domains"},
	} {
		rec := f.do(tt.method, base+"/"+domain, f.admin, tt.body)
		if code, field := fieldOf(t, rec.Body.Bytes()); rec.Code != 400 || code != "COULD_NOT_VALIDATE" || field != tt.field {
			t.Errorf("%s %s: %d %s, want naming %s", tt.method, tt.body, rec.Code, rec.Body, tt.field)
		}
	}
	if rec := f.do("PATCH", base+"/"+domain, f.admin, `{"domains":["a.example","b.example"]}`); rec.Code != 200 {
		t.Fatalf("patch: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("PUT", base+"/"+domain, f.admin, `{"name":"corp2","typeId":"DOMAIN","domains":["c.example"]}`); rec.Code != 200 {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	got = nil
	decodeData(t, f.do("GET", base+"/"+domain, f.admin, "").Body.Bytes(), &got)
	if got["name"] != "corp2" || got["version"] != 3.0 || len(got["domains"].([]any)) != 1 || len(got["roleAttributes"].([]any)) != 0 || len(got["tags"].(map[string]any)) != 0 {
		t.Errorf("after put: %v", got)
	}

	// Types.
	var types []map[string]any
	rec = f.do("GET", ManagementBase+"/posture-check-types?limit=100", f.admin, "")
	decodeData(t, rec.Body.Bytes(), &types)
	if len(types) != 6 {
		t.Errorf("posture check types: %s", rec.Body)
	}
	if rec := f.do("GET", ManagementBase+"/posture-check-types/MFA", f.admin, ""); rec.Code != 200 {
		t.Errorf("type MFA: %d", rec.Code)
	}
	if rec := f.do("GET", ManagementBase+"/posture-check-types/NOPE", f.admin, ""); rec.Code != 404 {
		t.Errorf("unknown type: %d", rec.Code)
	}

	// A check a policy names by id cannot be deleted; once the policy is gone it can.
	pol := f.create(t, "/service-policies", `{"name":"p","type":"Dial","semantic":"AnyOf","postureCheckRoles":["@`+domain+`"]}`)
	if rec := f.do("DELETE", base+"/"+domain, f.admin, ""); rec.Code != 409 || errorCode(t, rec) != "CAN_NOT_DELETE_REFERENCED_ENTITY" {
		t.Errorf("delete a named check: %d %s", rec.Code, rec.Body)
	}
	f.do("DELETE", ManagementBase+"/service-policies/"+pol, f.admin, "")
	if rec := f.do("DELETE", base+"/"+domain, f.admin, ""); rec.Code != 200 {
		t.Errorf("delete: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", base+"/"+domain, f.admin, ""); rec.Code != 404 {
		t.Errorf("get after delete: %d", rec.Code)
	}
}

func TestPostureGatedDial(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var users []struct {
		ID string `json:"id"`
	}
	decodeData(t, f.do("GET", ManagementBase+`/identities?filter=`+url.QueryEscape(`name = "user"`), f.admin, "").Body.Bytes(), &users)
	if rec := f.do("PATCH", ManagementBase+"/identities/"+users[0].ID, f.admin, `{"roleAttributes":["staff"]}`); rec.Code != 200 {
		t.Fatalf("patch identity: %d %s", rec.Code, rec.Body)
	}
	web := f.create(t, "/services", `{"name":"web","encryptionRequired":true}`)
	vault := f.create(t, "/services", `{"name":"vault","encryptionRequired":true}`)
	f.enrolledRouter(t, `{"name":"er1"}`)
	f.create(t, "/edge-router-policies", `{"name":"all","semantic":"AnyOf","identityRoles":["#all"],"edgeRouterRoles":["#all"]}`)
	f.create(t, "/service-edge-router-policies", `{"name":"all","semantic":"AnyOf","serviceRoles":["#all"],"edgeRouterRoles":["#all"]}`)
	check := f.create(t, "/posture-checks", `{"name":"corp-domain","typeId":"DOMAIN","domains":["corp.example"],"roleAttributes":["corp"]}`)
	f.create(t, "/posture-checks", `{"name":"mfa","typeId":"MFA","roleAttributes":["strong"]}`)
	policy := f.create(t, "/service-policies", `{"name":"web-corp","type":"Dial","semantic":"AnyOf","identityRoles":["#staff"],"serviceRoles":["@`+web+`"],"postureCheckRoles":["#corp"]}`)
	f.create(t, "/service-policies", `{"name":"vault-mfa","type":"Dial","semantic":"AnyOf","identityRoles":["#staff"],"serviceRoles":["@`+vault+`"],"postureCheckRoles":["#strong"]}`)

	dial := func(svc string) (int, string, string) {
		rec := f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+svc+`","type":"Dial"}`)
		var s struct {
			ID string `json:"id"`
		}
		if rec.Code == 201 {
			decodeData(t, rec.Body.Bytes(), &s)
			return rec.Code, "", s.ID
		}
		return rec.Code, errorCode(t, rec), ""
	}
	if code, ec, _ := dial(web); code != 409 || ec != "INVALID_POSTURE" {
		t.Fatalf("dial without posture: %d %s", code, ec)
	}
	// The service list says what is asked and that it fails.
	type query struct {
		ID        string `json:"id"`
		QueryType string `json:"queryType"`
		IsPassing bool   `json:"isPassing"`
		Timeout   int    `json:"timeout"`
	}
	type svcView struct {
		Name           string `json:"name"`
		PostureQueries []struct {
			PolicyID       string  `json:"policyId"`
			PolicyType     string  `json:"policyType"`
			IsPassing      bool    `json:"isPassing"`
			PostureQueries []query `json:"postureQueries"`
		} `json:"postureQueries"`
	}
	var sv svcView
	decodeData(t, f.do("GET", ClientBase+"/services/"+web, f.normal, "").Body.Bytes(), &sv)
	if len(sv.PostureQueries) != 1 || sv.PostureQueries[0].PolicyID != policy || sv.PostureQueries[0].IsPassing ||
		len(sv.PostureQueries[0].PostureQueries) != 1 || sv.PostureQueries[0].PostureQueries[0].ID != check ||
		sv.PostureQueries[0].PostureQueries[0].QueryType != "DOMAIN" || sv.PostureQueries[0].PostureQueries[0].Timeout != -1 {
		t.Errorf("postureQueries before the response: %+v", sv)
	}

	rec := f.do("POST", ClientBase+"/posture-response", f.normal, `{"id":"`+check+`","typeId":"DOMAIN","domain":"corp.example"}`)
	var pr struct {
		Services []any `json:"services"`
	}
	decodeData(t, rec.Body.Bytes(), &pr)
	if rec.Code != 201 || pr.Services == nil {
		t.Fatalf("posture response: %d %s", rec.Code, rec.Body)
	}
	code, _, sess := dial(web)
	if code != 201 {
		t.Fatalf("dial with a satisfied posture: %d", code)
	}
	decodeData(t, f.do("GET", ClientBase+"/services/"+web, f.normal, "").Body.Bytes(), &sv)
	if !sv.PostureQueries[0].IsPassing || !sv.PostureQueries[0].PostureQueries[0].IsPassing {
		t.Errorf("postureQueries after the response: %+v", sv)
	}
	// MFA does not exist yet for this API session: the MFA-gated service stays closed.
	if code, ec, _ := dial(vault); code != 409 || ec != "INVALID_POSTURE" {
		t.Errorf("dial of an MFA-gated service: %d %s", code, ec)
	}

	// Bulk: a bad element is named; a changed domain ends the session.
	rec = f.do("POST", ClientBase+"/posture-response-bulk", f.normal, `[{"id":"o","typeId":"OS","type":"Linux","version":"6.1"},{"id":"d","typeId":"DOMAIN"}]`)
	if code, field := fieldOf(t, rec.Body.Bytes()); rec.Code != 400 || code != "COULD_NOT_VALIDATE" || field != "[1].domain" {
		t.Errorf("bulk with a missing field: %d %s", rec.Code, rec.Body)
	}
	rec = f.do("POST", ClientBase+"/posture-response-bulk", f.normal, `[{"id":"o","typeId":"OS","type":"Linux","version":"6.1","build":"x"},{"id":"d","typeId":"DOMAIN","domain":"evil.example"},{"id":"e","typeId":"ENDPOINT_STATE","woken":true}]`)
	if rec.Code != 200 {
		t.Fatalf("bulk: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ClientBase+"/sessions/"+sess, f.normal, ""); rec.Code != 404 {
		t.Errorf("session after the domain changed: %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []struct{ body, field string }{
		{`{"id":"x","typeId":"DOMAIN","domain":"a","path":"/x"}`, "path"},
		{`{"id":"x","typeId":"MFA"}`, "typeId"},
		{`{"typeId":"DOMAIN","domain":"a"}`, "id"},
		{`{"id":"x","typeId":"PROCESS","isRunning":true}`, "path"},
	} {
		rec := f.do("POST", ClientBase+"/posture-response", f.normal, bad.body)
		if code, field := fieldOf(t, rec.Body.Bytes()); rec.Code != 400 || code != "COULD_NOT_VALIDATE" || field != bad.field {
			t.Errorf("%s: %d %s, want naming %s", bad.body, rec.Code, rec.Body, bad.field)
		}
	}
	if rec := f.do("POST", ClientBase+"/posture-response", "", `{"id":"x","typeId":"DOMAIN","domain":"a"}`); rec.Code != 401 {
		t.Errorf("posture response without a session: %d", rec.Code)
	}
}

// FuzzPostureResponse: decoding and checking posture responses never panics, and every
// failure is COULD_NOT_VALIDATE.
func FuzzPostureResponse(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","typeId":"DOMAIN","domain":"x"}`, `{"id":"a","typeId":"OS","type":"Linux","version":"1","build":"2"}`,
		`{"id":"a","typeId":"PROCESS","path":"/x","isRunning":true,"hash":"ab","signerFingerprints":["cd"]}`,
		`{"id":"a","typeId":"MAC","macAddresses":["00:11:22:33:44:55"]}`, `{"id":"a","typeId":"ENDPOINT_STATE","woken":true}`,
		`{"id":"","typeId":"MFA"}`, `[]`, `{"id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b postureResponseBody
		err := decodeJSONBytes(data, &b)
		if err == nil {
			_, err = b.toModel()
			if err == nil {
				return
			}
		}
		var ae *apiErr
		if (errors.As(err, &ae) && ae.code == codeCouldNotValidate) || model.CodeOf(err) == codeCouldNotValidate {
			return
		}
		t.Fatalf("error %v is not COULD_NOT_VALIDATE", err)
	})
}
