package sdk

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// The flows of the examples (example_test.go), run against the controller and a fake edge
// router: identities loaded from their files, an HTTP server on a Listener, an http.Client
// dialing through DialContext, a raw Dial with half-close.
func TestHTTPExamples(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.router("r")
	e.service("hello", false)
	e.service("echo", false)
	dir := t.TempDir()
	load := func(name string) *Client {
		path := filepath.Join(dir, name+".json")
		check(t, e.identity(name).Save(path))
		c, err := Load(path, e.options(name))
		check(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	host, client := load("host"), load("client")

	// ExampleClient_Listen.
	ln, err := host.Listen(testCtx(t), "hello")
	check(t, err)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s", r.RemoteAddr)
	})
	served := make(chan error, 1)
	go func() { served <- http.Serve(ln, handler) }()

	// ExampleClient_DialContext.
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialContext}}
	defer hc.CloseIdleConnections()
	get := func(url string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(testCtx(t), "GET", url, nil)
		check(t, err)
		resp, err := hc.Do(req)
		check(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		check(t, err)
		return fmt.Sprintf("%s %s", resp.Status, body)
	}
	want := "200 OK hello, " + client.IdentityID() + "@hello"
	for _, url := range []string{"http://hello/", "http://hello:8080/path", "http://hello:1/"} {
		if got := get(url); got != want {
			t.Errorf("GET %s: %q, want %q", url, got, want)
		}
	}

	// ExampleClient_Dial.
	echo, err := host.Listen(testCtx(t), "echo")
	check(t, err)
	defer echo.Close()
	serveEcho(t, echo)
	conn, err := client.Dial(testCtx(t), "echo")
	check(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "ping")
	check(t, err)
	check(t, conn.CloseWrite())
	if answer, err := io.ReadAll(conn); err != nil || string(answer) != "PING" {
		t.Errorf("echo: %q, %v", answer, err)
	}

	check(t, ln.Close())
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		t.Errorf("http.Serve after the listener closed: %v", err)
	}
}

// DialContext takes the service from the address's host, dials stream networks only, and
// returns no typed nil on failure.
func TestDialContext(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"hello:80": "hello", "hello": "hello", "[hello]:80": "hello", "my service:443": "my service",
		"a:b:c": "a:b:c", "": "",
	} {
		if got := serviceOf(addr); got != want {
			t.Errorf("serviceOf(%q) = %q, want %q", addr, got, want)
		}
	}

	e := newEnv(t)
	e.router("r")
	e.service("echo", false)
	host, client := e.sdk("host"), e.sdk("client")
	serveEcho(t, listen(t, host, "echo", ListenOptions{}))
	for _, network := range []string{"udp", "unix", "ip", ""} {
		conn, err := client.DialContext(testCtx(t), network, "echo:7")
		var unknown net.UnknownNetworkError
		if conn != nil || !errors.As(err, &unknown) || string(unknown) != network {
			t.Errorf("network %q: %v, %v", network, conn, err)
		}
	}
	conn, err := client.DialContext(testCtx(t), "tcp", "nope:80")
	if conn != nil || !errors.Is(err, ErrNoService) {
		t.Errorf("unknown service: %v, %v", conn, err)
	}
	for _, network := range []string{"tcp", "tcp4", "tcp6", "zmesh"} {
		conn, err := client.DialContext(testCtx(t), network, "echo:7")
		check(t, err)
		sc, ok := conn.(*Conn)
		if !ok {
			t.Fatalf("%s: a %T", network, conn)
		}
		sc.Write([]byte(network))
		check(t, sc.CloseWrite())
		got, err := io.ReadAll(sc)
		sc.Close()
		if err != nil || string(got) != strings.ToUpper(network) {
			t.Errorf("%s: %q %v", network, got, err)
		}
	}
}
