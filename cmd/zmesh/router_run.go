package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/dataplane"
)

func newRouterRunCommand(lookupEnv env, sigs signals) *cobra.Command {
	var file, ctrlFile string
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "run ROUTER.yml [--controller CONTROLLER.yml]",
		Short: "Run an enrolled router",
		Long: "Run the router ROUTER.yml (or --config) describes until SIGINT, SIGTERM or SIGQUIT: it\n" +
			"connects to its controller, links with the other routers and carries circuits. SIGHUP\n" +
			"reloads what can change while it runs (the log level, the proxy tunnel's services) and\n" +
			"names the changes that wait for the next start. With --controller the controller runs in\n" +
			"the same process, exactly as `zmesh controller run` would run it.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, setup, err := runSetup(cmd, args, file, lf, lookupEnv)
			if err != nil {
				return err
			}
			cfg, dlog, err := loadDaemonFile(setup, "router", file, lookupEnv, config.LoadRouter,
				func(c *config.Router) config.Log { return c.Log })
			log := dlog.Logger
			if err != nil {
				return err
			}
			var ccfg *config.Controller
			if ctrlFile != "" {
				var warnings []config.Diagnostic
				ccfg, warnings, err = config.LoadController(ctrlFile, lookupEnv)
				logWarnings(log, "controller", ctrlFile, warnings)
				if err != nil {
					return err
				}
			}
			var router atomic.Pointer[dataplane.Router]
			var ctrl atomic.Pointer[controlplane.Controller]
			reload := func() {
				newCfg, warnings, err := config.LoadRouter(file, lookupEnv)
				logWarnings(log, "router", file, warnings)
				if err != nil {
					log.Error("reload: "+file+" not applied; the router runs on unchanged", "err", err)
				} else {
					dlog.reload(file, newCfg.Log)
					applied := []string{"log.level"}
					if r := router.Load(); r != nil {
						done, err := r.Reload(newCfg)
						if err != nil {
							log.Error("reload: "+file+" applied in part", "err", err)
						}
						applied = append(applied, done...)
					}
					reportChanges(log, file, cfg, newCfg, applied)
				}
				if ccfg != nil {
					// The router's file decides the process's logs: the controller's log
					// section is not read in this process.
					reloadController(log, ctrlFile, lookupEnv, ccfg, ctrl.Load(), nil, []string{"log"})
				}
			}
			d := daemonRun{log: log, stderr: cmd.ErrOrStderr(), sigs: sigs, reload: reload}
			return d.run(cmd.Context(), func(ctx context.Context, ready func()) error {
				return runRouter(ctx, cmd, log, file, cfg, ccfg, &router, &ctrl, ready)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "router configuration file, instead of the argument")
	cmd.Flags().StringVar(&ctrlFile, "controller", "", "run the controller of this configuration file in the same process")
	lf.register(cmd.Flags())
	return markDaemon(cmd)
}

// runRouter runs the router of cfg, and the controller of ccfg in the same process when it is
// not nil, until ctx ends; router and ctrl are set once they exist, for reloads; ready is
// called once the router is ready.
func runRouter(ctx context.Context, cmd *cobra.Command, log *slog.Logger, file string, cfg *config.Router, ccfg *config.Controller,
	router *atomic.Pointer[dataplane.Router], ctrlRef *atomic.Pointer[controlplane.Controller], ready func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var ctrlErr error
	var ctrl *controlplane.Controller
	if ccfg != nil {
		var err error
		if ctrl, err = controlplane.Open(ccfg, log.With("role", "controller"), controlplane.Build{Version: version}); err != nil {
			return err
		}
		ctrlRef.Store(ctrl)
		listening := make(chan struct{})
		wg.Go(func() {
			ctrlErr = ctrl.Run(ctx, func(addr net.Addr) {
				fmt.Fprintf(cmd.OutOrStdout(), "controller API at https://%s (listening on %s), data in %s\n", ccfg.API.Advertise, addr, ccfg.DataDir)
				close(listening)
			})
			cancel() // the router does not outlive its co-located controller
		})
		select {
		case <-listening:
		case <-ctx.Done():
			wg.Wait()
			return ctrlErr
		}
	}
	r, err := dataplane.New(cfg, version, log.With("role", "router"))
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	if ctrl != nil {
		r.ConnectLocally(ctrl.ConnectLocal) // the co-located control channel skips TLS
	}
	router.Store(r)
	go func() {
		select {
		case <-r.Ready():
			fmt.Fprintf(cmd.OutOrStdout(), "router %s running (%s)\n", r.ID(), file)
			for _, w := range cfg.Web {
				var apis []string
				for _, a := range w.APIs {
					apis = append(apis, "/"+a.Binding)
				}
				for _, bp := range w.BindPoints {
					fmt.Fprintf(cmd.OutOrStdout(), "web listener %s at https://%s (listening on %s): %s\n", w.Name, bp.Address, bp.Interface, strings.Join(apis, ", "))
				}
			}
			ready()
		case <-ctx.Done():
		}
	}()
	err = r.Run(ctx)
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	return ctrlErr
}
