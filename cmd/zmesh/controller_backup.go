package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/store"
)

func newControllerBackupCommand() *cobra.Command {
	f := &edgeFlags{}
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent backup of a running controller's store to FILE",
		Long: "Stream a backup of the store of the controller logged in with zmesh edge login (an\n" +
			"administrator's session) into FILE, while the controller keeps serving: one consistent\n" +
			"snapshot, checked against its checksum before FILE is written (mode 0600). The CA and\n" +
			"certificates in the data directory's pki/ are not part of it: copy them separately.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			file := args[0]
			dir := filepath.Dir(file)
			tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".partial-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name()) // after the rename, nothing is left to remove
			if err := tmp.Chmod(0o600); err != nil {
				tmp.Close()
				return err
			}
			n, err := c.Download(cmd.Context(), "/edge/management/v1/database/backup", tmp)
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("back up the controller at %s: %w", c.Current(), err)
			}
			if err := store.CheckBackup(tmp.Name()); err != nil {
				return fmt.Errorf("the backup received from %s (%d bytes) is incomplete, %s not written: %w", c.Current(), n, file, err)
			}
			if err := os.Rename(tmp.Name(), file); err != nil {
				return err
			}
			if d, err := os.Open(dir); err == nil {
				d.Sync()
				d.Close()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup of %s (%d bytes) written to %s\n", c.Current(), n, file)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.sessionFile, "session-file", defaultSessionFile(), "where zmesh edge login keeps the session")
	f.addProfileFlag(cmd)
	return cmd
}

func newControllerRestoreCommand(lookupEnv env) *cobra.Command {
	var file string
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "restore --config FILE BACKUP",
		Short: "Replace a stopped controller's store with a backup",
		Long: "Restore BACKUP (written by zmesh controller backup) as the store of the controller\n" +
			"described by FILE. The controller must be stopped: the command takes the data\n" +
			"directory's lock and refuses while a controller holds it. The backup is checked whole\n" +
			"first, restored into a new directory, and only then is the old store moved aside to\n" +
			"db.before-restore-<time> in the data directory (nothing is deleted). A cluster member's\n" +
			"store comes from the cluster: the command refuses a FILE with a cluster section.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), lf, lookupEnv)
			if err != nil {
				return err
			}
			cfg, warnings, err := config.LoadController(file, lookupEnv)
			logWarnings(log, "controller", file, warnings)
			if err != nil {
				return err
			}
			if cfg.Cluster != nil {
				return fmt.Errorf("%s has a cluster section: a member's store comes from the cluster; restore the backup into a single controller (no cluster section), or recover from a surviving member (zmesh controller cluster recover)", file)
			}
			aside, err := controlplane.Restore(cfg.DataDir, args[0], log)
			if err != nil {
				return fmt.Errorf("restore %s: %w", args[0], err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "restored %s into %s\n", args[0], filepath.Join(cfg.DataDir, "db"))
			if aside != "" {
				fmt.Fprintf(out, "the previous store is in %s; remove it once the controller runs well\n", aside)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "controller configuration file")
	lf.register(cmd.Flags())
	cmd.MarkFlagRequired("config")
	return cmd
}
