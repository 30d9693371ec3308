package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/testutil"
)

type authenticatorView struct {
	ID                 string  `json:"id"`
	Method             string  `json:"method"`
	Username           string  `json:"username"`
	IdentityID         string  `json:"identityId"`
	IsIssuedByNetwork  bool    `json:"isIssuedByNetwork"`
	IsExtendRequested  bool    `json:"isExtendRequested"`
	IsKeyRollRequested bool    `json:"isKeyRollRequested"`
	ExtendRequestedAt  *string `json:"extendRequestedAt"`
}

func (f *fixture) authenticator(t *testing.T, id string) (authenticatorView, int) {
	t.Helper()
	rec := f.do("GET", ManagementBase+"/authenticators/"+id, f.admin, "")
	var v authenticatorView
	if rec.Code == http.StatusOK {
		decodeData(t, rec.Body.Bytes(), &v)
	}
	return v, rec.Code
}

// loginCode is the status of a password authentication.
func (f *fixture) loginCode(user, pass string) int {
	return f.do("POST", ClientBase+"/authenticate?method=password", "", `{"username":"`+user+`","password":"`+pass+`"}`).Code
}

func TestAuthenticatorAdministration(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bob, err := f.m.CreateIdentity(model.IdentityCreate{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	path := ManagementBase + "/authenticators"

	for _, bad := range []struct{ body, field string }{
		{`{"method":"updb","identityId":"` + bob.ID + `","username":"bob-user"}`, "password"},
		{`{"method":"updb","identityId":"nope","username":"bob-user","password":"bob-pass-1"}`, "identityId"},
		{`{"method":"totp","identityId":"` + bob.ID + `"}`, "method"},
		{`{"method":"cert","identityId":"` + bob.ID + `","certPem":"x"}`, "certPem"},
		{`{"identityId":"` + bob.ID + `"}`, "method"},
	} {
		rec := f.do("POST", path, f.admin, bad.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), bad.field) {
			t.Errorf("POST %s: %d %s", bad.body, rec.Code, rec.Body)
		}
	}
	if rec := f.do("POST", path, f.normal, `{"method":"updb","identityId":"`+bob.ID+`","username":"bob-user","password":"bob-pass-1"}`); rec.Code != http.StatusForbidden {
		t.Fatalf("non-admin create: %d %s", rec.Code, rec.Body)
	}
	updb := f.create(t, "/authenticators", `{"method":"updb","identityId":"`+bob.ID+`","username":"bob-user","password":"bob-pass-1"}`)
	if a, _ := f.authenticator(t, updb); a.Method != "updb" || a.Username != "bob-user" || a.IdentityID != bob.ID {
		t.Fatalf("created: %+v", a)
	}
	if code := f.loginCode("bob-user", "bob-pass-1"); code != http.StatusOK {
		t.Fatalf("login with the created authenticator: %d", code)
	}
	if rec := f.do("POST", path, f.admin, `{"method":"updb","identityId":"`+bob.ID+`","username":"bob-two","password":"bob-pass-1"}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("second updb authenticator: %d %s", rec.Code, rec.Body)
	}

	// An administrator resets the password without the current one.
	if rec := f.do("PATCH", path+"/"+updb, f.admin, `{"password":"bob-pass-2","username":null}`); rec.Code != http.StatusOK {
		t.Fatalf("patch password: %d %s", rec.Code, rec.Body)
	}
	if f.loginCode("bob-user", "bob-pass-1") != http.StatusUnauthorized || f.loginCode("bob-user", "bob-pass-2") != http.StatusOK {
		t.Fatal("the password reset did not take")
	}
	if rec := f.do("PUT", path+"/"+updb, f.admin, `{"username":"bobby"}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "password") {
		t.Fatalf("put without password: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("PUT", path+"/"+updb, f.admin, `{"username":"bobby","password":"bob-pass-3"}`); rec.Code != http.StatusOK {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	if f.loginCode("bobby", "bob-pass-3") != http.StatusOK {
		t.Fatal("the replaced credentials do not log in")
	}
	if rec := f.do("POST", path+"/"+updb+"/request-extend", f.admin, `{"rollKeys":true}`); rec.Code != http.StatusForbidden {
		t.Fatalf("request-extend of a updb authenticator: %d %s", rec.Code, rec.Body)
	}

	// Re-enrolling a updb authenticator returns it to a updb enrollment of the same username.
	if rec := f.do("POST", path+"/"+updb+"/re-enroll", f.admin, `{"expiresAt":"`+time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)+`"}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("re-enroll into the past: %d %s", rec.Code, rec.Body)
	}
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	rec := f.do("POST", path+"/"+updb+"/re-enroll", f.admin, `{"expiresAt":"`+expires.Format(time.RFC3339)+`"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("re-enroll: %d %s", rec.Code, rec.Body)
	}
	var created struct {
		ID string `json:"id"`
	}
	decodeData(t, rec.Body.Bytes(), &created)
	var enrollment struct {
		Method    string    `json:"method"`
		Username  string    `json:"username"`
		ExpiresAt time.Time `json:"expiresAt"`
		Token     string    `json:"token"`
	}
	decodeData(t, f.do("GET", ManagementBase+"/enrollments/"+created.ID, f.admin, "").Body.Bytes(), &enrollment)
	if enrollment.Method != "updb" || enrollment.Username != "bobby" || !enrollment.ExpiresAt.Equal(expires) {
		t.Fatalf("enrollment: %+v", enrollment)
	}
	if _, code := f.authenticator(t, updb); code != http.StatusNotFound {
		t.Fatalf("re-enrolled authenticator still there: %d", code)
	}
	if f.loginCode("bobby", "bob-pass-3") != http.StatusUnauthorized {
		t.Fatal("the re-enrolled password still logs in")
	}
	if err := f.m.EnrollUpdb(t.Context(), enrollment.Token, "bob-pass-4"); err != nil || f.loginCode("bobby", "bob-pass-4") != http.StatusOK {
		t.Fatalf("enroll again: %v", err)
	}
}

func TestCertAuthenticatorExtendAndReEnroll(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A certificate the network issued, through a one-time token.
	carol, err := f.m.CreateIdentity(model.IdentityCreate{Name: "carol", Enrollment: &model.EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(carol.ID)
	certPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParsePEMCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	auths, _ := f.m.AuthenticatorsOf(carol.ID)
	certAuth := auths[0].ID
	rec := f.withChain("POST", ClientBase+"/authenticate?method=cert", cert)
	if rec.Code != http.StatusOK {
		t.Fatalf("cert login: %d %s", rec.Code, rec.Body)
	}
	token := rec.Header().Get(SessionHeader)
	flags := func() (bool, bool) {
		t.Helper()
		var s struct {
			ExtendRequested bool `json:"isCertExtendRequested"`
			KeyRoll         bool `json:"isCertKeyRollRequested"`
		}
		decodeData(t, f.do("GET", ClientBase+"/current-api-session", token, "").Body.Bytes(), &s)
		return s.ExtendRequested, s.KeyRoll
	}
	if e, k := flags(); e || k {
		t.Fatalf("flags before the request: %v %v", e, k)
	}
	if rec := f.do("POST", ManagementBase+"/authenticators/"+certAuth+"/request-extend", f.admin, `{"rollKeys":true}`); rec.Code != http.StatusOK {
		t.Fatalf("request-extend: %d %s", rec.Code, rec.Body)
	}
	if a, _ := f.authenticator(t, certAuth); !a.IsExtendRequested || !a.IsKeyRollRequested || a.ExtendRequestedAt == nil || !a.IsIssuedByNetwork {
		t.Fatalf("authenticator after request-extend: %+v", a)
	}
	if e, k := flags(); !e || !k {
		t.Fatalf("API session flags after request-extend: %v %v", e, k)
	}

	// The client extends with a new key; the request is then done.
	var ext struct {
		ClientCert string `json:"clientCert"`
	}
	rec = f.do("POST", ClientBase+"/current-identity/authenticators/"+certAuth+"/extend", token, `{"clientCertCsr":`+jsonString(string(testutil.CSR(t, testutil.NewKey(t))))+`}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("extend: %d %s", rec.Code, rec.Body)
	}
	decodeData(t, rec.Body.Bytes(), &ext)
	if rec := f.do("POST", ClientBase+"/current-identity/authenticators/"+certAuth+"/extend-verify", token, `{"clientCert":`+jsonString(ext.ClientCert)+`}`); rec.Code != http.StatusOK {
		t.Fatalf("extend-verify: %d %s", rec.Code, rec.Body)
	}
	var after struct {
		authenticatorView
		LastExtendRolledKeys bool `json:"lastExtendRolledKeys"`
	}
	decodeData(t, f.do("GET", ManagementBase+"/authenticators/"+certAuth, f.admin, "").Body.Bytes(), &after)
	if after.IsExtendRequested || after.IsKeyRollRequested || after.ExtendRequestedAt != nil || !after.LastExtendRolledKeys {
		t.Fatalf("authenticator after the extension: %+v", after)
	}

	// Re-enrolling the network's certificate makes an ott enrollment and ends its sessions.
	newCert, err := pki.ParsePEMCert([]byte(ext.ClientCert))
	if err != nil {
		t.Fatal(err)
	}
	rec = f.withChain("POST", ClientBase+"/authenticate?method=cert", newCert)
	if rec.Code != http.StatusOK {
		t.Fatalf("login with the extended cert: %d %s", rec.Code, rec.Body)
	}
	token = rec.Header().Get(SessionHeader)
	rec = f.do("POST", ManagementBase+"/authenticators/"+certAuth+"/re-enroll", f.admin, `{"expiresAt":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("re-enroll: %d %s", rec.Code, rec.Body)
	}
	var created struct {
		ID string `json:"id"`
	}
	decodeData(t, rec.Body.Bytes(), &created)
	var enrollment struct {
		Method string `json:"method"`
	}
	decodeData(t, f.do("GET", ManagementBase+"/enrollments/"+created.ID, f.admin, "").Body.Bytes(), &enrollment)
	if enrollment.Method != "ott" {
		t.Fatalf("enrollment of a network certificate: %+v", enrollment)
	}
	if rec := f.do("GET", ClientBase+"/current-api-session", token, ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("API session of the re-enrolled certificate: %d %s", rec.Code, rec.Body)
	}

	// A third party's certificate, added by an administrator, authenticates and re-enrolls
	// to an ottca enrollment of its CA.
	corp := testutil.NewAuthority(t, "corp CA")
	caID := f.create(t, "/cas", `{"name":"corp","certPem":`+jsonString(string(corp.PEM()))+`,"isAutoCaEnrollmentEnabled":false,"isOttCaEnrollmentEnabled":true,"isAuthEnabled":true,"identityRoles":[]}`)
	ca := f.ca(t, caID)
	if rec := f.do("POST", ManagementBase+"/cas/"+caID+"/verify", f.admin, string(testutil.CertPEM(corp.Issue(t, ca.VerificationToken, nil)))); rec.Code != http.StatusOK {
		t.Fatalf("verify CA: %d %s", rec.Code, rec.Body)
	}
	corpCert := corp.Issue(t, "carol", nil)
	corpAuth := f.create(t, "/authenticators", `{"method":"cert","identityId":"`+carol.ID+`","certPem":`+jsonString(string(testutil.CertPEM(corpCert)))+`}`)
	if rec := f.do("POST", ManagementBase+"/authenticators", f.admin, `{"method":"cert","identityId":"`+carol.ID+`","certPem":`+jsonString(string(testutil.CertPEM(corpCert)))+`}`); rec.Code != http.StatusConflict {
		t.Fatalf("the same certificate twice: %d %s", rec.Code, rec.Body)
	}
	if rec := f.withChain("POST", ClientBase+"/authenticate?method=cert", corpCert); rec.Code != http.StatusOK {
		t.Fatalf("login with the added certificate: %d %s", rec.Code, rec.Body)
	}
	rec = f.do("POST", ManagementBase+"/authenticators/"+corpAuth+"/re-enroll", f.admin, `{"expiresAt":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("re-enroll third-party: %d %s", rec.Code, rec.Body)
	}
	decodeData(t, rec.Body.Bytes(), &created)
	var ottca struct {
		Method string `json:"method"`
		CAID   string `json:"caId"`
	}
	decodeData(t, f.do("GET", ManagementBase+"/enrollments/"+created.ID, f.admin, "").Body.Bytes(), &ottca)
	if ottca.Method != "ottca" || ottca.CAID != caID {
		t.Fatalf("enrollment of a third-party certificate: %+v", ottca)
	}
	if rec := f.withChain("POST", ClientBase+"/authenticate?method=cert", corpCert); rec.Code != http.StatusUnauthorized {
		t.Fatalf("re-enrolled certificate still logs in: %d", rec.Code)
	}
}
