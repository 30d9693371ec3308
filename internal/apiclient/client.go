// Package apiclient is a small client of the controller's HTTPS APIs: it authenticates,
// calls operations with the API's envelopes and session header, moves from one controller
// of a cluster to the next when one is gone (failover.go), enrolls identities from
// enrollment tokens, and reads and writes identity files. The zmesh CLI and the SDK use it.
package apiclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/zmesh/zmesh/internal/certid"
)

// Base paths of the two APIs.
const (
	ClientAPI     = "/edge/client/v1"
	ManagementAPI = "/edge/management/v1"
)

// Client calls a controller, or any member of a cluster of controllers: each call goes to
// the controller that answered last and, when that one cannot be reached or answers 503, to
// the next (see failover.go). Copies of a Client share its list of controllers.
type Client struct {
	// URL is the first controller's base URL, https://host:port, as given to New.
	URL   string
	HTTP  *http.Client
	Token string // the API session token, once authenticated; valid on every member

	ctrls *controllers
	tls   *tls.Config // the transport's, without a client certificate
}

// Timeouts of one attempt to connect to a controller: past them the next one is tried.
const (
	DialTimeout         = 10 * time.Second
	TLSHandshakeTimeout = 10 * time.Second
)

// New returns a client that trusts roots for the controller's certificate and presents cert
// (when not nil) as its client certificate. The server's certificate must also be the
// controller's own (certid.VerifyController): a router's certificate from the same CA, even
// one naming the controller's host, is refused.
func New(url string, roots *x509.CertPool, cert *tls.Certificate) *Client {
	return NewMulti([]string{url}, roots, cert)
}

// NewMulti is New for the controllers of a cluster at urls (base URLs, https://host:port),
// tried in order; it needs at least one (without any, every call fails).
func NewMulti(urls []string, roots *x509.CertPool, cert *tls.Certificate) *Client {
	if len(urls) == 0 {
		urls = []string{""}
	}
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, VerifyConnection: certid.VerifyController}
	ctrls := newControllers(urls)
	c := &Client{URL: ctrls.first(), ctrls: ctrls, tls: tc}
	c.HTTP = newHTTP(tc, cert)
	return c
}

// WithCertificate returns a client of the same controllers (sharing their list and which
// answered last) that presents cert instead, with its own connections; its Token is empty.
func (c *Client) WithCertificate(cert *tls.Certificate) *Client {
	return &Client{URL: c.URL, ctrls: c.ctrls, tls: c.tls, HTTP: newHTTP(c.tls, cert)}
}

func newHTTP(base *tls.Config, cert *tls.Certificate) *http.Client {
	tc := base.Clone()
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     tc,
			ForceAttemptHTTP2:   true,
			DialContext:         (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: TLSHandshakeTimeout,
		},
	}
}

// Error is an error answer of the API.
type Error struct {
	Status    int
	Code      string
	Message   string
	Field     string
	RequestID string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	if e.RequestID != "" {
		s += " [request " + e.RequestID + "]"
	}
	return s
}

// CodeOf returns the API error code of err, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Pagination is the meta.pagination of a list answer.
type Pagination struct {
	Limit      int `json:"limit"`
	Offset     int `json:"offset"`
	TotalCount int `json:"totalCount"`
}

// Do calls method path (below the URL, e.g. /edge/client/v1/version) with body encoded as
// JSON when not nil, and decodes the answer's data into out when not nil. It returns the
// answer's pagination when there is one.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (*Pagination, error) {
	return c.DoHeader(ctx, method, path, nil, body, out)
}

// DoHeader is Do with extra request headers.
func (c *Client) DoHeader(ctx context.Context, method, path string, header http.Header, body, out any) (*Pagination, error) {
	r := request{method: method, path: path, header: header}
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r.body, r.contentType = data, "application/json"
	}
	return c.send(ctx, r, out)
}

// DoBody is Do with a body that is not JSON, sent as it is with its content type (the PEM
// certificate of POST /cas/{id}/verify).
func (c *Client) DoBody(ctx context.Context, method, path, contentType string, body []byte, out any) (*Pagination, error) {
	if body == nil {
		body = []byte{}
	}
	return c.send(ctx, request{method: method, path: path, contentType: contentType, body: body}, out)
}

// send makes a request and decodes its answer as Do does.
func (c *Client) send(ctx context.Context, r request, out any) (*Pagination, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", r.method, r.path, err)
	}
	if resp.StatusCode >= 300 {
		return nil, decodeError(resp.StatusCode, data)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
		Meta struct {
			Pagination *Pagination `json:"pagination"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("%s %s: answer is not an API envelope: %w", r.method, r.path, err)
	}
	if out != nil {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode data: %w", r.method, r.path, err)
		}
	}
	return env.Meta.Pagination, nil
}

// raw sends a body-less GET with the session header and returns the response as is.
func (c *Client) raw(ctx context.Context, path string) (*http.Response, error) {
	return c.do(ctx, request{method: "GET", path: path})
}

func decodeError(status int, data []byte) error {
	var env struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"requestId"`
			Cause     *struct {
				Field string `json:"field"`
			} `json:"cause"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil || env.Error.Code == "" {
		return &Error{Status: status, Code: http.StatusText(status), Message: strings.TrimSpace(string(data))}
	}
	e := &Error{Status: status, Code: env.Error.Code, Message: env.Error.Message, RequestID: env.Error.RequestID}
	if env.Error.Cause != nil {
		e.Field = env.Error.Cause.Field
	}
	return e
}

// Session is the part of an API session the client uses.
type Session struct {
	ID         string    `json:"id"`
	Token      string    `json:"token"`
	IdentityID string    `json:"identityId"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Identity   struct {
		Name string `json:"name"`
	} `json:"identity"`
	// AuthQueries are the steps the session must still pass, e.g. MFA.
	AuthQueries []AuthQuery `json:"authQueries"`
}

// AuthQuery is a further authentication step an API session must pass.
type AuthQuery struct {
	TypeID   string `json:"typeId"`
	Provider string `json:"provider"`
	ID       string `json:"id"`
	HTTPURL  string `json:"httpUrl"`
}

// NeedsMFA reports whether the session must pass MFA before anything else.
func (s *Session) NeedsMFA() bool {
	for _, q := range s.AuthQueries {
		if q.TypeID == "MFA" {
			return true
		}
	}
	return false
}

// AuthenticatePassword opens an API session with a username and password. Unless the
// session must still pass MFA, the client then learns the cluster's members (LearnMembers).
func (c *Client) AuthenticatePassword(ctx context.Context, username, password string) (*Session, error) {
	var s Session
	body := map[string]string{"username": username, "password": password}
	if _, err := c.Do(ctx, "POST", ClientAPI+"/authenticate?method=password", body, &s); err != nil {
		return nil, err
	}
	c.Token = s.Token
	if !s.NeedsMFA() {
		c.learn(ctx)
	}
	return &s, nil
}

// AuthenticateCert opens an API session with the client certificate given to New, and learns
// the cluster's members as AuthenticatePassword does.
func (c *Client) AuthenticateCert(ctx context.Context) (*Session, error) {
	var s Session
	if _, err := c.Do(ctx, "POST", ClientAPI+"/authenticate?method=cert", map[string]any{}, &s); err != nil {
		return nil, err
	}
	c.Token = s.Token
	if !s.NeedsMFA() {
		c.learn(ctx)
	}
	return &s, nil
}
