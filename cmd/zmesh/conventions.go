package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes: 0 success, 1 a runtime failure, 2 a usage error (an unknown command or flag, a
// missing or extra argument, a value a flag does not allow).
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a command line the command cannot run; main exits with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode is the exit status for what a command returned.
func exitCode(err error) int {
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage),
		// cobra's own check of MarkFlagRequired, which runs before any hook of ours
		strings.HasPrefix(err.Error(), "required flag(s) "):
		return exitUsage
	}
	return exitFailure
}

// applyConventions makes every command of the tree under root follow the CLI's conventions:
// a bad flag or argument is a usage error; a command that only groups others shows its help
// when run alone and refuses an unknown subcommand, naming the closest ones.
func applyConventions(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.SuggestionsMinimumDistance = 2 // cobra's default, which it sets only at the root
			c.Args = unknownSubcommand
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		} else if args := c.Args; args != nil {
			c.Args = func(c *cobra.Command, a []string) error {
				err := args(c, a)
				switch {
				case err == nil:
				case strings.Contains(err.Error(), "usage:"): // says it already
					return usageError{err}
				default:
					return usageError{fmt.Errorf("%w (usage: %s)", err, c.UseLine())}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownSubcommand refuses the arguments of a command that only groups others: the first
// names no subcommand of it.
func unknownSubcommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %s?", strings.Join(s, ", "))
	}
	return usagef("%s; run '%s --help' for its commands", msg, c.CommandPath())
}

// configArg returns the configuration file of a `run` command, given as its argument or with
// --config (the same file if both).
func configArg(cmd *cobra.Command, args []string, flag string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && flag != args[0]:
		return "", usagef("two configuration files, %s and --config %s; give one (usage: %s)", args[0], flag, cmd.UseLine())
	case len(args) == 1:
		return args[0], nil
	case flag != "":
		return flag, nil
	}
	return "", usagef("no configuration file; give it as the argument or with --config (usage: %s)", cmd.UseLine())
}

// runSetup is the start of a `run` command: its configuration file (configArg) and what the
// flags and the environment say of its logs (the file's log section comes next).
func runSetup(cmd *cobra.Command, args []string, flag string, lf logFlags, lookupEnv env) (string, *logSetup, error) {
	file, err := configArg(cmd, args, flag)
	if err != nil {
		return "", nil, err
	}
	setup, err := newLogSetup(cmd.ErrOrStderr(), lf, lookupEnv)
	return file, setup, err
}

// checkFormat refuses an --output value other than those allowed.
func checkFormat(value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return usagef("--output %q is not allowed; allowed: %s", value, strings.Join(allowed, ", "))
}

// buildInfo is what `zmesh version` and `zmesh --version` print.
type buildInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func currentBuild() buildInfo {
	return buildInfo{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

// String is the text form: zmesh v0.1.0 (go1.26.8, linux/amd64).
func (b buildInfo) String() string {
	return fmt.Sprintf("zmesh %s (%s, %s/%s)", b.Version, b.Go, b.OS, b.Arch)
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output, "text", "json"); err != nil {
				return err
			}
			b := currentBuild()
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), b)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
