package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// The session file keeps the logins of zmesh edge login side by side, each under a profile
// name, and which one the commands use. A file written before profiles existed holds one
// session alone; it reads as the profile "default".

// defaultProfile names the login of edge login without --profile when there is none yet.
const defaultProfile = "default"

// edgeLogins is the content of the session file.
type edgeLogins struct {
	Current  string                 `json:"current"`
	Profiles map[string]edgeSession `json:"profiles"`
}

// loadLogins reads the session file; a file that does not exist holds no login.
func loadLogins(path string) (*edgeLogins, error) {
	l := &edgeLogins{Profiles: map[string]edgeSession{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("session file %s: %w", path, err)
	}
	if _, old := keys["url"]; old {
		var s edgeSession
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("session file %s: %w", path, err)
		}
		l.Current, l.Profiles[defaultProfile] = defaultProfile, s
		return l, nil
	}
	if err := json.Unmarshal(data, l); err != nil {
		return nil, fmt.Errorf("session file %s: %w", path, err)
	}
	if l.Profiles == nil {
		l.Profiles = map[string]edgeSession{}
	}
	return l, nil
}

// save writes the session file (mode 0600, replaced atomically), or removes it when it
// holds no login.
func (l *edgeLogins) save(path string) error {
	if len(l.Profiles) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return writeFileInDir(path, data, 0o600)
}

// names lists the profiles in order.
func (l *edgeLogins) names() []string {
	names := make([]string, 0, len(l.Profiles))
	for n := range l.Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// notLoggedIn is the error of a command that needs a login when there is none.
func notLoggedIn() error {
	return errors.New("not logged in: run zmesh edge login URL --username U first")
}

// login returns the profile the command uses (--profile, or the current one) and its session.
func (f *edgeFlags) login() (*edgeLogins, string, edgeSession, error) {
	l, err := loadLogins(f.sessionFile)
	if err != nil {
		return nil, "", edgeSession{}, err
	}
	name := f.profile
	if name == "" {
		name = l.Current
	}
	s, ok := l.Profiles[name]
	switch {
	case ok:
		return l, name, s, nil
	case f.profile != "":
		return nil, "", edgeSession{}, l.unknown(f.profile)
	case len(l.Profiles) > 0:
		// After a logout of the current profile, others remain but none is current.
		return nil, "", edgeSession{}, fmt.Errorf("not logged in: no login is current; run zmesh edge use PROFILE (there are: %s) or zmesh edge login",
			strings.Join(l.names(), ", "))
	}
	return nil, "", edgeSession{}, notLoggedIn()
}

// unknown is the error for a profile name that the file does not hold.
func (l *edgeLogins) unknown(name string) error {
	if len(l.Profiles) == 0 {
		return fmt.Errorf("no login profile %q: %w", name, notLoggedIn())
	}
	return fmt.Errorf("no login profile %q; there are: %s", name, strings.Join(l.names(), ", "))
}

// newEdgeUseCommand builds `edge use [NAME]`: switch the login the commands use, or list them.
func newEdgeUseCommand(f *edgeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "use [PROFILE]",
		Short: "Switch to another saved login, or list them with the current one marked",
		Long: "Logins of zmesh edge login --profile NAME are kept side by side in the session file.\n" +
			"zmesh edge use NAME makes later commands use login NAME; without NAME it lists them,\n" +
			"the current one marked with *. --profile NAME on any edge command uses NAME for that\n" +
			"command alone.",
		Args: argCount(0, 1),
		ValidArgsFunction: func(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			l, err := loadLogins(f.sessionFile)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []string
			for _, n := range l.names() {
				if strings.HasPrefix(n, prefix) {
					out = append(out, n)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := loadLogins(f.sessionFile)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return printLogins(cmd, f.output, l)
			}
			name := args[0]
			if _, ok := l.Profiles[name]; !ok {
				return l.unknown(name)
			}
			l.Current = name
			if err := l.save(f.sessionFile); err != nil {
				return err
			}
			s := l.Profiles[name]
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "using login %s: %s as %s\n", name, s.URL, s.Username)
			return err
		},
	}
}

// printLogins lists the saved logins, without their tokens.
func printLogins(cmd *cobra.Command, output string, l *edgeLogins) error {
	type entry struct {
		Name     string   `json:"name"`
		URL      string   `json:"url"`
		URLs     []string `json:"urls,omitempty"` // every controller, when several
		Username string   `json:"username"`
		Current  bool     `json:"current"`
	}
	entries := make([]entry, 0, len(l.Profiles))
	for _, n := range l.names() {
		p := l.Profiles[n]
		entries = append(entries, entry{n, p.URL, p.URLs, p.Username, n == l.Current})
	}
	if output == "json" {
		return printJSON(cmd, struct {
			Data []entry  `json:"data"`
			Meta struct{} `json:"meta"`
		}{Data: entries})
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintln(cmd.ErrOrStderr(), "no saved logins: run zmesh edge login URL --username U [--profile NAME]")
		return err
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tPROFILE\tURL\tUSERNAME")
	for _, e := range entries {
		mark := ""
		if e.Current {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, e.Name, e.URL, e.Username)
	}
	return tw.Flush()
}
