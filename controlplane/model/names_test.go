package model

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Names and usernames go through PRECIS: a control, formatting or invisible character, or a
// form that the rule would map to another (fullwidth letters, decomposed accents, extra
// spaces), is refused with COULD_NOT_VALIDATE naming the field, wherever the name enters.
func TestNamesAndUsernamesArePRECIS(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	host, err := f.m.CreateIdentity(IdentityCreate{Name: "host", Enrollment: &EnrollmentRequest{Updb: "host-user"}})
	if err != nil {
		t.Fatal(err)
	}
	ens, _ := f.m.EnrollmentsOf(host.ID)
	if err := f.m.EnrollUpdb(t.Context(), ens[0].Token, "host-pass"); err != nil {
		t.Fatal(err)
	}
	auths, _ := f.m.AuthenticatorsOf(host.ID)

	tests := []struct {
		value          string
		nameOK, userOK bool
	}{
		{"admin2", true, true},
		{"Café Zoë", true, false}, // a space is no part of a username
		{"café.zoë", true, true},
		{"日本語の名前", true, true},
		{"admin\x00", false, false},
		{"ad\u200dmin", false, false},                    // zero-width joiner
		{"ad\u200bmin", false, false},                    // zero-width space
		{"admin\u202e", false, false},                    // right-to-left override
		{"ad\u00admin", false, false},                    // soft hyphen
		{"admin\u2028", false, false},                    // line separator
		{"\uff41\uff44\uff4d\uff49\uff4e", false, false}, // fullwidth "admin"
		{"cafe\u0301", false, false},                     // not NFC
		{"a\u00a0admin", false, false},                   // no-break space
		{"two  spaces", false, false},
		{" leading", false, false},
		{"ﬁle", false, false}, // compatibility ligature
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.value), func(t *testing.T) {
			check := func(what, field string, ok bool, err error) {
				t.Helper()
				var me *Error
				switch {
				case ok && err != nil:
					t.Errorf("%s: %v, want success", what, err)
				case !ok && (!errors.As(err, &me) || me.Code != CodeCouldNotValidate || me.Field != field):
					t.Errorf("%s: %v, want COULD_NOT_VALIDATE naming %s", what, err, field)
				}
			}
			_, err := f.m.CreateIdentity(IdentityCreate{Name: tt.value})
			check("identity name", "name", tt.nameOK, err)
			_, err = f.m.UpdateIdentity(host.ID, func(id *Identity) error { id.Name = tt.value + "2"; return nil })
			check("identity rename", "name", tt.nameOK, err)
			if _, err := f.m.UpdateIdentity(host.ID, func(id *Identity) error { id.Name = "host"; return nil }); err != nil {
				t.Fatal(err)
			}

			user := tt.value
			_, err = f.m.CreateIdentity(IdentityCreate{Name: fmt.Sprintf("updb-%d", i), Enrollment: &EnrollmentRequest{Updb: user}})
			check("enrollment username", "enrollment.updb", tt.userOK, err)
			other, err := f.m.CreateIdentity(IdentityCreate{Name: fmt.Sprintf("later-%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.m.CreateEnrollment(other.ID, EnrollmentRequest{Updb: user + "-x"}, f.clock.Now().Add(time.Hour))
			check("later enrollment username", "username", tt.userOK, err)
			renamed := user + "-y"
			err = f.m.ChangeCredentials(t.Context(), host.ID, auths[0].ID, CredentialsChange{Username: &renamed, CurrentPassword: "host-pass"})
			check("changed username", "username", tt.userOK, err)
			_, err = newFixture(t).m.EnsureDefaultAdmin(t.Context(), user, "admin-pass")
			check("default admin username", "admin.username", tt.userOK, err)
		})
	}
}
