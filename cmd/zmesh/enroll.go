package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/zmesh/zmesh/internal/apiclient"
)

func newEnrollCommand() *cobra.Command {
	var jwtFile, out, password, certFile, keyFile string
	cmd := &cobra.Command{
		Use:   "enroll --jwt FILE --out IDENTITY.json",
		Short: "Enroll an identity from its enrollment token",
		Long: "Enroll an identity from the enrollment token (JWT) an administrator created for it. For\n" +
			"ott tokens a key is generated and a certificate requested; for updb tokens the password is\n" +
			"set (--password, or asked for); for ottca tokens the certificate issued by the third-party\n" +
			"CA is presented (--cert, --key). The identity file is written with mode 0600.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := os.ReadFile(jwtFile)
			if err != nil {
				return fmt.Errorf("read the enrollment token: %w", err)
			}
			claims, _, err := apiclient.ParseEnrollmentToken(string(token))
			if err != nil {
				return err
			}
			opts := apiclient.EnrollOptions{Password: password}
			switch claims.Method {
			case "updb":
				if opts.Password == "" {
					if opts.Password, err = askPassword(cmd, "password for "+claims.Username+": "); err != nil {
						return err
					}
				}
			case "ottca":
				if certFile == "" || keyFile == "" {
					return errors.New("an ottca enrollment needs --cert and --key: the certificate issued by the enrollment's CA")
				}
				cert, err := tls.LoadX509KeyPair(certFile, keyFile)
				if err != nil {
					return fmt.Errorf("--cert/--key: %w", err)
				}
				opts.Certificate = &cert
			}
			id, err := apiclient.Enroll(cmd.Context(), string(token), opts)
			if err != nil {
				return err
			}
			if err := id.Save(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrolled (%s) with %s; identity written to %s\n", claims.Method, id.ZtAPI, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&jwtFile, "jwt", "", "file holding the enrollment token")
	cmd.Flags().StringVarP(&out, "out", "o", "", "identity file to write")
	cmd.Flags().StringVar(&password, "password", "", "password to set (updb tokens); asked for when absent")
	cmd.Flags().StringVar(&certFile, "cert", "", "certificate issued by the enrollment's CA (ottca tokens)")
	cmd.Flags().StringVar(&keyFile, "key", "", "key of --cert (ottca tokens)")
	cmd.MarkFlagRequired("jwt")
	cmd.MarkFlagRequired("out")
	return cmd
}

// askPassword reads a password from the terminal without echo, or a line from stdin when it
// is not a terminal.
func askPassword(cmd *cobra.Command, prompt string) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), prompt)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if line = strings.TrimRight(line, "\r\n"); line == "" {
		return "", errors.New("no password given: use --password or type it on stdin")
	}
	return line, nil
}
