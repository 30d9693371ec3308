package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/certid"
)

// edgeSession is what `zmesh edge login` keeps between commands.
type edgeSession struct {
	// URL is the controller that answered last, the first one the next command tries.
	URL string `json:"url"`
	// URLs are every controller of the login, in order: those given to login, then the
	// members learned from them. Empty in files of logins to one controller (URL alone).
	URLs     []string `json:"urls,omitempty"`
	Token    string   `json:"token"`
	Username string   `json:"username"`
	CA       string   `json:"ca"` // PEM of the CAs trusted for these controllers
}

// controllers returns the login's controllers, in order.
func (s edgeSession) controllers() []string {
	if len(s.URLs) == 0 {
		return []string{s.URL}
	}
	return s.URLs
}

func defaultSessionFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = "."
	}
	return filepath.Join(dir, "zmesh", "edge-session.json")
}

type edgeFlags struct {
	sessionFile string
	profile     string // the saved login to use; "" for the current one
	output      string
	types       []*entityType
}

// addProfileFlag adds --profile (and ziti's name for it, --cli-identity) to cmd's persistent flags.
func (f *edgeFlags) addProfileFlag(cmd *cobra.Command) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&f.profile, "profile", "", "the saved login to use (see zmesh edge use); default: the current one")
	fs.StringVar(&f.profile, "cli-identity", "", "the same as --profile, as OpenZiti's CLI names it")
	fs.MarkHidden("cli-identity")
}

func newEdgeCommand() *cobra.Command {
	f := &edgeFlags{types: edgeTypes()}
	cmd := &cobra.Command{
		Use:   "edge",
		Short: "Administer a network through the controller's management API",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return f.checkOutput()
		},
	}
	cmd.PersistentFlags().StringVar(&f.sessionFile, "session-file", defaultSessionFile(), "where the login sessions are kept")
	f.addProfileFlag(cmd)
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(newEdgeLoginCommand(f), newEdgeCreateCommand(f), newEdgeListCommand(f), newEdgeGetCommand(f),
		newEdgeUpdateCommand(f), newEdgeDeleteCommand(f), newEdgeMFACommand(f), newEdgeDisableCommand(f), newEdgeEnableCommand(f),
		newEdgeReEnrollCommand(f), newEdgeLogoutCommand(f), newEdgeUseCommand(f), newEdgeVerifyCommand(f),
		newEdgePolicyAdvisorCommand(f))
	return cmd
}

func newEdgeLoginCommand(f *edgeFlags) *cobra.Command {
	var username, password, mfaCode string
	var yes bool
	cmd := &cobra.Command{
		Use:   "login URL [URL...] --username U --password P",
		Short: "Log in to a controller and keep the session for later commands",
		Long: "Log in to the controller at URL (https://host:port). The controller's CA is fetched from its\n" +
			"EST endpoint and trusted after its fingerprint is shown and confirmed (or --yes). An identity\n" +
			"with MFA also gives a code (--mfa-code, or asked for). The login is kept as profile\n" +
			"--profile NAME (default: the current profile, or \"default\" when there is none), which\n" +
			"becomes the current one; zmesh edge use switches between profiles.\n\n" +
			"Several URLs name the controllers of one cluster: each command calls the one that answered\n" +
			"last and moves to the next when it cannot be reached or answers 503. The members the\n" +
			"controllers list are learned and kept with the login.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var bases []string
			for _, a := range args {
				u, err := url.Parse(a)
				if err != nil || u.Scheme != "https" || u.Host == "" {
					return usagef("%q is not a controller URL such as https://ctrl.example.com:1280", a)
				}
				bases = append(bases, "https://"+u.Host)
			}
			roots, caPEM, err := trustControllers(cmd, bases, yes)
			if err != nil {
				return err
			}
			if password == "" {
				if password, err = askPassword(cmd, "password for "+username+": "); err != nil {
					return err
				}
			}
			client := apiclient.NewMulti(bases, roots, nil)
			sess, err := client.AuthenticatePassword(cmd.Context(), username, password)
			if err != nil {
				return err
			}
			if err := passMFA(cmd, client, sess, mfaCode); err != nil {
				return err
			}
			logins, err := loadLogins(f.sessionFile)
			if err != nil {
				return err
			}
			profile := f.profile
			if profile == "" {
				profile = logins.Current
			}
			if profile == "" {
				profile = defaultProfile
			}
			s := edgeSession{URL: client.Current(), Token: sess.Token, Username: username, CA: caPEM}
			if urls := client.URLs(); len(urls) > 1 {
				s.URLs = urls
			}
			logins.Profiles[profile] = s
			logins.Current = profile
			if err := logins.save(f.sessionFile); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s as %s (profile %s)\n", s.URL, username, profile)
			if len(s.URLs) > 1 {
				fmt.Fprintf(cmd.ErrOrStderr(), "controllers: %s\n", strings.Join(s.URLs, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&username, "username", "u", "", "username")
	cmd.Flags().StringVarP(&password, "password", "p", "", "password; asked for when absent")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "trust the controller's CA without asking")
	cmd.Flags().StringVar(&mfaCode, "mfa-code", "", "a code of the authenticator app, or a recovery code, when the identity has MFA; asked for when needed and absent")
	cmd.MarkFlagRequired("username")
	return cmd
}

// trustControllers fetches the CAs of the first of the controllers at bases that answers,
// checks that its certificate is the controller's under them, and has the user confirm them
// (unless yes). It returns them as a pool and as PEM. The other controllers are checked
// against these CAs when they are called.
func trustControllers(cmd *cobra.Command, bases []string, yes bool) (*x509.CertPool, string, error) {
	var (
		base string
		cas  []*x509.Certificate
		errs []error
	)
	for _, b := range bases {
		host := strings.TrimPrefix(b, "https://")
		leaf, err := apiclient.ServerCertificate(cmd.Context(), host)
		if err == nil {
			if cas, err = apiclient.FetchCAs(cmd.Context(), apiclient.PinnedClient(b, leaf)); err == nil {
				if err = checkControllerCert(leaf, cas, host); err == nil {
					base = b
					break
				}
			}
		}
		if len(bases) == 1 {
			return nil, "", err
		}
		errs = append(errs, fmt.Errorf("%s: %w", b, err))
	}
	if base == "" {
		return nil, "", fmt.Errorf("no controller gave its CAs: %w", errors.Join(errs...))
	}
	roots := x509.NewCertPool()
	var caPEM bytes.Buffer
	for _, c := range cas {
		roots.AddCert(c)
		pem.Encode(&caPEM, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	out := cmd.ErrOrStderr()
	for _, c := range cas {
		fmt.Fprintf(out, "controller CA %q, SHA-1 fingerprint %s\n", c.Subject.CommonName, apiclient.Fingerprint(c))
	}
	if !yes {
		fmt.Fprint(out, "trust this CA for "+strings.Join(bases, ", ")+"? [y/N] ")
		answer, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return nil, "", errors.New("login cancelled: the CA was not trusted")
		}
	}
	return roots, caPEM.String(), nil
}

// checkControllerCert checks that leaf, served at host, is the controller's certificate
// under the CAs the controller served.
func checkControllerCert(leaf *x509.Certificate, cas []*x509.Certificate, host string) error {
	roots := x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
		return fmt.Errorf("the controller's certificate is not valid for %s under the CAs it serves: %w", name, err)
	}
	if err := certid.VerifyController(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}); err != nil {
		return fmt.Errorf("the server at %s: %w", host, err)
	}
	return nil
}

// client returns a management client with the saved session of the profile in use.
func (f *edgeFlags) client() (*apiclient.Client, error) {
	_, name, s, err := f.login()
	if err != nil {
		return nil, err
	}
	return f.clientOf(name, s)
}

// clientOf returns a client with the saved session s of profile name.
func (f *edgeFlags) clientOf(name string, s edgeSession) (*apiclient.Client, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(s.CA)) {
		return nil, fmt.Errorf("session file %s holds no CA for profile %s; log in again", f.sessionFile, name)
	}
	c := apiclient.NewMulti(s.controllers(), roots, nil)
	c.Prefer(s.URL)
	c.Token = s.Token
	c.OnChange(func(current string, urls []string) { f.remember(name, s.Token, current, urls) })
	return c, nil
}

// remember keeps, with the login of profile name (when it is still the one of token), the
// controller that answered last and the controllers learned, so that the next command
// starts there. A failure to write is not the command's: it is logged.
func (f *edgeFlags) remember(name, token, current string, urls []string) {
	logins, err := loadLogins(f.sessionFile)
	if err != nil {
		slog.Debug("keep the controllers of the login", "err", err)
		return
	}
	s, ok := logins.Profiles[name]
	if !ok || s.Token != token {
		return
	}
	s.URL = current
	if len(urls) > 1 {
		s.URLs = urls
	}
	logins.Profiles[name] = s
	if err := logins.save(f.sessionFile); err != nil {
		slog.Debug("keep the controllers of the login", "err", err)
	}
}

func (f *edgeFlags) checkOutput() error {
	return checkFormat(f.output, "text", "json")
}

func enrollmentJWT(detail map[string]any) string {
	en, _ := detail["enrollment"].(map[string]any)
	for _, m := range []string{"ott", "updb", "ottca"} {
		if e, ok := en[m].(map[string]any); ok {
			if s, ok := e["jwt"].(string); ok {
				return s
			}
		}
	}
	return ""
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
