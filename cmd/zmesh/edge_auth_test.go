package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// signerCertFile writes a self-signed certificate, as a static external JWT signer's.
func signerCertFile(t *testing.T) string {
	t.Helper()
	return writeFile(t, "signer.pem", string(testutil.NewAuthority(t, "sso signer").PEM()))
}

// TestEdgeAuthEntities creates, reads, updates and deletes external JWT signers and
// authentication policies through the CLI.
func TestEdgeAuthEntities(t *testing.T) {
	t.Parallel()
	edge := loggedIn(t)
	certFile := signerCertFile(t)
	if _, _, err := edge("create", "ext-jwt-signer", "bad", "--issuer", "https://x", "--audience", "a", "--cert-file", certFile); err == nil ||
		!strings.Contains(err.Error(), "--kid") {
		t.Fatalf("a certificate without --kid: %v", err)
	}
	if _, _, err := edge("create", "ext-jwt-signer", "bad", "--issuer", "https://x", "--audience", "a"); err == nil ||
		!strings.Contains(err.Error(), "--jwks-endpoint or --cert-file") {
		t.Fatalf("a signer without keys: %v", err)
	}
	sso := edge.object(t, "create", "ext-jwt-signer", "sso", "--issuer", "https://sso.example.com", "--audience", "zmesh",
		"--cert-file", certFile, "--kid", "sso-1")
	ssoID := sso["id"].(string)
	hasFields(t, "static signer", sso, map[string]any{"kid": "sso-1", "commonName": "sso signer", "enabled": true, "claimsProperty": "sub"})
	if pemText, _ := sso["certPem"].(string); !strings.Contains(pemText, "BEGIN CERTIFICATE") {
		t.Errorf("static signer certificate: %v", sso["certPem"])
	}

	for _, c := range []crudCase{
		{
			typ: "ext-jwt-signer", name: "corp-idp",
			create: []string{"ext-jwt-signer", "corp-idp", "--issuer", "https://idp.corp.example.com", "--audience", "zmesh",
				"--jwks-endpoint", "https://idp.corp.example.com/keys", "--claims-property", "email", "--use-external-id",
				"--enroll-to-token", "--enroll-name-selector", "/name", "--enroll-attribute-selector", "groups",
				"--enroll-auth-policy", "default", "--scopes", "openid,email", "--target-token", "id", "--client-id", "zmesh-cli"},
			created: map[string]any{"issuer": "https://idp.corp.example.com", "audience": "zmesh", "jwksEndpoint": "https://idp.corp.example.com/keys",
				"claimsProperty": "email", "useExternalId": true, "enrollToTokenEnabled": true, "enrollToCertEnabled": false,
				"enrollNameClaimsSelector": "/name", "enrollAttributeClaimsSelector": "groups", "enrollAuthPolicyId": "default",
				"scopes": []string{"openid", "email"}, "targetToken": "ID", "clientId": "zmesh-cli", "enabled": true, "certPem": nil},
			update:  []string{"--enabled", "off", "--audience", "zmesh-2"},
			updated: map[string]any{"enabled": false, "audience": "zmesh-2", "issuer": "https://idp.corp.example.com"},
		},
		{
			typ: "auth-policy", name: "strict",
			create: []string{"auth-policy", "strict", "--cert", "off", "--min-password-length", "12", "--require-number-char",
				"--max-attempts", "5", "--lockout-minutes", "10", "--allowed-signers", "sso", "--require-totp", "--require-ext-jwt-signer", "sso"},
			created: map[string]any{
				"primary": map[string]any{
					"cert": map[string]any{"allowed": false, "allowExpiredCerts": false},
					"updb": map[string]any{"allowed": true, "minPasswordLength": 12, "requireNumberChar": true, "requireSpecialChar": false,
						"maxAttempts": 5, "lockoutDurationMinutes": 10},
					"extJwt": map[string]any{"allowed": true, "allowedSigners": []string{ssoID}},
				},
				"secondary": map[string]any{"requireTotp": true, "requireExtJwtSigner": ssoID},
			},
			update: []string{"--require-totp=false", "--updb", "off"},
			updated: map[string]any{
				"primary":   map[string]any{"updb": map[string]any{"allowed": false, "minPasswordLength": 12}, "cert": map[string]any{"allowed": false}},
				"secondary": map[string]any{"requireTotp": false, "requireExtJwtSigner": ssoID},
			},
		},
	} {
		t.Run(c.typ, func(t *testing.T) { c.run(t, edge) })
	}

	// The defaults of a policy created with no flags, and the built-in default policy.
	open := edge.object(t, "create", "auth-policy", "open")
	hasFields(t, "policy with defaults", open, map[string]any{"primary": map[string]any{
		"cert": map[string]any{"allowed": true}, "updb": map[string]any{"allowed": true, "minPasswordLength": 5, "maxAttempts": 0},
		"extJwt": map[string]any{"allowed": true, "allowedSigners": []string{}}}, "secondary": map[string]any{"requireTotp": false, "requireExtJwtSigner": nil}})
	if items := edge.list(t, "auth-policies"); len(items) != 2 {
		t.Errorf("policies: %v", items)
	}
	table := edge.must(t, "list", "auth-policies")
	if !strings.Contains(table, "default") || !strings.Contains(table, "TOTP") {
		t.Errorf("policy table:\n%s", table)
	}
	if _, _, err := edge("delete", "auth-policy", "default"); err == nil || !strings.Contains(err.Error(), "CAN_NOT_DELETE_DEFAULT_AUTH_POLICY") {
		t.Errorf("delete the default policy: %v", err)
	}
	// Identities reference policies by name or id.
	edge.must(t, "create", "identity", "pat", "--auth-policy", "open")
	if got := edge.object(t, "get", "identity", "pat"); got["authPolicyId"] != open["id"] {
		t.Errorf("identity's policy: %v", got["authPolicyId"])
	}
}

// totp is the test's own RFC 6238 code (SHA-1, 6 digits) of a 30 s step.
func totp(secret string, step int64) string {
	key, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(secret))
	if err != nil {
		panic(err)
	}
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(step))
	mac := hmac.New(sha1.New, key)
	mac.Write(msg[:])
	sum := mac.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	return fmt.Sprintf("%06d", (binary.BigEndian.Uint32(sum[off:off+4])&0x7fffffff)%1_000_000)
}

var recoveryCodeRE = regexp.MustCompile(`\b[A-Z2-9]{12}\b`)

// TestEdgeMFA enables MFA for a logged-in identity through the CLI (QR code drawn, URL and
// recovery codes printed), verifies it with a code of the test's own TOTP generator, logs in
// with MFA, and manages the recovery codes.
func TestEdgeMFA(t *testing.T) {
	t.Parallel()
	ctrl := ctrltest.Start(t).URL
	dir := t.TempDir()
	cli := func(session string) edgeFunc {
		return func(args ...string) (string, string, error) {
			return run(t, nil, append([]string{"edge", "--session-file", filepath.Join(dir, session)}, args...)...)
		}
	}
	admin := cli("admin.json")
	admin.must(t, "login", ctrl, "-u", "admin", "-p", "admin-pass", "--yes")
	jwt := filepath.Join(dir, "mia.jwt")
	admin.must(t, "create", "identity", "mia", "--updb", "mia-user", "--jwt-output", jwt)
	if _, _, err := run(t, nil, "enroll", "--jwt", jwt, "--out", filepath.Join(dir, "mia.json"), "--password", "mia-pass-1"); err != nil {
		t.Fatal(err)
	}
	mia := cli("mia.json")
	login := func(extra ...string) error {
		_, _, err := mia(append([]string{"login", ctrl, "-u", "mia-user", "-p", "mia-pass-1", "--yes"}, extra...)...)
		return err
	}
	if err := login(); err != nil {
		t.Fatal(err)
	}

	text := mia.must(t, "mfa", "enable")
	m := regexp.MustCompile(`otpauth://totp/\S+`).FindString(text)
	u, err := url.Parse(m)
	if err != nil || u.Query().Get("secret") == "" {
		t.Fatalf("enable printed no provisioning URL:\n%s", text)
	}
	secret := u.Query().Get("secret")
	if codes := recoveryCodeRE.FindAllString(text, -1); len(codes) != 20 {
		t.Fatalf("enable printed %d recovery codes:\n%s", len(codes), text)
	}
	// The QR code: a square of half blocks, two module rows per line.
	var qr []string
	for _, line := range strings.Split(text, "\n") {
		if strings.ContainsAny(line, "█▀▄") {
			qr = append(qr, line)
		}
	}
	if n := len([]rune(qr[0])); len(qr) < 12 || len(qr) != (n+1)/2 {
		t.Fatalf("QR code of %d lines of %d columns:\n%s", len(qr), n, text)
	}
	if _, _, err := mia("mfa", "enable"); err == nil || !strings.Contains(err.Error(), "MFA_EXISTS") {
		t.Fatalf("enable twice: %v", err)
	}

	// Three codes of one window: the previous step's, the current one's, the next one's.
	if left := 30 - time.Now().Unix()%30; left < 8 {
		time.Sleep(time.Duration(left+1) * time.Second)
	}
	step := time.Now().Unix() / 30
	if _, _, err := mia("mfa", "verify", "000000"); err == nil {
		t.Fatal("verify with a wrong code succeeded")
	}
	if out := mia.must(t, "mfa", "verify", totp(secret, step-1)); !strings.Contains(out, "MFA enabled") {
		t.Fatalf("verify: %q", out)
	}
	if out := mia.must(t, "mfa", "recovery-codes", "--code", totp(secret, step)); !strings.Contains(out, "20 recovery codes unused") {
		t.Fatalf("recovery codes: %q", out)
	}
	fresh := recoveryCodeRE.FindAllString(mia.must(t, "mfa", "recovery-codes", "--code", totp(secret, step+1), "--new"), -1)
	if len(fresh) != 20 {
		t.Fatalf("new recovery codes: %v", fresh)
	}
	if _, _, err := mia("mfa", "recovery-codes", "--code", totp(secret, step+1)); err == nil {
		t.Fatal("a used code was accepted again")
	}

	// Logging in needs a code now: none on stdin is an error, one on stdin is used.
	var stdout, stderr bytes.Buffer
	root := newRootCommand(&stdout, &stderr, func(string) (string, bool) { return "", false })
	root.SetIn(strings.NewReader(""))
	root.SetArgs([]string{"edge", "--session-file", filepath.Join(dir, "mia.json"), "login", ctrl, "-u", "mia-user", "-p", "mia-pass-1", "--yes"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--mfa-code") {
		t.Fatalf("login without a code: %v", err)
	}
	root = newRootCommand(&stdout, &stderr, func(string) (string, bool) { return "", false })
	root.SetIn(strings.NewReader(fresh[2] + "\n"))
	root.SetArgs([]string{"edge", "--session-file", filepath.Join(dir, "mia.json"), "login", ctrl, "-u", "mia-user", "-p", "mia-pass-1", "--yes"})
	if err := root.Execute(); err != nil {
		t.Fatalf("login with a code on stdin: %v", err)
	}
	if err := login("--mfa-code", fresh[0]); err != nil {
		t.Fatalf("login with a recovery code: %v", err)
	}
	if err := login("--mfa-code", fresh[0]); err == nil {
		t.Fatal("a recovery code worked twice")
	}
	if err := login("--mfa-code", fresh[1]); err != nil {
		t.Fatalf("login with another recovery code: %v", err)
	}
	if _, _, err := mia("mfa", "disable"); err == nil || !strings.Contains(err.Error(), "MFA_INVALID_TOKEN") {
		t.Fatalf("disable without a code: %v", err)
	}
	if _, _, err := mia("mfa", "disable", "--code", "123456"); err == nil {
		t.Fatal("disable with a wrong code succeeded")
	}

	// An enrollment not verified yet is disabled without a code.
	admin.must(t, "mfa", "enable", "--no-qr")
	if out := admin.must(t, "mfa", "disable"); !strings.Contains(out, "MFA disabled") {
		t.Fatalf("disable: %q", out)
	}
}
