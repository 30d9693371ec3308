package main

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/controlplane/edgeclient"
)

// edgeSession is what `zmesh edge login` keeps between commands.
type edgeSession struct {
	URL      string `json:"url"`
	Token    string `json:"token"`
	Username string `json:"username"`
	CA       string `json:"ca"` // PEM of the CAs trusted for this controller
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
	output      string
}

func newEdgeCommand() *cobra.Command {
	f := &edgeFlags{}
	cmd := &cobra.Command{Use: "edge", Short: "Administer a network through the controller's management API"}
	cmd.PersistentFlags().StringVar(&f.sessionFile, "session-file", defaultSessionFile(), "where the login session is kept")
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(newEdgeLoginCommand(f), newEdgeCreateCommand(f), newEdgeListCommand(f), newEdgeGetCommand(f), newEdgeDeleteCommand(f))
	return cmd
}

func newEdgeLoginCommand(f *edgeFlags) *cobra.Command {
	var username, password string
	var yes bool
	cmd := &cobra.Command{
		Use:   "login URL --username U --password P",
		Short: "Log in to a controller and keep the session for later commands",
		Long: "Log in to the controller at URL (https://host:port). The controller's CA is fetched from its\n" +
			"EST endpoint and trusted after its fingerprint is shown and confirmed (or --yes).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(args[0])
			if err != nil || u.Scheme != "https" || u.Host == "" {
				return fmt.Errorf("%q is not a controller URL such as https://ctrl.example.com:1280", args[0])
			}
			base := "https://" + u.Host
			leaf, err := edgeclient.ServerCertificate(cmd.Context(), u.Host)
			if err != nil {
				return err
			}
			cas, err := edgeclient.FetchCAs(cmd.Context(), edgeclient.PinnedClient(base, leaf))
			if err != nil {
				return err
			}
			roots := x509.NewCertPool()
			var caPEM bytes.Buffer
			for _, c := range cas {
				roots.AddCert(c)
				pem.Encode(&caPEM, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: u.Hostname()}); err != nil {
				return fmt.Errorf("the controller's certificate is not valid for %s under the CAs it serves: %w", u.Hostname(), err)
			}
			out := cmd.ErrOrStderr()
			for _, c := range cas {
				fmt.Fprintf(out, "controller CA %q, SHA-1 fingerprint %s\n", c.Subject.CommonName, edgeclient.Fingerprint(c))
			}
			if !yes {
				fmt.Fprint(out, "trust this CA for "+base+"? [y/N] ")
				answer, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return errors.New("login cancelled: the CA was not trusted")
				}
			}
			if password == "" {
				if password, err = askPassword(cmd, "password for "+username+": "); err != nil {
					return err
				}
			}
			client := edgeclient.New(base, roots, nil)
			sess, err := client.AuthenticatePassword(cmd.Context(), username, password)
			if err != nil {
				return err
			}
			if err := saveSession(f.sessionFile, edgeSession{URL: base, Token: sess.Token, Username: username, CA: caPEM.String()}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s as %s\n", base, username)
			return nil
		},
	}
	cmd.Flags().StringVarP(&username, "username", "u", "", "username")
	cmd.Flags().StringVarP(&password, "password", "p", "", "password; asked for when absent")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "trust the controller's CA without asking")
	cmd.MarkFlagRequired("username")
	return cmd
}

func saveSession(path string, s edgeSession) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// client returns a management client with the saved session.
func (f *edgeFlags) client() (*edgeclient.Client, error) {
	data, err := os.ReadFile(f.sessionFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("not logged in: run zmesh edge login URL --username U first")
	}
	if err != nil {
		return nil, err
	}
	var s edgeSession
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("session file %s: %w", f.sessionFile, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(s.CA)) {
		return nil, fmt.Errorf("session file %s holds no CA; log in again", f.sessionFile)
	}
	c := edgeclient.New(s.URL, roots, nil)
	c.Token = s.Token
	return c, nil
}

func (f *edgeFlags) checkOutput() error {
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("--output %q is not allowed; allowed: text, json", f.output)
	}
	return nil
}

// collection maps the CLI's entity names to API collections.
func collection(kind string) (string, error) {
	switch kind {
	case "identity", "identities":
		return "identities", nil
	}
	return "", fmt.Errorf("%q is not an entity type; allowed: identity", kind)
}

func newEdgeCreateCommand(f *edgeFlags) *cobra.Command {
	var typ, updb, ottca, jwtOut string
	var admin, ott bool
	var roles []string
	cmd := &cobra.Command{
		Use:   "create identity NAME [--ott | --updb USERNAME | --ottca CA-ID] [--jwt-output FILE]",
		Short: "Create an identity",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.checkOutput(); err != nil {
				return err
			}
			if _, err := collection(args[0]); err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			body := map[string]any{"name": args[1], "type": typ, "isAdmin": admin}
			if len(roles) > 0 {
				body["roleAttributes"] = roles
			}
			switch {
			case ott:
				body["enrollment"] = map[string]any{"ott": true}
			case updb != "":
				body["enrollment"] = map[string]any{"updb": updb}
			case ottca != "":
				body["enrollment"] = map[string]any{"ottca": ottca}
			}
			var created struct {
				ID string `json:"id"`
			}
			if _, err := c.Do(cmd.Context(), "POST", edgeclient.ManagementAPI+"/identities", body, &created); err != nil {
				return err
			}
			var detail map[string]any
			if _, err := c.Do(cmd.Context(), "GET", edgeclient.ManagementAPI+"/identities/"+created.ID, nil, &detail); err != nil {
				return err
			}
			if jwtOut != "" {
				token := enrollmentJWT(detail)
				if token == "" {
					return errors.New("the identity has no enrollment; --jwt-output needs --ott, --updb or --ottca")
				}
				if err := os.WriteFile(jwtOut, []byte(token), 0o600); err != nil {
					return err
				}
			}
			if f.output == "json" {
				return printJSON(cmd, detail)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created identity %s (%s)\n", args[1], created.ID)
			if jwtOut != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "enrollment token written to %s\n", jwtOut)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "Default", "identity type: User, Device, Service, Router, Default")
	cmd.Flags().BoolVar(&admin, "admin", false, "make the identity an administrator")
	cmd.Flags().BoolVar(&ott, "ott", false, "enroll with a one-time token and a certificate of the network")
	cmd.Flags().StringVar(&updb, "updb", "", "enroll with a one-time token that sets a password for this username")
	cmd.Flags().StringVar(&ottca, "ottca", "", "enroll with a one-time token and a certificate of this CA")
	cmd.Flags().StringVar(&jwtOut, "jwt-output", "", "write the enrollment token to this file")
	cmd.Flags().StringSliceVar(&roles, "role-attributes", nil, "role attributes")
	cmd.MarkFlagsMutuallyExclusive("ott", "updb", "ottca")
	return cmd
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

func newEdgeListCommand(f *edgeFlags) *cobra.Command {
	var filter string
	cmd := &cobra.Command{
		Use:   "list identities [--filter FILTER]",
		Short: "List identities",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.checkOutput(); err != nil {
				return err
			}
			coll, err := collection(args[0])
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if filter != "" {
				q.Set("filter", filter)
			}
			var items []map[string]any
			page, err := c.Do(cmd.Context(), "GET", edgeclient.ManagementAPI+"/"+coll+"?"+q.Encode(), nil, &items)
			if err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd, items)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTYPE\tADMIN")
			for _, it := range items {
				fmt.Fprintf(tw, "%v\t%v\t%v\t%v\n", it["id"], it["name"], it["typeId"], it["isAdmin"])
			}
			if page != nil {
				fmt.Fprintf(tw, "(%d of %d shown)\n", len(items), page.TotalCount)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&filter, "filter", "", `filter, e.g. name contains "lap" sort by name limit 50`)
	return cmd
}

// resolve turns a name into an id, leaving ids as they are.
func resolve(cmd *cobra.Command, c *edgeclient.Client, coll, nameOrID string) (string, error) {
	var items []struct {
		ID string `json:"id"`
	}
	q := url.Values{"filter": {fmt.Sprintf("id = %q or name = %q", nameOrID, nameOrID)}}
	if _, err := c.Do(cmd.Context(), "GET", edgeclient.ManagementAPI+"/"+coll+"?"+q.Encode(), nil, &items); err != nil {
		return "", err
	}
	if len(items) != 1 {
		return "", fmt.Errorf("no single %s is named or has id %q (%d match)", strings.TrimSuffix(coll, "ies")+"y", nameOrID, len(items))
	}
	return items[0].ID, nil
}

func newEdgeGetCommand(f *edgeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get identity NAME|ID",
		Short: "Show an identity",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.checkOutput(); err != nil {
				return err
			}
			coll, err := collection(args[0])
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			id, err := resolve(cmd, c, coll, args[1])
			if err != nil {
				return err
			}
			var detail map[string]any
			if _, err := c.Do(cmd.Context(), "GET", edgeclient.ManagementAPI+"/"+coll+"/"+id, nil, &detail); err != nil {
				return err
			}
			if f.output == "json" {
				return printJSON(cmd, detail)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, k := range []string{"id", "name", "typeId", "isAdmin", "externalId", "roleAttributes", "hasApiSession", "createdAt"} {
				fmt.Fprintf(tw, "%s\t%v\n", k, detail[k])
			}
			return tw.Flush()
		},
	}
}

func newEdgeDeleteCommand(f *edgeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete identity NAME|ID",
		Short: "Delete an identity and everything that belongs to it alone",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			coll, err := collection(args[0])
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			id, err := resolve(cmd, c, coll, args[1])
			if err != nil {
				return err
			}
			if _, err := c.Do(cmd.Context(), "DELETE", edgeclient.ManagementAPI+"/"+coll+"/"+id, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s %s\n", args[0], id)
			return nil
		},
	}
}
