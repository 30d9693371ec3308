package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a stopped process has to exit after SIGTERM before it is killed.
const stopGrace = 5 * time.Second

// Exec says how the harness starts its child processes: every process is the executable Path,
// so a scenario's routers are `Path router run ...` and the bench workers are
// `Path WorkerArgs... <role> ...`.
type Exec struct {
	// Path is the zmesh executable (os.Executable() in the CLI, the test binary in tests).
	Path string
	// WorkerArgs come before a worker's role: {"bench-worker"} for the zmesh binary.
	WorkerArgs []string
	// Env is added to the parent's environment for every child.
	Env []string
}

// Command describes a child process that a scenario starts through Env.Start.
type Command struct {
	// Name identifies the process in progress, logs and errors: "relay-a", "router-b".
	Name string
	// Args follow the executable (and Exec.WorkerArgs when Worker is set).
	Args []string
	// Worker marks a bench worker (sink, relay): Args start with its role, Exec.WorkerArgs are
	// put in front, and Start waits for the {"addr": ...} line the worker prints when ready.
	Worker bool
	// Relay marks a process on the forwarding path: its CPU time counts in CPU seconds per
	// GiB, and it is profiled when Options.ProfileDir is set.
	Relay bool
	// Profiled has the process profiled as Relay processes are, its CPU time not counted: a
	// load generator with the SDK embedded, whose process is on the path.
	Profiled bool

	// env is added to the child's environment (profiling).
	env []string
}

// Process is a running child process of a scenario.
type Process struct {
	name  string
	relay bool
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *lineBuffer
	errs  *tailBuffer
	done  chan struct{}
	err   error // the result of Wait; read only after done is closed
	addr  string
}

// Name returns the name the process was started with.
func (p *Process) Name() string { return p.name }

// PID returns the operating-system process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Addr returns the address a worker announced when it became ready; "" for other processes.
func (p *Process) Addr() string { return p.addr }

// startProcess starts c as path args...; the process is killed if ctx ends before it is stopped.
func startProcess(ctx context.Context, x Exec, c Command) (*Process, error) {
	args := c.Args
	if c.Worker {
		args = append(append([]string{}, x.WorkerArgs...), c.Args...)
	}
	cmd := exec.CommandContext(ctx, x.Path, args...)
	cmd.Env = append(append(os.Environ(), x.Env...), c.env...)
	// When ctx ends the process gets SIGTERM, to stop as cleanly as when stopped, and is killed
	// if it is still there stopGrace later.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	p := &Process{
		name:  c.Name,
		relay: c.Relay,
		cmd:   cmd,
		out:   newLineBuffer(),
		errs:  &tailBuffer{max: 8 << 10},
		done:  make(chan struct{}),
	}
	cmd.Stdout = p.out
	cmd.Stderr = p.errs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: stdin: %w", c.Name, err)
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s %s): %w", c.Name, x.Path, strings.Join(args, " "), err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits for the worker's {"addr": ...} line and records the address.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	return p.waitLine(ctx, timeout, "ready", func(line string) bool {
		var m message
		if decodeMessage(line, &m) && m.Addr != "" {
			p.addr = m.Addr
			return true
		}
		return false
	})
}

// WaitOutput waits up to timeout for a line of the process's standard output that contains
// text, such as the "router ... running" line a router prints when it is ready. It fails
// at once if the process exits first.
func (p *Process) WaitOutput(ctx context.Context, text string, timeout time.Duration) error {
	return p.waitLine(ctx, timeout, fmt.Sprintf("printing %q", text), func(line string) bool {
		return strings.Contains(line, text)
	})
}

// waitLine waits until match accepts a line of the standard output (the lines kept so far
// included); what says what is awaited, for errors.
func (p *Process) waitLine(ctx context.Context, timeout time.Duration, what string, match func(string) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		for _, line := range p.out.snapshot() {
			if match(line) {
				return nil
			}
		}
		if !p.running() {
			return p.failure("exited before " + what)
		}
		select {
		case <-p.out.changed:
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("%s (pid %d) not %s: %w%s", p.name, p.PID(), what, ctx.Err(), p.stderrTail())
		}
	}
}

// Running reports whether the process has not exited yet; Err describes how it ended.
func (p *Process) Running() bool { return p.running() }

// Err returns, once the process has exited, why, with the end of its standard error; nil
// while it runs.
func (p *Process) Err() error {
	if p.running() {
		return nil
	}
	return p.failure("exited")
}

// result waits for the process to exit on its own and returns its last JSON line.
func (p *Process) result(ctx context.Context, into *message) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", p.name, ctx.Err())
	}
	if p.err != nil {
		return p.failure("failed")
	}
	lines := p.out.snapshot()
	if len(lines) == 0 || !decodeMessage(lines[len(lines)-1], into) {
		return p.failure("printed no result")
	}
	return nil
}

// stop ends the process: stdin is closed and SIGTERM sent, and after stopGrace it is killed.
// It returns an error only if the process had already failed before it was asked to stop.
func (p *Process) stop() error {
	select {
	case <-p.done:
		if p.err != nil {
			return p.failure("exited during the run")
		}
		return nil
	default:
	}
	p.stdin.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.cmd.Process.Kill()
	}
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

// running reports whether the process has not exited yet.
func (p *Process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *Process) failure(what string) error {
	var err error
	select {
	case <-p.done:
		err = p.err
	default:
	}
	if err == nil {
		err = errors.New(what)
	} else {
		err = fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s (pid %d): %w%s", p.name, p.PID(), err, p.stderrTail())
}

func (p *Process) stderrTail() string {
	s := strings.TrimSpace(p.errs.String())
	if s == "" {
		return ""
	}
	return "\n  " + p.name + " stderr: " + strings.ReplaceAll(s, "\n", "\n  ")
}

// lineBuffer is a child's stdout: complete lines are kept (the last maxLines) and every new
// line is signalled on changed.
type lineBuffer struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{}
}

const maxLines = 64

func newLineBuffer() *lineBuffer { return &lineBuffer{changed: make(chan struct{}, 1)} }

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.lines = append(b.lines, string(b.partial[:i]))
		b.partial = b.partial[i+1:]
		added = true
	}
	if len(b.lines) > maxLines {
		b.lines = append([]string(nil), b.lines[len(b.lines)-maxLines:]...)
	}
	if len(b.partial) > 1<<20 {
		b.partial = b.partial[:0]
	}
	if added {
		select {
		case b.changed <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

func (b *lineBuffer) snapshot() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
