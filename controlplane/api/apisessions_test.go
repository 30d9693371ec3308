package api

import (
	"net/url"
	"strings"
	"testing"
)

// Administrators list, filter, page, read and end any API session and session; ending one
// makes its token UNAUTHORIZED and takes its sessions with it. Others are refused.
func TestManagementAPISessionsAndSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var users []struct {
		ID string `json:"id"`
	}
	decodeData(t, f.do("GET", ManagementBase+`/identities?filter=name%20%3D%20%22user%22`, f.admin, "").Body.Bytes(), &users)
	userID := users[0].ID
	if rec := f.do("PATCH", ManagementBase+"/identities/"+userID, f.admin, `{"roleAttributes":["staff"]}`); rec.Code != 200 {
		t.Fatalf("patch identity: %d %s", rec.Code, rec.Body)
	}
	web := f.create(t, "/services", `{"name":"web","encryptionRequired":true}`)
	f.create(t, "/service-policies", `{"name":"staff-web","type":"Dial","semantic":"AnyOf","identityRoles":["#staff"],"serviceRoles":["@`+web+`"]}`)
	f.enrolledRouter(t, `{"name":"er1","roleAttributes":["edge"]}`)
	f.create(t, "/edge-router-policies", `{"name":"all","semantic":"AnyOf","identityRoles":["#all"],"edgeRouterRoles":["#edge"]}`)
	f.create(t, "/service-edge-router-policies", `{"name":"all","semantic":"AnyOf","serviceRoles":["#all"],"edgeRouterRoles":["#all"]}`)
	rec := f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Dial"}`)
	if rec.Code != 201 {
		t.Fatalf("dial session: %d %s", rec.Code, rec.Body)
	}
	var created struct {
		ID string `json:"id"`
	}
	decodeData(t, rec.Body.Bytes(), &created)
	second := f.login(t, "user", "user-pass")

	for _, path := range []string{"/api-sessions", "/sessions", "/sessions/" + created.ID} {
		if rec := f.do("GET", ManagementBase+path, f.normal, ""); rec.Code != 403 {
			t.Fatalf("GET %s as a non-administrator: %d %s", path, rec.Code, rec.Body)
		}
	}

	type apiSession struct {
		ID              string `json:"id"`
		IdentityID      string `json:"identityId"`
		Token           string `json:"token"`
		IPAddress       string `json:"ipAddress"`
		AuthenticatorID string `json:"authenticatorId"`
		LastActivityAt  string `json:"lastActivityAt"`
		IsMfaRequired   *bool  `json:"isMfaRequired"`
		Identity        struct {
			Name string `json:"name"`
		} `json:"identity"`
	}
	var all []apiSession
	rec = f.do("GET", ManagementBase+"/api-sessions?limit=500", f.admin, "")
	decodeData(t, rec.Body.Bytes(), &all)
	if rec.Code != 200 || len(all) != 3 {
		t.Fatalf("GET /api-sessions: %d, %d sessions: %s", rec.Code, len(all), rec.Body)
	}
	own := 0
	for _, a := range all {
		if a.Token == f.admin {
			own++
		}
	}
	if own != 1 {
		t.Fatalf("the caller's own API session is listed with its token %d times, want once", own)
	}
	filter := url.QueryEscape(`identityId = "` + userID + `"`)
	var mine []apiSession
	decodeData(t, f.do("GET", ManagementBase+"/api-sessions?filter="+filter, f.admin, "").Body.Bytes(), &mine)
	if len(mine) != 2 {
		t.Fatalf("API sessions of the user: %+v", mine)
	}
	var current apiSession
	decodeData(t, f.do("GET", ClientBase+"/current-api-session", f.normal, "").Body.Bytes(), &current)
	var normal apiSession
	for _, a := range mine {
		if a.ID == current.ID {
			normal = a
		}
		if a.Token != "" {
			t.Fatalf("another's API session is listed with its token: %+v", a)
		}
		if a.IdentityID != userID || a.Identity.Name != "user" || a.AuthenticatorID == "" || a.LastActivityAt == "" || a.IsMfaRequired == nil || a.IPAddress == "" {
			t.Fatalf("API session fields: %+v", a)
		}
	}
	if normal.ID == "" {
		t.Fatalf("the user's API session %s is not listed: %+v", current.ID, mine)
	}
	var page []apiSession
	rec = f.do("GET", ManagementBase+"/api-sessions?filter="+filter+"&limit=1&offset=1", f.admin, "")
	decodeData(t, rec.Body.Bytes(), &page)
	if len(page) != 1 || !containsAll(rec.Body.String(), `"totalCount":2`, `"limit":1`, `"offset":1`) {
		t.Fatalf("a page of API sessions: %s", rec.Body)
	}
	var one apiSession
	decodeData(t, f.do("GET", ManagementBase+"/api-sessions/"+normal.ID, f.admin, "").Body.Bytes(), &one)
	if one.ID != normal.ID || one.Token != "" {
		t.Fatalf("GET /api-sessions/%s: %+v", normal.ID, one)
	}

	type session struct {
		ID           string `json:"id"`
		APISessionID string `json:"apiSessionId"`
		ServiceID    string `json:"serviceId"`
		IdentityID   string `json:"identityId"`
		Type         string `json:"type"`
		Token        string `json:"token"`
		EdgeRouters  []struct {
			Name string `json:"name"`
		} `json:"edgeRouters"`
	}
	var sessions []session
	decodeData(t, f.do("GET", ManagementBase+"/sessions?filter="+url.QueryEscape(`apiSessionId = "`+normal.ID+`"`), f.admin, "").Body.Bytes(), &sessions)
	if len(sessions) != 1 || sessions[0].ID != created.ID || sessions[0].ServiceID != web || sessions[0].IdentityID != userID || sessions[0].Type != "Dial" || sessions[0].Token != "" {
		t.Fatalf("sessions of the API session: %+v", sessions)
	}
	var got session
	decodeData(t, f.do("GET", ManagementBase+"/sessions/"+created.ID, f.admin, "").Body.Bytes(), &got)
	if got.ID != created.ID || len(got.EdgeRouters) != 1 || got.EdgeRouters[0].Name != "er1" || got.Token != "" {
		t.Fatalf("GET /sessions/%s: %+v", created.ID, got)
	}

	// Ending a session, then an API session.
	if rec := f.do("DELETE", ManagementBase+"/sessions/"+created.ID, f.admin, ""); rec.Code != 200 {
		t.Fatalf("DELETE session: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ManagementBase+"/sessions/"+created.ID, f.admin, ""); rec.Code != 404 {
		t.Fatalf("GET a deleted session: %d %s", rec.Code, rec.Body)
	}
	rec = f.do("POST", ClientBase+"/sessions", f.normal, `{"serviceId":"`+web+`","type":"Dial"}`)
	decodeData(t, rec.Body.Bytes(), &created)
	if rec := f.do("DELETE", ManagementBase+"/api-sessions/"+normal.ID, f.admin, ""); rec.Code != 200 {
		t.Fatalf("DELETE API session: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ClientBase+"/current-identity", f.normal, ""); rec.Code != 401 {
		t.Fatalf("the ended API session's token: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ManagementBase+"/sessions/"+created.ID, f.admin, ""); rec.Code != 404 {
		t.Fatalf("a session of the ended API session: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ClientBase+"/current-identity", second, ""); rec.Code != 200 {
		t.Fatalf("the user's other API session: %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/api-sessions/" + normal.ID, "/sessions/" + created.ID} {
		if rec := f.do("DELETE", ManagementBase+path, f.admin, ""); rec.Code != 404 || errorCode(t, rec) != "NOT_FOUND" {
			t.Fatalf("DELETE %s again: %d %s", path, rec.Code, rec.Body)
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
