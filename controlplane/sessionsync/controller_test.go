package sessionsync_test

import (
	"testing"

	"github.com/zmesh/zmesh/internal/ctrltest"
)

// TestController: the controller runs the syncer: a router that connects to its control
// channel gets the session state, and a login through the API reaches it as an update.
func TestController(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	m := c.Model
	c.Admin(t) // the administrator's login: an API session the router is to get

	routerID, cert := enrollRouter(t, m, "er1")
	r := newEdgeRouter()
	r.connect(t, c.CtrlAddr, c.Ctrl.CA().Pool(), routerID, cert)
	waitInSync(t, r, m)
	if apis, _, _ := r.state(); len(apis) != 1 {
		t.Fatalf("the router got %d API sessions, want the administrator's", len(apis))
	}
	c.Admin(t) // a second login through the API
	waitInSync(t, r, m)
	if apis, _, _ := r.state(); len(apis) != 2 {
		t.Fatalf("after a second login the router has %d API sessions, want 2", len(apis))
	}
	r.check(t)
}
