package api

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	requests []string // "METHOD route code"
	auths    []string // "method success|failure"
}

func (r *recorder) ObserveRequest(method, route string, code int, elapsed time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if elapsed < 0 {
		// Recorded in place of the request, so that the test's comparison fails on it.
		r.requests = append(r.requests, fmt.Sprintf("%s %s: negative duration %v", method, route, elapsed))
		return
	}
	r.requests = append(r.requests, method+" "+route+" "+http.StatusText(code))
}

func (r *recorder) ObserveAuthentication(method string, succeeded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	result := "failure"
	if succeeded {
		result = "success"
	}
	r.auths = append(r.auths, method+" "+result)
}

func (r *recorder) take() (requests, auths []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	requests, auths = r.requests, r.auths
	r.requests, r.auths = nil, nil
	return requests, auths
}

// The Observer hears of every request by its route pattern (never its raw path) and of
// every authentication attempt of a known method with its result.
func TestObserverLabels(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec := &recorder{}
	f.s = New(f.m, slog.New(slog.NewTextHandler(io.Discard, nil)), Info{Advertise: "ctrl.test:1280", Started: time.Now(), Observer: rec})

	tests := []struct {
		name           string
		method, path   string
		token, body    string
		requests       []string
		authentication []string
	}{
		{"password login", "POST", ClientBase + "/authenticate?method=password", "", `{"username":"admin","password":"admin-pass"}`,
			[]string{"POST /edge/client/v1/authenticate OK"}, []string{"password success"}},
		{"wrong password", "POST", ManagementBase + "/authenticate?method=password", "", `{"username":"admin","password":"wrong-pass"}`,
			[]string{"POST /edge/management/v1/authenticate Unauthorized"}, []string{"password failure"}},
		{"certificate without one", "POST", ClientBase + "/authenticate?method=cert", "", "",
			[]string{"POST /edge/client/v1/authenticate Unauthorized"}, []string{"cert failure"}},
		{"unknown method is no authentication", "POST", ClientBase + "/authenticate?method=magic", "", "",
			[]string{"POST /edge/client/v1/authenticate Bad Request"}, nil},
		{"mfa without a session", "POST", ClientBase + "/authenticate/mfa", "", `{"code":"123456"}`,
			[]string{"POST /edge/client/v1/authenticate/mfa Unauthorized"}, []string{"mfa failure"}},
		{"entity by id", "GET", ManagementBase + "/identities/some-id", f.admin, "",
			[]string{"GET /edge/management/v1/identities/{id} Not Found"}, nil},
		{"unknown path", "GET", ManagementBase + "/no/such/path/abc", f.admin, "",
			[]string{"GET unmatched Not Found"}, nil},
		{"wrong method", "PUT", ClientBase + "/version", "", "",
			[]string{"PUT /edge/client/v1/version Method Not Allowed"}, nil},
		{"unknown method name", "BREW", ClientBase + "/version", "", "",
			[]string{"other /edge/client/v1/version Method Not Allowed"}, nil},
	}
	for _, tt := range tests {
		f.do(tt.method, tt.path, tt.token, tt.body)
		requests, auths := rec.take()
		if !slices.Equal(requests, tt.requests) || !slices.Equal(auths, tt.authentication) {
			t.Errorf("%s: requests %q, authentications %q; want %q, %q", tt.name, requests, auths, tt.requests, tt.authentication)
		}
	}
}

// The management API's OpenAPI document lists the router metrics operation, for
// administrators only.
func TestOpenAPIListsRouterMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	doc := f.s.openAPI(ManagementBase)
	op, _ := doc["paths"].(map[string]map[string]any)["/edge-routers/{id}/metrics"]["get"].(map[string]any)
	if op == nil {
		t.Fatal("GET /edge-routers/{id}/metrics is not in the management API's document")
	}
	if _, ok := op["responses"].(map[string]any)["403"]; !ok {
		t.Errorf("the operation is not marked for administrators: %v", op["responses"])
	}
	if _, ok := f.s.openAPI(ClientBase)["paths"].(map[string]map[string]any)["/edge-routers/{id}/metrics"]; ok {
		t.Error("the client API lists the management operation")
	}
}
