package main

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
)

func newControllerRunCommand(lookupEnv env) *cobra.Command {
	var file string
	var logLevel string
	cmd := &cobra.Command{
		Use:   "run CONTROLLER.yml",
		Short: "Run a standalone controller",
		Long: "Run the controller CONTROLLER.yml (or --config) describes until interrupted. The first start\n" +
			"creates the data directory, the store, the CA, the API's server certificate and the default\n" +
			"administrator; later starts reuse them.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := configArg(cmd, args, file)
			if err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), logLevel)
			if err != nil {
				return err
			}
			cfg, warnings, err := config.LoadController(file, lookupEnv)
			logWarnings(log, "controller", file, warnings)
			if err != nil {
				return err
			}
			ctrl, err := controlplane.Open(cfg, log, controlplane.Build{Version: version})
			if err != nil {
				return err
			}
			return ctrl.Run(cmd.Context(), func(addr net.Addr) {
				fmt.Fprintf(cmd.OutOrStdout(), "controller API at https://%s (listening on %s), data in %s\n", cfg.API.Advertise, addr, cfg.DataDir)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "controller configuration file, instead of the argument")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return cmd
}

// newLogger returns a text logger at the named level.
func newLogger(w interface{ Write([]byte) (int, error) }, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q is not allowed; allowed: debug, info, warn, error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
