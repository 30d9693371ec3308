// Command zmesh is the single zmesh binary: it runs routers and controllers, checks their
// configuration files and administers a network. Each role is a subcommand.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at link time by the Makefile (-X main.version=...).
var version = "dev"

func main() {
	root := newRootCommand(os.Stdout, os.Stderr, os.LookupEnv)
	ctx, stop := context.Background(), func() {}
	// A daemon handles its signals itself (signals.go); other commands end on SIGINT and
	// SIGTERM through their context.
	if cmd, _, err := root.Find(os.Args[1:]); err != nil || !isDaemon(cmd) {
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	}
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		var reported reportedError
		if !errors.As(err, &reported) {
			fmt.Fprintln(os.Stderr, "zmesh:", err)
		}
		os.Exit(exitCode(err))
	}
}

// reportedError is a failure whose details the command has already printed; main only sets
// the exit code.
type reportedError struct{ msg string }

func (e reportedError) Error() string { return e.msg }
