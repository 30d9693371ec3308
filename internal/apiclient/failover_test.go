package apiclient_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// member serves the API of c on one more loopback HTTPS listener, as another member of a
// cluster sharing c's store would: through handler h when not nil (which gets c's API as
// next), counting the requests it takes.
type member struct {
	URL      string
	srv      *http.Server
	requests atomic.Int64
}

func serveMember(t *testing.T, c *ctrltest.Controller, h func(next http.Handler) http.Handler) *member {
	t.Helper()
	m := &member{}
	next := c.Ctrl.Handler()
	if h != nil {
		next = h(next)
	}
	m.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.requests.Add(1)
			next.ServeHTTP(w, r)
		}),
		// HTTP/1.1 alone, so that a handler may break the connection (ErrAbortHandler).
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	m.URL = c.ServeAPI(t, m.srv)
	return m
}

// deadURL returns the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) string { return "https://" + testutil.ClosedAddr(t) }

// unavailable answers every request 503 with the API's error envelope, having read its body.
func unavailable(bodies *[]string, mu *sync.Mutex) func(http.Handler) http.Handler {
	return func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			data, _ := io.ReadAll(r.Body)
			mu.Lock()
			*bodies = append(*bodies, string(data))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":"CLUSTER_HAS_NO_LEADER","message":"no leader"},"meta":{}}`)
		})
	}
}

// identityClient returns the client of a new identity's file listing urls as its ztAPIs.
func identityClient(t *testing.T, c *ctrltest.Controller, name string, urls ...string) *apiclient.Client {
	t.Helper()
	f := c.IdentityFile(t, name)
	f.ZtAPI = ""
	for _, u := range urls {
		f.ZtAPIs = append(f.ZtAPIs, u+apiclient.ClientAPI)
	}
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// An identity file whose first ztAPIs entry is dead logs in at the next and lists services;
// later calls go first to the controller that answered.
func TestFailoverDeadFirstAddress(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	dead := deadURL(t)
	live := serveMember(t, c, nil)
	cl := identityClient(t, c, "alice", dead, live.URL)
	if _, err := cl.AuthenticateCert(t.Context()); err != nil {
		t.Fatalf("authenticate with %s dead: %v", dead, err)
	}
	var services []map[string]any
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/services", nil, &services); err != nil {
		t.Fatalf("list services: %v", err)
	}
	if cl.Current() != live.URL {
		t.Errorf("current controller %s, want %s", cl.Current(), live.URL)
	}
	if got := cl.URLs(); len(got) < 2 || got[0] != dead || got[1] != live.URL {
		t.Errorf("controllers %v, want %s and %s first", got, dead, live.URL)
	}
}

// A client logged in on A goes on with the same API session on B once A's listener closes,
// and learned the members the controller lists at login.
func TestFailoverKeepsSession(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	a, b := serveMember(t, c, nil), serveMember(t, c, nil)
	cl := identityClient(t, c, "alice", a.URL, b.URL)
	sess, err := cl.AuthenticateCert(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The controller lists itself at its advertised address, c.URL: learned after the two.
	if got, want := cl.URLs(), []string{a.URL, b.URL, c.URL}; !slices.Equal(got, want) {
		t.Errorf("controllers after login %v, want %v", got, want)
	}
	if cl.Current() != a.URL {
		t.Fatalf("logged in at %s, want %s", cl.Current(), a.URL)
	}
	a.srv.Close()
	before := b.requests.Load()
	var cur apiclient.Session
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/current-api-session", nil, &cur); err != nil {
		t.Fatalf("after A closed: %v", err)
	}
	if cur.ID != sess.ID {
		t.Errorf("API session %s after the failover, want the login's %s", cur.ID, sess.ID)
	}
	if cl.Current() != b.URL || b.requests.Load() == before {
		t.Errorf("answered by %s (B took %d requests), want B %s", cl.Current(), b.requests.Load()-before, b.URL)
	}
	var services []map[string]any
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/services", nil, &services); err != nil {
		t.Errorf("list services after the failover: %v", err)
	}
}

// A controller answering 503 passes the call, body and all, to the next; later calls go to
// the next first.
func TestFailover503(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	var (
		mu     sync.Mutex
		bodies []string
	)
	busy := serveMember(t, c, unavailable(&bodies, &mu))
	live := serveMember(t, c, nil)
	cl := identityClient(t, c, "alice", busy.URL, live.URL)
	if _, err := cl.AuthenticatePassword(t.Context(), ctrltest.AdminUsername, ctrltest.AdminPassword); err != nil {
		t.Fatalf("password login with the first controller answering 503: %v", err)
	}
	mu.Lock()
	got := slices.Clone(bodies)
	mu.Unlock()
	if len(got) != 1 || !strings.Contains(got[0], `"username":"admin"`) {
		t.Errorf("the 503 controller received %q, want the login's body", got)
	}
	if busy.requests.Load() != 1 || live.requests.Load() < 1 {
		t.Errorf("requests: busy %d, live %d", busy.requests.Load(), live.requests.Load())
	}
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
		t.Fatal(err)
	}
	if busy.requests.Load() != 1 {
		t.Errorf("the 503 controller was asked again (%d requests) after another answered", busy.requests.Load())
	}
}

// When no controller answers, the error names each with its error.
func TestFailoverAllFail(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	var (
		mu     sync.Mutex
		bodies []string
	)
	dead := deadURL(t)
	busy := serveMember(t, c, unavailable(&bodies, &mu))
	cl := identityClient(t, c, "alice", dead, busy.URL)
	_, err := cl.AuthenticateCert(t.Context())
	var all *apiclient.ControllersError
	if !errors.As(err, &all) || len(all.Attempts) != 2 {
		t.Fatalf("%v, want a ControllersError of 2 attempts", err)
	}
	msg := err.Error()
	for _, want := range []string{dead + ": cannot reach it: nothing listens there", busy.URL + ": CLUSTER_HAS_NO_LEADER (HTTP 503)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if apiclient.CodeOf(err) != "CLUSTER_HAS_NO_LEADER" {
		t.Errorf("code %q, want the 503's", apiclient.CodeOf(err))
	}
}

// A connection that breaks after a POST was sent is not retried on another controller (it
// may have been carried out); a GET is.
func TestFailoverAfterSend(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	breaks := serveMember(t, c, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			panic(http.ErrAbortHandler) // closes the connection without an answer
		})
	})
	live := serveMember(t, c, nil)
	cl := identityClient(t, c, "alice", breaks.URL, live.URL)
	_, err := cl.AuthenticateCert(t.Context())
	if err == nil || !strings.Contains(err.Error(), "may have carried it out") || !strings.Contains(err.Error(), strings.TrimPrefix(breaks.URL, "https://")) {
		t.Errorf("POST through a connection broken after the request: %v; want it not retried, naming the controller", err)
	}
	if n := live.requests.Load(); n != 0 {
		t.Errorf("the POST reached the next controller too (%d requests)", n)
	}
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/version", nil, nil); err != nil {
		t.Errorf("GET: %v; want it answered by the next controller", err)
	}
	if cl.Current() != live.URL {
		t.Errorf("current %s, want %s", cl.Current(), live.URL)
	}
}

// A controller that accepts the connection and never completes the TLS handshake is left
// after the handshake timeout, even for a POST.
func TestFailoverConnectTimeout(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var held []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, conn) // silent: never answers the handshake
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
	})
	live := serveMember(t, c, nil)
	cl := identityClient(t, c, "alice", "https://"+ln.Addr().String(), live.URL)
	cl.HTTP.Transport.(*http.Transport).TLSHandshakeTimeout = 200 * time.Millisecond
	if _, err := cl.AuthenticateCert(t.Context()); err != nil {
		t.Fatalf("authenticate with the first controller silent: %v", err)
	}
	if cl.Current() != live.URL {
		t.Errorf("current %s, want %s", cl.Current(), live.URL)
	}
}

// A controller that answers the list of controllers 404 or empty changes nothing.
func TestLearnMembersNothing(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	for _, answer := range []int{http.StatusNotFound, http.StatusOK} {
		m := serveMember(t, c, func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != apiclient.ClientAPI+"/controllers" {
					next.ServeHTTP(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(answer)
				if answer == http.StatusOK {
					io.WriteString(w, `{"data":[],"meta":{"pagination":{"limit":10,"offset":0,"totalCount":0}}}`)
				} else {
					io.WriteString(w, `{"error":{"code":"NOT_FOUND","message":"no such path"},"meta":{}}`)
				}
			})
		})
		cl := identityClient(t, c, "id"+http.StatusText(answer), m.URL)
		if _, err := cl.AuthenticateCert(t.Context()); err != nil {
			t.Fatal(err)
		}
		added, err := cl.LearnMembers(t.Context())
		if err != nil || len(added) != 0 {
			t.Errorf("answer %d: learned %v, %v; want nothing", answer, added, err)
		}
		if got := cl.URLs(); !slices.Equal(got, []string{m.URL}) {
			t.Errorf("answer %d: controllers %v, want %s alone", answer, got, m.URL)
		}
	}
}

// A call that moves to another controller learns the members, as a login does.
func TestFailoverLearnsMembers(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	admin := c.Admin(t)
	dead := deadURL(t)
	live := serveMember(t, c, nil)
	cl := apiclient.NewMulti([]string{dead, live.URL}, c.Ctrl.CA().Pool(), nil)
	cl.Token = admin.Token
	if got := cl.URLs(); !slices.Equal(got, []string{dead, live.URL}) {
		t.Fatalf("controllers %v before any call", got)
	}
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := cl.URLs(), []string{dead, live.URL, c.URL}; !slices.Equal(got, want) {
		t.Errorf("controllers after a failover %v, want %v", got, want)
	}
}

// Prefer chooses where the next call starts; OnChange hears of a move and of members
// learned, not of calls answered where they started.
func TestPreferAndOnChange(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	admin := c.Admin(t)
	var (
		mu     sync.Mutex
		bodies []string
	)
	busy := serveMember(t, c, unavailable(&bodies, &mu))
	live := serveMember(t, c, nil)
	cl := apiclient.NewMulti([]string{busy.URL, live.URL}, c.Ctrl.CA().Pool(), nil)
	cl.Token = admin.Token
	var changes []string
	cl.OnChange(func(current string, urls []string) {
		changes = append(changes, current+" of "+strings.Join(urls, ","))
	})
	cl.Prefer(live.URL + "/")
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
		t.Fatal(err)
	}
	if busy.requests.Load() != 0 || len(changes) != 0 {
		t.Errorf("after Prefer(live): busy took %d requests, changes %v; want none", busy.requests.Load(), changes)
	}
	cl.Prefer(busy.URL)
	if _, err := cl.Do(t.Context(), "GET", apiclient.ClientAPI+"/current-api-session", nil, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{
		live.URL + " of " + busy.URL + "," + live.URL,               // the move
		live.URL + " of " + busy.URL + "," + live.URL + "," + c.URL, // the member learned
	}
	if busy.requests.Load() != 1 || !slices.Equal(changes, want) {
		t.Errorf("after Prefer(busy): busy took %d requests, changes %v; want 1 and %v", busy.requests.Load(), changes, want)
	}
}
