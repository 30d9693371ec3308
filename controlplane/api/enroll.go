package api

import (
	"mime"
	"net/http"
	"strings"

	"github.com/zmesh/zmesh/controlplane/model"
)

func (s *Server) registerEnroll() {
	s.handle(client, "POST", "/enroll", public, "Enrolls with a one-time token (method ott, ottca or updb) or a certificate of a verified CA (method ca)", s.enrollGeneric)
	s.handle(client, "POST", "/enroll/ott", public, "Enrolls with a one-time token and a CSR; returns the client certificate", s.enrollOTT)
	s.handle(client, "POST", "/enroll/ottca", public, "Enrolls with a one-time token and a client certificate of the enrollment's CA", s.enrollOTTCA)
	s.handle(client, "POST", "/enroll/ca", public, "Creates an identity from a client certificate of a verified CA with auto-enrollment", s.enrollCA)
	s.handle(client, "POST", "/enroll/updb", public, "Enrolls with a one-time token and sets the password", s.enrollUpdb)
}

// genericEnroll is the JSON body /enroll accepts.
type genericEnroll struct {
	CertCsr       *string `json:"certCsr"`
	ClientCsr     *string `json:"clientCsr"`
	Name          *string `json:"name"`
	Password      *string `json:"password"`
	ServerCertCsr *string `json:"serverCertCsr"`
	Username      *string `json:"username"`
}

// mediaType is the request's content type without parameters; "" when absent.
func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

func isPEMType(mt string) bool {
	return mt == "" || mt == "application/x-pem-file" || mt == "text/plain" || mt == "application/pkcs10"
}

// enrollGeneric is the legacy endpoint: the method and token come in the query string, the
// CSR as a PEM body (ott) or the password in a JSON body (updb).
func (s *Server) enrollGeneric(c *call) error {
	q := c.r.URL.Query()
	method, token := q.Get("method"), q.Get("token")
	switch method {
	case model.EnrollOTT:
		var csr []byte
		if mt := mediaType(c.r); mt == "application/json" {
			var body genericEnroll
			if err := decodeJSON(c.w, c.r, &body); err != nil {
				return err
			}
			if err := required(req("clientCsr", body.ClientCsr != nil)); err != nil {
				return err
			}
			csr = []byte(*body.ClientCsr)
		} else if isPEMType(mt) {
			data, err := readBody(c.w, c.r)
			if err != nil {
				return err
			}
			csr = data
		} else {
			return newErr(codeUnsupportedMedia, "method ott takes a PEM CSR (application/x-pem-file) or JSON with clientCsr, not %q", mt)
		}
		cert, err := s.m.EnrollOTT(token, csr)
		if err != nil {
			return err
		}
		return s.certReply(c, cert)
	case model.EnrollUpdb:
		return s.updb(c, token)
	case model.EnrollOTTCA:
		if err := s.m.EnrollOTTCA(token, c.peerChain()); err != nil {
			return err
		}
		return c.empty()
	case model.EnrollCA:
		if _, err := s.m.EnrollCA(c.peerChain()); err != nil {
			return err
		}
		return c.empty()
	case model.EnrollErOtt:
		var body erOttRequest
		if err := decodeJSON(c.w, c.r, &body); err != nil {
			return err
		}
		return s.erOtt(c, tokenOf(c, body.Token), &body)
	}
	return fieldErr("method", method, "is not an enrollment method; allowed: ott, ottca, updb, ca, erott")
}

// certReply answers an enrollment that issued a certificate: PEM, unless the client asked
// for JSON.
func (s *Server) certReply(c *call, cert []byte) error {
	if strings.Contains(c.r.Header.Get("Accept"), "application/json") {
		return c.data(http.StatusOK, map[string]any{"cert": string(cert), "ca": string(s.m.CA().PEM())})
	}
	c.w.Header().Set("Content-Type", "application/x-pem-file")
	c.w.WriteHeader(http.StatusOK)
	_, err := c.w.Write(cert)
	return err
}

// ottRequest is the JSON body of /enroll/ott and /enroll/ottca.
type ottRequest struct {
	ClientCsr *string `json:"clientCsr"`
	Token     *string `json:"token"`
}

// tokenOf takes the token from the body or, failing that, the query string.
func tokenOf(c *call, body *string) string {
	if body != nil {
		return *body
	}
	return c.r.URL.Query().Get("token")
}

func (s *Server) enrollOTT(c *call) error {
	var body ottRequest
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := required(req("clientCsr", body.ClientCsr != nil)); err != nil {
		return err
	}
	cert, err := s.m.EnrollOTT(tokenOf(c, body.Token), []byte(*body.ClientCsr))
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, map[string]any{"cert": string(cert), "ca": string(s.m.CA().PEM())})
}

func (s *Server) enrollOTTCA(c *call) error {
	var body ottRequest
	if c.r.ContentLength != 0 {
		if err := decodeJSON(c.w, c.r, &body); err != nil {
			return err
		}
	}
	if err := s.m.EnrollOTTCA(tokenOf(c, body.Token), c.peerChain()); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) enrollCA(c *call) error {
	if _, err := s.m.EnrollCA(c.peerChain()); err != nil {
		return err
	}
	return c.empty()
}

func (s *Server) enrollUpdb(c *call) error { return s.updb(c, c.r.URL.Query().Get("token")) }

func (s *Server) updb(c *call, token string) error {
	var body struct {
		Password *string `json:"password"`
		Username *string `json:"username"`
	}
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := required(req("password", body.Password != nil)); err != nil {
		return err
	}
	if err := checkLen("password", *body.Password, model.MinPasswordLen, model.MaxPasswordLen); err != nil {
		return err
	}
	if err := s.m.EnrollUpdb(c.r.Context(), token, *body.Password); err != nil {
		return err
	}
	return c.empty()
}
