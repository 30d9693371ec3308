package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// Observer is told of what the API serves; the controller's metrics implement it. Its label
// values are bounded: a route is a pattern of the route table, never a raw path.
type Observer interface {
	// ObserveRequest reports one request: its method (an HTTP method, or "other"), the route
	// pattern that served it (e.g. /edge/management/v1/identities/{id}; RouteUnmatched when
	// no operation is at the path), the status code answered and the time it took.
	ObserveRequest(method, route string, code int, elapsed time.Duration)
	// ObserveAuthentication reports one authentication attempt of a method (password, cert,
	// ext-jwt, mfa) and whether it succeeded.
	ObserveAuthentication(method string, succeeded bool)
}

// RouteUnmatched is the route of requests to paths no operation serves.
const RouteUnmatched = "unmatched"

// AuthMFA names the second factor (POST /authenticate/mfa) among authentication methods.
const AuthMFA = "mfa"

// authMethodOf tells which authentication method a route's requests make, for the routes
// that authenticate: the method query parameter of POST /authenticate (only the methods the
// controller knows, so that a client cannot add label values), the second factor of
// POST /authenticate/mfa.
func authMethodOf(rt route) func(*http.Request) string {
	switch rt.method + " " + rt.path {
	case "POST /authenticate":
		return func(r *http.Request) string {
			switch m := r.URL.Query().Get("method"); m {
			case model.MethodPassword, model.MethodCertAuth, model.MethodExtJWT:
				return m
			}
			return ""
		}
	case "POST /authenticate/mfa":
		return func(*http.Request) string { return AuthMFA }
	}
	return nil
}

// requestLabels names a served request by its method and the pattern of the route table
// that served it (ServeMux records it in r.Pattern): bounded values, whatever the path.
func requestLabels(r *http.Request) (method, route string) {
	route = r.Pattern
	if _, path, found := strings.Cut(r.Pattern, " "); found {
		route = path
	}
	// A pattern without a method (the answers to a wrong method or an unknown path) or a
	// redirect (no pattern) still has the request's method, bounded to the known ones.
	switch method = r.Method; method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
	default:
		method = "other"
	}
	if route == "" || route == "/" {
		route = RouteUnmatched
	}
	return method, route
}

// statusWriter remembers the status code a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status answered; 200 when the handler wrote nothing, as net/http then sends.
func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// unwrapWriter returns the server's own ResponseWriter under statusWriter, so that
// http.MaxBytesReader can tell the server to close the connection after an oversized body.
func unwrapWriter(w http.ResponseWriter) http.ResponseWriter {
	if sw, ok := w.(*statusWriter); ok {
		return sw.ResponseWriter
	}
	return w
}
