package api

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/model/modeltest"
)

// frozenClock is a clock that moves only when the test moves it.
type frozenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *frozenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *frozenClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// attackFrom is the loopback address of the i-th guess: 40 addresses in turn.
func attackFrom(i int) string { return fmt.Sprintf("127.0.0.%d", i%40+10) }

// guesses sends 200 requests of guess(i) from 40 loopback addresses and returns how many
// were not refused with 429. Every answer must be 401 or 429 RATE_LIMITED with Retry-After.
func guesses(t *testing.T, l *live, guess func(i int) hreq) int {
	t.Helper()
	checked := 0
	for i := range 200 {
		r := guess(i)
		r.from = attackFrom(i)
		a := l.do(r)
		switch {
		case a.status == http.StatusUnauthorized:
			checked++
		case a.status != http.StatusTooManyRequests || a.code(t) != "RATE_LIMITED" || a.header.Get("Retry-After") == "":
			t.Fatalf("guess %d: %d %v %s, want 401, or 429 RATE_LIMITED with Retry-After", i, a.status, a.header, a.body)
		}
	}
	return checked
}

// TestLoginGuessesFromManySources sends 200 wrong passwords for one user from 40 addresses:
// refused after at most 10, while the address the user logged in from still gets in.
func TestLoginGuessesFromManySources(t *testing.T) {
	t.Parallel()
	clock := &frozenClock{t: time.Now()}
	l := startLive(t, liveOptions{clock: clock.Now})
	l.updbUser("victim", "")
	l.login("victim", "victim-Pass1!")
	checked := guesses(t, l, func(i int) hreq {
		return hreq{method: "POST", path: "/authenticate?method=password",
			body: map[string]string{"username": "victim", "password": fmt.Sprintf("guess-%d", i)}}
	})
	if checked == 0 || checked > 10 {
		t.Errorf("%d of 200 passwords from 40 addresses were checked, want 1 to 10", checked)
	}
	l.login("victim", "victim-Pass1!")
}

// TestMFAGuessesFromManySources sends 200 wrong TOTP codes for one identity from 40
// addresses: refused after at most 10, while the address that passed MFA before still does.
func TestMFAGuessesFromManySources(t *testing.T) {
	t.Parallel()
	clock := &frozenClock{t: time.Now()}
	l := startLive(t, liveOptions{clock: clock.Now})
	l.updbUser("totp-user", "")
	s := l.login("totp-user", "totp-user-Pass1!")
	l.expect(hreq{method: "POST", path: "/current-identity/mfa", token: s.token}, "POST /current-identity/mfa", 201, "")
	var d mfaDetail
	l.expect(hreq{method: "GET", path: "/current-identity/mfa", token: s.token}, "GET /current-identity/mfa", 200, "").data(t, &d)
	u, err := url.Parse(*d.ProvisioningURL)
	if err != nil {
		t.Fatal(err)
	}
	secret := u.Query().Get("secret")
	step := clock.Now().Unix() / 30
	l.expect(hreq{method: "POST", path: "/current-identity/mfa/verify", token: s.token, body: map[string]string{"code": totpCode(secret, step)}},
		"POST /current-identity/mfa/verify", 200, "")

	partial := l.login("totp-user", "totp-user-Pass1!")
	valid := map[string]bool{}
	for s := step - 1; s <= step+1; s++ {
		valid[totpCode(secret, s)] = true
	}
	checked := guesses(t, l, func(i int) hreq {
		code := fmt.Sprintf("%06d", i)
		if valid[code] {
			code = "999999"
		}
		return hreq{method: "POST", path: "/authenticate/mfa", token: partial.token, body: map[string]string{"code": code}}
	})
	if checked == 0 || checked > 10 {
		t.Errorf("%d of 200 codes from 40 addresses were checked, want 1 to 10", checked)
	}
	clock.Add(30 * time.Second)
	l.expect(hreq{method: "POST", path: "/authenticate/mfa", token: partial.token, body: map[string]string{"code": totpCode(secret, step+1)}},
		"POST /authenticate/mfa", 200, "")
}

// TestLoginsBeyondHashQueue sends 150 right logins at once to a controller that checks one
// password at a time: those beyond the wait queue get 429 RATE_LIMITED with Retry-After.
func TestLoginsBeyondHashQueue(t *testing.T) {
	t.Parallel()
	m, ca := modeltest.New(t, nil, model.Options{PasswordHashers: 1})
	if _, err := m.EnsureDefaultAdmin(t.Context(), "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	s := New(m, slog.New(slog.NewTextHandler(io.Discard, nil)), Info{Advertise: "ctrl.test:1280", ServerCert: ca.Certificate(), Started: time.Now()})
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 150 {
		wg.Go(func() {
			req := httptest.NewRequest("POST", ClientBase+"/authenticate?method=password",
				strings.NewReader(`{"username":"admin","password":"admin-pass"}`))
			req.Header.Set("Content-Type", "application/json")
			req.RemoteAddr = fmt.Sprintf("10.0.%d.%d:40000", i/200, i%200)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code == http.StatusTooManyRequests && (errorCode(t, rec) != "RATE_LIMITED" || rec.Header().Get("Retry-After") == "") {
				t.Errorf("a refused login: %v %s", rec.Header(), rec.Body)
			}
			mu.Lock()
			statuses[rec.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[http.StatusOK] == 0 || statuses[http.StatusTooManyRequests] == 0 || statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != 150 {
		t.Errorf("150 logins at once answered %v, want some 200 and some 429 only", statuses)
	}
}
