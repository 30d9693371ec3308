package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
)

func newControllerRunCommand(lookupEnv env, sigs signals) *cobra.Command {
	var file string
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "run CONTROLLER.yml",
		Short: "Run a standalone controller",
		Long: "Run the controller CONTROLLER.yml (or --config) describes until SIGINT, SIGTERM or SIGQUIT.\n" +
			"The first start creates the data directory, the store, the CA, the API's server certificate\n" +
			"and the default administrator; later starts reuse them. SIGHUP reloads the log level and the\n" +
			"web listeners' certificate and names the changes that wait for the next start.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, setup, err := runSetup(cmd, args, file, lf, lookupEnv)
			if err != nil {
				return err
			}
			cfg, dlog, err := loadDaemonFile(setup, "controller", file, lookupEnv, config.LoadController,
				func(c *config.Controller) config.Log { return c.Log })
			log := dlog.Logger
			if err != nil {
				return err
			}
			var opened atomic.Pointer[controlplane.Controller]
			d := daemonRun{log: log, stderr: cmd.ErrOrStderr(), sigs: sigs, reload: func() {
				reloadController(log, file, lookupEnv, cfg, opened.Load(), dlog, []string{"log.level"})
			}}
			return d.run(cmd.Context(), func(ctx context.Context, ready func()) error {
				// Opened under the daemon's signals: a stop while the store opens still
				// closes it.
				ctrl, err := controlplane.Open(cfg, log, controlplane.Build{Version: version})
				if err != nil {
					return err
				}
				opened.Store(ctrl)
				return ctrl.Run(ctx, func(addr net.Addr) {
					fmt.Fprintf(cmd.OutOrStdout(), "controller API at https://%s (listening on %s), data in %s\n", cfg.API.Advertise, addr, cfg.DataDir)
					ready()
				})
			})
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "controller configuration file, instead of the argument")
	lf.register(cmd.Flags())
	return markDaemon(cmd)
}

// reloadController reads the controller's file again and applies what can change while it
// runs: the log level (through dlog, when the file decides the process's logs) and the web
// listeners' certificate, re-read from its files. The other changes are named, but for
// those under applied. A file that does not load changes nothing.
func reloadController(log *slog.Logger, file string, lookupEnv env, cfg *config.Controller, ctrl *controlplane.Controller, dlog *daemonLog, applied []string) {
	newCfg, warnings, err := config.LoadController(file, lookupEnv)
	logWarnings(log, "controller", file, warnings)
	if err != nil {
		log.Error("reload: "+file+" not applied; the controller runs on unchanged", "err", err)
		return
	}
	if dlog != nil {
		dlog.reload(file, newCfg.Log)
	}
	if ctrl != nil && len(cfg.Web) > 0 {
		switch changed, err := ctrl.ReloadWebCertificate(); {
		case err != nil:
			log.Error("reload: the web listeners keep their certificate", "err", err)
		case changed:
			log.Info("reload: the web listeners present the server certificate read again")
		}
	}
	reportChanges(log, file, cfg, newCfg, applied)
}
