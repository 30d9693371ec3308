package api

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
)

// issueURI returns a client certificate of the authority with common name cn and URI SANs.
func issueURI(t *testing.T, a *testutil.Authority, cn string, uris ...string) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	key := testutil.NewKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// withChain sends a request that presented a client certificate.
func (f *fixture) withChain(method, path string, cert *x509.Certificate) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	return f.serve(req)
}

type caView struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	IdentityNameFormat string `json:"identityNameFormat"`
	VerificationToken  string `json:"verificationToken"`
	ExternalIDClaim    *struct {
		Location        string `json:"location"`
		Matcher         string `json:"matcher"`
		MatcherCriteria string `json:"matcherCriteria"`
		Parser          string `json:"parser"`
		ParserCriteria  string `json:"parserCriteria"`
		Index           int    `json:"index"`
	} `json:"externalIdClaim"`
}

func (f *fixture) ca(t *testing.T, id string) caView {
	t.Helper()
	rec := f.do("GET", ManagementBase+"/cas/"+id, f.admin, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("get CA: %d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(rec.Body.String(), `"externalIdClaim":`) {
		t.Fatalf("no externalIdClaim field: %s", rec.Body)
	}
	var v caView
	decodeData(t, rec.Body.Bytes(), &v)
	return v
}

func TestCAExternalIDClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	claim := `{"location":"SAN_URI","matcher":"SCHEME","matcherCriteria":"spiffe","parser":"NONE","parserCriteria":"","index":0}`
	id := f.create(t, "/cas", `{"name":"corp","certPem":`+jsonString(string(corp.PEM()))+`,"isAutoCaEnrollmentEnabled":true,"isOttCaEnrollmentEnabled":false,"isAuthEnabled":true,"identityRoles":["spiffe"],"externalIdClaim":`+claim+`}`)
	ca := f.ca(t, id)
	if x := ca.ExternalIDClaim; x == nil || x.Location != "SAN_URI" || x.Matcher != "SCHEME" || x.MatcherCriteria != "spiffe" || x.Parser != "NONE" || ca.IdentityNameFormat != model.DefaultIdentityNameFormat {
		t.Fatalf("created CA: %+v", ca)
	}
	if rec := f.do("POST", ManagementBase+"/cas/"+id+"/verify", f.admin, string(testutil.CertPEM(corp.Issue(t, ca.VerificationToken, nil)))); rec.Code != http.StatusOK {
		t.Fatalf("verify CA: %d %s", rec.Code, rec.Body)
	}

	// Enrollment gives the identity the claimed external id and no authenticator.
	first := issueURI(t, corp, "laptop", "https://corp.example/x", "spiffe://corp.example/dev/1")
	if rec := f.withChain("POST", ClientBase+"/enroll/ca", first); rec.Code != http.StatusOK {
		t.Fatalf("enroll: %d %s", rec.Code, rec.Body)
	}
	var idents []struct {
		ID         string `json:"id"`
		Name       string `json:"name"`
		ExternalID string `json:"externalId"`
	}
	decodeData(t, f.do("GET", ManagementBase+`/identities?filter=name%3D%22corp-laptop%22`, f.admin, "").Body.Bytes(), &idents)
	if len(idents) != 1 || idents[0].ExternalID != "spiffe://corp.example/dev/1" {
		t.Fatalf("enrolled identity: %+v", idents)
	}
	var auths []any
	decodeData(t, f.do("GET", ManagementBase+"/identities/"+idents[0].ID+"/authenticators", f.admin, "").Body.Bytes(), &auths)
	if len(auths) != 0 {
		t.Fatalf("authenticators of an external id identity: %v", auths)
	}

	// Another certificate with the same claim authenticates as that identity.
	second := issueURI(t, corp, "phone", "spiffe://corp.example/dev/1")
	rec := f.withChain("POST", ClientBase+"/authenticate?method=cert", second)
	if rec.Code != http.StatusOK {
		t.Fatalf("authenticate by claim: %d %s", rec.Code, rec.Body)
	}
	var sess struct {
		Identity struct {
			ID string `json:"id"`
		} `json:"identity"`
	}
	decodeData(t, rec.Body.Bytes(), &sess)
	if sess.Identity.ID != idents[0].ID {
		t.Fatalf("authenticated as %s, want %s", sess.Identity.ID, idents[0].ID)
	}
	if rec := f.withChain("POST", ClientBase+"/authenticate?method=cert", issueURI(t, corp, "x", "spiffe://corp.example/dev/2")); rec.Code != http.StatusUnauthorized {
		t.Fatalf("claim of no identity: %d %s", rec.Code, rec.Body)
	}
	rec = f.withChain("POST", ClientBase+"/enroll/ca", issueURI(t, corp, "none", "https://corp.example/y"))
	if rec.Code != http.StatusBadRequest || errorCode(t, rec) != model.CodeMissingCertClaim {
		t.Fatalf("enroll without the claim: %d %s", rec.Code, rec.Body)
	}

	// Changes are checked; null removes the claim.
	for _, bad := range []struct{ method, body, field string }{
		{"PATCH", `{"externalIdClaim":{"matcher":"PREFIX"}}`, "externalIdClaim.matcher"},
		{"PATCH", `{"externalIdClaim":{"location":"SAN_DNS"}}`, "externalIdClaim.location"},
		{"PATCH", `{"externalIdClaim":{"parser":"SPLIT"}}`, "externalIdClaim.parserCriteria"},
		{"PATCH", `{"externalIdClaim":{"index":-1}}`, "externalIdClaim.index"},
		{"PUT", `{"name":"corp","isAutoCaEnrollmentEnabled":true,"isOttCaEnrollmentEnabled":false,"isAuthEnabled":true,"identityRoles":[],"identityNameFormat":"x","externalIdClaim":{"location":"COMMON_NAME"}}`, "externalIdClaim.matcher"},
	} {
		rec := f.do(bad.method, ManagementBase+"/cas/"+id, f.admin, bad.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), bad.field) {
			t.Errorf("%s %s: %d %s", bad.method, bad.body, rec.Code, rec.Body)
		}
	}
	if rec := f.do("PATCH", ManagementBase+"/cas/"+id, f.admin, `{"identityNameFormat":"[caName]","externalIdClaim":{"location":"COMMON_NAME","matcher":"PREFIX","matcherCriteria":"id:","parser":"SPLIT","parserCriteria":".","index":1}}`); rec.Code != http.StatusOK {
		t.Fatalf("patch: %d %s", rec.Code, rec.Body)
	}
	if ca := f.ca(t, id); ca.IdentityNameFormat != "[caName]" || ca.ExternalIDClaim == nil || ca.ExternalIDClaim.Location != "COMMON_NAME" || ca.ExternalIDClaim.Index != 1 || ca.ExternalIDClaim.ParserCriteria != "." {
		t.Fatalf("patched CA: %+v", ca)
	}
	// Names are made unique with a counter; the claim here is the second part of the CN.
	for i, want := range []struct{ name, externalID string }{{"corp", "b"}, {"corp000001", "d"}} {
		cn := []string{"id:a.b", "id:c.d"}[i]
		if rec := f.withChain("POST", ClientBase+"/enroll/ca", issueURI(t, corp, cn)); rec.Code != http.StatusOK {
			t.Fatalf("enroll %s: %d %s", cn, rec.Code, rec.Body)
		}
		decodeData(t, f.do("GET", ManagementBase+`/identities?filter=name%3D%22`+want.name+`%22`, f.admin, "").Body.Bytes(), &idents)
		if len(idents) != 1 || idents[0].ExternalID != want.externalID {
			t.Fatalf("identity %s: %+v", want.name, idents)
		}
	}
	if rec := f.do("PATCH", ManagementBase+"/cas/"+id, f.admin, `{"externalIdClaim":null}`); rec.Code != http.StatusOK {
		t.Fatalf("remove claim: %d %s", rec.Code, rec.Body)
	}
	if ca := f.ca(t, id); ca.ExternalIDClaim != nil {
		t.Fatalf("claim after null: %+v", ca.ExternalIDClaim)
	}
	// Without a claim the certificate itself is enrolled, and authenticates.
	plain := corp.Issue(t, "plain", nil)
	if rec := f.withChain("POST", ClientBase+"/enroll/ca", plain); rec.Code != http.StatusOK {
		t.Fatalf("enroll without claim: %d %s", rec.Code, rec.Body)
	}
	if rec := f.withChain("POST", ClientBase+"/authenticate?method=cert", plain); rec.Code != http.StatusOK {
		t.Fatalf("authenticate without claim: %d %s", rec.Code, rec.Body)
	}
}

func TestCAJWT(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	id := f.create(t, "/cas", `{"name":"corp","certPem":`+jsonString(string(corp.PEM()))+`,"isAutoCaEnrollmentEnabled":true,"isOttCaEnrollmentEnabled":false,"isAuthEnabled":true,"identityRoles":[]}`)
	rec := f.do("GET", ManagementBase+"/cas/"+id+"/jwt", f.admin, "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/jwt" {
		t.Fatalf("CA JWT: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var claims model.EnrollmentClaims
	if _, _, err := jwt.NewParser().ParseUnverified(rec.Body.String(), &claims); err != nil {
		t.Fatalf("CA JWT: %v: %s", err, rec.Body)
	}
	if claims.Method != "ca" || claims.Subject != id || claims.ID != id || len(claims.Audience) != 1 || claims.Audience[0] != model.EnrollmentAudience {
		t.Fatalf("CA JWT claims: %+v", claims)
	}
	if rec := f.do("GET", ManagementBase+"/cas/nope/jwt", f.admin, ""); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown CA: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", ManagementBase+"/cas/"+id+"/jwt", f.normal, ""); rec.Code != http.StatusForbidden {
		t.Fatalf("non-admin: %d %s", rec.Code, rec.Body)
	}
}

// TestCAPatchEmptyClaim checks that a patch with an empty externalIdClaim, as the ziti CLI's
// CA update sends with every change, changes the other fields and leaves a CA without a
// claim without one.
func TestCAPatchEmptyClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	corp := testutil.NewAuthority(t, "corp CA")
	id := f.create(t, "/cas", `{"name":"corp","certPem":`+jsonString(string(corp.PEM()))+`,"isAutoCaEnrollmentEnabled":true,"isOttCaEnrollmentEnabled":false,"isAuthEnabled":true,"identityRoles":[]}`)
	if rec := f.do("PATCH", ManagementBase+"/cas/"+id, f.admin, `{"identityNameFormat":"[caName]-[commonName]-x","externalIdClaim":{}}`); rec.Code != http.StatusOK {
		t.Fatalf("PATCH with an empty claim: %d %s", rec.Code, rec.Body)
	}
	if ca := f.ca(t, id); ca.ExternalIDClaim != nil || ca.IdentityNameFormat != "[caName]-[commonName]-x" {
		t.Fatalf("CA after the patch: claim %+v, name format %q", ca.ExternalIDClaim, ca.IdentityNameFormat)
	}
}
