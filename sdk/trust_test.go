package sdk

import (
	"errors"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/certid"
)

// TestRouterPosingAsControllerRefused: the SDK's controller client refuses a router's server
// certificate naming the controller's address, though it chains to the network's CA.
func TestRouterPosingAsControllerRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.sdkIdentity("alice")
	genuine := *id
	id.Controller, id.Controllers = "https://"+e.ctl.Imposter(t), nil // the imposter alone
	c, err := New(id, e.options("alice"))
	check(t, err)
	t.Cleanup(func() { c.Close() })
	if _, err := c.Services(testCtx(t)); !errors.Is(err, certid.ErrNotController) || !strings.Contains(err.Error(), "not the controller's certificate") {
		t.Errorf("services from a router posing as the controller: %v; want it refused as not the controller's certificate", err)
	}
	good, err := New(&genuine, e.options("alice"))
	check(t, err)
	t.Cleanup(func() { good.Close() })
	if _, err := good.Services(testCtx(t)); err != nil {
		t.Errorf("services from the controller: %v", err)
	}
}
