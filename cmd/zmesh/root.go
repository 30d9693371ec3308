package main

import (
	"io"

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
		newTunnelCommand(lookupEnv),
		newBenchCommand(selfExec, lookupEnv), newBenchWorkerCommand(lookupEnv),
		newQuickstartCommand(lookupEnv),
		newGenManCommand(),
	)
	root.Version = version
	root.SetVersionTemplate(currentBuild().String() + "\n")
	applyConventions(root)
	return root
}

func newRouterCommand(lookupEnv env) *cobra.Command {
	cmd := &cobra.Command{Use: "router", Short: "Run and check edge routers"}
	cmd.AddCommand(newValidateCommand("router", lookupEnv, loadRouter), newRouterEnrollCommand(lookupEnv), newRouterReEnrollCommand(lookupEnv),
		newRouterRunCommand(lookupEnv))
	return cmd
}

func newControllerCommand(lookupEnv env) *cobra.Command {
	cmd := &cobra.Command{Use: "controller", Short: "Run and check controllers"}
	cmd.AddCommand(newValidateCommand("controller", lookupEnv, loadController), newControllerRunCommand(lookupEnv))
	cmd.AddCommand(newControllerBackupCommand(), newControllerRestoreCommand(lookupEnv))
	return cmd
}
