package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// network drives one controller over real HTTPS for TestSmallNetwork.
type network struct {
	t     *testing.T
	ctx   context.Context
	url   string
	dir   string
	admin *apiclient.Client
}

func (n *network) mgmt(method, path string, body, out any) error {
	_, err := n.admin.Do(n.ctx, method, apiclient.ManagementAPI+path, body, out)
	return err
}

// create POSTs a management entity and returns its id.
func (n *network) create(path string, body any) string {
	n.t.Helper()
	var out struct {
		ID string `json:"id"`
	}
	if err := n.mgmt("POST", path, body, &out); err != nil {
		n.t.Fatalf("POST %s %v: %v", path, body, err)
	}
	return out.ID
}

// identity creates an ott identity with attributes, enrolls it with `zmesh enroll` and returns
// a client authenticated with its certificate.
func (n *network) identity(name string, attrs ...string) (*apiclient.Client, string) {
	n.t.Helper()
	id := n.create("/identities", map[string]any{"name": name, "type": "User", "isAdmin": false, "roleAttributes": attrs, "enrollment": map[string]any{"ott": true}})
	var detail struct {
		Enrollment struct {
			OTT struct {
				JWT string `json:"jwt"`
			} `json:"ott"`
		} `json:"enrollment"`
	}
	if err := n.mgmt("GET", "/identities/"+id, nil, &detail); err != nil || detail.Enrollment.OTT.JWT == "" {
		n.t.Fatalf("identity %s: %v %+v", name, err, detail)
	}
	jwtFile := filepath.Join(n.dir, name+".jwt")
	if err := os.WriteFile(jwtFile, []byte(detail.Enrollment.OTT.JWT), 0o600); err != nil {
		n.t.Fatal(err)
	}
	idFile := filepath.Join(n.dir, name+".json")
	if _, _, err := run(n.t, nil, "enroll", "--jwt", jwtFile, "--out", idFile); err != nil {
		n.t.Fatalf("zmesh enroll %s: %v", name, err)
	}
	file, err := apiclient.LoadIdentity(idFile)
	if err != nil {
		n.t.Fatal(err)
	}
	c, err := file.Client()
	if err != nil {
		n.t.Fatal(err)
	}
	if _, err := c.AuthenticateCert(n.ctx); err != nil {
		n.t.Fatalf("authenticate %s: %v", name, err)
	}
	return c, id
}

// router creates an edge router and enrolls it with `zmesh router enroll`; it returns the
// router's id and configuration directory.
func (n *network) router(name string) (string, string) {
	n.t.Helper()
	id := n.create("/edge-routers", map[string]any{"name": name, "roleAttributes": []string{"edge"}, "isTunnelerEnabled": true})
	var detail struct {
		EnrollmentJWT string `json:"enrollmentJwt"`
	}
	if err := n.mgmt("GET", "/edge-routers/"+id, nil, &detail); err != nil || detail.EnrollmentJWT == "" {
		n.t.Fatalf("router %s: %v %+v", name, err, detail)
	}
	dir := filepath.Join(n.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		n.t.Fatal(err)
	}
	jwtFile := filepath.Join(dir, "router.jwt")
	os.WriteFile(jwtFile, []byte(detail.EnrollmentJWT), 0o600)
	u, _ := url.Parse(n.url)
	cfg := fmt.Sprintf(`v: 3
identity:
  cert: certs/client.cert
  server_cert: certs/server.cert
  key: certs/router.key
  ca: certs/ca.cert
ctrl:
  endpoint: tls:%s
edge:
  csr:
    country: US
    organization: zmesh-test
    sans:
      dns: [%s.zmesh.test, localhost]
      ip: [127.0.0.1]
`, u.Host, name)
	cfgFile := filepath.Join(dir, "router.yml")
	os.WriteFile(cfgFile, []byte(cfg), 0o600)
	out, _, err := run(n.t, nil, "router", "enroll", cfgFile, "--jwt", jwtFile)
	if err != nil || !strings.Contains(out, "enrolled") {
		n.t.Fatalf("zmesh router enroll %s: %v %q", name, err, out)
	}
	return id, dir
}

type serviceView struct {
	ID          string         `json:"id"`
	Name        string         `json:"name"`
	Permissions []string       `json:"permissions"`
	Config      map[string]any `json:"config"`
}

func services(t *testing.T, c *apiclient.Client) map[string]serviceView {
	t.Helper()
	var list []serviceView
	if _, err := c.Do(context.Background(), "GET", apiclient.ClientAPI+"/services?limit=100&configTypes=intercept.v1", nil, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]serviceView{}
	for _, s := range list {
		slices.Sort(s.Permissions)
		out[s.Name] = s
	}
	return out
}

type sessionView struct {
	ID          string `json:"id"`
	Token       string `json:"token"`
	EdgeRouters []struct {
		Name string `json:"name"`
	} `json:"edgeRouters"`
}

func session(c *apiclient.Client, serviceID, typ string) (*sessionView, error) {
	var s sessionView
	_, err := c.Do(context.Background(), "POST", apiclient.ClientAPI+"/sessions", map[string]string{"serviceId": serviceID, "type": typ}, &s)
	return &s, err
}

func lastChange(t *testing.T, c *apiclient.Client) time.Time {
	t.Helper()
	var out struct {
		LastChangeAt time.Time `json:"lastChangeAt"`
	}
	if _, err := c.Do(context.Background(), "GET", apiclient.ClientAPI+"/current-api-session/service-updates", nil, &out); err != nil {
		t.Fatal(err)
	}
	return out.LastChangeAt
}

// TestSmallNetwork builds a small network over real HTTPS: three identities with attributes
// enrolled with `zmesh enroll`, five services with intercept.v1 and host.v1 configs, Dial and
// Bind policies with #attribute roles, a posture check, and two edge routers enrolled with
// `zmesh router enroll`. It checks who may dial and bind what, session creation granted and
// denied, posture gating, 409 on referenced deletes, service updates, and that extending a
// router's certificates invalidates the old client certificate.
func TestSmallNetwork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := ctrltest.Start(t).URL
	u, _ := url.Parse(base)
	leaf, err := apiclient.ServerCertificate(ctx, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	n := &network{t: t, ctx: ctx, url: base, dir: t.TempDir(), admin: apiclient.PinnedClient(base, leaf)}
	if _, err := n.admin.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}

	alice, _ := n.identity("alice", "staff", "eng")
	bob, _ := n.identity("bob", "staff")
	carol, _ := n.identity("carol", "contractor")

	intercept := func(name, host string, port int) string {
		return n.create("/configs", map[string]any{"name": name, "configTypeId": "intercept.v1", "data": map[string]any{
			"protocols": []string{"tcp"}, "addresses": []string{host}, "portRanges": []map[string]int{{"low": port, "high": port}}}})
	}
	host := func(name string, port int) string {
		return n.create("/configs", map[string]any{"name": name, "configTypeId": "host.v1", "data": map[string]any{
			"protocol": "tcp", "address": "127.0.0.1", "port": port}})
	}
	svc := map[string]string{}
	webIntercept := intercept("web-intercept", "web.zmesh.test", 80)
	for _, s := range []struct {
		name, attr string
		configs    []string
	}{
		{"web", "public", []string{webIntercept, host("web-host", 8080)}},
		{"wiki", "public", []string{intercept("wiki-intercept", "wiki.zmesh.test", 80), host("wiki-host", 8081)}},
		{"db", "internal", []string{intercept("db-intercept", "db.zmesh.test", 5432), host("db-host", 5432)}},
		{"git", "internal", []string{intercept("git-intercept", "*.git.zmesh.test", 22), host("git-host", 2222)}},
		{"metrics", "ops", []string{host("metrics-host", 9090)}},
	} {
		svc[s.name] = n.create("/services", map[string]any{"name": s.name, "roleAttributes": []string{s.attr}, "configs": s.configs, "encryptionRequired": true})
	}
	domain := n.create("/posture-checks", map[string]any{"name": "corp-domain", "typeId": "DOMAIN", "domains": []string{"corp.example"}, "roleAttributes": []string{"corp"}})
	n.create("/service-policies", map[string]any{"name": "staff-dial-public", "type": "Dial", "semantic": "AnyOf", "identityRoles": []string{"#staff"}, "serviceRoles": []string{"#public"}})
	n.create("/service-policies", map[string]any{"name": "eng-dial-internal", "type": "Dial", "semantic": "AllOf", "identityRoles": []string{"#staff", "#eng"}, "serviceRoles": []string{"#internal"}})
	n.create("/service-policies", map[string]any{"name": "eng-bind-ops", "type": "Bind", "semantic": "AnyOf", "identityRoles": []string{"#eng"}, "serviceRoles": []string{"#ops"}})
	n.create("/service-policies", map[string]any{"name": "contractor-wiki", "type": "Dial", "semantic": "AnyOf", "identityRoles": []string{"#contractor"}, "serviceRoles": []string{"@" + svc["wiki"]}, "postureCheckRoles": []string{"#corp"}})

	t.Run("sessions need an edge router that may carry the service", func(t *testing.T) {
		if _, err := session(alice, svc["db"], "Dial"); apiclient.CodeOf(err) != "NO_EDGE_ROUTERS_AVAILABLE" {
			t.Fatalf("session without edge routers: %v", err)
		}
	})
	er1, er1Dir := n.router("er1")
	n.router("er2")
	n.create("/edge-router-policies", map[string]any{"name": "everyone", "semantic": "AnyOf", "identityRoles": []string{"#all"}, "edgeRouterRoles": []string{"#edge"}})
	n.create("/service-edge-router-policies", map[string]any{"name": "everything", "semantic": "AnyOf", "serviceRoles": []string{"#all"}, "edgeRouterRoles": []string{"#all"}})

	t.Run("who may dial and bind what", func(t *testing.T) {
		want := map[string]map[string]string{
			"alice": {"web": "Dial", "wiki": "Dial", "db": "Dial", "git": "Dial", "metrics": "Bind"},
			"bob":   {"web": "Dial", "wiki": "Dial"},
			"carol": {"wiki": "Dial"},
		}
		for name, c := range map[string]*apiclient.Client{"alice": alice, "bob": bob, "carol": carol} {
			got := services(t, c)
			if len(got) != len(want[name]) {
				t.Errorf("%s sees %d services, want %d: %v", name, len(got), len(want[name]), got)
			}
			for s, perm := range want[name] {
				if p := strings.Join(got[s].Permissions, ","); p != perm {
					t.Errorf("%s on %s: permissions %q, want %q", name, s, p, perm)
				}
			}
		}
		if cfg := services(t, bob)["web"].Config["intercept.v1"]; cfg == nil {
			t.Errorf("web's intercept.v1 config is not embedded: %v", services(t, bob)["web"].Config)
		}
	})

	t.Run("roleFilter and roleSemantic narrow the list by the services' attributes", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			want  int
		}{{"roleFilter=%23internal", 2}, {"roleFilter=%23internal&roleFilter=%23public&roleSemantic=AnyOf", 4},
			{"roleFilter=%23internal&roleFilter=%23public", 0}, {"roleFilter=%40" + svc["metrics"], 1}, {"roleFilter=%23all", 5}} {
			var list []serviceView
			if _, err := alice.Do(ctx, "GET", apiclient.ClientAPI+"/services?"+tc.query, nil, &list); err != nil || len(list) != tc.want {
				t.Errorf("services?%s: %d services, %v; want %d", tc.query, len(list), err, tc.want)
			}
		}
		if _, err := alice.Do(ctx, "GET", apiclient.ClientAPI+"/services?roleFilter=%23x&roleSemantic=Most", nil, nil); apiclient.CodeOf(err) != "COULD_NOT_VALIDATE" {
			t.Errorf("roleSemantic Most: %v", err)
		}
	})

	t.Run("sessions granted and denied", func(t *testing.T) {
		s, err := session(alice, svc["db"], "Dial")
		if err != nil || s.Token == "" || len(s.EdgeRouters) != 2 {
			t.Fatalf("alice dials db: %v %+v", err, s)
		}
		if _, err := session(alice, svc["metrics"], "Bind"); err != nil {
			t.Fatalf("alice binds metrics: %v", err)
		}
		for _, denied := range []struct {
			who        *apiclient.Client
			name, what string
			typ        string
		}{{bob, "bob", "db", "Dial"}, {alice, "alice", "metrics", "Dial"}, {bob, "bob", "web", "Bind"}, {carol, "carol", "web", "Dial"}} {
			if _, err := session(denied.who, svc[denied.what], denied.typ); err == nil {
				t.Errorf("%s got a %s session for %s", denied.name, denied.typ, denied.what)
			}
		}
	})

	t.Run("posture gating: carol needs the corp domain", func(t *testing.T) {
		if _, err := session(carol, svc["wiki"], "Dial"); err == nil {
			t.Fatal("carol dialed wiki without posture")
		} else if code := apiclient.CodeOf(err); code == "" {
			t.Fatalf("posture refusal without a code: %v", err)
		}
		postureResponse := func(d string) {
			t.Helper()
			if _, err := carol.Do(ctx, "POST", apiclient.ClientAPI+"/posture-response", map[string]string{"id": domain, "typeId": "DOMAIN", "domain": d}, nil); err != nil {
				t.Fatalf("posture response %s: %v", d, err)
			}
		}
		postureResponse("corp.example")
		cs, err := session(carol, svc["wiki"], "Dial")
		if err != nil {
			t.Fatalf("carol dials wiki with posture: %v", err)
		}
		postureResponse("home.example")
		if _, err := carol.Do(ctx, "GET", apiclient.ClientAPI+"/sessions/"+cs.ID, nil, nil); apiclient.CodeOf(err) != "NOT_FOUND" {
			t.Fatalf("carol's session after her posture stopped holding: %v", err)
		}
	})

	t.Run("referenced deletes are refused", func(t *testing.T) {
		if err := n.mgmt("DELETE", "/configs/"+webIntercept, nil, nil); apiclient.CodeOf(err) != "CAN_NOT_DELETE_REFERENCED_ENTITY" {
			t.Fatalf("delete a config a service uses: %v", err)
		}
		if err := n.mgmt("DELETE", "/config-types/intercept.v1", nil, nil); apiclient.CodeOf(err) != "CAN_NOT_DELETE_REFERENCED_ENTITY" {
			t.Fatalf("delete a config type in use: %v", err)
		}
	})

	t.Run("service updates move when something relevant changes", func(t *testing.T) {
		before := lastChange(t, bob)
		if err := n.mgmt("PATCH", "/services/"+svc["db"], map[string]any{"roleAttributes": []string{"internal", "public"}}, nil); err != nil {
			t.Fatal(err)
		}
		if after := lastChange(t, bob); !after.After(before) {
			t.Fatalf("service-updates did not move: %v then %v", before, after)
		}
		if got := services(t, bob); got["db"].Name == "" {
			t.Fatalf("bob does not see db after it became public: %v", got)
		}
	})

	t.Run("router certificate extension: the new certificate works, the previous one gets the same answer, older ones are refused", func(t *testing.T) {
		cert, err := tls.LoadX509KeyPair(filepath.Join(er1Dir, "certs/client.cert"), filepath.Join(er1Dir, "certs/router.key"))
		if err != nil {
			t.Fatal(err)
		}
		server, err := os.ReadFile(filepath.Join(er1Dir, "certs/server.cert"))
		if err != nil {
			t.Fatal(err)
		}
		sc, err := pki.ParsePEMCert(server)
		if err != nil || !slices.Contains(sc.DNSNames, "er1.zmesh.test") || len(sc.IPAddresses) != 1 || sc.Subject.CommonName != er1 {
			t.Fatalf("server certificate: %v %v %v %v", err, sc.DNSNames, sc.IPAddresses, sc.Subject)
		}
		roots := x509.NewCertPool()
		caPEM, _ := os.ReadFile(filepath.Join(er1Dir, "certs/ca.cert"))
		if !roots.AppendCertsFromPEM(caPEM) {
			t.Fatal("ca file holds no certificate")
		}
		extend := func(c tls.Certificate) (*apiclient.RouterCerts, error) {
			key, err := loadOrCreateKey(filepath.Join(er1Dir, "certs/router.key"))
			if err != nil {
				t.Fatal(err)
			}
			csr, err := apiclient.RouterCSR(key, er1, &config.CSR{SANs: sansOf(sc)}, true)
			if err != nil {
				t.Fatal(err)
			}
			return apiclient.ExtendRouter(ctx, strings.TrimPrefix(base, "https://"), roots, c, csr, csr)
		}
		next, err := extend(cert)
		if err != nil || !strings.Contains(next.Cert, "BEGIN CERTIFICATE") {
			t.Fatalf("extend with the current certificate: %v", err)
		}
		// Asked again with the previous certificate and the same keys (the answer was lost),
		// the controller answers with the certificates it issued, and issues none.
		again, err := extend(cert)
		if err != nil || again.Cert != next.Cert || again.ServerCert != next.ServerCert {
			t.Fatalf("extend again with the previous certificate: %v, same certificates %v", err, err == nil && again.Cert == next.Cert)
		}
		otherCSR, err := apiclient.RouterCSR(testutil.NewKey(t), er1, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := apiclient.ExtendRouter(ctx, strings.TrimPrefix(base, "https://"), roots, cert, otherCSR, otherCSR); apiclient.CodeOf(err) != "INVALID_AUTH" {
			t.Fatalf("extend with the previous certificate for another key: %v", err)
		}
		newCert, err := tls.X509KeyPair([]byte(next.Cert), mustRead(t, filepath.Join(er1Dir, "certs/router.key")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := extend(newCert); err != nil {
			t.Fatalf("extend with the new certificate: %v", err)
		}
		if _, err := extend(cert); apiclient.CodeOf(err) != "INVALID_AUTH" {
			t.Fatalf("extend with the certificate of two extensions ago: %v", err)
		}
	})
}

func sansOf(c *x509.Certificate) config.SANs {
	s := config.SANs{DNS: c.DNSNames}
	for _, ip := range c.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			s.IP = append(s.IP, a.Unmap())
		}
	}
	return s
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
