package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync/atomic"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
)

// The signals of the daemons (router run, controller run, the tunnel commands). SIGINT,
// SIGTERM and SIGQUIT stop them with the full cleanup (tunnel rules removed, circuits and
// links closed, the store closed) and exit 0, the signal named in the log; SIGQUIT first
// writes every goroutine's stack to standard error, the debugging it does by default. SIGHUP
// reloads a daemon that has a file to reload, and stops the others as SIGTERM does. SIGPIPE is
// ignored: a write to a closed pipe (a log reader gone) fails, instead of killing the process
// before it cleans up. Other commands end on SIGINT and SIGTERM through their context, and on
// the other signals as Go programs do.

// daemonAnnotation marks a daemon command, whose signals daemonRun.run handles: main does not
// bind SIGINT and SIGTERM to its context.
const daemonAnnotation = "zmesh.daemon"

// markDaemon marks cmd as a daemon and returns it.
func markDaemon(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[daemonAnnotation] = "true"
	return cmd
}

// isDaemon reports whether cmd is a daemon command.
func isDaemon(cmd *cobra.Command) bool {
	return cmd != nil && cmd.Annotations[daemonAnnotation] == "true"
}

// signals is how a daemon hears the process's signals: os/signal, or a test's own.
type signals interface {
	Notify(c chan<- os.Signal, sig ...os.Signal)
	Stop(c chan<- os.Signal)
	Ignore(sig ...os.Signal)
}

// osSignals are the process's signals.
type osSignals struct{}

func (osSignals) Notify(c chan<- os.Signal, sig ...os.Signal) { signal.Notify(c, sig...) }
func (osSignals) Stop(c chan<- os.Signal)                     { signal.Stop(c) }
func (osSignals) Ignore(sig ...os.Signal)                     { signal.Ignore(sig...) }

// signalName names a signal as operators write it.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// sdNotify tells systemd of the daemon's state when it runs the daemon as a Type=notify
// service (NOTIFY_SOCKET is set); otherwise it does nothing.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("cannot notify systemd", "state", state, "err", err)
	}
}

// daemonRun is one run of a daemon: its logger, standard error (for SIGQUIT's stacks), its
// signals, and reload, what SIGHUP does (nil: SIGHUP stops the daemon).
type daemonRun struct {
	log    *slog.Logger
	stderr io.Writer
	sigs   signals
	reload func()
}

// run runs f with a context that ends at the first stop signal (or when ctx ends), and
// returns what f returns. f calls ready once the daemon serves: systemd is told READY=1. A
// reload is announced to systemd as RELOADING=1 (with the monotonic time systemd 253 and
// later need to wait for it) and READY=1 when done; the stop as STOPPING=1. Signals that
// come while the daemon stops are logged, SIGQUIT's stacks written again.
func (d daemonRun) run(ctx context.Context, f func(ctx context.Context, ready func()) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.sigs.Ignore(syscall.SIGPIPE)
	ch := make(chan os.Signal, 4)
	d.sigs.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP)
	defer d.sigs.Stop(ch)
	var isReady atomic.Bool
	handled := make(chan struct{})
	defer func() { <-handled }()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		defer close(handled)
		stopping := false
		for {
			var s os.Signal
			select {
			case s = <-ch:
			case <-ctx.Done():
				if !stopping {
					stopping = true
					sdNotify(d.log, daemon.SdNotifyStopping)
				}
				select {
				case s = <-ch:
				case <-stopped:
					return
				}
			case <-stopped:
				return
			}
			if s == syscall.SIGQUIT {
				d.log.Info("SIGQUIT: the stacks of every goroutine follow on standard error")
				pprof.Lookup("goroutine").WriteTo(d.stderr, 2)
			}
			switch {
			case stopping:
				d.log.Info("already stopping: " + signalName(s) + " ignored")
			case s == syscall.SIGHUP && d.reload != nil:
				// Before READY=1, systemd is still waiting for the start: no reload notices.
				announce := isReady.Load()
				if announce {
					sdNotify(d.log, daemon.SdNotifyReloading+"\n"+daemon.SdNotifyMonotonicUsec())
				}
				d.log.Info("reloading on SIGHUP")
				d.reload()
				if announce {
					sdNotify(d.log, daemon.SdNotifyReady)
				}
			default:
				d.log.Info("stopping on " + signalName(s))
				stopping = true
				sdNotify(d.log, daemon.SdNotifyStopping)
				cancel()
			}
		}
	}()
	return f(ctx, func() {
		isReady.Store(true)
		sdNotify(d.log, daemon.SdNotifyReady)
	})
}
