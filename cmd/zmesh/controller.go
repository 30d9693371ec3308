package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
)

func newControllerRunCommand(lookupEnv env) *cobra.Command {
	var file string
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "run CONTROLLER.yml",
		Short: "Run a standalone controller",
		Long: "Run the controller CONTROLLER.yml (or --config) describes until interrupted. The first start\n" +
			"creates the data directory, the store, the CA, the API's server certificate and the default\n" +
			"administrator; later starts reuse them.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, log, err := runSetup(cmd, args, file, lf, lookupEnv)
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
	lf.register(cmd.Flags())
	return cmd
}
