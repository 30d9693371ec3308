package apiclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Failover. A Client knows one controller or several (the members of a cluster: any of them
// answers every call, and an API session opened on one is valid on all, as they share the
// store). A call goes first to the controller that answered last, then to the others in
// their order, and stops at the first that answers with anything but 503. It moves on when
//
//   - the controller cannot be reached: the connection, or its TLS handshake, fails or times
//     out (DialTimeout, TLSHandshakeTimeout); the request was never sent, whatever its method;
//   - it answers 503 Service Unavailable: it did not carry the request out (a member without
//     a leader, one starting or stopping);
//   - the connection fails after the request was sent, for GET, HEAD, OPTIONS and PUT only:
//     those may be sent twice with the same effect. A POST, PATCH or DELETE that may have
//     reached a controller is not sent to another one: it could be carried out twice (two
//     identities, two sessions), or its second answer would hide the effect of the first (a
//     DELETE answered 404). Its error says so; the caller decides.
//
// Bodies are kept as bytes, so that each attempt sends the same body again. When every
// controller failed, the error (*ControllersError) names each with its error.
//
// Members are learned: after authenticating, and after a call moved to another controller,
// the Client reads GET /edge/client/v1/controllers and adds the edge-client URLs of the
// members it lists to its own list, after the controllers it was given. A controller that
// answers the list empty, or not at all (404: no cluster), changes nothing.

// controllers is the list of controllers a Client and its copies call, and which one
// answered last.
type controllers struct {
	mu       sync.Mutex
	urls     []string // base URLs, https://host:port: those given, then those learned
	last     int      // index in urls of the controller that answered last
	learning atomic.Bool
	// changed, when set, is told the list and the one that answered last after either
	// changed, outside mu.
	changed func(current string, urls []string)
}

func newControllers(urls []string) *controllers {
	c := &controllers{}
	for _, u := range urls {
		u = strings.TrimSuffix(u, "/")
		if !slices.Contains(c.urls, u) {
			c.urls = append(c.urls, u)
		}
	}
	return c
}

func (c *controllers) first() string {
	if len(c.urls) == 0 {
		return ""
	}
	return c.urls[0]
}

// order returns the controllers in the order to try them: the one that answered last, then
// those after it, then those before it.
func (c *controllers) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(slices.Clone(c.urls[c.last:]), c.urls[:c.last]...)
}

// answered records that u answered.
func (c *controllers) answered(u string) {
	c.mu.Lock()
	i := slices.Index(c.urls, u)
	moved := i >= 0 && i != c.last
	if moved {
		c.last = i
	}
	c.mu.Unlock()
	if moved {
		c.tell()
	}
}

// add appends the URLs it does not know yet and returns them.
func (c *controllers) add(urls []string) []string {
	c.mu.Lock()
	var added []string
	for _, u := range urls {
		if !slices.Contains(c.urls, u) {
			c.urls = append(c.urls, u)
			added = append(added, u)
		}
	}
	c.mu.Unlock()
	if len(added) > 0 {
		c.tell()
	}
	return added
}

// tell calls changed, when set, with the current state.
func (c *controllers) tell() {
	c.mu.Lock()
	fn, cur, urls := c.changed, c.urls[c.last], slices.Clone(c.urls)
	c.mu.Unlock()
	if fn != nil {
		fn(cur, urls)
	}
}

// URLs returns the base URLs of the controllers the client knows: those it was given, then
// those it learned.
func (c *Client) URLs() []string {
	l := c.ctrls
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.urls)
}

// Current returns the base URL of the controller that answered last (the first one before
// any call).
func (c *Client) Current() string {
	l := c.ctrls
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.urls[l.last]
}

// Prefer makes u, a controller the client knows, the first one the next call tries, as
// if it had answered last.
func (c *Client) Prefer(u string) {
	l := c.ctrls
	u = strings.TrimSuffix(u, "/")
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.urls, u); i >= 0 {
		l.last = i
	}
}

// OnChange sets fn to be called, in the calling goroutine, after a call answered by another
// controller than the previous one, or members were learned, with the controller that
// answered last and the list: to keep them (the CLI keeps them with its login).
func (c *Client) OnChange(fn func(current string, urls []string)) {
	c.ctrls.mu.Lock()
	defer c.ctrls.mu.Unlock()
	c.ctrls.changed = fn
}

// Attempt is one controller's part in a failed call.
type Attempt struct {
	URL string // the controller's base URL
	Err error
}

// ControllersError is the error of a call that no controller answered.
type ControllersError struct {
	Method, Path string
	Attempts     []Attempt
}

func (e *ControllersError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: none of the %d controllers answered: ", e.Method, e.Path, len(e.Attempts))
	for i, a := range e.Attempts {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", a.URL, a.Err)
	}
	return b.String()
}

// Unwrap returns each controller's error.
func (e *ControllersError) Unwrap() []error {
	errs := make([]error, len(e.Attempts))
	for i, a := range e.Attempts {
		errs[i] = a.Err
	}
	return errs
}

// request is one call, as each attempt sends it again.
type request struct {
	method, path string
	contentType  string
	body         []byte // nil: no body
	header       http.Header
	noTimeout    bool // a download: no limit on the whole exchange
}

// replayable reports whether a request of method may be sent to another controller after it
// may have reached one: sending it twice has the effect of sending it once, and the second
// answer is the first's.
func replayable(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "PUT":
		return true
	}
	return false
}

// do sends r to the controllers in turn, as the package's failover says, and returns the
// first answer that is not a 503 (or, with one controller, any answer).
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	urls := c.ctrls.order()
	if len(urls) == 1 {
		resp, _, err := c.attempt(ctx, urls[0], r)
		if err != nil {
			return nil, c.single(ctx, urls[0], r, err)
		}
		c.ctrls.answered(urls[0])
		return resp, nil
	}
	var failed []Attempt
	for i, base := range urls {
		resp, wrote, err := c.attempt(ctx, base, r)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
			}
			if !wrote {
				failed = append(failed, Attempt{base, unreachedError(err)})
				continue
			}
			if !replayable(r.method) {
				return nil, fmt.Errorf("%s %s at %s: %w (not sent to another controller: this one may have carried it out)",
					r.method, r.path, hostOf(base), innermost(err))
			}
			failed = append(failed, Attempt{base, fmt.Errorf("after the request was sent: %w", innermost(err))})
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			failed = append(failed, Attempt{base, decodeError(resp.StatusCode, data)})
			continue
		}
		c.ctrls.answered(base)
		if i > 0 {
			// A failover: the cluster may have changed; learn its members now.
			c.learn(ctx)
		}
		return resp, nil
	}
	return nil, &ControllersError{Method: r.method, Path: r.path, Attempts: failed}
}

// single is the error of a call to a client's only controller.
func (c *Client) single(ctx context.Context, base string, r request, err error) error {
	host := hostOf(base)
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
	}
	if unreached(err) {
		return reachError(host, err)
	}
	// The request may have reached the controller: say which one it was.
	return fmt.Errorf("%s %s at %s: %w", r.method, r.path, host, innermost(err))
}

// unreachedError says why a controller of several could not be reached; the caller names it.
func unreachedError(err error) error {
	if hint := reachHint(err); hint != "" {
		return fmt.Errorf("cannot reach it: %s (%w)", hint, innermost(err))
	}
	return fmt.Errorf("cannot reach it: %w", innermost(err))
}

func hostOf(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return base
}

// attempt sends r to the controller at base. wrote reports whether the request was sent
// whole before err: only then may the controller have acted on it.
func (c *Client) attempt(ctx context.Context, base string, r request) (resp *http.Response, wrote bool, err error) {
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			sent.Store(true)
		}
	}}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), r.method, base+r.path, body)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range r.header {
		req.Header[k] = v
	}
	if r.body != nil {
		req.Header.Set("Content-Type", r.contentType)
	}
	if c.Token != "" {
		req.Header.Set("zt-session", c.Token)
	}
	hc := c.HTTP
	if r.noTimeout {
		copied := *c.HTTP
		copied.Timeout = 0
		hc = &copied
	}
	resp, err = hc.Do(req)
	return resp, sent.Load(), err
}

// Member is a controller of the cluster as GET /controllers lists it.
type Member struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	APIAddresses map[string][]struct {
		URL     string `json:"url"`
		Version string `json:"version"`
	} `json:"apiAddresses"`
}

// LearnMembers reads the members of the cluster (GET /edge/client/v1/controllers, with the
// client's session) and adds their edge-client URLs to the client's list. It returns the
// URLs it added. A controller that answers 404, or lists no member, changes nothing.
func (c *Client) LearnMembers(ctx context.Context) ([]string, error) {
	var members []Member
	if _, err := c.Do(ctx, "GET", ClientAPI+"/controllers", nil, &members); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("list the controllers: %w", err)
	}
	var found []string
	for _, m := range members {
		for _, a := range m.APIAddresses["edge-client"] {
			u, err := url.Parse(a.URL)
			if err != nil || u.Scheme != "https" || u.Host == "" {
				continue // not an address this client can call
			}
			if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != ClientAPI {
				continue
			}
			found = append(found, "https://"+u.Host)
		}
	}
	return c.ctrls.add(found), nil
}

// learn runs LearnMembers once at a time for all copies of the client, when it has an API
// session, and ignores its failure: the call it follows succeeded, and the list is a help.
func (c *Client) learn(ctx context.Context) {
	if c.Token == "" || !c.ctrls.learning.CompareAndSwap(false, true) {
		return
	}
	defer c.ctrls.learning.Store(false)
	_, _ = c.LearnMembers(ctx)
}
