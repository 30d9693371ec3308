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
	reasonNotYet = "planned in issue 19"
)

// absentOps are the operations of the reference zmesh does not serve.
func absentOps() []absentOp {
	m := func(method, path, reason string) absentOp {
		return absentOp{apis: management, method: method, path: path, reason: reason}
	}
	return []absentOp{
		m("POST", "/authenticators", reasonNotYet),
		m("PUT", "/authenticators/{id}", reasonNotYet),
		m("PATCH", "/authenticators/{id}", reasonNotYet),
		m("POST", "/authenticators/{id}/re-enroll", reasonNotYet),
		m("POST", "/authenticators/{id}/request-extend", reasonNotYet),
		m("GET", "/cas/{id}/jwt", reasonNotYet),
		m("GET", "/controller-settings", reasonNotYet),
		m("POST", "/controller-settings", reasonNotYet),
		m("GET", "/controller-settings/{id}", reasonNotYet),
		m("GET", "/controller-settings/{id}/effective", reasonNotYet),
		m("PUT", "/controller-settings/{id}/effective", reasonNotYet),
		m("PATCH", "/controller-settings/{id}/effective", reasonNotYet),
		m("DELETE", "/controller-settings/{id}/effective", reasonNotYet),
		m("POST", "/current-api-session/totp-token", reasonNotYet),
		m("POST", "/database/check-data-integrity", reasonNotYet),
		m("GET", "/database/data-integrity-results", reasonNotYet),
		m("POST", "/database/fix-data-integrity", reasonNotYet),
		m("POST", "/database/snapshot", reasonNotYet),
		m("GET", "/identities/{id}/failed-service-requests", reasonNotYet),
		m("GET", "/identities/{id}/policy-advice/{serviceId}", reasonNotYet),
		m("GET", "/identities/{id}/posture-data", reasonNotYet),
		m("GET", "/identities/{id}/service-configs", reasonNotYet),
		m("POST", "/identities/{id}/service-configs", reasonNotYet),
		m("DELETE", "/identities/{id}/service-configs", reasonNotYet),
		m("PUT", "/identities/{id}/trace", reasonNotYet),
		m("GET", "/revocations", reasonNotYet),
		m("POST", "/revocations", reasonNotYet),
		m("GET", "/revocations/{id}", reasonNotYet),
		m("GET", "/routers", reasonNotYet),
		m("POST", "/routers", reasonNotYet),
		m("GET", "/routers/{id}", reasonNotYet),
		m("PUT", "/routers/{id}", reasonNotYet),
		m("PATCH", "/routers/{id}", reasonNotYet),
		m("DELETE", "/routers/{id}", reasonNotYet),
		m("GET", "/sessions/{id}/route-path", reasonNotYet),
		m("GET", "/transit-routers", reasonNotYet),
		m("POST", "/transit-routers", reasonNotYet),
		m("GET", "/transit-routers/{id}", reasonNotYet),
		m("PUT", "/transit-routers/{id}", reasonNotYet),
		m("PATCH", "/transit-routers/{id}", reasonNotYet),
		m("DELETE", "/transit-routers/{id}", reasonNotYet),
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
