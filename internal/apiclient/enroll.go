package apiclient

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/smallstep/pkcs7"

	"github.com/zmesh/zmesh/internal/certid"
)

// EnrollmentClaims are the claims of an enrollment token.
type EnrollmentClaims struct {
	jwt.RegisteredClaims
	Method   string `json:"em"`
	CA       string `json:"ca,omitempty"`
	Username string `json:"username,omitempty"`
}

// EnrollOptions complete an enrollment token.
type EnrollOptions struct {
	// Password is the password chosen for an updb enrollment.
	Password string
	// Certificate is the third-party certificate an ottca enrollment presents.
	Certificate *tls.Certificate
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// ParseEnrollmentToken reads an enrollment token without checking its signature: the
// signature is checked against the controller the token names, in Enroll.
func ParseEnrollmentToken(token string) (*EnrollmentClaims, *jwt.Token, error) {
	var claims EnrollmentClaims
	t, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(token), &claims)
	if err != nil {
		return nil, nil, fmt.Errorf("the enrollment token is not a JWT: %w", err)
	}
	if claims.Issuer == "" || claims.ID == "" || claims.Method == "" {
		return nil, nil, errors.New("the enrollment token lacks iss, jti or em")
	}
	return &claims, t, nil
}

// Enroll completes the enrollment an enrollment token describes and returns the identity
// file. It trusts the controller named by the token's issuer only once the token's signature
// verifies against the controller's TLS certificate, then takes the network's CAs from the
// controller's EST endpoint.
func Enroll(ctx context.Context, token string, opts EnrollOptions) (*IdentityFile, error) {
	tr, err := trustIssuer(ctx, token, opts.Now, opts.Certificate)
	if err != nil {
		return nil, err
	}
	claims, client := tr.claims, tr.client
	id := NewIdentityFile(claims.Issuer)
	id.ID.CA = "pem:" + string(tr.caPEM)

	switch claims.Method {
	case "ott":
		key, keyPEM, err := NewKey()
		if err != nil {
			return nil, err
		}
		csr, err := IdentityCSR(key, claims.Subject)
		if err != nil {
			return nil, err
		}
		var out struct {
			Cert string `json:"cert"`
		}
		body := map[string]string{"token": claims.ID, "clientCsr": string(csr)}
		if _, err := client.Do(ctx, "POST", ClientAPI+"/enroll/ott", body, &out); err != nil {
			return nil, err
		}
		id.ID.Cert = "pem:" + out.Cert
		id.ID.Key = "pem:" + string(keyPEM)
	case "updb":
		if opts.Password == "" {
			return nil, errors.New("an updb enrollment needs the password to set")
		}
		body := map[string]string{"password": opts.Password}
		if _, err := client.Do(ctx, "POST", ClientAPI+"/enroll/updb?token="+url.QueryEscape(claims.ID), body, nil); err != nil {
			return nil, err
		}
		id.Username = claims.Username
	case "ottca":
		if opts.Certificate == nil {
			return nil, errors.New("an ottca enrollment needs the certificate and key issued by the enrollment's CA")
		}
		body := map[string]string{"token": claims.ID}
		if _, err := client.Do(ctx, "POST", ClientAPI+"/enroll/ottca", body, nil); err != nil {
			return nil, err
		}
		var certPEM bytes.Buffer
		for _, der := range opts.Certificate.Certificate {
			pem.Encode(&certPEM, &pem.Block{Type: "CERTIFICATE", Bytes: der})
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(opts.Certificate.PrivateKey)
		if err != nil {
			return nil, err
		}
		id.ID.Cert = "pem:" + certPEM.String()
		id.ID.Key = "pem:" + string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	default:
		return nil, fmt.Errorf("enrollment method %q is not one this client completes; allowed: ott, ottca, updb", claims.Method)
	}
	return id, nil
}

// trusted is a controller an enrollment token led to, once trusted.
type trusted struct {
	claims *EnrollmentClaims
	caPEM  []byte  // the network's CAs
	client *Client // verifies the controller with those CAs
}

// trustIssuer establishes trust in the controller that issued an enrollment token: the token
// must be unexpired and signed with the key of the certificate the controller at its issuer
// URL presents; the network's CAs are then read from the controller's EST endpoint, and the
// controller's certificate must chain to them. cert, if set, is presented as the client
// certificate.
func trustIssuer(ctx context.Context, token string, now func() time.Time, cert *tls.Certificate) (*trusted, error) {
	if now == nil {
		now = time.Now
	}
	claims, _, err := ParseEnrollmentToken(token)
	if err != nil {
		return nil, err
	}
	if claims.ExpiresAt != nil && now().After(claims.ExpiresAt.Time) {
		return nil, fmt.Errorf("the enrollment token expired at %s", claims.ExpiresAt.Time.Format(time.RFC3339))
	}
	u, err := url.Parse(claims.Issuer)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("the enrollment token's issuer %q is not an https URL", claims.Issuer)
	}
	leaf, err := serverLeaf(ctx, u.Host)
	if err != nil {
		return nil, err
	}
	if err := verifyToken(token, leaf, now); err != nil {
		return nil, fmt.Errorf("the enrollment token is not signed by the controller at %s: %w", u.Host, err)
	}
	cas, err := fetchCAs(ctx, pinnedClient(claims.Issuer, leaf, cert))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	var caPEM bytes.Buffer
	for _, c := range cas {
		roots.AddCert(c)
		pem.Encode(&caPEM, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now()}); err != nil {
		return nil, fmt.Errorf("the controller's certificate does not chain to the CAs it serves: %w", err)
	}
	if err := certid.VerifyController(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}); err != nil {
		return nil, fmt.Errorf("the server at %s: %w", u.Host, err)
	}
	return &trusted{claims: claims, caPEM: caPEM.Bytes(), client: New(claims.Issuer, roots, cert)}, nil
}

// RouterCerts are what an edge router's enrollment returns, in PEM.
type RouterCerts struct {
	Cert       string `json:"cert"`
	ServerCert string `json:"serverCert"`
	CA         string `json:"ca"`
}

// EnrollRouter completes an edge router's erott enrollment token with the router's client and
// server CSRs, trusting the controller as Enroll does.
func EnrollRouter(ctx context.Context, token string, clientCSR, serverCSR []byte, now func() time.Time) (*RouterCerts, error) {
	tr, err := trustIssuer(ctx, token, now, nil)
	if err != nil {
		return nil, err
	}
	if tr.claims.Method != "erott" {
		return nil, fmt.Errorf("the enrollment token is for method %s; a router enrolls with an erott token (zmesh edge create edge-router)", tr.claims.Method)
	}
	var out RouterCerts
	body := map[string]string{"token": tr.claims.ID, "certCsr": string(clientCSR), "serverCertCsr": string(serverCSR)}
	if _, err := tr.client.Do(ctx, "POST", ClientAPI+"/enroll/erott", body, &out); err != nil {
		return nil, err
	}
	if out.CA == "" {
		out.CA = string(tr.caPEM)
	}
	return &out, nil
}

// NewKey makes an identity's key (ECDSA P-256, as enrollment does) and returns it with its
// PKCS#8 PEM.
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("new key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("new key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// IdentityCSR is the PEM certificate request of an identity's key: its common name only,
// the rest being the controller's to decide.
func IdentityCSR(key crypto.Signer, cn string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		return nil, fmt.Errorf("create CSR: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// serverLeaf connects to host and returns the certificate it presents, unverified.
func serverLeaf(ctx context.Context, host string) (*x509.Certificate, error) {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, reachError(host, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("the controller at %s presented no certificate", host)
	}
	return certs[0], nil
}

// Fingerprint is the SHA-1 fingerprint the API uses to name certificates.
func Fingerprint(c *x509.Certificate) string {
	sum := sha1.Sum(c.Raw)
	return hex.EncodeToString(sum[:])
}

// verifyToken checks the token's signature with the key of the controller's certificate;
// the algorithm is the key's, never the token's choice.
func verifyToken(token string, leaf *x509.Certificate, now func() time.Time) error {
	var method jwt.SigningMethod
	switch k := leaf.PublicKey.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			method = jwt.SigningMethodES256
		case elliptic.P384():
			method = jwt.SigningMethodES384
		default:
			method = jwt.SigningMethodES512
		}
	default:
		method = jwt.SigningMethodRS256
	}
	var claims EnrollmentClaims
	// The kid is not compared with the certificate: it names the certificate the token was
	// signed under, and a controller reissues its certificate for the same key (to add its
	// certificate policy), after which tokens it signed before still verify with that key.
	t, err := jwt.ParseWithClaims(strings.TrimSpace(token), &claims, func(*jwt.Token) (any, error) {
		return leaf.PublicKey, nil
	}, jwt.WithValidMethods([]string{method.Alg()}), jwt.WithTimeFunc(now))
	if err != nil {
		return err
	}
	if !t.Valid {
		return errors.New("invalid signature")
	}
	return nil
}

// pinnedClient trusts exactly the certificate leaf, for the calls made before the network's
// CAs are known.
func pinnedClient(baseURL string, leaf *x509.Certificate, cert *tls.Certificate) *Client {
	tc := &tls.Config{
		InsecureSkipVerify: true,
		MinVersion:         tls.VersionTLS12,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf.Raw) {
				return errors.New("the controller's certificate changed during enrollment")
			}
			return nil
		},
	}
	ctrls := newControllers([]string{baseURL})
	return &Client{URL: ctrls.first(), ctrls: ctrls, tls: tc, HTTP: newHTTP(tc, cert)}
}

// FetchCAs reads the controller's CA store from /.well-known/est/cacerts.
func FetchCAs(ctx context.Context, c *Client) ([]*x509.Certificate, error) { return fetchCAs(ctx, c) }

func fetchCAs(ctx context.Context, c *Client) ([]*x509.Certificate, error) {
	resp, err := c.raw(ctx, ClientAPI+"/.well-known/est/cacerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp.StatusCode, data)
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(data)), ""))
	if err != nil {
		return nil, fmt.Errorf("the CA store is not base64: %w", err)
	}
	p7, err := pkcs7.Parse(der)
	if err != nil {
		return nil, fmt.Errorf("the CA store is not PKCS#7: %w", err)
	}
	if len(p7.Certificates) == 0 {
		return nil, errors.New("the CA store holds no certificate")
	}
	return p7.Certificates, nil
}

// PinnedClient is a client that trusts exactly one server certificate.
func PinnedClient(baseURL string, leaf *x509.Certificate) *Client {
	return pinnedClient(baseURL, leaf, nil)
}

// ServerCertificate returns the certificate the server at host presents, without checking it.
func ServerCertificate(ctx context.Context, host string) (*x509.Certificate, error) {
	return serverLeaf(ctx, host)
}
