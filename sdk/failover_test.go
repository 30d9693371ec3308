package sdk

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// serveAPI serves the API of the test's controller on one more loopback HTTPS listener, as
// another member of a cluster sharing its store would, and returns its URL and server.
func serveAPI(t *testing.T, c *ctrltest.Controller) (string, *http.Server) {
	t.Helper()
	srv := &http.Server{}
	return c.ServeAPI(t, srv), srv
}

// An identity file whose ztAPIs starts with a dead controller loads, authenticates at the
// next one and lists services.
func TestLoadZtAPIsDeadFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.service("svc", false)
	dead := "https://" + testutil.ClosedAddr(t)
	f := e.identity("app")
	f.ZtAPI, f.ZtAPIs = "", []string{dead + apiclient.ClientAPI, e.ctl.URL + apiclient.ClientAPI}
	data, err := json.Marshal(f)
	check(t, err)
	path := filepath.Join(t.TempDir(), "app.json")
	check(t, os.WriteFile(path, data, 0o600))

	c, err := Load(path, e.options("app"))
	check(t, err)
	t.Cleanup(func() { c.Close() })
	services, err := c.Services(testCtx(t))
	if err != nil {
		t.Fatalf("services with the first controller dead: %v", err)
	}
	if len(services) != 1 || services[0].Name != "svc" {
		t.Errorf("services %+v, want svc", services)
	}
}

// Clients logged in at controller A go on at B once A's listener closes, in the same API
// session: they list services, bind, dial and carry bytes; a renewed certificate's
// controller calls keep the list.
func TestFailoverToAnotherController(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.router("r")
	e.service("echo", false)
	a, srvA := serveAPI(t, e.ctl)
	b, _ := serveAPI(t, e.ctl)
	client := func(name string) *Client {
		id := e.sdkIdentity(name)
		id.Controller, id.Controllers = "", []string{a, b}
		c, err := New(id, e.options(name))
		check(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	host, dialer := client("host"), client("client")
	for _, c := range []*Client{host, dialer} {
		if _, err := c.Services(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	tokens := []string{host.currentToken(), dialer.currentToken()}
	if cur := host.creds.Load().api.Current(); cur != a {
		t.Fatalf("logged in at %s, want A %s", cur, a)
	}

	srvA.Close()
	if _, err := dialer.Services(testCtx(t)); err != nil {
		t.Fatalf("services after A closed: %v", err)
	}
	l := listen(t, host, "echo", ListenOptions{})
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, conn)
	}()
	conn, err := dialer.Dial(testCtx(t), "echo")
	if err != nil {
		t.Fatalf("dial after A closed: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo %q, %v", got, err)
	}
	if now := []string{host.currentToken(), dialer.currentToken()}; !slices.Equal(now, tokens) {
		t.Errorf("API sessions changed in the failover")
	}
	for _, c := range []*Client{host, dialer} {
		if cur := c.creds.Load().api.Current(); cur != b {
			t.Errorf("%s answered by %s, want B %s", c.IdentityID(), cur, b)
		}
	}
	// The controller lists itself at its advertised address: learned, and kept by the calls
	// of a renewed certificate.
	next, err := dialer.newCredentials(dialer.creds.Load().cert)
	check(t, err)
	if got, want := next.api.URLs(), []string{a, b, e.ctl.URL}; !slices.Equal(got, want) {
		t.Errorf("controllers %v, want %v", got, want)
	}
}

// currentToken returns c's current API session token.
func (c *Client) currentToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}
