package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openziti/sdk-golang/ziti"
	"github.com/openziti/sdk-golang/ziti/edge"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
)

// The data-plane checks' services: three hosted by router B's tunnel (host.v1 configs
// pointing at the suite's own loopback servers), one hosted by an OpenZiti SDK Listen.
const (
	svcE2EE   = "data-e2ee"   // encryptionRequired; the exchange server
	svcPlain  = "data-plain"  // the same server, without end-to-end encryption
	svcHTTP   = "data-http"   // an HTTP server
	svcListen = "data-listen" // encryptionRequired; an OpenZiti SDK listener serves the exchange
)

// The data-plane checks' identities, each enrolled with `ziti edge enroll`. The dialing ones
// may use router A only, the listening one router B only, so that every circuit crosses
// both routers.
const (
	idZiti   = "data-ziti"   // sdk-golang's dialer
	idZmesh  = "data-zmesh"  // zmesh's SDK and `zmesh tunnel proxy`
	idTunnel = "data-tunnel" // `ziti tunnel proxy`
	idDoomed = "data-doomed" // deleted under a live circuit
	idHost   = "data-host"   // sdk-golang's listener
)

const (
	dataDialers = "data-dialers"
	dataHosts   = "data-hosts"
	// Sizes: the end-to-end encrypted exchange each way, a throughput push, a short exchange.
	bulkBytes       = 64 << 20
	throughputBytes = 256 << 20
	throughputChunk = 32 << 10
	shortBytes      = 1 << 20
	// How long a data step's exchanges may take together, even on a loaded machine: the
	// steps together stay well inside `make interop`'s timeout when circuits stall.
	dataDeadline = 2 * time.Minute
)

// dataNet is what the data-plane checks set up on the quickstart network.
type dataNet struct {
	routerA, routerB string            // router-1's and router-2's ids
	services         map[string]string // name -> id
	files            map[string]string // identity name -> identity file
	ids              map[string]string // identity name -> id
	httpBody         string            // what the HTTP server answers
}

// runSDKData carries traffic between OpenZiti's clients (sdk-golang, `ziti tunnel proxy`)
// and zmesh's (its SDK, `zmesh tunnel proxy`, the routers' tunnels) through the quickstart's
// two routers: OpenZiti's clients enter at router-1 (A), services are hosted behind
// router-2 (B).
func runSDKData(t *testing.T, l *ledger, n *network, zitiBin string) {
	r := adminREST(t, n)
	step := func(name string, f func() error) bool { t.Helper(); return l.step(t, "data", name, f) }
	d := setupData(t, r, n, zitiBin)
	dialOpts := &ziti.DialOptions{ConnectTimeout: testutil.Patience}

	zc := openZiti(t, d.files[idZiti])
	zm, err := sdk.Load(d.files[idZmesh], sdk.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("zmesh's SDK with the identity file of `ziti edge enroll`: %v", err)
	}
	defer zm.Close()
	zmDial := func(svc string) (*sdk.Conn, error) {
		ctx, cancel := context.WithTimeout(t.Context(), testutil.Patience)
		defer cancel()
		return zm.Dial(ctx, svc)
	}

	step("dial-hosted-e2ee", func() error {
		conn, err := zc.DialWithOptions(svcE2EE, dialOpts)
		if err != nil {
			return fmt.Errorf("dial %s: %w", svcE2EE, err)
		}
		defer conn.Close()
		if _, err := (exchange{seed: 1, up: bulkBytes, down: bulkBytes, checked: true}).run(conn, time.Now().Add(dataDeadline)); err != nil {
			return fmt.Errorf("64 MiB each way: %w", err)
		}
		if err := zitiEncrypted(conn); err != nil {
			return err
		}
		if err := d.crossesAB(r, conn.GetCircuitId()); err != nil {
			return err
		}
		// The same check tells a circuit without end-to-end encryption.
		plain, err := zc.DialWithOptions(svcPlain, dialOpts)
		if err != nil {
			return fmt.Errorf("dial %s: %w", svcPlain, err)
		}
		defer plain.Close()
		if zitiEncrypted(plain) == nil {
			return fmt.Errorf("sdk-golang reports its circuit to %s, which is not encryptionRequired, as end-to-end encrypted", svcPlain)
		}
		return nil
	})

	// An OpenZiti SDK listener through router B, reached by zmesh's SDK and tunneler.
	hc := openZiti(t, d.files[idHost])
	ln, listenErr := hc.ListenWithOptions(svcListen, &ziti.ListenOptions{ConnectTimeout: testutil.Patience})
	if listenErr == nil {
		defer ln.Close()
		go serveExchanges(ln)
		listenErr = await("a terminator of "+svcListen, func() error { return terminated(r, d.services[svcListen]) })
	} else {
		listenErr = fmt.Errorf("sdk-golang Listen %s: %w", svcListen, listenErr)
	}
	step("listen-reached-by-zmesh-sdk", func() error {
		if listenErr != nil {
			return listenErr
		}
		conn, err := zmDial(svcListen)
		if err != nil {
			return fmt.Errorf("zmesh SDK dial %s: %w", svcListen, err)
		}
		defer conn.Close()
		if _, err := (exchange{seed: 2, up: shortBytes, down: shortBytes, checked: true}).run(conn, time.Now().Add(dataDeadline)); err != nil {
			return err
		}
		if !conn.Encrypted() {
			return fmt.Errorf("zmesh's SDK reports its circuit to %s as not end-to-end encrypted", svcListen)
		}
		return d.crossesAB(r, strconv.FormatUint(conn.CircuitID(), 10))
	})
	step("listen-reached-by-zmesh-tunnel", func() error {
		if listenErr != nil {
			return listenErr
		}
		port := n.freePort(3)
		p, err := startProc(t, nil, "", n.zmesh, "tunnel", "proxy", "--identity", d.files[idZmesh], "--service", svcListen+":"+strconv.Itoa(port))
		if err != nil {
			return err
		}
		defer p.stop()
		conn, err := p.dial("127.0.0.1:" + strconv.Itoa(port))
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := (exchange{seed: 3, up: shortBytes, down: shortBytes, checked: true}).run(conn, time.Now().Add(dataDeadline)); err != nil {
			return fmt.Errorf("through zmesh tunnel proxy: %w; it printed: %s", err, lastLines(p.out.String(), 4))
		}
		return nil
	})

	step("ziti-tunnel-proxy-http", func() error {
		z := newZitiCLI(t, nil, zitiBin)
		port := n.freePort(4)
		p, err := startProc(t, z.env, z.dir, zitiBin, "tunnel", "proxy", "--cli-agent=false", "-i", d.files[idTunnel], svcHTTP+":"+strconv.Itoa(port))
		if err != nil {
			return err
		}
		defer p.stop()
		conn, err := p.dial("127.0.0.1:" + strconv.Itoa(port))
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := httpGet(conn, d.httpBody); err != nil {
			return fmt.Errorf("through ziti tunnel proxy: %w; it logged: %s", err, zitiLog(p.out.String(), 3))
		}
		return nil
	})

	step("identity-delete-ends-circuit", func() error {
		dc := openZiti(t, d.files[idDoomed])
		conn, err := dc.DialWithOptions(svcPlain, dialOpts)
		if err != nil {
			return fmt.Errorf("dial %s: %w", svcPlain, err)
		}
		defer conn.Close()
		if _, err := (exchange{seed: 4, up: 1024, down: 1024, checked: true}).run(conn, time.Now().Add(dataDeadline)); err != nil {
			return fmt.Errorf("the live circuit: %w", err)
		}
		if err := r.do("DELETE", managementAPI+"/identities/"+d.ids[idDoomed], nil, nil); err != nil {
			return err
		}
		// Its live circuit ends within a second of the delete.
		start := time.Now()
		if err := conn.SetReadDeadline(start.Add(5 * time.Second)); err != nil {
			return err
		}
		got, err := io.ReadAll(conn)
		took := time.Since(start)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("the deleted identity's circuit is still open %v after the delete", took.Round(time.Millisecond))
		case len(got) > 0:
			return fmt.Errorf("the deleted identity's circuit carried %d more bytes after the delete", len(got))
		case took > 3*time.Second: // moments, even on a loaded machine
			return fmt.Errorf("the deleted identity's circuit ended %v after the delete (%v)", took.Round(time.Millisecond), err)
		}
		t.Logf("the deleted identity's circuit ended %v after the delete (%v)", took.Round(time.Millisecond), err)
		return nil
	})

	step("zmesh-sdk-same-port", func() error {
		// Router A has one edge address, which OpenZiti's clients and zmesh's SDK are given.
		var er struct {
			Data struct {
				SupportedProtocols map[string]string `json:"supportedProtocols"`
			} `json:"data"`
		}
		if err := r.do("GET", managementAPI+"/edge-routers/"+d.routerA, nil, &er); err != nil {
			return err
		}
		if len(er.Data.SupportedProtocols) != 1 {
			return fmt.Errorf("router-1's edge addresses are %v, want its one edge listener", er.Data.SupportedProtocols)
		}
		// An OpenZiti client on router A's edge port, its circuit held open.
		deadline := time.Now().Add(dataDeadline)
		held, err := zc.DialWithOptions(svcPlain, dialOpts)
		if err != nil {
			return fmt.Errorf("the OpenZiti client's dial of %s: %w", svcPlain, err)
		}
		defer held.Close()
		if _, err := (exchange{seed: 5, up: 64 << 10, down: 64 << 10, checked: true}).run(held, deadline); err != nil {
			return fmt.Errorf("the OpenZiti client's circuit: %w", err)
		}
		conn, err := zmDial(svcPlain)
		if err != nil {
			return fmt.Errorf("zmesh SDK dial %s on the same router: %w", svcPlain, err)
		}
		defer conn.Close()
		if _, err := (exchange{seed: 6, up: shortBytes, down: shortBytes, checked: true}).run(conn, deadline); err != nil {
			return fmt.Errorf("the zmesh SDK's circuit: %w", err)
		}
		if _, err := (exchange{seed: 7, up: 64 << 10, down: 64 << 10, checked: true}).run(held, deadline); err != nil {
			return fmt.Errorf("the OpenZiti client's circuit, after the zmesh SDK's: %w", err)
		}
		return nil
	})

	step("throughput", func() error {
		deadline := time.Now().Add(2 * dataDeadline)
		var errs []error
		for _, svc := range []string{svcPlain, svcE2EE} {
			for _, c := range []struct {
				name string
				dial func() (net.Conn, error)
			}{
				{"sdk-golang", func() (net.Conn, error) { return zc.DialWithOptions(svc, dialOpts) }},
				{"zmesh SDK", func() (net.Conn, error) { return zmDial(svc) }},
			} {
				what := fmt.Sprintf("%s to %s", c.name, svc)
				mbps, err := throughput(c.dial, deadline)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", what, err))
					continue
				}
				msg := fmt.Sprintf("throughput %s (router A -> router B -> the sink): %.0f MB/s (%d MiB, %d KiB writes; load average %s)",
					what, mbps, throughputBytes>>20, throughputChunk>>10, loadAverage())
				t.Log(msg)
				l.note(msg)
			}
		}
		return errors.Join(errs...)
	})
}

// setupData creates, by REST, what the data-plane checks use: the suite's servers, their
// services and policies, and the identities, enrolled with `ziti edge enroll`.
func setupData(t *testing.T, r *rest, n *network, zitiBin string) *dataNet {
	t.Helper()
	d := &dataNet{services: map[string]string{}, files: map[string]string{}, ids: map[string]string{},
		httpBody: "zmesh carried this for ziti tunnel proxy\n"}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// The suite's servers on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must("the exchange server", err)
	t.Cleanup(func() { ln.Close() })
	go serveExchanges(ln)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, d.httpBody) }))
	t.Cleanup(web.Close)

	for i, id := range []*string{&d.routerA, &d.routerB} {
		er, err := r.byName("edge-routers", "router-"+strconv.Itoa(i+1))
		must("the quickstart's routers", err)
		*id = str(er, "id")
	}

	// The quickstart lets every identity use every router; it keeps that for the identities
	// there are now, so that the ones created here use only the routers given them below.
	erp, err := r.byName("edge-router-policies", "quickstart")
	must("the quickstart's edge router policy", err)
	all, err := r.list("identities", "")
	must("the identities", err)
	var roles []string
	for _, id := range all {
		roles = append(roles, "@"+str(id, "id"))
	}
	must("narrow the quickstart's edge router policy", r.do("PATCH", managementAPI+"/edge-router-policies/"+str(erp, "id"),
		map[string]any{"identityRoles": roles}, nil))

	hostV1, err := r.byName("config-types", "host.v1")
	must("the host.v1 config type", err)
	hostConfig := func(name, addr string) string {
		host, port, err := net.SplitHostPort(addr)
		must("a server's address", err)
		p, err := strconv.Atoi(port)
		must("a server's port", err)
		id, err := r.create("configs", map[string]any{"name": name, "configTypeId": str(hostV1, "id"),
			"data": map[string]any{"protocol": "tcp", "address": host, "port": p}})
		must("config "+name, err)
		return id
	}
	exchangeHost := hostConfig("data-exchange-host", ln.Addr().String())
	httpHost := hostConfig("data-http-host", strings.TrimPrefix(web.URL, "http://"))
	for _, s := range []struct {
		name      string
		encrypted bool
		configs   []string
	}{
		{svcE2EE, true, []string{exchangeHost}},
		{svcPlain, false, []string{exchangeHost}},
		{svcHTTP, false, []string{httpHost}},
		{svcListen, true, nil},
	} {
		// OpenZiti's clients encrypt with their own scheme, which an encrypted service must
		// allow (openZitiEncryption, off by default).
		id, err := r.create("services", map[string]any{"name": s.name, "encryptionRequired": s.encrypted,
			"openZitiEncryption": s.encrypted, "configs": s.configs})
		must("service "+s.name, err)
		d.services[s.name] = id
	}
	svcRoles := func(names ...string) []string {
		var out []string
		for _, name := range names {
			out = append(out, "@"+d.services[name])
		}
		return out
	}
	for _, p := range []struct {
		name, typ            string
		identities, services []string
	}{
		{"data-dial", "Dial", []string{"#" + dataDialers}, svcRoles(svcE2EE, svcPlain, svcHTTP, svcListen)},
		{"data-tunnel-bind", "Bind", []string{"@" + d.routerB}, svcRoles(svcE2EE, svcPlain, svcHTTP)},
		{"data-sdk-bind", "Bind", []string{"#" + dataHosts}, svcRoles(svcListen)},
	} {
		_, err := r.create("service-policies", map[string]any{"name": p.name, "type": p.typ, "semantic": "AnyOf",
			"identityRoles": p.identities, "serviceRoles": p.services})
		must("service policy "+p.name, err)
	}
	for _, p := range []struct{ name, role, router string }{
		{"data-dialers-router-a", dataDialers, d.routerA},
		{"data-hosts-router-b", dataHosts, d.routerB},
	} {
		_, err := r.create("edge-router-policies", map[string]any{"name": p.name, "semantic": "AnyOf",
			"identityRoles": []string{"#" + p.role}, "edgeRouterRoles": []string{"@" + p.router}})
		must("edge router policy "+p.name, err)
	}

	for _, id := range []struct{ name, role string }{
		{idZiti, dataDialers}, {idZmesh, dataDialers}, {idTunnel, dataDialers}, {idDoomed, dataDialers}, {idHost, dataHosts},
	} {
		file := t.TempDir() + "/" + id.name + ".json"
		got, err := enrollWithZiti(t, r, zitiBin, id.name, []string{id.role}, file)
		must("identity "+id.name, err)
		d.ids[id.name], d.files[id.name] = got, file
	}

	// Router B's tunnel hosts the services its identity may bind once it has heard of them.
	must("router-2's tunnel hosting the data services", await("terminators of the data services", func() error {
		for _, name := range []string{svcE2EE, svcPlain, svcHTTP} {
			if err := terminated(r, d.services[name]); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}))
	return d
}

// crossesAB reports an error unless the live circuit id enters at router A and leaves at
// router B, as the controller's fabric API shows its path.
func (d *dataNet) crossesAB(r *rest, id string) error {
	var out struct {
		Data struct {
			Path struct {
				Nodes []struct {
					ID string `json:"id"`
				} `json:"nodes"`
			} `json:"path"`
		} `json:"data"`
	}
	if err := r.do("GET", "/fabric/v1/circuits/"+id, nil, &out); err != nil {
		return fmt.Errorf("the circuit: %w", err)
	}
	var path []string
	for _, n := range out.Data.Path.Nodes {
		path = append(path, n.ID)
	}
	if !slices.Equal(path, []string{d.routerA, d.routerB}) {
		return fmt.Errorf("circuit %s's path is %q, want router-1 then router-2 (%q, %q)", id, path, d.routerA, d.routerB)
	}
	return nil
}

// terminated reports an error unless the service has a terminator.
func terminated(r *rest, serviceID string) error {
	var out struct {
		Data []map[string]any `json:"data"`
	}
	if err := r.do("GET", managementAPI+"/services/"+serviceID+"/terminators", nil, &out); err != nil {
		return err
	}
	if len(out.Data) == 0 {
		return errors.New("no terminator")
	}
	return nil
}

// openZiti is an OpenZiti SDK context of an identity file, closed when the test ends.
func openZiti(t *testing.T, file string) ziti.Context {
	t.Helper()
	cfg, err := ziti.NewConfigFromFile(file)
	if err != nil {
		t.Fatalf("sdk-golang: %v", err)
	}
	ctx, err := ziti.NewContext(cfg)
	if err != nil {
		t.Fatalf("sdk-golang: %v", err)
	}
	t.Cleanup(ctx.Close)
	return ctx
}

// zitiEncrypted reports an error unless the OpenZiti SDK's connection says it is end-to-end
// encrypted: then the routers carried only ciphertext.
func zitiEncrypted(conn edge.Conn) error {
	var state struct {
		EncryptionRequired bool `json:"encryptionRequired"`
		Encrypted          bool `json:"encrypted"`
	}
	if err := json.Unmarshal([]byte(conn.GetState()), &state); err != nil {
		return fmt.Errorf("the connection's state %q: %w", conn.GetState(), err)
	}
	if !state.Encrypted {
		return fmt.Errorf("sdk-golang reports the circuit as not end-to-end encrypted (state %s)", conn.GetState())
	}
	return nil
}

// throughput pushes throughputBytes through a circuit dial opens to the sink, in
// throughputChunk writes, by deadline, and returns MB/s from the first byte to the sink's
// answer.
func throughput(dial func() (net.Conn, error), deadline time.Time) (float64, error) {
	conn, err := dial()
	if err != nil {
		return 0, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	took, err := (exchange{seed: 8, up: throughputBytes, chunk: throughputChunk}).run(conn, deadline)
	if err != nil {
		return 0, err
	}
	return float64(throughputBytes) / 1e6 / took.Seconds(), nil
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// httpGet sends a GET over conn and checks the answer: 200 with body want.
func httpGet(conn net.Conn, want string) error {
	if err := conn.SetDeadline(time.Now().Add(testutil.Patience)); err != nil {
		return err
	}
	req, err := http.NewRequest("GET", "http://"+svcHTTP+"/interop", nil)
	if err != nil {
		return err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return fmt.Errorf("GET: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return fmt.Errorf("GET: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET: the body: %w", err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != want {
		return fmt.Errorf("GET answered %s %q, want 200 %q", resp.Status, body, want)
	}
	return nil
}

// enrollWithZiti creates an identity of roles by REST, enrolls it with `ziti edge enroll`,
// which writes file, and returns its id.
func enrollWithZiti(t *testing.T, r *rest, zitiBin, name string, roles []string, file string) (string, error) {
	id, err := r.create("identities", map[string]any{"name": name, "type": "User", "isAdmin": false,
		"roleAttributes": roles, "enrollment": map[string]any{"ott": true}})
	if err != nil {
		return "", err
	}
	tok, err := r.enrollmentJWT(id, "ott")
	if err != nil {
		return "", err
	}
	z := newZitiCLI(t, nil, zitiBin)
	if err := os.WriteFile(z.path(name+".jwt"), []byte(tok), 0o600); err != nil {
		return "", err
	}
	if _, err := z.run("edge", "enroll", z.path(name+".jwt"), "-o", file); err != nil {
		return "", fmt.Errorf("ziti edge enroll: %w", err)
	}
	return id, fileExists(file)
}

// zitiLog keeps the last n warnings and errors of the ziti CLI's JSON log, each as its
// message and error; lines that are not JSON are kept as they are.
func zitiLog(s string, n int) string {
	var lines []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		var e struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			lines = append(lines, line)
			continue
		}
		if e.Level != "warning" && e.Level != "error" && e.Level != "fatal" {
			continue
		}
		if e.Error != "" {
			e.Msg += ": " + e.Error
		}
		lines = append(lines, e.Level+" "+e.Msg)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// proc is a client process (a tunneler) the suite runs for a step.
type proc struct {
	out    lockedBuffer
	exited chan error
	cancel context.CancelFunc
}

// startProc runs bin with args (in dir with env when given) until stop.
func startProc(t *testing.T, env []string, dir, bin string, args ...string) (*proc, error) {
	ctx, cancel := context.WithCancel(t.Context())
	p := &proc{exited: make(chan error, 1), cancel: cancel}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// stop ends the process and waits for it.
func (p *proc) stop() {
	p.cancel()
	<-p.exited
}

// dial connects to addr, where the process listens once it has started: it waits for the
// port to accept, and fails at once when the process exits.
func (p *proc) dial(addr string) (net.Conn, error) {
	var conn net.Conn
	err := await("a connection to "+addr, func() error {
		select {
		case err := <-p.exited:
			p.exited <- err
			return &procExited{err}
		default:
		}
		var err error
		conn, err = net.DialTimeout("tcp", addr, testutil.Patience)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w; it printed: %s", err, lastLines(p.out.String(), 4))
	}
	return conn, nil
}

// procExited ends an await: the process will not listen any more.
type procExited struct{ err error }

func (e *procExited) Error() string { return fmt.Sprintf("the process exited (%v)", e.err) }

// await calls f every few milliseconds until it returns nil, and returns an error saying what
// was awaited with f's last error when it still fails after testutil.Patience, or at once
// when f's error is a *procExited.
func await(what string, f func() error) error {
	deadline := time.Now().Add(testutil.Patience)
	for {
		err := f()
		var pe *procExited
		switch {
		case err == nil:
			return nil
		case errors.As(err, &pe):
			return fmt.Errorf("%s: %w", what, err)
		case time.Now().After(deadline):
			return fmt.Errorf("%s: still failing after %v: %w", what, testutil.Patience, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
