package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/zmesh/zmesh/internal/quickstart"
	"github.com/zmesh/zmesh/internal/testutil"
)

// `zmesh quickstart` as a real process: its first run creates the network in a new directory
// and the demo answers through the proxy port, which the router's circuit counter in
// /metrics (Prometheus text) counts; the health checks say healthy; the client identity file
// works with `zmesh tunnel proxy`; SIGINT stops it with exit code 0 and leaves no port open.
// A second run in the same directory with --routers 2 reuses the network (same router
// certificate, same password), adds router-2 and carries the demo from router-2's proxy
// across the link to router-1, which hosts the service.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "qs")
	offset := freePortOffset(t, 2)
	ports := quickstart.Ports{Offset: offset}

	q := startCLI(t, "quickstart", "--dir", dir, "--port-offset", strconv.Itoa(offset))
	q.waitLine("quickstart ready:", 2*time.Minute)
	if out := q.stdoutText(); !strings.Contains(out, "created the quickstart network in "+dir) ||
		!strings.Contains(out, fmt.Sprintf("echo hello | nc -N 127.0.0.1 %d", ports.Proxy(1))) ||
		!strings.Contains(out, "--identity "+filepath.Join(dir, "client.json")) {
		t.Errorf("first run printed:\n%s", out)
	}
	password := readFile(t, filepath.Join(dir, "admin-password"))
	routerCert := readFile(t, filepath.Join(dir, "router-1", "client.cert"))
	ca := filepath.Join(dir, "router-1", "ca.cert")

	web1 := quickstart.Addr(ports.Web(1))
	before := circuitsCreated(t, ca, web1)
	if err := quickstart.Echo(t.Context(), quickstart.Addr(ports.Proxy(1)), "hello through router-1\n"); err != nil {
		t.Fatalf("echo through router-1's proxy: %v", err)
	}
	if after := circuitsCreated(t, ca, web1); after != before+1 {
		t.Errorf("zmesh_circuits_created_total went from %v to %v for one circuit", before, after)
	}
	waitHealthy(t, ca, web1)

	// The printed login works with the generated password file on stdin.
	if !strings.Contains(q.stdoutText(), "-u admin --yes < "+filepath.Join(dir, "admin-password")) {
		t.Errorf("the printed login does not read the password file on stdin:\n%s", q.stdoutText())
	}
	var loginOut, loginErr bytes.Buffer
	login := newRootCommand(&loginOut, &loginErr, func(string) (string, bool) { return "", false })
	login.SetIn(strings.NewReader(password))
	session := filepath.Join(t.TempDir(), "session.json")
	login.SetArgs([]string{"edge", "login", "https://" + quickstart.Addr(ports.API()), "-u", "admin", "--yes",
		"--session-file", session})
	if err := login.Execute(); err != nil || !strings.Contains(loginOut.String(), "logged in") {
		t.Errorf("zmesh edge login: %v\n%s%s", err, &loginOut, &loginErr)
	}
	checkFabricCircuit(t, session, quickstart.Addr(ports.Proxy(1)), "echo", "router-1")
	clientProxy(t, filepath.Join(dir, "client.json"))

	q.interrupt()
	if out := q.stdoutText(); strings.Count(out, "quickstart ready:") != 1 || !strings.Contains(out, "quickstart stopped") {
		t.Errorf("first run printed:\n%s", out)
	}
	checkClosed(t, ports, 1)

	// Second run: same directory, two routers; the port offset comes from the directory.
	q = startCLI(t, "quickstart", "--dir", dir, "--routers", "2")
	q.waitLine("quickstart ready:", 2*time.Minute)
	if out := q.stdoutText(); !strings.Contains(out, "reusing the quickstart network in "+dir) ||
		!strings.Contains(out, fmt.Sprintf("router-2: edge tls:127.0.0.1:%d", ports.Edge(2))) {
		t.Errorf("second run printed:\n%s", out)
	}
	if readFile(t, filepath.Join(dir, "admin-password")) != password || readFile(t, filepath.Join(dir, "router-1", "client.cert")) != routerCert {
		t.Error("the second run did not reuse the password and router-1's certificate")
	}
	web2 := quickstart.Addr(ports.Web(2))
	before1, before2 := circuitsCreated(t, ca, web1), circuitsCreated(t, ca, web2)
	if err := quickstart.Echo(t.Context(), quickstart.Addr(ports.Proxy(2)), "hello across the link\n"); err != nil {
		t.Fatalf("echo through router-2's proxy: %v", err)
	}
	// Router-2 is the circuit's ingress, router-1 (which hosts the service) its egress.
	if after1, after2 := circuitsCreated(t, ca, web1), circuitsCreated(t, ca, web2); after1 != before1+1 || after2 != before2+1 {
		t.Errorf("zmesh_circuits_created_total: router-1 %v -> %v, router-2 %v -> %v for one circuit", before1, after1, before2, after2)
	}
	waitHealthy(t, ca, web2)
	q.interrupt()
	checkClosed(t, ports, 2)
}

// freePortOffset picks a port offset whose quickstart ports with routers routers are all
// free now, at random so that parallel tests and runs do not meet. The offsets stay below
// 20000: every port is then below the ephemeral range, which outgoing connections use.
func freePortOffset(t *testing.T, routers int) int {
	t.Helper()
	for range 100 {
		offset := 1000 + rand.IntN(19000)
		free := true
		for _, p := range (quickstart.Ports{Offset: offset}).Listening(routers) {
			ln, err := net.Listen("tcp", p.Addr())
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return offset
		}
	}
	t.Fatal("no port offset with every quickstart port free")
	return 0
}

// cliProcess is the test binary running as the zmesh command line (see TestMain).
type cliProcess struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	stdout bytes.Buffer
	lines  []string
	newOut chan struct{} // signalled on each line
	stderr bytes.Buffer
}

func startCLI(t *testing.T, args ...string) *cliProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &cliProcess{t: t, name: strings.Join(args[:min(2, len(args))], " "), done: make(chan struct{}), newOut: make(chan struct{}, 1)}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = append(os.Environ(), cliEnv+"=1", "GORACE=atexit_sleep_ms=0")
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.newOut <- struct{}{}:
			default:
			}
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", p.name, p.stdoutText(), p.stderrText())
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *cliProcess) stdoutText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

func (p *cliProcess) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLine waits for a line of standard output that starts with prefix and returns it.
func (p *cliProcess) waitLine(prefix string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.newOut:
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before printing %q", p.name, p.cmd.ProcessState, prefix)
		case <-deadline:
			p.t.Fatalf("%s printed no %q within %s", p.name, prefix, timeout)
		}
	}
}

// interrupt sends SIGINT and expects the process to exit with code 0.
func (p *cliProcess) interrupt() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s still runs 30 s after SIGINT", p.name)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Fatalf("%s exited with code %d after SIGINT", p.name, code)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// webClient trusts the network's CA, as `curl --cacert` does.
func webClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(readFile(t, caFile))) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// circuitsCreated scrapes a router's /metrics, parses it as the Prometheus text format and
// returns its zmesh_circuits_created_total.
func circuitsCreated(t *testing.T, caFile, addr string) float64 {
	t.Helper()
	resp, err := webClient(t, caFile).Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET https://%s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("https://%s/metrics is not the Prometheus text format: %v", addr, err)
	}
	f, ok := families["zmesh_circuits_created_total"]
	if !ok || len(f.GetMetric()) == 0 {
		t.Fatalf("https://%s/metrics has no zmesh_circuits_created_total", addr)
	}
	var sum float64
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// waitHealthy polls a router's /health-checks until it answers 200 with data.healthy true
// and a passing controllerPing check.
func waitHealthy(t *testing.T, caFile, addr string) {
	t.Helper()
	c := webClient(t, caFile)
	testutil.EventuallyNil(t, "https://"+addr+"/health-checks says healthy", func() error {
		resp, err := c.Get("https://" + addr + "/health-checks")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var h struct {
			Data struct {
				Healthy bool `json:"healthy"`
				Checks  []struct {
					ID      string `json:"id"`
					Healthy bool   `json:"healthy"`
				} `json:"checks"`
			} `json:"data"`
		}
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &h) == nil && h.Data.Healthy {
			for _, c := range h.Data.Checks {
				if c.ID == "controllerPing" && c.Healthy {
					return nil
				}
			}
		}
		return fmt.Errorf("answer %s %s", resp.Status, body)
	})
}

// clientProxy runs `zmesh tunnel proxy` with the quickstart's client identity and echoes
// through it.
func clientProxy(t *testing.T, identity string) {
	t.Helper()
	addr := testutil.ClosedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	p := startCLI(t, "tunnel", "proxy", "--identity", identity, "--service", "echo:"+port)
	p.waitLine("service echo on", time.Minute)
	testutil.EventuallyNil(t, "echo through zmesh tunnel proxy with the client identity", func() error {
		return quickstart.Echo(t.Context(), addr, "hello as the client identity\n")
	})
	p.interrupt()
}

// checkClosed dials every port the quickstart listened on and expects a refusal.
func checkClosed(t *testing.T, ports quickstart.Ports, routers int) {
	t.Helper()
	for _, p := range ports.Listening(routers) {
		c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("port %d (%s) still accepts connections after the quickstart stopped", p.Port, p.Role)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("port %d (%s): %v, want connection refused", p.Port, p.Role, err)
		}
	}
}
