package ctrltest

import (
	"net"
	"net/http"
	"sync"
	"testing"
)

// ServeAPI serves the controller's API with srv on one more loopback HTTPS listener, as
// another member of a cluster sharing its store would, until the test ends; it returns the
// listener's base URL. srv's Handler defaults to the controller's API (a test wraps it to
// count or refuse requests) and its TLSConfig to the controller's.
func (c *Controller) ServeAPI(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if srv.Handler == nil {
		srv.Handler = c.Ctrl.Handler()
	}
	if srv.TLSConfig == nil {
		srv.TLSConfig = c.Ctrl.TLSConfig()
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	return "https://" + ln.Addr().String()
}
