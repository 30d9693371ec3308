package routers_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// metricsView is the body of GET /edge-routers/{id}/metrics.
type metricsView struct {
	Timestamp time.Time          `json:"timestamp"`
	Values    map[string]float64 `json:"values"`
}

// getMetrics asks the management API for a router's latest report.
func (e *env) getMetrics(id string) (metricsView, error) {
	var v metricsView
	_, err := e.admin.Do(context.Background(), "GET", "/edge/management/v1/edge-routers/"+id+"/metrics", nil, &v)
	return v, err
}

func wantNotFound(t *testing.T, err error) {
	t.Helper()
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "NOT_FOUND" {
		t.Fatalf("error %v, want 404 NOT_FOUND", err)
	}
}

// The management API serves the latest metrics report each router sent: 404 before the
// first one, the newest one after several, still after the router reconnects, and 404 again
// once the router is deleted. An unknown router is 404 too.
func TestManagementServesLatestMetrics(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, cert := e.enroll(t, "er1")
	_, err := e.getMetrics("no-such-router")
	wantNotFound(t, err)
	_, err = e.getMetrics(id)
	wantNotFound(t, err)

	ch := e.dial(t, cert)
	if _, err := hello(ch, id); err != nil {
		t.Fatal(err)
	}
	_, err = e.getMetrics(id)
	wantNotFound(t, err)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, values := range []map[string]float64{{"link.count": 1}, {"link.count": 2, "forwarder.forwarded": 42}} {
		if err := ch.Send(t.Context(), &ctrlproto.Metrics{Timestamp: at.Add(time.Duration(i) * time.Minute), Values: values}); err != nil {
			t.Fatal(err)
		}
	}
	want := metricsView{Timestamp: at.Add(time.Minute), Values: map[string]float64{"link.count": 2, "forwarder.forwarded": 42}}
	var got metricsView
	testutil.Eventually(t, "the second report served", func() bool {
		got, err = e.getMetrics(id)
		return err == nil && got.Timestamp.Equal(want.Timestamp)
	})
	if !maps.Equal(got.Values, want.Values) {
		t.Fatalf("values = %v, want %v", got.Values, want.Values)
	}

	// A reconnection keeps the report until the router sends a newer one.
	ch.Close()
	testutil.Eventually(t, "offline", func() bool { return !e.view(t, id).IsOnline })
	again := e.dial(t, cert)
	if _, err := hello(again, id); err != nil {
		t.Fatal(err)
	}
	if got, err := e.getMetrics(id); err != nil || !got.Timestamp.Equal(want.Timestamp) {
		t.Fatalf("after reconnecting: %+v, %v; want the report of the first connection", got, err)
	}

	if err := e.m.DeleteEdgeRouter(id); err != nil {
		t.Fatal(err)
	}
	_, err = e.getMetrics(id)
	wantNotFound(t, err)
	if rep, ok := e.ctrl.Routers().LatestMetrics(id); ok {
		t.Fatalf("the deleted router's report is still kept: %+v", rep)
	}
}

// The route is for administrators only, like the rest of the management API.
func TestManagementMetricsNeedsAdmin(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, _ := e.enroll(t, "er1")
	ctx := context.Background()
	var created struct {
		ID string `json:"id"`
	}
	if _, err := e.admin.Do(ctx, "POST", "/edge/management/v1/identities", map[string]any{
		"name": "user", "type": "User", "isAdmin": false, "enrollment": map[string]any{"updb": "user1"},
	}, &created); err != nil {
		t.Fatal(err)
	}
	enrollments, err := e.m.EnrollmentsOf(created.ID)
	if err != nil || len(enrollments) != 1 {
		t.Fatalf("enrollments: %v %v", enrollments, err)
	}
	if err := e.m.EnrollUpdb(t.Context(), enrollments[0].Token, "user-pass"); err != nil {
		t.Fatal(err)
	}
	user := apiclient.New(e.url, e.ctrl.CA().Pool(), nil)
	if _, err := user.AuthenticatePassword(ctx, "user1", "user-pass"); err != nil {
		t.Fatal(err)
	}
	_, err = user.Do(ctx, "GET", "/edge/management/v1/edge-routers/"+id+"/metrics", nil, nil)
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 403 || apiErr.Code != "UNAUTHORIZED" {
		t.Fatalf("a non-administrator got %v, want 403 UNAUTHORIZED", err)
	}
}
