package main

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"
)

// identityVerb is the parent of a verb that applies to identities only (disable, enable).
func identityVerb(verb, short string, sub *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   verb + " identity NAME|ID",
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s needs an entity type; allowed: identity", verb)
			}
			return fmt.Errorf("%q is not an entity type %s applies to; allowed: identity", args[0], verb)
		},
	}
	cmd.AddCommand(sub)
	return cmd
}

// identityCommand is `VERB identity NAME|ID`: it resolves the identity and runs run with its
// name as given and id, then shows the identity (as JSON with -o json) or the line run
// returns.
func (f *edgeFlags) identityCommand(short string, run func(e *edgeCall, name, id string) (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:               "identity NAME|ID",
		Aliases:           []string{"identities"},
		Short:             short,
		Args:              argCount(1, 1),
		ValidArgsFunction: f.completeNames("identities"),
		RunE: func(cmd *cobra.Command, pos []string) error {
			e, err := f.call(cmd)
			if err != nil {
				return err
			}
			id, err := e.resolve("identities", pos[0])
			if err != nil {
				return err
			}
			done, err := run(e, pos[0], id)
			if err != nil {
				return err
			}
			if f.output == "json" {
				var d map[string]any
				if _, err := e.do("GET", "/identities/"+url.PathEscape(id), nil, &d); err != nil {
					return err
				}
				return printJSON(cmd, d)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), done)
			return err
		},
	}
}

// newEdgeDisableCommand builds `edge disable identity NAME|ID [--duration-minutes N]`.
func newEdgeDisableCommand(f *edgeFlags) *cobra.Command {
	var minutes int64
	sub := f.identityCommand("Disable an identity: its API sessions end and it cannot log in or enroll",
		func(e *edgeCall, name, id string) (string, error) {
			if _, err := e.do("POST", "/identities/"+url.PathEscape(id)+"/disable", map[string]int64{"durationMinutes": minutes}, nil); err != nil {
				return "", err
			}
			if minutes == 0 {
				return fmt.Sprintf("disabled identity %s (%s) until enabled", name, id), nil
			}
			return fmt.Sprintf("disabled identity %s (%s) for %d minutes", name, id, minutes), nil
		})
	sub.Flags().Int64Var(&minutes, "duration-minutes", 0, "minutes the identity stays disabled; 0: until enabled")
	return identityVerb("disable", "Disable an identity", sub)
}

// newEdgeEnableCommand builds `edge enable identity NAME|ID`.
func newEdgeEnableCommand(f *edgeFlags) *cobra.Command {
	sub := f.identityCommand("Enable a disabled identity", func(e *edgeCall, name, id string) (string, error) {
		if _, err := e.do("POST", "/identities/"+url.PathEscape(id)+"/enable", nil, nil); err != nil {
			return "", err
		}
		return fmt.Sprintf("enabled identity %s (%s)", name, id), nil
	})
	return identityVerb("enable", "Enable a disabled identity", sub)
}
