package api

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
)

// BenchmarkClientListServices is GET /edge/client/v1/services, as a client sees it, in a
// network of 10,000 services (100 attribute groups), 1,000 identities (100 teams) and 1,000
// Dial/Bind policies each granting a team a group. The identity listing is in three teams;
// "all" is an identity a policy grants #all. Sub-benchmarks: the first page (10), a page of
// 500, and a filtered, sorted page. Target: p50 <= 20 ms.
func BenchmarkClientListServices(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, ca := modeltest.New(b, log, model.Options{})
	if err := m.EnsureBuiltinConfigTypes(); err != nil {
		b.Fatal(err)
	}
	s := New(m, log, Info{Advertise: "ctrl.test:1280", ServerCert: ca.Certificate(), Started: time.Now()})

	for i := range 10_000 {
		if err := m.CreateService(&model.Service{Name: fmt.Sprintf("service-%05d", i), RoleAttributes: []string{fmt.Sprintf("group%d", i%100)}}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 1000 {
		attrs := []string{fmt.Sprintf("team%d", i%100), fmt.Sprintf("team%d", (i+1)%100), fmt.Sprintf("team%d", (i+2)%100)}
		var enroll *model.EnrollmentRequest
		switch i {
		case 0:
			enroll = &model.EnrollmentRequest{Updb: "member"}
		case 1:
			attrs, enroll = []string{"everything"}, &model.EnrollmentRequest{Updb: "everything"}
		}
		id, err := m.CreateIdentity(model.IdentityCreate{Name: fmt.Sprintf("identity-%04d", i), RoleAttributes: attrs, Enrollment: enroll})
		if err != nil {
			b.Fatal(err)
		}
		if enroll != nil {
			ens, _ := m.EnrollmentsOf(id.ID)
			if err := m.EnrollUpdb(b.Context(), ens[0].Token, "password-"+enroll.Updb); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range 1000 {
		typ := model.PolicyDial
		if i%2 == 1 {
			typ = model.PolicyBind
		}
		p := &model.ServicePolicy{Name: fmt.Sprintf("policy-%04d", i), Type: typ, Semantic: model.SemanticAny,
			IdentityRoles: []string{fmt.Sprintf("#team%d", i%100)}, ServiceRoles: []string{fmt.Sprintf("#group%d", (i*7+i/100)%100)}}
		if i == 0 {
			p.IdentityRoles, p.ServiceRoles = []string{"#everything"}, []string{"#all"}
		}
		if err := m.CreateServicePolicy(p); err != nil {
			b.Fatal(err)
		}
	}
	token := func(user string) string {
		as, _, err := m.AuthenticatePassword(b.Context(), user, "password-"+user, model.Login{Source: "127.0.0.1"})
		if err != nil {
			b.Fatal(err)
		}
		return as.Token
	}
	sessions := map[string]string{"member": token("member"), "all": token("everything")}

	for _, tc := range []struct{ who, name, query string }{
		{"member", "page10", ""},
		{"member", "page500", "?limit=500"},
		{"member", "filtered", "?filter=" + `name%20contains%20%22-01%22%20and%20not%20(name%20contains%20%22x%22)%20sort%20by%20name%20desc`},
		{"all", "page10", ""},
		{"all", "page500", "?limit=500"},
	} {
		b.Run(tc.who+"/"+tc.name, func(b *testing.B) {
			d := make([]time.Duration, 0, b.N)
			for b.Loop() {
				req := newReq("GET", ClientBase+"/services"+tc.query, sessions[tc.who])
				rec := httptest.NewRecorder()
				start := time.Now()
				s.ServeHTTP(rec, req)
				d = append(d, time.Since(start))
				if rec.Code != 200 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2])/1e6, "p50-ms")
			b.ReportMetric(float64(d[len(d)*99/100])/1e6, "p99-ms")
		})
	}
}
