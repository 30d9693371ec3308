package main

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// newEdgeMFACommand builds `edge mfa enable|verify|disable|recovery-codes`, which manage the
// TOTP MFA of the identity logged in with `edge login`.
func newEdgeMFACommand(f *edgeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mfa",
		Short: "Manage TOTP multi-factor authentication of the logged-in identity",
		Long: "Manage TOTP multi-factor authentication (RFC 6238: SHA-1, 6 digits, 30 s) of the identity\n" +
			"logged in with zmesh edge login: enable it (scan the QR code or enter the URL in an\n" +
			"authenticator app), verify it with a first code, see or replace the recovery codes, disable it.",
	}
	cmd.AddCommand(newMFAEnableCommand(f), newMFAVerifyCommand(f), newMFADisableCommand(f), newMFARecoveryCodesCommand(f))
	return cmd
}

func newMFAEnableCommand(f *edgeFlags) *cobra.Command {
	var noQR bool
	cmd := &cobra.Command{
		Use:   "enable",
		Short: "Start MFA enrollment: show the QR code, the provisioning URL and the recovery codes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			mfa, err := c.EnrollMFA(cmd.Context())
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd, mfa)
			}
			out := cmd.OutOrStdout()
			if !noQR {
				png, err := c.MFAQRCode(cmd.Context())
				if err != nil {
					return err
				}
				if err := printQR(out, png); err != nil {
					return err
				}
			}
			fmt.Fprintf(out, "provisioning URL (for an authenticator app):\n  %s\n\n", mfa.ProvisioningURL)
			fmt.Fprintln(out, "recovery codes (each works once when the app is not at hand; keep them safe, they are not shown again):")
			printCodes(out, mfa.RecoveryCodes)
			_, err = fmt.Fprintln(out, "\nfinish with: zmesh edge mfa verify CODE (a code of the app)")
			return err
		},
	}
	cmd.Flags().BoolVar(&noQR, "no-qr", false, "do not draw the QR code")
	return cmd
}

func printCodes(w io.Writer, codes []string) {
	for i, code := range codes {
		sep := "  "
		if i%4 == 3 || i == len(codes)-1 {
			sep = "\n"
		}
		fmt.Fprintf(w, "  %s%s", code, sep)
	}
}

func newMFAVerifyCommand(f *edgeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "verify CODE",
		Short: "Complete MFA enrollment with a first code of the authenticator app",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if err := c.VerifyMFA(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "MFA enabled: logins must now pass a code")
			return err
		},
	}
}

func newMFADisableCommand(f *edgeFlags) *cobra.Command {
	var code string
	cmd := &cobra.Command{
		Use:   "disable [--code CODE]",
		Short: "Disable MFA; once verified, with a current code of the authenticator app",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if err := c.DisableMFA(cmd.Context(), code); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "MFA disabled")
			return err
		},
	}
	cmd.Flags().StringVarP(&code, "code", "c", "", "a current code of the authenticator app (not needed before verification)")
	return cmd
}

func newMFARecoveryCodesCommand(f *edgeFlags) *cobra.Command {
	var code string
	var regenerate bool
	cmd := &cobra.Command{
		Use:   "recovery-codes --code CODE [--new]",
		Short: "Tell how many recovery codes are unused, or replace them all (--new)",
		Long: "Recovery codes are kept hashed once MFA is verified, so they are shown only when made: by\n" +
			"enable and by --new, which replaces every code (the old ones stop working).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if code == "" {
				return errors.New("--code is required: a current code of the authenticator app")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if regenerate {
				codes, err := c.NewMFARecoveryCodes(cmd.Context(), code)
				if err != nil {
					return err
				}
				if f.output == "json" {
					return printJSON(cmd, map[string]any{"recoveryCodes": codes})
				}
				fmt.Fprintln(out, "new recovery codes (the old ones no longer work; these are not shown again):")
				printCodes(out, codes)
				return nil
			}
			n, err := c.MFARecoveryCodes(cmd.Context(), code)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd, map[string]any{"unusedRecoveryCodes": n})
			}
			_, err = fmt.Fprintf(out, "%d recovery codes unused; they are shown only when made: use --new to replace them all\n", n)
			return err
		},
	}
	cmd.Flags().StringVarP(&code, "code", "c", "", "a current code of the authenticator app")
	cmd.Flags().BoolVar(&regenerate, "new", false, "replace every recovery code and show the new ones")
	return cmd
}

// qrModules reads the modules of a QR code image: dark (true) or light, row by row. It
// finds the module size from the top-left finder pattern, 7 modules wide.
func qrModules(img image.Image) ([][]bool, error) {
	b := img.Bounds()
	dark := func(x, y int) bool {
		r, g, bl, _ := img.At(x, y).RGBA()
		return r+g+bl < 3*0x8000
	}
	x0, y0 := -1, -1
	for y := b.Min.Y; y < b.Max.Y && x0 < 0; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if dark(x, y) {
				x0, y0 = x, y
				break
			}
		}
	}
	if x0 < 0 {
		return nil, errors.New("the QR code image is blank")
	}
	run := 0
	for x := x0; x < b.Max.X && dark(x, y0); x++ {
		run++
	}
	if run < 7 || run%7 != 0 {
		return nil, errors.New("the QR code image has no finder pattern")
	}
	size := run / 7
	x1 := x0
	for x := b.Max.X - 1; x >= x0; x-- {
		if dark(x, y0) {
			x1 = x
			break
		}
	}
	n := (x1 - x0 + 1) / size
	if n < 21 || y0+n*size > b.Max.Y {
		return nil, errors.New("the QR code image has an unexpected size")
	}
	rows := make([][]bool, n)
	for r := range rows {
		rows[r] = make([]bool, n)
		for c := range rows[r] {
			rows[r][c] = dark(x0+c*size+size/2, y0+r*size+size/2)
		}
	}
	return rows, nil
}

// printQR draws a PNG QR code with half blocks, two module rows per line, light modules in
// the foreground colour (for terminals with a dark background) and a quiet zone around it.
func printQR(w io.Writer, pngData []byte) error {
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		return fmt.Errorf("the QR code is not a PNG: %w", err)
	}
	rows, err := qrModules(img)
	if err != nil {
		return err
	}
	const quiet = 2
	n := len(rows) + 2*quiet
	at := func(r, c int) bool { // dark?
		r, c = r-quiet, c-quiet
		return r >= 0 && c >= 0 && r < len(rows) && c < len(rows) && rows[r][c]
	}
	var sb strings.Builder
	for r := 0; r < n; r += 2 {
		for c := range n {
			top, bottom := at(r, c), at(r+1, c)
			switch {
			case top && bottom:
				sb.WriteRune(' ')
			case top:
				sb.WriteRune('▄')
			case bottom:
				sb.WriteRune('▀')
			default:
				sb.WriteRune('█')
			}
		}
		sb.WriteByte('\n')
	}
	_, err = io.WriteString(w, sb.String()+"\n")
	return err
}

// passMFA completes the MFA step of a login session when it has one, with code or, when
// empty, a code read from the terminal or stdin.
func passMFA(cmd *cobra.Command, c *apiclient.Client, sess *apiclient.Session, code string) error {
	if !sess.NeedsMFA() {
		return nil
	}
	if code == "" {
		var err error
		if code, err = askPassword(cmd, "MFA code (authenticator app or recovery code): "); err != nil {
			return fmt.Errorf("the identity has MFA: give --mfa-code or type a code: %w", err)
		}
	}
	return c.AuthenticateMFA(cmd.Context(), strings.TrimSpace(code))
}
