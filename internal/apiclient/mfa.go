package apiclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// MFAHeader carries the MFA code of the operations that need a current one.
const MFAHeader = "mfa-validation-code"

// MFA is the current identity's MFA enrollment. ProvisioningURL and RecoveryCodes are shown
// only until the enrollment is verified.
type MFA struct {
	ID              string   `json:"id"`
	IsVerified      bool     `json:"isVerified"`
	ProvisioningURL string   `json:"provisioningUrl"`
	RecoveryCodes   []string `json:"recoveryCodes"`
}

func codeBody(code string) map[string]string { return map[string]string{"code": code} }

func codeHeader(code string) http.Header {
	h := http.Header{}
	h.Set(MFAHeader, code)
	return h
}

// AuthenticateMFA passes the MFA step of the API session with a TOTP or recovery code;
// the session then needing nothing more, the client learns the cluster's members, as the
// other authentications do.
func (c *Client) AuthenticateMFA(ctx context.Context, code string) error {
	if _, err := c.Do(ctx, "POST", ClientAPI+"/authenticate/mfa", codeBody(code), nil); err != nil {
		return err
	}
	c.learn(ctx)
	return nil
}

// EnrollMFA starts MFA enrollment of the current identity and returns it, with the
// provisioning URL and recovery codes.
func (c *Client) EnrollMFA(ctx context.Context) (*MFA, error) {
	if _, err := c.Do(ctx, "POST", ClientAPI+"/current-identity/mfa", map[string]any{}, nil); err != nil {
		return nil, err
	}
	return c.MFA(ctx)
}

// MFA returns the current identity's MFA enrollment.
func (c *Client) MFA(ctx context.Context) (*MFA, error) {
	var m MFA
	if _, err := c.Do(ctx, "GET", ClientAPI+"/current-identity/mfa", nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// MFAQRCode returns the PNG QR code of the current identity's unverified enrollment.
func (c *Client) MFAQRCode(ctx context.Context) ([]byte, error) {
	resp, err := c.raw(ctx, ClientAPI+"/current-identity/mfa/qr-code")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the QR code: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp.StatusCode, data)
	}
	return data, nil
}

// VerifyMFA completes the enrollment with a first code of the authenticator app.
func (c *Client) VerifyMFA(ctx context.Context, code string) error {
	_, err := c.Do(ctx, "POST", ClientAPI+"/current-identity/mfa/verify", codeBody(code), nil)
	return err
}

// DisableMFA removes the current identity's MFA enrollment; code may be empty while it is
// unverified.
func (c *Client) DisableMFA(ctx context.Context, code string) error {
	_, err := c.DoHeader(ctx, "DELETE", ClientAPI+"/current-identity/mfa", codeHeader(code), nil, nil)
	return err
}

// MFARecoveryCodes checks a current code and returns how many recovery codes are unused.
func (c *Client) MFARecoveryCodes(ctx context.Context, code string) (int, error) {
	var out struct {
		Unused int `json:"unusedRecoveryCodes"`
	}
	_, err := c.DoHeader(ctx, "GET", ClientAPI+"/current-identity/mfa/recovery-codes", codeHeader(code), nil, &out)
	return out.Unused, err
}

// NewMFARecoveryCodes replaces every recovery code after checking a current code and
// returns the new ones.
func (c *Client) NewMFARecoveryCodes(ctx context.Context, code string) ([]string, error) {
	var out struct {
		RecoveryCodes []string `json:"recoveryCodes"`
	}
	_, err := c.Do(ctx, "POST", ClientAPI+"/current-identity/mfa/recovery-codes", codeBody(code), &out)
	return out.RecoveryCodes, err
}
