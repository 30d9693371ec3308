package api

import (
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// TestDisableIdentityRoutes: POST /identities/{id}/disable ends the identity's API
// sessions at once and refuses its logins like a wrong password, the identity shows
// disabled, disabledAt and disabledUntil, and POST /identities/{id}/enable lifts it; an
// unknown id is 404, a non-administrator 403, a negative or unknown field 400.
func TestDisableIdentityRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids, err := f.m.Identities()
	if err != nil {
		t.Fatal(err)
	}
	var userID string
	for _, i := range ids {
		if i.Name == "user" {
			userID = i.ID
		}
	}
	base := ManagementBase + "/identities/" + userID
	type identity struct {
		Disabled      bool       `json:"disabled"`
		DisabledAt    *time.Time `json:"disabledAt"`
		DisabledUntil *time.Time `json:"disabledUntil"`
	}
	get := func() identity {
		t.Helper()
		rec := f.do("GET", base, f.admin, "")
		if rec.Code != 200 {
			t.Fatalf("GET identity: %d %s", rec.Code, rec.Body)
		}
		var i identity
		refData(t, rec.Body.Bytes(), &i)
		return i
	}
	status := func(method, path, token, body string, want int, code string) {
		t.Helper()
		rec := f.do(method, path, token, body)
		if rec.Code != want {
			t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, rec.Code, rec.Body, want)
		}
		if code != "" && errorCode(t, rec) != code {
			t.Fatalf("%s %s %s: %s, want code %s", method, path, body, rec.Body, code)
		}
	}
	login := func(want int, code string) {
		t.Helper()
		status("POST", ClientBase+"/authenticate?method=password", "", `{"username":"user","password":"user-pass"}`, want, code)
	}

	if i := get(); i.Disabled || i.DisabledAt != nil || i.DisabledUntil != nil {
		t.Fatalf("a new identity shows %+v", i)
	}
	status("POST", base+"/disable", f.normal, `{"durationMinutes":0}`, 403, "UNAUTHORIZED")
	status("POST", base+"/enable", f.normal, "", 403, "UNAUTHORIZED")
	status("POST", ManagementBase+"/identities/nobody/disable", f.admin, `{"durationMinutes":0}`, 404, "NOT_FOUND")
	status("POST", ManagementBase+"/identities/nobody/enable", f.admin, "", 404, "NOT_FOUND")
	status("POST", base+"/disable", f.admin, `{"durationMinutes":-1}`, 400, "COULD_NOT_VALIDATE")
	status("POST", base+"/disable", f.admin, `{"minutes":5}`, 400, "COULD_NOT_VALIDATE")
	status("GET", ClientBase+"/current-identity", f.normal, "", 200, "")

	// Until enabled: the session answers 401 at once, logins fail like a wrong password.
	status("POST", base+"/disable", f.admin, `{}`, 200, "")
	status("GET", ClientBase+"/current-identity", f.normal, "", 401, "UNAUTHORIZED")
	login(401, "INVALID_AUTH")
	status("POST", ClientBase+"/authenticate?method=password", "", `{"username":"user","password":"wrong-pass"}`, 401, "INVALID_AUTH")
	if i := get(); !i.Disabled || i.DisabledAt == nil || i.DisabledUntil != nil {
		t.Fatalf("disabled until enabled, the identity shows %+v", i)
	}
	rec := f.do("GET", ManagementBase+"/identities?filter="+url.QueryEscape("disabled = true"), f.admin, "")
	var list []struct {
		ID string `json:"id"`
	}
	refData(t, rec.Body.Bytes(), &list)
	if len(list) != 1 || list[0].ID != userID {
		t.Fatalf("filter disabled = true lists %s", rec.Body)
	}
	// Replacing its fields keeps it disabled.
	status("PUT", base, f.admin, `{"name":"user","type":"Default","isAdmin":false}`, 200, "")
	login(401, "INVALID_AUTH")

	status("POST", base+"/enable", f.admin, "", 200, "")
	if i := get(); i.Disabled || i.DisabledAt != nil || i.DisabledUntil != nil {
		t.Fatalf("enabled, the identity shows %+v", i)
	}
	login(200, "")

	// For a duration: disabledUntil is durationMinutes after disabledAt.
	status("POST", base+"/disable", f.admin, `{"durationMinutes":90}`, 200, "")
	i := get()
	if !i.Disabled || i.DisabledAt == nil || i.DisabledUntil == nil || !i.DisabledUntil.Equal(i.DisabledAt.Add(90*time.Minute)) {
		t.Fatalf("disabled for 90 minutes, the identity shows %+v", i)
	}
	login(401, "INVALID_AUTH")
}

// A disabled identity's ext-jwt API session ends and its JWTs are refused like bad
// credentials until it is enabled.
func TestDisableIdentityExtJWT(t *testing.T) {
	t.Parallel()
	idp := startTestIdP(t, "http://127.0.0.1/realms/dev", httptest.NewServer)
	idp.addKey("dev-1", true, true)
	l := startLive(t, liveOptions{})
	l.createID(t, "/external-jwt-signers", map[string]any{"name": "dev-idp", "enabled": true, "issuer": idp.iss,
		"audience": idp.aud, "jwksEndpoint": idp.endpoint()})
	ident := l.createID(t, "/identities", map[string]any{"name": "erin", "type": "User", "isAdmin": false})
	jwt := idp.sign("dev-1", idp.claims("sub", ident))
	a := l.expect(hreq{method: "POST", path: "/authenticate?method=ext-jwt", bearer: jwt}, "POST /authenticate", 200, "")
	token := a.header.Get(SessionHeader)

	l.expect(hreq{method: "POST", path: "/identities/" + ident + "/disable", mgmt: true, token: l.admin, body: map[string]any{"durationMinutes": 0}},
		"POST /identities/{id}/disable", 200, "")
	l.expect(hreq{method: "GET", path: "/current-identity", token: token}, "GET /current-identity", 401, "UNAUTHORIZED")
	l.expect(hreq{method: "POST", path: "/authenticate?method=ext-jwt", bearer: jwt}, "POST /authenticate", 401, "INVALID_AUTH")
	l.expect(hreq{method: "POST", path: "/identities/" + ident + "/enable", mgmt: true, token: l.admin}, "POST /identities/{id}/enable", 200, "")
	l.expect(hreq{method: "POST", path: "/authenticate?method=ext-jwt", bearer: jwt}, "POST /authenticate", 200, "")
}
