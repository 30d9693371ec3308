package api

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"runtime"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
)

func (s *Server) registerInfo() {
	s.handle(both, "GET", "/", public, "Returns version information", s.version)
	s.handle(both, "GET", "/version", public, "Returns version information", s.version)
	s.handle(both, "GET", "/protocols", public, "Lists the listening edge protocols", s.protocols)
	s.handle(both, "GET", "/enumerated-capabilities", public, "Lists the capabilities the controller knows, enabled or not", s.capabilities)
	s.handle(both, "GET", "/specs", public, "Lists the API specifications", s.specs)
	s.handle(both, "GET", "/specs/{id}", public, "Returns one API specification", s.spec)
	s.handle(both, "GET", "/specs/{id}/spec", public, "Returns the body of an API specification", s.specBody)
	s.handle(both, "GET", "/.well-known/est/cacerts", public, "Returns the CA certificates as a base64 PKCS#7 store, to bootstrap trust before enrollment", s.cacerts)
	s.handle(both, "GET", "/controllers", session, "Lists the controllers", s.controllers)
	// The server root answers as the reference's does: the client API's version at / and
	// /version, its CAs at /.well-known/est/cacerts (where ziti edge login fetches them).
	s.handle(root, "GET", "/", public, "Returns version information", s.version)
	s.handle(root, "GET", "/version", public, "Returns version information", s.version)
	s.handle(root, "GET", "/.well-known/est/cacerts", public, "Returns the CA certificates as a base64 PKCS#7 store", s.cacerts)
}

func (s *Server) apiURL(base string) string { return "https://" + s.info.Advertise + base }

func (s *Server) apiVersions() map[string]any {
	v := func(base string) map[string]any {
		return map[string]any{"v1": map[string]any{"apiBaseUrls": []string{s.apiURL(base)}, "path": base}}
	}
	return map[string]any{
		"edge":            v(ClientBase),
		"edge-client":     v(ClientBase),
		"edge-management": v(ManagementBase),
		"fabric":          v(FabricBase),
	}
}

func (s *Server) version(c *call) error {
	return c.data(http.StatusOK, map[string]any{
		"version":        s.info.Version,
		"revision":       s.info.Revision,
		"buildDate":      s.info.BuildDate,
		"runtimeVersion": runtime.Version(),
		"apiVersions":    s.apiVersions(),
		"capabilities":   []string{},
	})
}

func (s *Server) protocols(c *call) error {
	return c.data(http.StatusOK, map[string]any{"https": map[string]string{"address": s.info.Advertise}})
}

func (s *Server) capabilities(c *call) error {
	return c.data(http.StatusOK, []string{"OIDC_AUTH", "HA_CONTROLLER"})
}

// specIDs are the specifications served: one per API.
func specID(base string) string {
	if base == ManagementBase {
		return "edge-management"
	}
	return "edge-client"
}

func (s *Server) specDetail(id string) map[string]any {
	t := s.info.Started.UTC()
	return map[string]any{"id": id, "name": "zmesh " + id + " API", "_links": links("specs", id),
		"createdAt": t, "updatedAt": t, "tags": map[string]any{}}
}

func (s *Server) specs(c *call) error {
	return c.list([]any{s.specDetail(specID(c.base))}, 1, listParams{limit: 1})
}

func (s *Server) spec(c *call) error {
	if c.path("id") != specID(c.base) {
		return newErr(codeNotFound, "no specification %q; this API serves %q", c.path("id"), specID(c.base))
	}
	return c.data(http.StatusOK, s.specDetail(c.path("id")))
}

func (s *Server) specBody(c *call) error {
	if c.path("id") != specID(c.base) {
		return newErr(codeNotFound, "no specification %q; this API serves %q", c.path("id"), specID(c.base))
	}
	doc := s.openAPI(c.base)
	body, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, json.RawMessage(body))
}

func (s *Server) cacerts(c *call) error {
	der, err := pki.PKCS7(s.m.CA().Certificate())
	if err != nil {
		return err
	}
	c.w.Header().Set("Content-Type", "application/pkcs7-mime")
	c.w.Header().Set("Content-Transfer-Encoding", "base64")
	c.w.WriteHeader(http.StatusOK)
	enc := base64.StdEncoding.EncodeToString(der)
	for len(enc) > 64 {
		c.w.Write([]byte(enc[:64] + "\n"))
		enc = enc[64:]
	}
	_, err = c.w.Write([]byte(enc + "\n"))
	return err
}

func (s *Server) controllers(c *call) error {
	var list []Controller
	if s.info.Controllers != nil {
		var err error
		if list, err = s.info.Controllers(); err != nil {
			return err
		}
	}
	out := make([]any, 0, len(list))
	for _, ctl := range list {
		addr := func(base string) []map[string]string {
			return []map[string]string{{"url": "https://" + ctl.APIAddress + base, "version": "v1"}}
		}
		t := ctl.JoinedAt.UTC()
		d := map[string]any{
			"id": ctl.ID, "name": ctl.ID, "_links": links("controllers", ctl.ID),
			"createdAt": t, "updatedAt": t, "tags": map[string]any{},
			"apiAddresses":      map[string]any{"edge-client": addr(ClientBase), "edge-management": addr(ManagementBase)},
			"ctrlAddress":       ctl.CtrlAddress,
			"isOnline":          ctl.Online,
			"lastJoinedAt":      t,
			"isPreferredLeader": ctl.Leader,
		}
		if ctl.Cert != nil {
			d["certPem"] = string(encodeCert(ctl.Cert))
			d["fingerprint"] = certid.Fingerprint(ctl.Cert)
		}
		out = append(out, d)
	}
	return c.list(out, len(out), listParams{limit: max(len(out), 1)})
}
