package model

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// JWKS fetching.
const (
	// DefaultJWKSRefetchInterval is how often at most a signer's key set is fetched again
	// because a token names a key it lacks.
	DefaultJWKSRefetchInterval = 10 * time.Second
	// jwksTTL is how long a fetched key set is used before it is fetched again.
	jwksTTL = time.Hour
	// jwksTimeout bounds one fetch.
	jwksTimeout = 10 * time.Second
	// maxJWKSBytes bounds a key set's size.
	maxJWKSBytes = 1 << 20
)

// jwk is one usable key of a key set.
type jwk struct {
	key crypto.PublicKey
	alg string // the entry's "alg", "" when absent
}

// jwksCache keeps the key sets of the signers defined by a key-set endpoint. A set is
// fetched on first use, used for jwksTTL, and fetched again early when a token names a key
// the set lacks (key rotation), at most once per refetch interval per signer so that tokens
// with made-up key ids cannot make the controller hammer the provider.
type jwksCache struct {
	client  *http.Client
	refetch time.Duration

	mu      sync.Mutex
	entries map[string]*jwksEntry // by signer id
}

type jwksEntry struct {
	mu          sync.Mutex // one fetch at a time per signer
	endpoint    string
	keys        map[string]jwk
	fetchedAt   time.Time
	lastAttempt time.Time
}

func newJWKSCache(opts Options) *jwksCache {
	c := &jwksCache{client: opts.JWKSClient, refetch: opts.JWKSRefetchInterval, entries: map[string]*jwksEntry{}}
	if c.refetch == 0 {
		c.refetch = DefaultJWKSRefetchInterval
	}
	if c.client == nil {
		c.client = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: opts.JWKSRoots},
			TLSHandshakeTimeout: jwksTimeout,
		}}
	}
	if c.client.CheckRedirect == nil {
		cl := *c.client
		cl.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			// A redirect stays on https, or, from a loopback http endpoint, on loopback http:
			// never a downgrade from https, never plain http across a network.
			if req.URL.Scheme != "https" && (via[0].URL.Scheme == "https" || !loopbackHTTP(req.URL)) {
				return fmt.Errorf("redirect to %s refused: key sets are fetched over https, or over http from a loopback address only", req.URL.Redacted())
			}
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return nil
		}
		c.client = &cl
	}
	return c
}

// forgetAll drops every signer's key set (the store's content was replaced).
func (c *jwksCache) forgetAll() {
	c.mu.Lock()
	clear(c.entries)
	c.mu.Unlock()
}

// forget drops what is cached for a signer (changed or deleted).
func (c *jwksCache) forget(signerID string) {
	c.mu.Lock()
	delete(c.entries, signerID)
	c.mu.Unlock()
}

func (c *jwksCache) entry(s *ExtJWTSigner) *jwksEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[s.ID]
	if e == nil || e.endpoint != s.JWKSEndpoint {
		e = &jwksEntry{endpoint: s.JWKSEndpoint}
		c.entries[s.ID] = e
	}
	return e
}

// key returns the key kid of the signer's key set, fetching the set when it is missing,
// older than jwksTTL, or lacks kid, unless a fetch happened less than the refetch interval
// ago.
func (c *jwksCache) key(ctx context.Context, s *ExtJWTSigner, kid string, now time.Time) (jwk, error) {
	e := c.entry(s)
	e.mu.Lock()
	defer e.mu.Unlock()
	k, ok := e.keys[kid]
	fresh := e.keys != nil && now.Sub(e.fetchedAt) < jwksTTL
	if ok && fresh {
		return k, nil
	}
	if !e.lastAttempt.IsZero() && now.Sub(e.lastAttempt) < c.refetch {
		if ok {
			return k, nil // stale but the best there is
		}
		return jwk{}, fmt.Errorf("key %q is not in the key set of %s, fetched %s ago (fetched again at most every %s)",
			kid, e.endpoint, now.Sub(e.lastAttempt).Round(time.Millisecond), c.refetch)
	}
	e.lastAttempt = now
	keys, err := c.fetch(ctx, e.endpoint)
	if err != nil {
		if ok {
			return k, nil
		}
		return jwk{}, err
	}
	e.keys, e.fetchedAt = keys, now
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return jwk{}, fmt.Errorf("key %q is not in the key set of %s", kid, e.endpoint)
}

// fetch reads and parses a key set. Entries that are not signature keys of a supported type
// are skipped.
func (c *jwksCache) fetch(ctx context.Context, endpoint string) (map[string]jwk, error) {
	// The fetch outlives a client that goes away: it counts against the refetch interval.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", endpoint, nil)
	if err != nil {
		return nil, fmt.Errorf("key set %s: %w", endpoint, err)
	}
	if req.URL.Scheme != "https" && !loopbackHTTP(req.URL) {
		return nil, fmt.Errorf("key set %s refused: not https, nor http on a loopback address", endpoint)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch key set: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch key set %s: HTTP %d", endpoint, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read key set %s: %w", endpoint, err)
	}
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("key set %s is larger than %d bytes", endpoint, maxJWKSBytes)
	}
	return parseJWKS(data)
}

// loopbackHTTP reports whether u is an http:// URL whose host is a loopback IP literal
// (127.0.0.0/8, ::1). Host names, localhost included, are not: what they resolve to is not
// the URL's to say.
func loopbackHTTP(u *url.URL) bool {
	if u.Scheme != "http" {
		return false
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return err == nil && ip.Unmap().IsLoopback() && ip.Zone() == ""
}

// jwkJSON is a JSON web key as key sets carry it (RFC 7517, 7518, 8037).
type jwkJSON struct {
	Kty string   `json:"kty"`
	Kid string   `json:"kid"`
	Use string   `json:"use"`
	Alg string   `json:"alg"`
	Crv string   `json:"crv"`
	X   string   `json:"x"`
	Y   string   `json:"y"`
	N   string   `json:"n"`
	E   string   `json:"e"`
	X5C []string `json:"x5c"`
}

// parseJWKS parses a key set; entries without kid, for encryption, or of unsupported types
// are left out.
func parseJWKS(data []byte) (map[string]jwk, error) {
	var set struct {
		Keys []jwkJSON `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("the key set is not JSON: %w", err)
	}
	out := map[string]jwk{}
	for _, k := range set.Keys {
		if k.Kid == "" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		pub, err := k.publicKey()
		if err != nil {
			continue
		}
		if _, err := algorithmsFor(pub, k.Alg); err != nil {
			continue
		}
		out[k.Kid] = jwk{key: pub, alg: k.Alg}
	}
	if len(out) == 0 {
		return nil, errors.New("the key set holds no usable signature key")
	}
	return out, nil
}

func decodeB64(s string, url bool) ([]byte, error) {
	if url {
		return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	}
	return base64.StdEncoding.DecodeString(s)
}

func (k jwkJSON) publicKey() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := decodeB64(k.N, true)
		e, err2 := decodeB64(k.E, true)
		if err := errors.Join(err1, err2); err != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("RSA key %q: bad n or e", k.Kid)
		}
		exp := int(new(big.Int).SetBytes(e).Int64())
		if exp < 3 || exp%2 == 0 {
			return nil, fmt.Errorf("RSA key %q: bad exponent", k.Kid)
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("EC key %q: curve %q not supported", k.Kid, k.Crv)
		}
		x, err1 := decodeB64(k.X, true)
		y, err2 := decodeB64(k.Y, true)
		size := (curve.Params().BitSize + 7) / 8
		if err := errors.Join(err1, err2); err != nil || len(x) != size || len(y) != size {
			return nil, fmt.Errorf("EC key %q: bad x or y", k.Kid)
		}
		// The uncompressed point encoding, parsed with the check that it is on the curve.
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, fmt.Errorf("EC key %q: %w", k.Kid, err)
		}
		return pub, nil
	case "OKP":
		x, err := decodeB64(k.X, true)
		if k.Crv != "Ed25519" || err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("OKP key %q: only Ed25519 is supported", k.Kid)
		}
		return ed25519.PublicKey(x), nil
	}
	if len(k.X5C) > 0 {
		return parseX5C(k.X5C)
	}
	return nil, fmt.Errorf("key %q: type %q not supported", k.Kid, k.Kty)
}
