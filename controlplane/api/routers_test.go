package api

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/testutil"
)

// testCSR is a router's CSR for 127.0.0.1 and dns.
func testCSR(t *testing.T, dns ...string) string {
	t.Helper()
	return string(testutil.CSR(t, testutil.NewKey(t), append(dns, "127.0.0.1")...))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

type routerDetail struct {
	ID                  string  `json:"id"`
	IsVerified          bool    `json:"isVerified"`
	Fingerprint         *string `json:"fingerprint"`
	EnrollmentToken     *string `json:"enrollmentToken"`
	EnrollmentJWT       *string `json:"enrollmentJwt"`
	EnrollmentExpiresAt *string `json:"enrollmentExpiresAt"`
	Cost                int     `json:"cost"`
	Name                string  `json:"name"`
}

func (f *fixture) router(t *testing.T, id string) routerDetail {
	t.Helper()
	rec := f.do("GET", ManagementBase+"/edge-routers/"+id, f.admin, "")
	if rec.Code != 200 {
		t.Fatalf("get router: %d %s", rec.Code, rec.Body)
	}
	var r routerDetail
	decodeData(t, rec.Body.Bytes(), &r)
	return r
}

// extend posts a router certificate extension with chain as the TLS client certificates.
func (f *fixture) extend(chain []*x509.Certificate, body string) (int, string, []byte) {
	req := httptest.NewRequest("POST", ClientBase+"/enroll/extend/router", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if chain != nil {
		req.TLS = &tls.ConnectionState{PeerCertificates: chain}
	}
	rec := f.serve(req)
	code := ""
	if rec.Code != 200 {
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(rec.Body.Bytes(), &env)
		code = env.Error.Code
	}
	return rec.Code, code, rec.Body.Bytes()
}

type routerCerts struct {
	Cert       string `json:"cert"`
	ServerCert string `json:"serverCert"`
	CA         string `json:"ca"`
}

func parseCert(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	c, err := pki.ParsePEMCert([]byte(p))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEdgeRouterEnrollmentAndExtension(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.create(t, "/edge-routers", `{"name":"er1","cost":7}`)
	r := f.router(t, id)
	if r.IsVerified || r.EnrollmentJWT == nil || r.EnrollmentToken == nil || r.EnrollmentExpiresAt == nil || r.Fingerprint != nil {
		t.Fatalf("new router: %+v", r)
	}
	var claims struct {
		jwt.RegisteredClaims
		Method string `json:"em"`
	}
	if _, _, err := jwt.NewParser().ParseUnverified(*r.EnrollmentJWT, &claims); err != nil {
		t.Fatal(err)
	}
	if claims.Method != "erott" || claims.Subject != id || claims.ID != *r.EnrollmentToken || claims.Issuer != "https://ctrl.test" {
		t.Fatalf("claims: %+v", claims)
	}

	// Both CSRs are required, by either of their names.
	rec := f.do("POST", ClientBase+"/enroll/erott", "", `{"token":"`+*r.EnrollmentToken+`","clientCsr":`+jsonString(testCSR(t))+`}`)
	if rec.Code != 400 || errorCode(t, rec) != "COULD_NOT_VALIDATE" || !strings.Contains(rec.Body.String(), "serverCertCsr") {
		t.Fatalf("erott without server CSR: %d %s", rec.Code, rec.Body)
	}
	// An ott token is not an erott token.
	rec = f.do("POST", ClientBase+"/enroll/erott", "", `{"token":"6f4a3c1e-3b2a-4c1d-9e8f-0a1b2c3d4e5f","certCsr":"x","serverCertCsr":"y"}`)
	if rec.Code != 400 || errorCode(t, rec) != "INVALID_ENROLLMENT_TOKEN" {
		t.Fatalf("unknown token: %d %s", rec.Code, rec.Body)
	}

	rec = f.do("POST", ClientBase+"/enroll?method=erott&token="+*r.EnrollmentToken, "",
		`{"certCsr":`+jsonString(testCSR(t))+`,"serverCertCsr":`+jsonString(testCSR(t, "er1.example.com"))+`}`)
	if rec.Code != 200 {
		t.Fatalf("erott enrollment: %d %s", rec.Code, rec.Body)
	}
	var certs routerCerts
	decodeData(t, rec.Body.Bytes(), &certs)
	client, server := parseCert(t, certs.Cert), parseCert(t, certs.ServerCert)
	if client.Subject.CommonName != id || client.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("client cert: %v %v", client.Subject, client.ExtKeyUsage)
	}
	if len(server.DNSNames) != 1 || server.DNSNames[0] != "er1.example.com" || len(server.IPAddresses) != 1 || server.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("server cert SANs: %v %v %v", server.DNSNames, server.IPAddresses, server.ExtKeyUsage)
	}
	if !strings.Contains(certs.CA, "BEGIN CERTIFICATE") {
		t.Fatalf("ca: %q", certs.CA)
	}
	r = f.router(t, id)
	if !r.IsVerified || r.EnrollmentJWT != nil || r.Fingerprint == nil || *r.Fingerprint != certid.Fingerprint(client) {
		t.Fatalf("enrolled router: %+v", r)
	}
	// The token is used up.
	rec = f.do("POST", ClientBase+"/enroll/erott", "", `{"token":"`+claims.ID+`","certCsr":`+jsonString(testCSR(t))+`,"serverCertCsr":`+jsonString(testCSR(t))+`}`)
	if rec.Code != 400 || errorCode(t, rec) != "INVALID_ENROLLMENT_TOKEN" {
		t.Fatalf("reused token: %d %s", rec.Code, rec.Body)
	}
	// An update keeps the certificates.
	if rec := f.do("PUT", ManagementBase+"/edge-routers/"+id, f.admin, `{"name":"er1-renamed"}`); rec.Code != 200 {
		t.Fatalf("put router: %d %s", rec.Code, rec.Body)
	}
	if r = f.router(t, id); !r.IsVerified || r.Name != "er1-renamed" || r.Cost != 0 {
		t.Fatalf("router after PUT: %+v", r)
	}

	both := `{"certCsr":` + jsonString(testCSR(t)) + `,"serverCertCsr":` + jsonString(testCSR(t)) + `}`
	if status, code, body := f.extend(nil, both); status != 401 || code != "INVALID_AUTH" {
		t.Fatalf("extend without certificate: %d %s", status, body)
	}
	if status, code, body := f.extend([]*x509.Certificate{client}, `{"certCsr":`+jsonString(testCSR(t))+`}`); status != 400 || code != "COULD_NOT_VALIDATE" {
		t.Fatalf("extend with one CSR: %d %s", status, body)
	}
	status, _, body := f.extend([]*x509.Certificate{client}, both)
	if status != 200 {
		t.Fatalf("extend: %d %s", status, body)
	}
	var next routerCerts
	decodeData(t, body, &next)
	newClient := parseCert(t, next.Cert)
	if r = f.router(t, id); *r.Fingerprint != certid.Fingerprint(newClient) {
		t.Fatalf("fingerprint after extension: %+v", r)
	}
	// The previous client certificate stops working at once; the new one works. Asked
	// again with it for the same keys (a lost answer), the controller answers with the
	// certificates it issued; for other keys, it refuses.
	if status, _, body := f.extend([]*x509.Certificate{client}, both); status != 200 {
		t.Fatalf("extend again with the previous certificate and the same CSRs: %d %s", status, body)
	} else {
		var again routerCerts
		decodeData(t, body, &again)
		if again.Cert != next.Cert || again.ServerCert != next.ServerCert {
			t.Fatal("extend again: other certificates than the first answer's")
		}
	}
	other := `{"certCsr":` + jsonString(testCSR(t)) + `,"serverCertCsr":` + jsonString(testCSR(t)) + `}`
	if status, code, body := f.extend([]*x509.Certificate{client}, other); status != 401 || code != "INVALID_AUTH" {
		t.Fatalf("extend with the old certificate for other keys: %d %s", status, body)
	}
	if _, err := f.m.EdgeRouterByCert(client); err == nil {
		t.Fatal("the old certificate still names the router")
	}
	if got, err := f.m.EdgeRouterByCert(newClient); err != nil || got.ID != id {
		t.Fatalf("router by new certificate: %v %v", got, err)
	}
	// A certificate of the network that is not a router's is refused.
	if status, code, _ := f.extend([]*x509.Certificate{server}, both); status != 401 || code != "INVALID_AUTH" {
		t.Fatalf("extend with a server certificate: %d %s", status, code)
	}

	// Re-enrollment drops the certificate and issues a new token.
	if rec := f.do("POST", ManagementBase+"/edge-routers/"+id+"/re-enroll", f.admin, ""); rec.Code != 200 {
		t.Fatalf("re-enroll: %d %s", rec.Code, rec.Body)
	}
	if r = f.router(t, id); r.IsVerified || r.EnrollmentToken == nil || *r.EnrollmentToken == claims.ID {
		t.Fatalf("router after re-enroll: %+v", r)
	}
	if _, err := f.m.EdgeRouterByCert(newClient); err == nil {
		t.Fatal("the certificate still names the router after re-enrollment")
	}
	// Deleting the router deletes its pending enrollment.
	if rec := f.do("DELETE", ManagementBase+"/edge-routers/"+id, f.admin, ""); rec.Code != 200 {
		t.Fatalf("delete router: %d %s", rec.Code, rec.Body)
	}
	if ens, _ := f.m.Enrollments(); len(ens) != 0 {
		t.Fatalf("enrollments left: %d", len(ens))
	}
}

func TestTerminators(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := f.create(t, "/services", `{"name":"web","roleAttributes":["web"]}`)
	other := f.create(t, "/services", `{"name":"other"}`)
	sealed := f.create(t, "/services", `{"name":"sealed","encryptionRequired":true}`)
	er := f.create(t, "/edge-routers", `{"name":"er1"}`)
	er2 := f.create(t, "/edge-routers", `{"name":"er2"}`)

	for _, tc := range []struct{ body, field string }{
		{`{"router":"` + er + `","binding":"transport","address":"tcp:127.0.0.1:80"}`, "service"},
		{`{"service":"nope","router":"` + er + `","binding":"transport","address":"tcp:127.0.0.1:80"}`, "service"},
		{`{"service":"` + svc + `","router":"nope","binding":"transport","address":"tcp:127.0.0.1:80"}`, "router"},
		{`{"service":"` + svc + `","router":"` + er + `","binding":"tra nsport","address":"x"}`, "binding"},
		{`{"service":"` + svc + `","router":"` + er + `","binding":"transport","address":""}`, "address"},
		{`{"service":"` + svc + `","router":"` + er + `","binding":"transport","address":"x","cost":70000}`, "cost"},
		{`{"service":"` + svc + `","router":"` + er + `","binding":"transport","address":"x","precedence":"best"}`, "precedence"},
		// A router's dialers cannot take part in end-to-end encryption.
		{`{"service":"` + sealed + `","router":"` + er + `","binding":"proxy","address":"127.0.0.1:80"}`, "binding"},
		{`{"service":"` + sealed + `","router":"` + er + `","binding":"transport_udp","address":"udp:127.0.0.1:53"}`, "binding"},
	} {
		rec := f.do("POST", ManagementBase+"/terminators", f.admin, tc.body)
		if rec.Code != 400 || errorCode(t, rec) != "COULD_NOT_VALIDATE" || !strings.Contains(rec.Body.String(), `"field":"`+tc.field+`"`) {
			t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body)
		}
	}
	t1 := f.create(t, "/terminators", `{"service":"`+svc+`","router":"`+er+`","binding":"transport","address":"tcp:127.0.0.1:8080","cost":10}`)
	f.create(t, "/terminators", `{"service":"`+svc+`","router":"`+er2+`","binding":"transport","address":"tcp:127.0.0.1:8081","precedence":"required"}`)
	f.create(t, "/terminators", `{"service":"`+other+`","router":"`+er2+`","binding":"edge","address":"hosted","identity":"x"}`)

	var detail struct {
		ServiceID  string `json:"serviceId"`
		RouterID   string `json:"routerId"`
		Precedence string `json:"precedence"`
		Cost       int    `json:"cost"`
		Service    struct {
			Name string `json:"name"`
		} `json:"service"`
	}
	decodeData(t, f.do("GET", ManagementBase+"/terminators/"+t1, f.admin, "").Body.Bytes(), &detail)
	if detail.ServiceID != svc || detail.RouterID != er || detail.Precedence != "default" || detail.Cost != 10 || detail.Service.Name != "web" {
		t.Fatalf("terminator: %+v", detail)
	}
	var list []struct{ ID string }
	decodeData(t, f.do("GET", ManagementBase+`/terminators?filter=cost%20%3E%205`, f.admin, "").Body.Bytes(), &list)
	if len(list) != 1 || list[0].ID != t1 {
		t.Fatalf("filter cost > 5: %+v", list)
	}
	if rec := f.do("PATCH", ManagementBase+"/terminators/"+t1, f.admin, `{"cost":3}`); rec.Code != 200 {
		t.Fatalf("patch: %d %s", rec.Code, rec.Body)
	}
	decodeData(t, f.do("GET", ManagementBase+"/terminators/"+t1, f.admin, "").Body.Bytes(), &detail)
	if detail.Cost != 3 || detail.Precedence != "default" {
		t.Fatalf("after patch: %+v", detail)
	}

	// The client view: only for identities that may use the service.
	path := ClientBase + "/services/" + svc + "/terminators"
	if rec := f.do("GET", path, f.normal, ""); rec.Code != 404 {
		t.Fatalf("terminators of a service out of reach: %d %s", rec.Code, rec.Body)
	}
	f.create(t, "/service-policies", `{"name":"dial-web","type":"Dial","semantic":"AnyOf","identityRoles":["#all"],"serviceRoles":["#web"]}`)
	rec := f.do("GET", path, f.normal, "")
	var client []map[string]any
	decodeData(t, rec.Body.Bytes(), &client)
	if rec.Code != 200 || len(client) != 2 {
		t.Fatalf("client terminators: %d %s", rec.Code, rec.Body)
	}
	if _, ok := client[0]["address"]; ok {
		t.Fatalf("the client view shows the address: %v", client[0])
	}
	if client[0]["serviceId"] != svc || client[0]["routerId"] == "" {
		t.Fatalf("client view: %v", client[0])
	}

	// Deleting a router deletes its terminators; deleting a service deletes its own.
	if rec := f.do("DELETE", ManagementBase+"/edge-routers/"+er2, f.admin, ""); rec.Code != 200 {
		t.Fatalf("delete router: %d %s", rec.Code, rec.Body)
	}
	if all, _ := f.m.Terminators(); len(all) != 1 || all[0].ID != t1 {
		t.Fatalf("terminators after router delete: %d", len(all))
	}
	if rec := f.do("DELETE", ManagementBase+"/services/"+svc, f.admin, ""); rec.Code != 200 {
		t.Fatalf("delete service: %d %s", rec.Code, rec.Body)
	}
	if all, _ := f.m.Terminators(); len(all) != 0 {
		t.Fatalf("terminators after service delete: %d", len(all))
	}
}

// enrolledRouter creates an edge router and enrolls it, so that it may carry sessions.
func (f *fixture) enrolledRouter(t *testing.T, body string) string {
	t.Helper()
	id := f.create(t, "/edge-routers", body)
	r := f.router(t, id)
	rec := f.do("POST", ClientBase+"/enroll/erott", "", `{"token":"`+*r.EnrollmentToken+`","certCsr":`+jsonString(testCSR(t))+`,"serverCertCsr":`+jsonString(testCSR(t, "router.test"))+`}`)
	if rec.Code != 200 {
		t.Fatalf("enroll router: %d %s", rec.Code, rec.Body)
	}
	return id
}
