package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// fakeSignals are a test's signals: send delivers one to the daemon that listens.
type fakeSignals struct {
	mu      sync.Mutex
	ch      chan<- os.Signal
	ignored []os.Signal
}

func (f *fakeSignals) Notify(c chan<- os.Signal, _ ...os.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ch = c
}

func (f *fakeSignals) Stop(chan<- os.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ch = nil
}

func (f *fakeSignals) Ignore(sig ...os.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ignored = append(f.ignored, sig...)
}

func (f *fakeSignals) send(t *testing.T, s os.Signal) {
	t.Helper()
	var ch chan<- os.Signal
	testutil.Eventually(t, "the daemon listening for signals", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		ch = f.ch
		return ch != nil
	})
	ch <- s
}

// freePort returns a loopback port free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestDaemonSignals runs a controller as `zmesh controller run` does, with a notify socket
// as systemd gives one: READY=1 once it listens; SIGHUP reloads (RELOADING=1 with the
// monotonic time, then READY=1), applying the file's log level and naming the other changes;
// a file that does not load changes nothing; SIGQUIT writes the stacks, then stops with the
// full cleanup (STOPPING=1) and no error. SIGPIPE is ignored.
func TestDaemonSignals(t *testing.T) {
	sockPath := filepath.Join(t.TempDir(), "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)
	notice := func(what string) string {
		t.Helper()
		sock.SetReadDeadline(time.Now().Add(testutil.Patience))
		buf := make([]byte, 4096)
		n, err := sock.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return string(buf[:n])
	}

	dir := t.TempDir()
	base := "v: 1\ndataDir: data\nadmin: {password: secret1}\n" +
		"api: {listen: 127.0.0.1:" + strconv.Itoa(freePort(t)) + "}\nctrl: {listen: tls:127.0.0.1:" + strconv.Itoa(freePort(t)) + "}\n"
	file := filepath.Join(dir, "controller.yml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(base)
	sigs := &fakeSignals{}
	var stdout bytes.Buffer
	stderr := &ctrltest.LogBuffer{}
	cmd := newRootCommandWith(&stdout, stderr, envOf(nil), sigs)
	cmd.SetArgs([]string{"controller", "run", file})
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()

	if got := notice("READY=1"); got != "READY=1" {
		t.Fatalf("first notice %q, want READY=1", got)
	}
	if strings.Contains(stderr.String(), "level=DEBUG") {
		t.Fatal("debug lines before the file asks for them")
	}

	write(base + "log: {level: debug, format: json}\nsessionTimeout: 45m\n")
	sigs.send(t, syscall.SIGHUP)
	if got := notice("RELOADING=1"); !regexp.MustCompile(`^RELOADING=1\nMONOTONIC_USEC=[0-9]+\n$`).MatchString(got) {
		t.Fatalf("notice at reload %q, want RELOADING=1 and MONOTONIC_USEC", got)
	}
	if got := notice("READY=1 after the reload"); got != "READY=1" {
		t.Fatalf("notice after the reload %q, want READY=1", got)
	}
	out := stderr.String()
	for _, want := range []string{
		`msg="reloading on SIGHUP"`,
		`msg="log level changed" level=debug`,
		`msg="log.format changed in ` + file + `: takes effect at the next start"`,
		`msg="sessionTimeout changed in ` + file + `: takes effect at the next start"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the reload's log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "log.level changed") {
		t.Errorf("the applied log level is named as waiting for a restart:\n%s", out)
	}

	write(base + "log: {level: loud}\n")
	sigs.send(t, syscall.SIGHUP)
	notice("RELOADING=1")
	notice("READY=1")
	if want := `reload: ` + file + ` not applied; the controller runs on unchanged" err="` + file + `:6: log.level: \"loud\" is not allowed`; !strings.Contains(stderr.String(), want) {
		t.Errorf("a broken file's reload: the log lacks %s:\n%s", want, stderr.String())
	}

	sigs.send(t, syscall.SIGQUIT)
	if got := notice("STOPPING=1"); got != "STOPPING=1" {
		t.Fatalf("notice at the stop %q, want STOPPING=1", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("controller run ended with %v after SIGQUIT", err)
		}
	case <-time.After(testutil.Patience):
		t.Fatal("controller run did not stop after SIGQUIT")
	}
	out = stderr.String()
	if !regexp.MustCompile(`(?m)^goroutine [0-9]+ \[running\]:$`).MatchString(out) {
		t.Error("SIGQUIT wrote no goroutine stacks")
	}
	for _, want := range []string{`msg="stopping on SIGQUIT"`, `msg="controller stopped"`, "level=DEBUG"} {
		if !strings.Contains(out, want) {
			t.Errorf("the stop's log lacks %s:\n%s", want, out)
		}
	}
	if !slices.Contains(sigs.ignored, os.Signal(syscall.SIGPIPE)) {
		t.Error("SIGPIPE is not ignored")
	}
}

// TestLogLevelPrecedence: --log-level over $ZMESH_LOG_LEVEL over the file's log.level over
// info; a reload changes the level in place unless the flag or the environment fixes it, and
// then says which.
func TestLogLevelPrecedence(t *testing.T) {
	t.Parallel()
	file := func(level string) config.Log { return config.Log{Level: level, Format: "text"} }
	tests := []struct {
		name    string
		lf      logFlags
		env     map[string]string
		file    string
		want    string // the level in effect
		fixedBy string
	}{
		{"default", logFlags{}, nil, "info", "INFO", ""},
		{"file", logFlags{}, nil, "debug", "DEBUG", ""},
		{"environment over file", logFlags{}, map[string]string{envLogLevel: "warn"}, "debug", "WARN", "$ZMESH_LOG_LEVEL"},
		{"flag over environment", logFlags{level: "warn"}, map[string]string{envLogLevel: "error"}, "debug", "WARN", "--log-level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			setup, err := newLogSetup(&buf, tt.lf, envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			d := setup.logger(file(tt.file))
			if got := d.level.Level().String(); got != tt.want || d.levelFixedBy != tt.fixedBy {
				t.Fatalf("level %s fixed by %q, want %s fixed by %q", got, d.levelFixedBy, tt.want, tt.fixedBy)
			}
			changed := d.reload("r.yml", file(tt.file), file("debug"))
			if tt.fixedBy != "" {
				if changed || d.level.Level().String() != tt.want {
					t.Errorf("a reload changed a level %s fixes", tt.fixedBy)
				}
				d.reload("r.yml", file("debug"), file("info"))
				if want := "log.level changed in r.yml but " + tt.fixedBy + " fixes the level: unchanged"; !strings.Contains(buf.String(), want) {
					t.Errorf("the reload's log %q lacks %q", buf.String(), want)
				}
				return
			}
			if d.level.Level().String() != "DEBUG" || changed != (tt.file != "debug") {
				t.Errorf("after a reload to debug: %s, changed %v", d.level.Level(), changed)
			}
			buf.Reset()
			d.Debug("a debug line")
			if !strings.Contains(buf.String(), "a debug line") {
				t.Errorf("the logger did not take the new level in place: %q", buf.String())
			}
		})
	}
}

// TestDaemonCommands: main leaves the signals of the daemons to them, and binds SIGINT and
// SIGTERM to the context of the other commands; it tells them apart as cobra finds them.
func TestDaemonCommands(t *testing.T) {
	t.Parallel()
	root := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{}, envOf(nil))
	for _, tc := range []struct {
		args   []string
		daemon bool
	}{
		{[]string{"router", "run", "--log-level", "debug", "r.yml", "--controller", "c.yml"}, true},
		{[]string{"controller", "run", "-c", "c.yml"}, true},
		{[]string{"tunnel", "tproxy", "--identity", "id.json"}, true},
		{[]string{"tunnel", "proxy", "--identity", "id.json", "--service", "a:1"}, true},
		{[]string{"tunnel", "host", "--identity", "id.json"}, true},
		{[]string{"router", "validate", "r.yml"}, false},
		{[]string{"edge", "list", "services"}, false},
		{[]string{"quickstart"}, false},
		{[]string{"tunnel"}, false},
	} {
		cmd, _, err := root.Find(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if isDaemon(cmd) != tc.daemon {
			t.Errorf("%v: daemon %v, want %v", tc.args, isDaemon(cmd), tc.daemon)
		}
	}
}
