package main

import (
	"io"

	"github.com/spf13/cobra"
)

// env resolves ${VAR} references in configuration files.
type env func(string) (string, bool)

func newRootCommand(stdout, stderr io.Writer, lookupEnv env) *cobra.Command {
	return newRootCommandWith(stdout, stderr, lookupEnv, osSignals{})
}

// newRootCommandWith is newRootCommand with the signals the daemons hear (a test's own).
func newRootCommandWith(stdout, stderr io.Writer, lookupEnv env, sigs signals) *cobra.Command {
	root := &cobra.Command{
		Use:           "zmesh",
		Short:         "zmesh: a zero-trust overlay network",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newRouterCommand(lookupEnv, sigs),
		newControllerCommand(lookupEnv, sigs),
		newVersionCommand(),
		newEnrollCommand(),
		newEdgeCommand(),
		newFabricCommand(),
		newTunnelCommand(lookupEnv, sigs),
		newBenchCommand(selfExec, lookupEnv), newBenchWorkerCommand(lookupEnv),
		newQuickstartCommand(lookupEnv),
		newGenManCommand(),
	)
	root.Version = version
	root.SetVersionTemplate(currentBuild().String() + "\n")
	applyConventions(root)
	return root
}

func newRouterCommand(lookupEnv env, sigs signals) *cobra.Command {
	cmd := &cobra.Command{Use: "router", Short: "Run and check edge routers"}
	cmd.AddCommand(newValidateCommand("router", lookupEnv, loadRouter), newRouterEnrollCommand(lookupEnv), newRouterReEnrollCommand(lookupEnv),
		newRouterRunCommand(lookupEnv, sigs))
	return cmd
}

func newControllerCommand(lookupEnv env, sigs signals) *cobra.Command {
	cmd := &cobra.Command{Use: "controller", Short: "Run and check controllers"}
	cmd.AddCommand(newValidateCommand("controller", lookupEnv, loadController), newControllerRunCommand(lookupEnv, sigs))
	cmd.AddCommand(newControllerBackupCommand(), newControllerRestoreCommand(lookupEnv), newControllerClusterCommand(lookupEnv))
	return cmd
}
