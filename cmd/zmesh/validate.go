package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/zmesh/zmesh/config"
)

// loader loads one kind of configuration file and returns its effective configuration.
type loader func(path string, lookupEnv env) (any, []config.Diagnostic, error)

func loadRouter(path string, lookupEnv env) (any, []config.Diagnostic, error) {
	return config.LoadRouter(path, lookupEnv)
}

func loadController(path string, lookupEnv env) (any, []config.Diagnostic, error) {
	return config.LoadController(path, lookupEnv)
}

func newValidateCommand(kind string, lookupEnv env, load loader) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "validate [--output yaml|json] FILE",
		Short: "Check a " + kind + " configuration file and print its effective configuration",
		Long: "Check a " + kind + " configuration file. When it is valid, print the effective configuration\n" +
			"(every default filled in, the file's key names) and exit 0; otherwise print every error\n" +
			"with its file, line and key, and exit 1. A key the file may not have (a typo) is an error.\n" +
			"Warnings go to stderr and do not change the exit code.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "yaml", "json"); err != nil {
				return err
			}
			cfg, warnings, err := load(args[0], lookupEnv)
			warnings, err = config.Strict(warnings, err)
			for _, w := range warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			if err != nil {
				var errs config.Errors
				if !errors.As(err, &errs) {
					return err
				}
				for _, d := range errs {
					fmt.Fprintf(cmd.ErrOrStderr(), "error: %s\n", d)
				}
				return reportedError{fmt.Sprintf("%s: %d errors", args[0], len(errs))}
			}
			return printConfig(cmd, output, cfg)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "format of the effective configuration: yaml or json")
	return cmd
}

func printConfig(cmd *cobra.Command, output string, cfg any) error {
	out := cmd.OutOrStdout()
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(cfg)
	}
	enc := yaml.NewEncoder(out)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	return enc.Close()
}

// logWarnings logs the warnings of a configuration file at WARN. Unknown keys, which
// validate refuses, are ignored here so that a file of another version still runs; they are
// logged loudly, with a closing line that names the validate command that fails on them.
func logWarnings(log *slog.Logger, kind, file string, warnings []config.Diagnostic) {
	for _, w := range warnings {
		if w.UnknownKey {
			log.Warn(w.String() + "; ignored")
			continue
		}
		log.Warn(w.String())
	}
	if n := config.CountUnknownKeys(warnings); n > 0 {
		keys := "keys"
		if n == 1 {
			keys = "key"
		}
		log.Warn(fmt.Sprintf("%s: %d unknown %s ignored; `zmesh %s validate %s` fails on this file", file, n, keys, kind, file))
	}
}
