package sdkoverlay

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
)

// The tunneler's identity file lists two controllers; once the first one's listener closes,
// the tunneler goes on watching its services at the second. (Both answer the list of
// controllers 404, so that the one the controller lists is not learned: this is the file's
// list at work.)
func TestWatchServicesFollowsControllers(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	all := []string{"#all"}
	for _, typ := range []string{model.PolicyDial, model.PolicyBind} {
		if err := c.Model.CreateServicePolicy(&model.ServicePolicy{Name: typ, Type: typ, Semantic: model.SemanticAny, IdentityRoles: all, ServiceRoles: all}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Model.CreateService(&model.Service{Name: "first"}); err != nil {
		t.Fatal(err)
	}
	a, srvA := serveAPI(t, c)
	b, _ := serveAPI(t, c)
	f := c.IdentityFile(t, "tunneler")
	f.ZtAPI, f.ZtAPIs = "", []string{a + apiclient.ClientAPI, b + apiclient.ClientAPI}
	path := filepath.Join(t.TempDir(), "tunneler.json")
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	client, err := sdk.Load(path, sdk.Options{RenewAt: -1, Logger: slog.New(slog.NewTextHandler(c.Logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	lists := make(chan []string, 16)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		Overlay{C: client}.WatchServices(ctx, func(list []tunnel.Service) {
			var names []string
			for _, s := range list {
				names = append(names, s.Name)
			}
			slices.Sort(names)
			lists <- names
		})
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	next := func() []string {
		t.Helper()
		select {
		case l := <-lists:
			return l
		case <-time.After(time.Minute):
			t.Fatal("no list of services in a minute (a poll every 5 s)")
			return nil
		}
	}
	if got := next(); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("services %v, want first", got)
	}
	srvA.Close()
	if err := c.Model.CreateService(&model.Service{Name: "second"}); err != nil {
		t.Fatal(err)
	}
	if got := next(); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("services after the first controller closed %v, want first and second", got)
	}
}

// serveAPI serves c's API on one more loopback HTTPS listener, as another member of a cluster
// sharing its store would, but for the list of controllers.
func serveAPI(t *testing.T, c *ctrltest.Controller) (string, *http.Server) {
	t.Helper()
	api := c.Ctrl.Handler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == apiclient.ClientAPI+"/controllers" {
			http.NotFound(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: h}
	return c.ServeAPI(t, srv), srv
}
