package api

import (
	"encoding/base64"
	"net/http"
)

// Headers naming the external signer of an enrollment token: the spec's and the
// reference's names.
const (
	TokenIssuerHeader       = "svc-token-issuer-id"
	TokenIssuerHeaderZitiV1 = "ziti-token-issuer-id"
)

func (s *Server) registerTokenEnroll() {
	s.handle(client, "POST", "/enroll/token", public, "Creates an identity from a JWT of an external signer: with clientCsr it gets a certificate, without it authenticates with JWTs", s.enrollToken)
	s.handle(client, "POST", "/enroll/challenge", public, "Signs a nonce with an enrollment key, so that a client can check the controller it enrolls with", s.enrollChallenge)
	s.handle(client, "GET", "/enroll/jwks", public, "Lists the keys that sign enrollment tokens", s.enrollJWKS)
	s.handle(both, "GET", "/network-jwts", public, "Lists JWTs that bootstrap trust in the network", s.networkJWTs)
}

func (s *Server) enrollToken(c *call) error {
	raw := c.bearer()
	if raw == "" {
		return fieldErr("Authorization", nil, "is required: Bearer <jwt of an external JWT signer>")
	}
	signer := c.r.Header.Get(TokenIssuerHeader)
	if signer == "" {
		signer = c.r.Header.Get(TokenIssuerHeaderZitiV1)
	}
	var body struct {
		ClientCsr *string `json:"clientCsr"`
	}
	if c.r.ContentLength != 0 && c.r.Body != nil && c.r.Body != http.NoBody {
		if err := decodeJSON(c.w, c.r, &body); err != nil {
			return err
		}
	}
	var csr []byte
	if body.ClientCsr != nil {
		if *body.ClientCsr == "" {
			return fieldErr("clientCsr", nil, "must be a PEM certificate request when given")
		}
		csr = []byte(*body.ClientCsr)
	}
	out, err := s.m.EnrollWithToken(c.r.Context(), raw, signer, csr)
	if err != nil {
		return err
	}
	if out.CertPEM == nil {
		return c.empty()
	}
	return c.data(http.StatusOK, map[string]any{"cert": string(out.CertPEM), "ca": string(s.m.CA().PEM())})
}

func (s *Server) enrollChallenge(c *call) error {
	var body struct {
		KeyID *string `json:"keyId"`
		Nonce *string `json:"nonce"`
	}
	if err := decodeJSON(c.w, c.r, &body); err != nil {
		return err
	}
	if err := required(req("keyId", body.KeyID != nil), req("nonce", body.Nonce != nil)); err != nil {
		return err
	}
	alg, sig, err := s.m.SignChallenge(*body.KeyID, *body.Nonce)
	if err != nil {
		return err
	}
	// The reference answers the challenge without the envelope.
	writeJSON(c.w, http.StatusOK, map[string]string{
		"algorithm": alg, "kid": *body.KeyID, "signature": sig, "caPool": string(s.m.CA().PEM()),
	})
	return nil
}

// padded is the big-endian bytes of an EC coordinate, padded to the curve's size.
func padded(b []byte, size int) []byte {
	if len(b) >= size {
		return b
	}
	return append(make([]byte, size-len(b)), b...)
}

func (s *Server) enrollJWKS(c *call) error {
	keys := []map[string]any{}
	if pub := s.m.SigningPublicKey(); pub != nil {
		size := (pub.Curve.Params().BitSize + 7) / 8
		raw, err := pub.Bytes() // uncompressed point: 0x04 || X || Y
		if err != nil {
			return err
		}
		k := map[string]any{
			"kty": "EC", "crv": pub.Curve.Params().Name, "use": "sig", "alg": "ES256", "kid": s.m.SigningKeyID(),
			"x": base64.RawURLEncoding.EncodeToString(padded(raw[1:1+size], size)),
			"y": base64.RawURLEncoding.EncodeToString(padded(raw[1+size:], size)),
		}
		if cert := s.info.ServerCert; cert != nil {
			k["x5c"] = []string{base64.StdEncoding.EncodeToString(cert.Raw), base64.StdEncoding.EncodeToString(s.m.CA().Certificate().Raw)}
		}
		keys = append(keys, k)
	}
	// The reference answers the key set without the envelope.
	writeJSON(c.w, http.StatusOK, map[string]any{"keys": keys})
	return nil
}

func (s *Server) networkJWTs(c *call) error {
	token, err := s.m.NetworkJWT()
	if err != nil {
		return err
	}
	return c.list([]any{map[string]any{"name": "default", "token": token}}, 1, listParams{limit: 1})
}
