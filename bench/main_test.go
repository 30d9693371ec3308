package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// workerEnv makes the test binary act as a bench worker: the harness re-executes it with this
// variable set and the worker's arguments, as the zmesh binary runs `zmesh bench-worker`. With
// the arguments `router run ...` it acts as `zmesh router run` instead (see runRouter), and
// with `tunnel proxy ...` as `zmesh tunnel proxy` (runTunnelProxy).
const workerEnv = "ZMESH_BENCH_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		var err error
		switch {
		case len(os.Args) > 1 && os.Args[1] == "router":
			err = runRouter(ctx, os.Args[2:], os.Stdout, os.Stderr)
		case len(os.Args) > 1 && os.Args[1] == "tunnel":
			err = runTunnelProxy(ctx, os.Args[2:], os.Stdout, os.Stderr)
		default:
			err = RunWorker(ctx, os.Args[1:], os.Stdin, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		}
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testExec starts workers from the test binary. A binary built with -race sleeps a second
// at exit unless GORACE says otherwise, which would make every worker slow to stop.
func testExec(t *testing.T) Exec {
	t.Helper()
	path, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Exec{Path: path, Env: []string{workerEnv + "=1", "GORACE=atexit_sleep_ms=0"}}
}
