package model

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/store"
)

// A large network for the policy benchmarks: 10,000 services in 100 groups, 1,000 identities
// in 100 teams, 1,000 Dial/Bind policies each granting one team one service group, 10 edge
// routers that every identity may use and that carry every service. The benchmarked identity
// is in three teams; a second one has a policy granting it #all.
const (
	benchServices   = 10000
	benchIdentities = 1000
	benchPolicies   = 1000
	benchGroups     = 100
)

type benchNet struct {
	f            *fixture
	member       *APISession // three teams
	everything   *APISession // granted #all
	memberSvc    string      // a service member may dial
	memberWanted int         // how many services member may use
}

// bulk stores records in transactions of at most 500.
func bulk[T any](b *testing.B, m *Model, coll *store.Collection[T], recs []*T) {
	b.Helper()
	for i := 0; i < len(recs); i += 500 {
		chunk := recs[i:min(i+500, len(recs))]
		if err := m.st.Update(func(tx *store.Tx) error {
			for _, r := range chunk {
				if err := coll.Create(tx, r); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchNet(b *testing.B) *benchNet {
	b.Helper()
	f := newFixture(b)
	m := f.m
	base := func(id string) Base { now := m.now(); return Base{ID: id, CreatedAt: now, UpdatedAt: now} }

	services := make([]*Service, benchServices)
	for i := range services {
		services[i] = &Service{Base: base(fmt.Sprintf("svc%05d", i)), Name: fmt.Sprintf("service-%05d", i),
			RoleAttributes: []string{fmt.Sprintf("group%d", i%benchGroups)}, Configs: []string{}, TerminatorStrategy: DefaultStrat}
	}
	bulk(b, m, m.c.services, services)

	identities := make([]*Identity, benchIdentities)
	for i := range identities {
		identities[i] = &Identity{Base: base(fmt.Sprintf("id%04d", i)), Name: fmt.Sprintf("identity-%04d", i), Type: IdentityTypeDefault,
			RoleAttributes: []string{fmt.Sprintf("team%d", i%benchGroups), fmt.Sprintf("team%d", (i+1)%benchGroups), fmt.Sprintf("team%d", (i+2)%benchGroups)}}
	}
	identities[benchIdentities-1].RoleAttributes = []string{"everything"}
	bulk(b, m, m.c.identities, identities)

	policies := make([]*ServicePolicy, benchPolicies)
	for i := range policies {
		typ := PolicyDial
		if i%2 == 1 {
			typ = PolicyBind
		}
		policies[i] = &ServicePolicy{Base: base(fmt.Sprintf("sp%04d", i)), Name: fmt.Sprintf("policy-%04d", i), Type: typ, Semantic: SemanticAny,
			IdentityRoles: []string{fmt.Sprintf("#team%d", i%benchGroups)}, ServiceRoles: []string{fmt.Sprintf("#group%d", (i*7+i/benchGroups)%benchGroups)},
			PostureCheckRoles: []string{}}
	}
	policies[0].IdentityRoles = []string{"#everything"}
	policies[0].ServiceRoles = []string{"#all"}
	bulk(b, m, m.c.servicePolicies, policies)

	routers := make([]*EdgeRouter, 10)
	for i := range routers {
		routers[i] = &EdgeRouter{Base: base(fmt.Sprintf("er%02d", i)), Name: fmt.Sprintf("router-%02d", i), RoleAttributes: []string{"edge"}, IsVerified: true}
	}
	bulk(b, m, m.c.edgeRouters, routers)
	bulk(b, m, m.c.edgeRouterPolicies, []*EdgeRouterPolicy{{Base: base("erp"), Name: "all", Semantic: SemanticAny,
		IdentityRoles: []string{"#all"}, EdgeRouterRoles: []string{"#edge"}}})
	bulk(b, m, m.c.serviceEdgeRouterPolicies, []*ServiceEdgeRouterPolicy{{Base: base("serp"), Name: "all", Semantic: SemanticAny,
		ServiceRoles: []string{"#all"}, EdgeRouterRoles: []string{"#all"}}})

	sessions := []*APISession{
		{Base: base("as-member"), Token: newToken(), IdentityID: identities[0].ID, LastActivityAt: m.now()},
		{Base: base("as-all"), Token: newToken(), IdentityID: identities[benchIdentities-1].ID, LastActivityAt: m.now()},
	}
	bulk(b, m, m.c.apiSessions, sessions)
	m.cache.gen.Add(1) // the bulk inserts bypassed the model

	n := &benchNet{f: f, member: sessions[0], everything: sessions[1]}
	list, err := m.ServicesFor(n.member.IdentityID)
	if err != nil {
		b.Fatal(err)
	}
	n.memberWanted = len(list)
	i := slices.IndexFunc(list, func(a ServiceAccess) bool { return a.Dial })
	if i < 0 {
		b.Fatal("the benchmarked identity may dial nothing")
	}
	n.memberSvc = list[i].ID
	return n
}

// percentiles reports the p50 and p99 of the durations as ms/op metrics.
func percentiles(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) == 0 {
		return
	}
	b.ReportMetric(float64(d[len(d)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100])/1e6, "p99-ms")
}

// BenchmarkServicesFor lists the services an identity may use in a network of 10,000
// services, 1,000 policies and 1,000 identities. Target: p50 <= 20 ms.
func BenchmarkServicesFor(b *testing.B) {
	n := newBenchNet(b)
	for _, tc := range []struct {
		name string
		as   *APISession
		want int
	}{{"member", n.member, n.memberWanted}, {"all", n.everything, benchServices}} {
		b.Run(tc.name, func(b *testing.B) {
			d := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				list, err := n.f.m.ServicesFor(tc.as.IdentityID)
				d = append(d, time.Since(start))
				if err != nil || len(list) != tc.want {
					b.Fatalf("%d services, %v; want %d", len(list), err, tc.want)
				}
			}
			b.ReportMetric(float64(tc.want), "services")
			percentiles(b, d)
		})
	}
	b.Run("rebuild", func(b *testing.B) {
		// The first listing after a change rebuilds the policy index.
		d := make([]time.Duration, 0, b.N)
		for b.Loop() {
			n.f.m.cache.gen.Add(1)
			start := time.Now()
			if _, err := n.f.m.ServicesFor(n.member.IdentityID); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
		}
		percentiles(b, d)
	})
}

// BenchmarkCreateSession creates Dial sessions in the same network. Target: <= 2 ms.
func BenchmarkCreateSession(b *testing.B) {
	n := newBenchNet(b)
	d := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		_, routers, err := n.f.m.CreateSession(n.member, n.memberSvc, PolicyDial, nil)
		d = append(d, time.Since(start))
		if err != nil || len(routers) != 10 {
			b.Fatalf("%v, %d routers", err, len(routers))
		}
	}
	percentiles(b, d)
}

// BenchmarkRelated answers the related-entity lists of the management API from the policy
// index in the same network: the identities that may use a service, the services an
// identity may use, the policies that apply to an identity.
func BenchmarkRelated(b *testing.B) {
	n := newBenchNet(b)
	for _, tc := range []struct {
		name, typ, id, related string
	}{
		{"service-identities", TypeServices, n.memberSvc, TypeIdentities},
		{"identity-services", TypeIdentities, n.member.IdentityID, TypeServices},
		{"identity-service-policies", TypeIdentities, n.member.IdentityID, TypeServicePolicies},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d := make([]time.Duration, 0, b.N)
			found := 0
			for b.Loop() {
				start := time.Now()
				ids, err := n.f.m.Related(tc.typ, tc.id, tc.related, "")
				d = append(d, time.Since(start))
				if err != nil || len(ids) == 0 {
					b.Fatalf("%d ids, %v", len(ids), err)
				}
				found = len(ids)
			}
			b.ReportMetric(float64(found), "ids")
			percentiles(b, d)
		})
	}
}
