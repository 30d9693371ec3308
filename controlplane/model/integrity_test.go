package model

import (
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
	issues, err := f.m.CheckIntegrity(false)
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
	issues, err = f.m.CheckIntegrity(true)
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
	issues, err = f.m.CheckIntegrity(false)
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
