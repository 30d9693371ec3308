package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
)

// The flow of the SDK's HTTP examples through two real routers, end-to-end encrypted: one
// identity serves HTTP with http.Serve on an sdk.Listener, another GETs http://<service>/
// with an http.Client whose transport dials through Client.DialContext.
func TestSDKHTTP(t *testing.T) {
	t.Parallel()
	n, svc, dialerCert, hostCert, dialerID := buildEdgeNet(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, err := sdk.New(sdkIdentity(t, n.identityFile(hostCert)), sdk.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	client, err := sdk.New(sdkIdentity(t, n.identityFile(dialerCert)), sdk.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	var ln *sdk.Listener
	testutil.Eventually(t, "the routers to know the host's session", func() bool {
		ln, err = host.Listen(ctx, svc.Name)
		return err == nil
	})
	served := make(chan error, 1)
	go func() {
		served <- http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello, %s", r.RemoteAddr)
		}))
	}()

	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialContext}}
	defer hc.CloseIdleConnections()
	var got string
	testutil.Eventually(t, "a GET through the routers", func() bool {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+svc.Name+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		got = fmt.Sprintf("%s %s", resp.Status, body)
		return err == nil
	})
	if want := "200 OK hello, " + dialerID.ID + "@" + svc.Name; got != want {
		t.Errorf("GET: %q, want %q", got, want)
	}

	ln.Close()
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		t.Errorf("http.Serve after the listener closed: %v", err)
	}
}
