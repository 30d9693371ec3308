package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
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
	"github.com/zmesh/zmesh/internal/apiclient"
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
			changed := d.reload("r.yml", file("debug"))
			if tt.fixedBy != "" {
				if changed || d.level.Level().String() != tt.want {
					t.Errorf("a reload changed a level %s fixes", tt.fixedBy)
				}
				want := "log.level of r.yml differs from the level in effect, which " + tt.fixedBy + " fixes: unchanged"
				if !strings.Contains(buf.String(), want) {
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

// TestRouterReload runs an enrolled router with a proxy tunnel as `zmesh router run` does:
// SIGHUP with another services list in its file opens the new pair's port and closes the
// removed one's, and names the identity's change as taking effect at the next start; SIGTERM
// stops it with no error.
func TestRouterReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ctrl := ctrltest.Start(t)
	u, _ := url.Parse(ctrl.URL)
	leaf, err := apiclient.ServerCertificate(ctx, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	n := &network{t: t, ctx: ctx, url: ctrl.URL, dir: t.TempDir(), admin: apiclient.PinnedClient(ctrl.URL, leaf)}
	if _, err := n.admin.AuthenticatePassword(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	_, dir := n.router("r1")
	file := filepath.Join(dir, "router.yml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The control channel, where the file enrolled from names the API.
	enrolled := []byte(strings.Replace(string(data), "endpoint: tls:"+u.Host, "endpoint: tls:"+ctrl.CtrlAddr, 1))
	proxy := func(service string, port int) string {
		return fmt.Sprintf("listeners:\n  - binding: tunnel\n    options:\n      mode: proxy\n      services: [\"%s:%d\"]\n", service, port)
	}
	portA, portB := freePort(t), freePort(t)
	if err := os.WriteFile(file, append(slices.Clip(enrolled), proxy("a", portA)...), 0o600); err != nil {
		t.Fatal(err)
	}

	sigs := &fakeSignals{}
	stdout, stderr := &ctrltest.LogBuffer{}, &ctrltest.LogBuffer{}
	cmd := newRootCommandWith(stdout, stderr, envOf(nil), sigs)
	cmd.SetArgs([]string{"router", "run", file})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("router log:\n%s", stderr)
		}
	})
	listening := func(port int) error {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			c.Close()
		}
		return err
	}
	testutil.EventuallyNil(t, "the proxy port of a", func() error { return listening(portA) })

	changed := strings.Replace(string(enrolled), "cert: certs/client.cert", "cert: certs/renewed.cert", 1) + proxy("b", portB)
	if err := os.WriteFile(file, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	sigs.send(t, syscall.SIGHUP)
	testutil.Eventually(t, "the reload's identity warning", func() bool {
		return strings.Contains(stderr.String(), `msg="identity.cert changed in `+file+`: takes effect at the next start"`)
	})
	if err := listening(portB); err != nil {
		t.Errorf("the added service's port after the reload: %v", err)
	}
	if err := listening(portA); err == nil {
		t.Error("the removed service's port still listens after the reload")
	}
	out := stderr.String()
	opened := regexp.MustCompile(`msg="tunnel proxy port open" .*service=b listen=127.0.0.1:` + strconv.Itoa(portB))
	closed := regexp.MustCompile(`msg="tunnel proxy port closed" .*service=a port=` + strconv.Itoa(portA))
	if !opened.MatchString(out) || !closed.MatchString(out) {
		t.Errorf("the reload's log does not name the ports opened and closed:\n%s", out)
	}
	if strings.Contains(out, "options.services changed") {
		t.Errorf("the applied services are named as waiting for a restart:\n%s", out)
	}

	sigs.send(t, syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("router run ended with %v after SIGTERM", err)
		}
	case <-time.After(testutil.Patience):
		t.Fatal("router run did not stop after SIGTERM")
	}
	for _, want := range []string{`msg="stopping on SIGTERM"`, `msg="router stopped"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the router's log lacks %s", want)
		}
	}
}
