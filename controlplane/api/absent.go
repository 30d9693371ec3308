package api

import (
	"net/http"
	"strings"
)

// codeNotImplemented answers an operation of the reference that zmesh does not serve.
const codeNotImplemented = "NOT_IMPLEMENTED"

// absentOp is an operation of the reference's Swagger documents (client.yml,
// management.yml) that zmesh does not serve. It answers 501 NOT_IMPLEMENTED with its reason,
// so that a client learns why rather than meeting a bare 404. docs/openziti-compatibility.md
// lists the same operations with the same reasons; the conformance test holds the two equal.
type absentOp struct {
	apis         apiSet
	method, path string
	reason       string
}

// Reasons of absence, shared by the operations of one group.
const (
	reasonSettings     = "zmesh's controller settings come from controller.yml; there are none to read or change at run time"
	reasonTrace        = "zmesh does not trace an identity's data flow"
	reasonRevocations  = "these revoke the reference's own OIDC tokens, which zmesh does not issue; an API session ends when it is deleted"
	reasonCreateRouter = "routers are created at /edge-routers, which gives each its enrollment"
	reasonRoutePath    = "circuits do not record the session they serve yet"
)

// absentOps are the operations of the reference zmesh does not serve.
func absentOps() []absentOp {
	m := func(method, path, reason string) absentOp {
		return absentOp{apis: management, method: method, path: path, reason: reason}
	}
	return []absentOp{
		m("GET", "/controller-settings", reasonSettings),
		m("POST", "/controller-settings", reasonSettings),
		m("GET", "/controller-settings/{id}", reasonSettings),
		m("GET", "/controller-settings/{id}/effective", reasonSettings),
		m("PUT", "/controller-settings/{id}/effective", reasonSettings),
		m("PATCH", "/controller-settings/{id}/effective", reasonSettings),
		m("DELETE", "/controller-settings/{id}/effective", reasonSettings),
		m("PUT", "/identities/{id}/trace", reasonTrace),
		m("GET", "/revocations", reasonRevocations),
		m("POST", "/revocations", reasonRevocations),
		m("GET", "/revocations/{id}", reasonRevocations),
		m("POST", "/routers", reasonCreateRouter),
		m("GET", "/sessions/{id}/route-path", reasonRoutePath),
		m("POST", "/transit-routers", reasonCreateRouter),
	}
}

// opKey names an operation whatever its wildcards are called: "GET /services/{}".
func opKey(method, path string) string {
	var b strings.Builder
	b.WriteString(method + " ")
	for {
		open := strings.IndexByte(path, '{')
		end := strings.IndexByte(path[max(open, 0):], '}')
		if open < 0 || end < 0 {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:open] + "{}")
		path = path[open+end+1:]
	}
}

// absentHandler answers an operation zmesh does not serve.
func (s *Server) absentHandler(op absentOp) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, s.log, newRequestID(), newErr(codeNotImplemented, "%s %s is not served by zmesh: %s; see docs/openziti-compatibility.md", op.method, op.path, op.reason))
	})
}
