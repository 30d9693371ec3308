package api

import (
	"errors"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// Request bodies are held to one strict reading: member names match the fields exactly,
// names appear once per object, text is valid UTF-8, and names and usernames are in the
// PRECIS form. Before, encoding/json matched names case-insensitively with the last one
// winning, so that "ISADMIN":true after "isAdmin":false made an administrator.
func TestStrictRequestBodies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	target, err := f.m.CreateIdentity(model.IdentityCreate{Name: "target"})
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	const (
		identities = ManagementBase + "/identities"
		login      = ClientBase + "/authenticate?method=password"
	)
	tests := []struct {
		name, method, path, body string
		status                   int
		field                    string // named by a 400
	}{
		{"member name in other case", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"ISADMIN":true}`, 400, "ISADMIN"},
		{"nested member name in other case", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"enrollment":{"updb":"xuser","UPDB":"admin"}}`, 400, "enrollment.UPDB"},
		{"second password in other case", "POST", login,
			`{"username":"user","password":"wrong-pass","Password":"user-pass"}`, 400, "Password"},
		{"member of a nullable object in other case", "PATCH", ManagementBase + "/auth-policies/default",
			`{"secondary":{"requireExtJwtSigner":null,"RequireTotp":true}}`, 400, "secondary.RequireTotp"},
		{"duplicate name", "POST", identities,
			`{"name":"x","name":"y","type":"User","isAdmin":false}`, 400, "name"},
		{"duplicate isAdmin", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"isAdmin":true}`, 400, "isAdmin"},
		{"duplicate name in tags", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"tags":{"a":"1","a":"2"}}`, 400, "tags.a"},
		{"invalid UTF-8 in a value", "POST", identities,
			"{\"name\":\"x\xff\",\"type\":\"User\",\"isAdmin\":false}", 400, "name"},
		{"invalid UTF-8 in a name", "POST", identities,
			"{\"name\":\"x\",\"type\":\"User\",\"isAdmin\":false,\"tags\":{\"\xc3\":\"v\"}}", 400, "tags"},
		{"lone surrogate", "POST", identities,
			`{"name":"x\ud800","type":"User","isAdmin":false}`, 400, "name"},
		{"NUL in a name", "POST", identities,
			`{"name":"admin\u0000","type":"User","isAdmin":false}`, 400, "name"},
		{"NUL in a username", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"enrollment":{"updb":"admin\u0000"}}`, 400, "enrollment.updb"},
		{"zero-width joiner in a name", "POST", identities,
			`{"name":"ad\u200dmin","type":"User","isAdmin":false}`, 400, "name"},
		{"zero-width joiner in a username", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"enrollment":{"updb":"ad\u200dmin"}}`, 400, "enrollment.updb"},
		{"fullwidth name", "POST", identities,
			`{"name":"ａｄｍｉｎ","type":"User","isAdmin":false}`, 400, "name"},
		{"fullwidth username", "POST", identities,
			`{"name":"x","type":"User","isAdmin":false,"enrollment":{"updb":"ａｄｍｉｎ"}}`, 400, "enrollment.updb"},
		{"fullwidth username of a later enrollment", "POST", ManagementBase + "/enrollments",
			`{"method":"updb","identityId":"` + target.ID + `","expiresAt":"` + expires + `","username":"ａｄｍｉｎ"}`, 400, "username"},
		{"NUL in a service name", "POST", ManagementBase + "/services",
			`{"name":"svc\u0000","encryptionRequired":true}`, 400, "name"},

		{"ordinary identity", "POST", identities,
			`{"name":"José Müller","type":"User","isAdmin":false,"enrollment":{"updb":"jose.mueller"},"tags":{"team":"ops"}}`, 201, ""},
		{"ordinary identity of non-Latin name", "POST", identities,
			`{"name":"日本の名前","type":"User","isAdmin":false,"roleAttributes":["a","b"]}`, 201, ""},
		{"ordinary later enrollment", "POST", ManagementBase + "/enrollments",
			`{"method":"updb","identityId":"` + target.ID + `","expiresAt":"` + expires + `","username":"target-user"}`, 201, ""},
		{"ordinary nullable object", "PATCH", ManagementBase + "/auth-policies/default",
			`{"secondary":{"requireTotp":false,"requireExtJwtSigner":null}}`, 200, ""},
		{"ordinary login", "POST", login, `{"username":"user","password":"user-pass"}`, 200, ""},
	}
	for _, tt := range tests {
		token := f.admin
		if tt.path == login {
			token = ""
		}
		rec := f.do(tt.method, tt.path, token, tt.body)
		if rec.Code != tt.status {
			t.Errorf("%s: %s %s: %d %s, want %d", tt.name, tt.method, tt.path, rec.Code, rec.Body, tt.status)
			continue
		}
		if tt.status != 400 {
			continue
		}
		if code, field := fieldOf(t, rec.Body.Bytes()); code != "COULD_NOT_VALIDATE" || field != tt.field {
			t.Errorf("%s: %s, want COULD_NOT_VALIDATE naming %s", tt.name, rec.Body, tt.field)
		}
	}
	ids, err := f.m.Identities()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id.Name == "x" || id.Name == "y" {
			t.Errorf("a refused body created identity %q (admin %v)", id.Name, id.IsAdmin)
		}
	}
}

// decodeJSONBytes names the member at fault by its path from the body's root.
func TestDecodeNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target func() any
		body   string
		field  string
	}{
		{func() any { return new([]postureResponseBody) }, `[{"id":"c","typeId":"MAC"},{"id":"c","typeId":"MAC","TypeId":"OS"}]`, "[1].TypeId"},
		{func() any { return new([]postureResponseBody) }, `[{"id":"c","typeId":"MAC","macAddresses":["a","a\ud800"]}]`, "[0].macAddresses[1]"},
		{func() any { return new(identityBody) }, `{"roleAttributes":["a",1]}`, "roleAttributes[1]"},
		{func() any { return new(identityBody) }, `{"appData":{"x":{"k":1,"k":2}}}`, "appData.x.k"},
		{func() any { return new(identityBody) }, `{"serviceHostingCosts":{"s":1.5}}`, "serviceHostingCosts.s"},
		{func() any { return new(authPolicyBody) }, "{\"secondary\":{\"requireExtJwtSigner\":\"\xff\"}}", "secondary.requireExtJwtSigner"},
		{func() any { return new(authPolicyBody) }, `{"secondary":{"requireExtJwtSigner":7}}`, "secondary.requireExtJwtSigner"},
		{func() any { return new(authPolicyBody) }, `{"primary":{"updb":{"maxAttempts":1,"maxattempts":2}}}`, "primary.updb.maxattempts"},
		{func() any { return new(erpBody) }, `{"name":"p","edgeRouterRoles":["#a",{}]}`, "edgeRouterRoles[1]"},
		{func() any { return new(erpBody) }, `{"name":"p","Name":"q"}`, "Name"},
		{func() any { return new(signerBody) }, `{"tags":{"a":null,"a":true}}`, "tags.a"},
		{func() any { return new(identityBody) }, `{"name":"a"} {}`, ""},
		{func() any { return new(identityBody) }, `{"name":"a"`, ""},
		{func() any { return new(identityBody) }, `[1]`, ""},
	}
	for _, tt := range tests {
		err := decodeJSONBytes([]byte(tt.body), tt.target())
		var ae *apiErr
		if !errors.As(err, &ae) || ae.code != codeCouldNotValidate || ae.field != tt.field {
			t.Errorf("%q: %v (field %q), want COULD_NOT_VALIDATE naming %q", tt.body, err, fieldOfErr(ae), tt.field)
		}
	}

	// Embedded structs' fields are the body's own, and nullable fields tell null from absent.
	var erp erpBody
	if err := decodeJSONBytes([]byte(`{"name":"p","semantic":"AllOf","edgeRouterRoles":["#a"]}`), &erp); err != nil ||
		erp.Name == nil || *erp.Name != "p" || erp.EdgeRouterRoles == nil || len(*erp.EdgeRouterRoles) != 1 {
		t.Errorf("erp body: %v %+v", err, erp)
	}
	var signer signerBody
	if err := decodeJSONBytes([]byte(`{"name":"s","kid":null,"tags":{"a":"b"}}`), &signer); err != nil ||
		!signer.Name.present() || signer.Name.v != "s" || !signer.Kid.set || !signer.Kid.null || signer.Issuer.set ||
		signer.Tags.v["a"] != "b" {
		t.Errorf("signer body: %v %+v", err, signer)
	}
}

func fieldOfErr(ae *apiErr) string {
	if ae == nil {
		return ""
	}
	return ae.field
}
