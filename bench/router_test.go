package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/dataplane"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
	"github.com/zmesh/zmesh/tunnel/sdkoverlay"
)

// runRouter is `zmesh router run ROUTER.yml [--controller CONTROLLER.yml] [--log-level L]`
// for the test binary, which cannot run the zmesh command line: it wires the controller and
// the router as cmd/zmesh does and prints the same "router <id> running" line when ready.
// (cmd/zmesh's tests run the zmesh scenarios through the real command.)
func runRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 2 || args[0] != "run" {
		return fmt.Errorf("router: want run ROUTER.yml [flags], got %q", args)
	}
	file := args[1]
	fs := flag.NewFlagSet("router run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ctrlFile := fs.String("controller", "", "controller configuration to run co-located")
	level := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args[2:]); err != nil {
		return fmt.Errorf("router run: %w", err)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("router run: --log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	stopProfiling, err := StartProfiling()
	if err != nil {
		return fmt.Errorf("router run: %w", err)
	}
	defer func() {
		if perr := stopProfiling(); perr != nil {
			log.Warn("router run: profiles", "err", perr)
		}
	}()
	cfg, _, err := config.LoadRouter(file, noEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var ctrlErr error
	var ctrl *controlplane.Controller
	if *ctrlFile != "" {
		ccfg, _, err := config.LoadController(*ctrlFile, noEnv)
		if err != nil {
			return err
		}
		if ctrl, err = controlplane.Open(ccfg, log.With("role", "controller"), controlplane.Build{Version: "test"}); err != nil {
			return err
		}
		ready := make(chan struct{})
		wg.Go(func() {
			ctrlErr = ctrl.Run(ctx, func(addr net.Addr) {
				fmt.Fprintf(stdout, "controller API listening on %s\n", addr)
				close(ready)
			})
			cancel()
		})
		select {
		case <-ready:
		case <-ctx.Done():
			wg.Wait()
			return ctrlErr
		}
	}
	r, err := dataplane.New(cfg, "test", log.With("role", "router"))
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	if ctrl != nil {
		r.ConnectLocally(ctrl.ConnectLocal)
	}
	go func() {
		select {
		case <-r.Ready():
			fmt.Fprintf(stdout, "router %s running (%s)\n", r.ID(), file)
		case <-ctx.Done():
		}
	}()
	err = r.Run(ctx)
	cancel()
	wg.Wait()
	return errors.Join(err, ctrlErr)
}

// runTunnelProxy is `zmesh tunnel proxy --identity FILE --service NAME:PORT [--log-level L]`
// for the test binary, as runRouter is for routers: it prints the same "service NAME on ADDR"
// line once the port listens.
func runTunnelProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 || args[0] != "proxy" {
		return fmt.Errorf("tunnel: want proxy --identity FILE --service NAME:PORT, got %q", args)
	}
	fs := flag.NewFlagSet("tunnel proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	identity := fs.String("identity", "", "identity file")
	service := fs.String("service", "", "NAME:PORT")
	level := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("tunnel proxy: %w", err)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("tunnel proxy: --log-level: %w", err)
	}
	name, port, ok := strings.Cut(*service, ":")
	portNum, err := strconv.Atoi(port)
	if !ok || err != nil {
		return fmt.Errorf("tunnel proxy: --service %q is not NAME:PORT", *service)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	stopProfiling, err := StartProfiling()
	if err != nil {
		return fmt.Errorf("tunnel proxy: %w", err)
	}
	defer func() {
		if perr := stopProfiling(); perr != nil {
			log.Warn("tunnel proxy: profiles", "err", perr)
		}
	}()
	c, err := sdk.Load(*identity, sdk.Options{Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := tunnel.ListenProxy("127.0.0.1", []config.TunnelService{{Service: name, Port: portNum}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "service %s on %s\n", name, p.Addr(name))
	p.ServeOverlay(ctx, sdkoverlay.Overlay{C: c}, log)
	return nil
}
