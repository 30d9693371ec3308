package model

import (
	"fmt"
	"testing"

	"github.com/zmesh/zmesh/controlplane/store"
)

func TestCheckIntegrity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := &Service{Name: "web"}
	if err := f.m.CreateService(svc); err != nil {
		t.Fatal(err)
	}
	// Records naming records that do not exist, written past the model's checks.
	err := f.m.st.Update(func(tx *store.Tx) error {
		for _, put := range []func() error{
			func() error {
				return f.m.c.authenticators.Put(tx, &Authenticator{Base: f.m.newBase(nil), IdentityID: "ghost", Method: MethodUpdb, Username: "ghost-user"})
			},
			func() error {
				return f.m.c.enrollments.Put(tx, &Enrollment{Base: f.m.newBase(nil), IdentityID: "ghost", Method: EnrollOTT, Token: "t1"})
			},
			func() error {
				return f.m.c.identityServiceConfigs.Put(tx, &IdentityServiceConfigs{IdentityID: "ghost", Configs: map[string]map[string]string{svc.ID: {"x": "y"}}})
			},
			func() error {
				return f.m.c.configs.Put(tx, &Config{Base: f.m.newBase(nil), Name: "orphan", ConfigTypeID: "no-such-type"})
			},
			func() error {
				s := *svc
				s.Configs = []string{"no-such-config"}
				return f.m.c.services.Put(tx, &s)
			},
		} {
			if err := put(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	issues, _, err := f.m.CheckIntegrity(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(issues) != 5 {
		t.Fatalf("issues: %+v", issues)
	}
	for _, is := range issues {
		if is.Fixed {
			t.Errorf("a check fixed %q", is.Description)
		}
	}
	issues, _, err = f.m.CheckIntegrity(true)
	if err != nil {
		t.Fatal(err)
	}
	fixed := 0
	for _, is := range issues {
		if is.Fixed {
			fixed++
		}
	}
	if len(issues) != 5 || fixed != 4 {
		t.Fatalf("fix: %+v", issues)
	}
	issues, _, err = f.m.CheckIntegrity(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(issues) != 1 || issues[0].Fixed {
		t.Fatalf("after the fix: %+v", issues)
	}
	if s, err := f.m.Service(svc.ID); err != nil || len(s.Configs) != 0 {
		t.Fatalf("service configs after the fix: %v %v", s, err)
	}
	if ghosts, err := f.m.AuthenticatorsOf("ghost"); err != nil || len(ghosts) != 0 {
		t.Fatalf("authenticators of a missing identity after the fix: %v %v", ghosts, err)
	}
}

// A fix repairs more broken records than one transaction holds, in batches, reports each once,
// and leaves the records that are whole alone.
func TestCheckIntegrityInBatches(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, store.Options{InMemory: true})
	keep, err := f.m.CreateIdentity(IdentityCreate{Name: "kept", Enrollment: &EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	const broken = 2*integrityBatch + 7
	for i := 0; i < broken; i += 500 {
		err := f.m.st.Update(func(tx *store.Tx) error {
			for j := i; j < min(i+500, broken); j++ {
				e := &Enrollment{Base: f.m.newBase(nil), IdentityID: "ghost", Method: EnrollOTT, Token: fmt.Sprintf("t%d", j)}
				if err := f.m.c.enrollments.Put(tx, e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	issues, more, err := f.m.CheckIntegrity(true)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, is := range issues {
		if !is.Fixed || seen[is.Description] {
			t.Fatalf("issue %+v reported twice or not fixed", is)
		}
		seen[is.Description] = true
	}
	if len(issues) != broken || more {
		t.Fatalf("%d issues (more: %v), want %d", len(issues), more, broken)
	}
	if issues, _, err := f.m.CheckIntegrity(false); err != nil || len(issues) != 0 {
		t.Fatalf("after the fix: %d issues, %v", len(issues), err)
	}
	if ens, err := f.m.EnrollmentsOf(keep.ID); err != nil || len(ens) != 1 {
		t.Fatalf("the whole identity's enrollment after the fix: %v %v", ens, err)
	}
}
