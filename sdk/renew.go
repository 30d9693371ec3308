package sdk

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/certid"
)

// Certificate renewal: see "Certificate renewal" in the package doc.

// Waits between failed renewals, doubling from the first to the last, and the bound of one.
const (
	renewFirstRetry = 5 * time.Second
	renewLastRetry  = 10 * time.Minute
	renewTimeout    = 30 * time.Second
)

// The controller's answers to an extend-verify of a certificate that is not the extension
// in progress: there is none, or it is another.
const (
	codeNoExtension    = "NO_CERT_EXTENSION_IN_PROGRESS"
	codeExtendMismatch = "INVALID_CLIENT_CERT"
)

// errNotExtendable: the controller does not extend the identity's certificate (it was not
// issued by the network).
var errNotExtendable = errors.New("the controller does not extend this identity's certificate (not issued by the network)")

// renewal is the renewal loop's state.
type renewal struct {
	// pending is set while the current certificate is an extension the controller has not
	// put in force yet: the next attempt verifies it before anything else.
	pending bool
	authID  string // the cert authenticator the extension is of
}

// apiSessionDetail is what renewal reads of the current API session.
type apiSessionDetail struct {
	AuthenticatorID string `json:"authenticatorId"`
	Extendable      bool   `json:"isCertExtendable"`
	ExtendRequested bool   `json:"isCertExtendRequested"`
	KeyRollRequest  bool   `json:"isCertKeyRollRequested"`
}

// renewLoop renews the identity's certificate whenever it is due or an administrator asks
// for it, until Close.
func (c *Client) renewLoop() {
	retry := renewFirstRetry
	wait := time.Until(c.renewalDue())
	for {
		t := time.NewTimer(max(min(wait, c.opts.RenewCheck), 0))
		select {
		case <-c.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.life, renewTimeout)
		renewed, err := c.renewStep(ctx)
		cancel()
		if c.life.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, errNotExtendable):
			c.log.Info("the identity's certificate is not renewed", "reason", err)
			return
		case err != nil:
			c.log.Warn("certificate renewal failed", "err", err, "retryIn", retry,
				"expires", c.creds.Load().chain[0].NotAfter.UTC().Format(time.RFC3339))
			wait, retry = retry, min(2*retry, renewLastRetry)
			continue
		}
		retry = renewFirstRetry
		wait = time.Until(c.renewalDue())
		if renewed {
			// A certificate whose start the controller backdated by more than RenewAt of
			// its lifetime is due at once: wait RenewAt of what is left instead.
			left := time.Until(c.creds.Load().chain[0].NotAfter)
			wait = max(wait, time.Duration(float64(left)*c.opts.RenewAt))
		}
	}
}

// renewalDue is when the current certificate is to be renewed: Options.RenewAt of its
// lifetime.
func (c *Client) renewalDue() time.Time {
	leaf := c.creds.Load().chain[0]
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(time.Duration(float64(life) * c.opts.RenewAt))
}

// renewStep does what is due now: it puts in force an extension a previous attempt left
// unverified, else renews the certificate when it is due or the controller asks for it
// (isCertExtendRequested of the API session). Before the certificate is due, it asks only
// when the Client has an API session: an idle Client does not log in to ask. It reports
// whether the certificate changed.
func (c *Client) renewStep(ctx context.Context) (bool, error) {
	if c.renewal.pending {
		err := c.verify(ctx, c.renewal.authID, c.creds.Load().chain[0])
		if err == nil {
			return true, nil
		}
		if code := apiclient.CodeOf(err); code != codeNoExtension && code != codeExtendMismatch {
			return false, err
		}
		// The extension is no longer in progress: an earlier verification went through
		// though its answer was lost, or another client of the identity extended it since.
		// The API session tells which; start again from it.
		c.renewal.pending = false
		c.log.Warn("the certificate's extension is no longer in progress; checking the API session", "err", err)
	}
	due := !time.Now().Before(c.renewalDue())
	c.mu.Lock()
	tok := c.token
	c.mu.Unlock()
	if !due && tok == "" {
		return false, nil
	}
	var sess apiSessionDetail
	if _, err := c.call(ctx, "GET", apiclient.ClientAPI+"/current-api-session", nil, &sess); err != nil {
		return false, fmt.Errorf("read the API session: %w", err)
	}
	if !sess.Extendable {
		// Either the controller does not extend this certificate, or it is an extension
		// whose verification did not happen (the program stopped between writing the
		// identity file and verifying): then verifying it now finishes that renewal.
		err := c.verify(ctx, sess.AuthenticatorID, c.creds.Load().chain[0])
		if code := apiclient.CodeOf(err); code == codeNoExtension || code == codeExtendMismatch {
			return false, errNotExtendable
		}
		return err == nil, err
	}
	if !due && !sess.ExtendRequested {
		return false, nil
	}
	return true, c.renew(ctx, sess.AuthenticatorID, sess.KeyRollRequest)
}

// renew extends the certificate of cert authenticator authID, with a new key when rollKey:
// extend, then the identity file, then the Client's own certificate, then extend-verify.
//
// The controller admits the current certificate and the extension from the extension until
// the verification, and only the extension after it, so that order always leaves a
// certificate that authenticates in the file: a program stopped before the file was written
// still has the current one, stopped after it has the extension, which its next renewal
// check verifies (renewStep).
func (c *Client) renew(ctx context.Context, authID string, rollKey bool) error {
	cr := c.creds.Load()
	key, ok := cr.cert.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("identity %s (file %q): its key, a %T, cannot sign a certificate request; an ECDSA, RSA or Ed25519 key can", c.id, c.path, cr.cert.PrivateKey)
	}
	var keyPEM []byte
	if rollKey {
		k, kpem, err := apiclient.NewKey()
		if err != nil {
			return err
		}
		key, keyPEM = k, kpem
	}
	csr, err := apiclient.IdentityCSR(key, c.id)
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	var out struct {
		ClientCert string `json:"clientCert"`
	}
	body := map[string]string{"clientCertCsr": string(csr)}
	path := apiclient.ClientAPI + "/current-identity/authenticators/" + url.PathEscape(authID) + "/extend"
	if _, err := c.call(ctx, "POST", path, body, &out); err != nil {
		return fmt.Errorf("extend the certificate: %w", err)
	}
	cert, err := certid.Issued([]byte(out.ClientCert), key, c.id, c.roots, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return fmt.Errorf("the certificate the controller issued: %w", err)
	}
	if err := apiclient.ReplaceCredentials(c.path, cr.cert.Certificate[0], []byte(out.ClientCert), keyPEM); err != nil {
		return err
	}
	next, err := c.newCredentials(cert)
	if err != nil {
		return err
	}
	// From now on new router connections, controller calls and end-to-end key exchanges
	// present the new certificate; those made before keep theirs.
	c.creds.Store(next)
	cr.api.HTTP.CloseIdleConnections()
	c.renewal.pending, c.renewal.authID = true, authID
	c.log.Info("certificate extended", "expires", cert.Leaf.NotAfter.UTC().Format(time.RFC3339),
		"fingerprint", certid.Fingerprint(cert.Leaf), "newKey", rollKey, "file", c.path)
	return c.verify(ctx, authID, cert.Leaf)
}

// verify puts the certificate of leaf, the Client's current one, in force as authenticator authID's (extend-verify).
// The Client then authenticates again at once, with the new one: after a key roll the
// controller ended the API sessions opened with the previous certificate.
func (c *Client) verify(ctx context.Context, authID string, leaf *x509.Certificate) error {
	c.mu.Lock()
	tok := c.token
	c.mu.Unlock()
	body := map[string]string{"clientCert": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))}
	path := apiclient.ClientAPI + "/current-identity/authenticators/" + url.PathEscape(authID) + "/extend-verify"
	if _, err := c.call(ctx, "POST", path, body, nil); err != nil {
		return fmt.Errorf("verify the extended certificate: %w", err)
	}
	c.renewal.pending = false
	c.log.Info("certificate renewed", "expires", leaf.NotAfter.UTC().Format(time.RFC3339), "fingerprint", certid.Fingerprint(leaf))
	if tok != "" {
		if _, err := c.authenticate(ctx, tok); err != nil {
			c.log.Warn("authenticating with the renewed certificate failed; the next call tries again", "err", err)
		}
	}
	return nil
}
