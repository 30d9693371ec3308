package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/dataplane"
)

func newRouterRunCommand(lookupEnv env) *cobra.Command {
	var file, ctrlFile string
	var lf logFlags
	cmd := &cobra.Command{
		Use:   "run ROUTER.yml [--controller CONTROLLER.yml]",
		Short: "Run an enrolled router",
		Long: "Run the router ROUTER.yml (or --config) describes until interrupted (SIGINT or SIGTERM): it\n" +
			"connects to its controller, links with the other routers and carries circuits. With\n" +
			"--controller the controller runs in the same process, exactly as `zmesh controller run`\n" +
			"would run it.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, log, err := runSetup(cmd, args, file, lf, lookupEnv)
			if err != nil {
				return err
			}
			cfg, warnings, err := config.LoadRouter(file, lookupEnv)
			logWarnings(log, "router", file, warnings)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var wg sync.WaitGroup
			var ctrlErr error
			var ctrl *controlplane.Controller
			if ctrlFile != "" {
				ccfg, warnings, err := config.LoadController(ctrlFile, lookupEnv)
				logWarnings(log, "controller", ctrlFile, warnings)
				if err != nil {
					return err
				}
				if ctrl, err = controlplane.Open(ccfg, log.With("role", "controller"), controlplane.Build{Version: version}); err != nil {
					return err
				}
				ready := make(chan struct{})
				wg.Go(func() {
					ctrlErr = ctrl.Run(ctx, func(addr net.Addr) {
						fmt.Fprintf(cmd.OutOrStdout(), "controller API at https://%s (listening on %s), data in %s\n", ccfg.API.Advertise, addr, ccfg.DataDir)
						close(ready)
					})
					cancel() // the router does not outlive its co-located controller
				})
				select {
				case <-ready:
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
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "router configuration file, instead of the argument")
	cmd.Flags().StringVar(&ctrlFile, "controller", "", "run the controller of this configuration file in the same process")
	lf.register(cmd.Flags())
	return cmd
}
