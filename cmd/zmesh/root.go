package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
)

// env resolves ${VAR} references in configuration files.
type env func(string) (string, bool)

func newRootCommand(stdout, stderr io.Writer, lookupEnv env) *cobra.Command {
	root := &cobra.Command{
		Use:           "zmesh",
		Short:         "zmesh: a zero-trust overlay network",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newRouterCommand(lookupEnv),
		newControllerCommand(lookupEnv),
		newVersionCommand(),
		newEnrollCommand(),
		newEdgeCommand(),
		newFabricCommand(),
		newTunnelCommand(),
		newBenchCommand(selfExec), newBenchWorkerCommand(),
		newQuickstartCommand(),
	)
	return root
}

func newRouterCommand(lookupEnv env) *cobra.Command {
	cmd := &cobra.Command{Use: "router", Short: "Run and check edge routers"}
	cmd.AddCommand(newValidateCommand("router", lookupEnv, loadRouter), newRouterEnrollCommand(lookupEnv), newRouterRunCommand(lookupEnv))
	return cmd
}

func newControllerCommand(lookupEnv env) *cobra.Command {
	cmd := &cobra.Command{Use: "controller", Short: "Run and check controllers"}
	cmd.AddCommand(newValidateCommand("controller", lookupEnv, loadController), newControllerRunCommand(lookupEnv))
	cmd.AddCommand(newControllerBackupCommand(), newControllerRestoreCommand(lookupEnv))
	return cmd
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "zmesh %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
