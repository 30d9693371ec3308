package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/netnstest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// buildZmesh builds cmd/zmesh into dir and returns the binary's path. With the race
// detector on in the test, the binary is built with it too.
func buildZmesh(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts its GOROOT/bin first in PATH
	if err != nil {
		t.Fatalf("the go command, to build cmd/zmesh: %v", err)
	}
	bin := filepath.Join(dir, "zmesh")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, "github.com/zmesh/zmesh/cmd/zmesh")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/zmesh: %v\n%s", err, out)
	}
	return bin
}

// proc is a process of the test, started in a network namespace.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *ctrltest.LogBuffer // stdout and stderr, read while the process writes them
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// procOptions are the optional settings of start.
type procOptions struct {
	env []string // added to the test's environment
	// unprivileged runs the process as the user nobody with only the capabilities
	// CAP_NET_ADMIN and CAP_NET_BIND_SERVICE, as deploy/systemd/zmesh-router.service runs a
	// router: its files must be readable (and its directory writable) by that user.
	unprivileged bool
}

// nobody is the uid and gid an unprivileged process runs as.
const nobody = 65534

// start runs argv in network namespace ns. The process is stopped (SIGTERM, then SIGKILL)
// at the end of the test if it still runs, and its output is logged when the test failed.
func start(t *testing.T, ns netns.NsHandle, name string, opts procOptions, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &ctrltest.LogBuffer{}, done: make(chan struct{})}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, opts.env...)
	// SIGKILL when the thread that started it ends: a crashed test leaves no process behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if opts.unprivileged {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
		cmd.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE}
	}
	p.cmd = cmd
	if err := netnstest.Run(ns, cmd.Start); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Logf("%s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("----- output of %s (%s) -----\n%s----- end of %s -----", name, strings.Join(argv, " "), p.out, name)
		}
	})
	return p
}

// stop sends sig and waits up to timeout for the process to end, then kills it. It returns
// how the process ended (nil for exit status 0).
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not end within %v of %v; killed (%v)", timeout, sig, p.err)
	}
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// waitOutput waits until the process's output holds s, failing the test when the process
// ends first or it does not within testutil.Patience.
func (p *proc) waitOutput(t *testing.T, s string) {
	t.Helper()
	testutil.EventuallyNil(t, fmt.Sprintf("%s logs %q", p.name, s), func() error {
		if strings.Contains(p.out.String(), s) {
			return nil
		}
		if done, err := p.exited(); done {
			t.Fatalf("%s ended (%v) before logging %q", p.name, err, s)
		}
		return errors.New("not yet")
	})
}

// run runs argv in namespace ns to its end and returns its output, failing the test when it
// does not exit with status 0 within timeout.
func run(t *testing.T, ns netns.NsHandle, timeout time.Duration, argv ...string) string {
	t.Helper()
	out, err := runErr(t, ns, timeout, argv...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return out
}

// runErr is run for a command that may fail: its output and its error.
func runErr(t *testing.T, ns netns.NsHandle, timeout time.Duration, argv ...string) (string, error) {
	t.Helper()
	p := start(t, ns, filepath.Base(argv[0])+" "+strings.Join(argv[1:min(3, len(argv))], " "), procOptions{}, argv...)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
	}
	return p.out.String(), p.err
}
