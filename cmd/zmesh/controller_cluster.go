package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/pki"
)

// newControllerClusterCommand groups the commands of a controller's cluster membership.
// They reach the controller running on the data directory of --config through its socket
// <dataDir>/cluster.sock: a controller that is not a member yet cannot open API sessions,
// and init is what creates the administrator.
func newControllerClusterCommand(lookupEnv env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Manage the cluster of controllers a running controller belongs to",
		Long: "Manage the cluster of the controller described by --config (its file has a cluster\n" +
			"section), through the socket <dataDir>/cluster.sock of the running controller: run them\n" +
			"as the user the controller runs as. import-ca works on a stopped controller's files.",
	}
	type op struct {
		use, short, long string
		args             cobra.PositionalArgs
		req              func(args []string) controlplane.ClusterRequest
	}
	ops := []op{
		{"init", "Make this controller the first member of a new cluster",
			"Bootstrap the running controller, which has a cluster section and no raft state, as a\n" +
				"cluster of one, and create in it the built-in config types and the default\n" +
				"administrator (admin.username, admin.password). A controller that was a single\n" +
				"controller keeps its records, and the members added later receive them.",
			cobra.NoArgs, func([]string) controlplane.ClusterRequest { return controlplane.ClusterRequest{Op: "init"} }},
		{"add API_ADDRESS", "Add the controller whose API is at API_ADDRESS to the cluster",
			"On the leader: read the new member's id and raft address from its API (API_ADDRESS, its\n" +
				"api.advertise; both ends present their controller certificate of the network's CA), add\n" +
				"it as a voter and record its addresses. The new member must run, with a cluster section\n" +
				"and the network's CA imported before its first start (import-ca).",
			cobra.ExactArgs(1), func(a []string) controlplane.ClusterRequest { return controlplane.ClusterRequest{Op: "add", Arg: a[0]} }},
		{"remove ID", "Remove the member ID from the cluster",
			"On the leader: remove the member ID from the cluster's configuration and its record.",
			cobra.ExactArgs(1), func(a []string) controlplane.ClusterRequest {
				return controlplane.ClusterRequest{Op: "remove", Arg: a[0]}
			}},
		{"list", "List the cluster's members",
			"List the members as this controller knows them: id, raft address, API address,\n" +
				"whether it votes and which one leads.",
			cobra.NoArgs, func([]string) controlplane.ClusterRequest { return controlplane.ClusterRequest{Op: "list"} }},
		{"transfer-leadership [ID]", "Hand the leadership to the member ID, or to the readiest follower",
			"On the leader: hand the leadership to the member ID, or without ID to the follower\n" +
				"most up to date, and return once it leads.",
			cobra.MaximumNArgs(1), func(a []string) controlplane.ClusterRequest {
				r := controlplane.ClusterRequest{Op: "transfer-leadership"}
				if len(a) == 1 {
					r.Arg = a[0]
				}
				return r
			}},
	}
	for _, o := range ops {
		var file string
		sub := &cobra.Command{
			Use: o.use, Short: o.short, Long: o.long, Args: o.args,
			RunE: func(cmd *cobra.Command, args []string) error {
				log, err := newLogger(cmd.ErrOrStderr(), logFlags{}, lookupEnv)
				if err != nil {
					return err
				}
				cfg, err := loadClusterConfig(file, lookupEnv, log)
				if err != nil {
					return err
				}
				ms, err := controlplane.RunClusterCommand(cmd.Context(), cfg.DataDir, o.req(args))
				if err != nil {
					return err
				}
				printMembers(cmd.OutOrStdout(), ms)
				return nil
			},
		}
		sub.Flags().StringVarP(&file, "config", "c", "", "the controller's configuration file")
		sub.MarkFlagRequired("config")
		cmd.AddCommand(sub)
	}
	cmd.AddCommand(newControllerImportCACommand(lookupEnv), newControllerRecoverCommand(lookupEnv))
	return cmd
}

// loadClusterConfig loads the controller configuration file, logging its warnings, and
// refuses one without a cluster section.
func loadClusterConfig(file string, lookupEnv env, log *slog.Logger) (*config.Controller, error) {
	cfg, warnings, err := config.LoadController(file, lookupEnv)
	logWarnings(log, "controller", file, warnings)
	if err != nil {
		return nil, err
	}
	if cfg.Cluster == nil {
		return nil, fmt.Errorf("%s has no cluster section: add one (see docs/controller-config.md#cluster) and restart the controller", file)
	}
	return cfg, nil
}

func printMembers(w io.Writer, ms []controlplane.MemberStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tAPI ADDRESS\tCTRL ADDRESS\tVOTER\tLEADER")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%t\n", m.ID, m.RaftAddress, m.APIAddress, m.CtrlAddress, m.Voter, m.Leader)
	}
	tw.Flush()
}

func newControllerImportCACommand(lookupEnv env) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "import-ca --config FILE CA_CERT CA_KEY",
		Short: "Install the network's CA into a new member's data directory before its first start",
		Long: "Copy the network's CA (ca.cert and ca.key of the first member's <dataDir>/pki) into the\n" +
			"pki directory of the controller FILE describes, before its first start: the members\n" +
			"share the CA. The key is written 0600; the command refuses a data directory that has a\n" +
			"CA already, and a CA the controller would not open: not one CA certificate, expired, or\n" +
			"a key that is not the certificate's. Copy the key between hosts over a channel you\n" +
			"trust (scp), and delete the copy afterwards.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logFlags{}, lookupEnv)
			if err != nil {
				return err
			}
			cfg, err := loadClusterConfig(file, lookupEnv, log)
			if err != nil {
				return err
			}
			dir := filepath.Join(cfg.DataDir, "pki")
			if err := controlplane.ImportCA(dir, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "the network's CA is in %s (%s, %s); start the controller, then add it from a member\n", dir, pki.CACertFile, pki.CAKeyFile)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "the new member's configuration file")
	cmd.MarkFlagRequired("config")
	return cmd
}

func newControllerRecoverCommand(lookupEnv env) *cobra.Command {
	var file string
	var dryRun bool
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "recover --config FILE",
		Short: "Make the one survivor of a cluster that lost its quorum a cluster of itself alone",
		Long: "When a majority of the members is lost for good, the cluster has no leader and takes no\n" +
			"write. Run this on the stopped controller FILE describes, one survivor: every entry of\n" +
			"its raft log is applied to its store and its raft configuration is rewritten to hold it\n" +
			"alone. Started again, it leads; add new members to it from empty data directories. Do\n" +
			"not start the other old members again. Writes only the lost members held are lost, and\n" +
			"entries this member held that the cluster had not committed are kept. With several\n" +
			"survivors, run it with --dry-run on each and recover the one whose last entry has the\n" +
			"highest term, then index. The store and the raft directory are copied aside first, to\n" +
			"<dataDir>/before-recover-<time>-<random>. A lost member must not come back on its old\n" +
			"directories: add it again from empty ones.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), lf, lookupEnv)
			if err != nil {
				return err
			}
			cfg, err := loadClusterConfig(file, lookupEnv, log)
			if err != nil {
				return err
			}
			r, err := controlplane.RecoverMember(cfg, log, dryRun)
			out := cmd.OutOrStdout()
			if len(r.Members) > 0 || r.LastIndex > 0 {
				fmt.Fprintf(out, "member %s: last log entry %d (term %d), store applied up to %d\n", cfg.Cluster.ID, r.LastIndex, r.LastTerm, r.AppliedIndex)
				fmt.Fprintln(out, "configuration found:")
				for _, m := range r.Members {
					fmt.Fprintf(out, "  %s at %s (voter: %t)\n", m.ID, m.Address, m.Voter)
				}
			}
			if err != nil {
				return err
			}
			if dryRun {
				return nil
			}
			fmt.Fprintf(out, "recovered: %s is a cluster of itself alone; the store and the raft state as they were are in %s\n", cfg.Cluster.ID, r.Aside)
			fmt.Fprintln(out, "start the controller, then add new members from empty data directories (zmesh controller cluster add)")
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "the controller's configuration file")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only show the member's raft state: its last entry and configuration")
	lf.register(cmd.Flags())
	cmd.MarkFlagRequired("config")
	return cmd
}
