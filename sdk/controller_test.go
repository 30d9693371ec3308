package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
)

// Services lists every page, with permissions, encryption and configs by type name.
func TestServices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ct := &model.ConfigType{Name: "app.v1", Schema: map[string]any{"type": "object"}}
	check(t, e.m.CreateConfigType(ct))
	cfg := &model.Config{Name: "app", ConfigTypeID: ct.ID, Data: map[string]any{"port": 8080}}
	check(t, e.m.CreateConfig(cfg))
	check(t, e.m.CreateService(&model.Service{Name: "configured", Configs: []string{cfg.ID}, EncryptionRequired: true}))
	// More than a page.
	for i := range pageSize + 10 {
		e.service(fmt.Sprintf("svc-%03d", i), false)
	}
	// Only configured may be dialed.
	_, err := e.m.UpdateServicePolicy(mustPolicy(t, e, model.PolicyDial), func(p *model.ServicePolicy) error {
		p.ServiceRoles = []string{"@" + mustService(t, e, "configured").ID}
		return nil
	})
	check(t, err)

	c := e.sdk("app")
	list, err := c.Services(testCtx(t))
	check(t, err)
	if len(list) != pageSize+11 {
		t.Fatalf("listed %d services, want %d", len(list), pageSize+11)
	}
	svc, err := c.ServiceByName(testCtx(t), "configured")
	check(t, err)
	if !svc.EncryptionRequired || !svc.CanDial() || !svc.CanBind() {
		t.Errorf("configured: %+v", svc)
	}
	var app struct{ Port int }
	if err := json.Unmarshal(svc.Configs["app.v1"], &app); err != nil || app.Port != 8080 {
		t.Errorf("configs %s: %v %+v", svc.Configs, err, app)
	}
	other, err := c.ServiceByName(testCtx(t), "svc-007")
	check(t, err)
	if other.EncryptionRequired || other.CanDial() || !other.CanBind() || len(other.Configs) != 0 {
		t.Errorf("svc-007 (bind only now): %+v", other)
	}
	if _, err := c.ServiceByName(testCtx(t), "nope"); !errors.Is(err, ErrNoService) {
		t.Errorf("unknown service: %v", err)
	}
}

func mustPolicy(t *testing.T, e *testEnv, name string) string {
	t.Helper()
	list, err := e.m.ServicePolicies()
	check(t, err)
	return idByName(t, "policy", name, list, func(p *model.ServicePolicy) (string, string) { return p.Name, p.ID })
}

func identityID(t *testing.T, e *testEnv, name string) string {
	t.Helper()
	list, err := e.m.Identities()
	check(t, err)
	return idByName(t, "identity", name, list, func(i *model.Identity) (string, string) { return i.Name, i.ID })
}

// idByName returns the id of the entity of list named name, failing the test when none is.
func idByName[T any](t *testing.T, kind, name string, list []T, nameID func(T) (string, string)) string {
	t.Helper()
	for _, x := range list {
		if n, id := nameID(x); n == name {
			return id
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return ""
}

func mustService(t *testing.T, e *testEnv, name string) *model.Service {
	t.Helper()
	s, err := e.m.ServiceByName(name)
	check(t, err)
	return s
}

// A call answered 401 (the API session ended) authenticates again, once, and succeeds.
func TestReauthenticateAfter401(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.service("echo", false)
	c := e.sdk("app")
	if _, err := c.Services(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	first := c.token
	sessions, err := e.m.APISessions()
	check(t, err)
	if len(sessions) != 1 {
		t.Fatalf("%d API sessions after the first call, want 1 (lazy authentication, once)", len(sessions))
	}
	check(t, e.m.DeleteAPISession(sessions[0].ID))
	list, err := c.Services(testCtx(t))
	if err != nil || len(list) != 1 {
		t.Fatalf("after the API session ended: %v %v", list, err)
	}
	if c.token == first || c.token == "" {
		t.Error("the token did not change")
	}
	// A Client whose certificate the controller does not know cannot authenticate: no loop.
	id := e.sdkIdentity("gone")
	check(t, e.m.DeleteIdentity(identityID(t, e, "gone")))
	gone, err := New(id, e.options("gone"))
	check(t, err)
	defer gone.Close()
	if _, err := gone.Services(testCtx(t)); err == nil || !strings.Contains(err.Error(), "authenticate") {
		t.Errorf("deleted identity: %v", err)
	}
}

// Load reads an identity file as zmesh enroll writes it.
func TestLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.service("echo", false)
	path := filepath.Join(t.TempDir(), "id.json")
	check(t, e.identity("app").Save(path))
	c, err := Load(path, e.options("app"))
	check(t, err)
	defer c.Close()
	if _, err := c.ServiceByName(testCtx(t), "echo"); err != nil {
		t.Fatal(err)
	}
	if want := identityID(t, e, "app"); c.IdentityID() != want {
		t.Errorf("IdentityID %q, want %q", c.IdentityID(), want)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// Close logs out: the API session ends.
	check(t, c.Close())
	if sessions, _ := e.m.APISessions(); len(sessions) != 0 {
		t.Errorf("%d API sessions after Close", len(sessions))
	}
	if _, err := c.Dial(testCtx(t), "echo"); !errors.Is(err, ErrClosed) {
		t.Errorf("Dial after Close: %v", err)
	}
}

// countingTransport counts the requests per path.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

// WatchServices reports everything first, then what was added, changed and removed, and
// lists the services again only when service-updates moved.
func TestWatchServices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.service("a", false)
	b := e.service("b", false)
	c := e.sdk("app")
	counter := &countingTransport{next: c.creds.Load().api.HTTP.Transport, n: map[string]int{}}
	c.creds.Load().api.HTTP.Transport = counter

	type change struct{ added, changed, removed []string }
	changes := make(chan change, 10)
	names := func(list []Service) []string {
		var out []string
		for _, s := range list {
			out = append(out, s.Name)
		}
		return out
	}
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() {
		done <- c.WatchServices(ctx, 20*time.Millisecond, func(added, changed, removed []Service) {
			changes <- change{names(added), names(changed), names(removed)}
		})
	}()
	next := func() change {
		select {
		case ch := <-changes:
			return ch
		case <-time.After(10 * time.Second):
			t.Fatal("no change reported")
			return change{}
		}
	}
	if ch := next(); len(ch.added) != 2 || ch.changed != nil || ch.removed != nil {
		t.Fatalf("first report %+v", ch)
	}
	// Nothing changes: polls, no listing.
	lists := counter.count("/edge/client/v1/services")
	polls := counter.count("/edge/client/v1/current-api-session/service-updates")
	testutil.Eventually(t, "3 more polls at 20ms", func() bool {
		return counter.count("/edge/client/v1/current-api-session/service-updates") >= polls+3
	})
	if got := counter.count("/edge/client/v1/services"); got != lists {
		t.Errorf("listed %d times without a change", got-lists)
	}
	select {
	case ch := <-changes:
		t.Fatalf("reported %+v without a change", ch)
	default:
	}

	e.service("c", false)
	if ch := next(); fmt.Sprint(ch.added) != "[c]" || ch.changed != nil || ch.removed != nil {
		t.Errorf("after adding c: %+v", ch)
	}
	_, err := e.m.UpdateService(b.ID, func(s *model.Service) error { s.Name = "b2"; return nil })
	check(t, err)
	if ch := next(); fmt.Sprint(ch.changed) != "[b2]" || ch.added != nil || ch.removed != nil {
		t.Errorf("after changing b: %+v", ch)
	}
	check(t, e.m.DeleteService(b.ID))
	if ch := next(); fmt.Sprint(ch.removed) != "[b2]" || ch.added != nil || ch.changed != nil {
		t.Errorf("after deleting b: %+v", ch)
	}
	// The watch keeps the listing ServiceByName answers from.
	if _, err := c.ServiceByName(ctx, "c"); err != nil {
		t.Error(err)
	}
	if n := counter.count("/edge/client/v1/services"); n != lists+3 {
		t.Errorf("%d listings for 3 changes", n-lists)
	}
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("WatchServices after Close: %v", err)
	}
}
