package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/quickstart"
)

// quickstartReady starts the one line `zmesh quickstart` prints once everything answers.
const quickstartReady = "quickstart ready:"

func newQuickstartCommand(lookupEnv env) *cobra.Command {
	var dir string
	var lf logFlags
	var routers, portOffset int
	cmd := &cobra.Command{
		Use:   "quickstart [--dir DIR] [--routers N]",
		Short: "Run a complete network on this machine: a controller, routers and a demo service",
		Long: "Create in DIR (default ./zmesh-quickstart), or reuse from an earlier run, a network on\n" +
			"127.0.0.1 and run it in this process until interrupted (Ctrl-C, SIGTERM): a controller\n" +
			"(API on port 1280), N edge routers linked in a full mesh (router i: SDK listener 3021+i,\n" +
			"link listener 10079+i, health checks and metrics over HTTPS on 8080+i), an echo server on\n" +
			"2000 as the service \"echo\" (end-to-end encrypted, hosted by router-1's tunnel) and each\n" +
			"router's tunnel proxy of it on 2000+i. DIR holds the administrator's generated password\n" +
			"(admin-password), the configuration files, the routers' certificates and keys, and an\n" +
			"enrolled client identity (client.json) allowed to dial the echo service. --port-offset\n" +
			"moves every port when the defaults are taken; a directory keeps the offset it was made with.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), lf, lookupEnv)
			if err != nil {
				return err
			}
			if routers < 1 || routers > quickstart.MaxRouters {
				return usagef("--routers %d is not allowed; allowed: 1 to %d", routers, quickstart.MaxRouters)
			}
			opts := quickstart.Options{Routers: routers, Version: version, Log: log}
			if cmd.Flags().Changed("port-offset") {
				if portOffset < 0 || portOffset > quickstart.MaxPortOffset {
					return usagef("--port-offset %d is not allowed; allowed: 0 to %d", portOffset, quickstart.MaxPortOffset)
				}
				opts.PortOffset = &portOffset
			}
			out := cmd.OutOrStdout()
			n, err := quickstart.Prepare(dir, opts)
			if err != nil {
				return err
			}
			if n.Created {
				fmt.Fprintf(out, "created the quickstart network in %s\n", n.Dir)
			} else {
				fmt.Fprintf(out, "reusing the quickstart network in %s\n", n.Dir)
			}
			err = quickstart.Run(cmd.Context(), n, quickstart.RunOptions{
				Version: version,
				Log:     log,
				Ready:   func() { printQuickstart(out, n) },
			})
			if pe := (*quickstart.PortInUseError)(nil); errors.As(err, &pe) {
				return fmt.Errorf("%w; or move every port with another --dir and --port-offset N", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(out, "quickstart stopped")
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./zmesh-quickstart", "the directory of the network, created when missing and reused when present")
	cmd.Flags().IntVar(&routers, "routers", 1, fmt.Sprintf("how many linked routers to run, 1 to %d", quickstart.MaxRouters))
	cmd.Flags().IntVar(&portOffset, "port-offset", 0, fmt.Sprintf("add this to every port, 0 to %d (default: the directory's, 0 for a new one)", quickstart.MaxPortOffset))
	lf.register(cmd.Flags())
	return cmd
}

// printQuickstart tells what runs where and how to use it, ending with the ready line.
func printQuickstart(w io.Writer, n *quickstart.Network) {
	p := n.Ports
	first := n.Routers[0]
	fmt.Fprintf(w, "controller: API %s, control channel tls:%s, data in %s\n",
		n.APIURL(), quickstart.Addr(p.Ctrl()), filepath.Join(n.Dir, quickstart.ControllerDataDir))
	for _, r := range n.Routers {
		fmt.Fprintf(w, "%s: edge tls:%s, link tls:%s, health checks and metrics https://%s, echo proxy %s\n",
			r.Name, quickstart.Addr(p.Edge(r.Index)), quickstart.Addr(p.Link(r.Index)),
			quickstart.Addr(p.Web(r.Index)), quickstart.Addr(p.Proxy(r.Index)))
	}
	fmt.Fprintf(w, "service %q: echo server %s, hosted by %s's tunnel, end-to-end encrypted\n",
		quickstart.ServiceName, quickstart.Addr(p.Echo()), first.Name)
	// The password goes on stdin, not the command line, where every local user could read it.
	fmt.Fprintf(w, "admin login: zmesh edge login %s -u %s --yes < %s\n",
		n.APIURL(), quickstart.AdminUsername, shellQuote(n.PasswordFile))
	fmt.Fprintf(w, "try the demo: echo hello | nc -N %s %d\n", quickstart.Host, p.Proxy(n.Routers[len(n.Routers)-1].Index))
	fmt.Fprintf(w, "as the client identity: zmesh tunnel proxy --identity %s --service %s:%d, then echo hello | nc -N %s %d\n",
		shellQuote(n.ClientIdentity), quickstart.ServiceName, p.ClientProxy(), quickstart.Host, p.ClientProxy())
	fmt.Fprintf(w, "health and metrics: curl --cacert %s https://%s/health-checks (and /metrics)\n",
		shellQuote(first.CAFile), quickstart.Addr(p.Web(first.Index)))
	noun := "router"
	if len(n.Routers) > 1 {
		noun = "routers"
	}
	fmt.Fprintf(w, "%s %d %s, demo at %s; press Ctrl-C to stop\n", quickstartReady, len(n.Routers), noun,
		quickstart.Addr(p.Proxy(n.Routers[len(n.Routers)-1].Index)))
}

// shellQuote quotes a path for a POSIX shell when it holds characters the shell would read.
func shellQuote(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
