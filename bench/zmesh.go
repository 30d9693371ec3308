package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/model"
)

// Names of the zmesh scenarios.
const (
	// ZmeshOneRouter is one router, with the controller co-located, carrying each connection
	// of its tunnel proxy on-ramp as a circuit to its own proxy terminator: compared with
	// BaselineProxy.
	ZmeshOneRouter = "zmesh-1router"
	// ZmeshTwoRoutersTLS is router A (co-located controller, tunnel proxy, link dialer) and
	// router B (tls: link listener, terminator), with split links: compared with
	// BaselineTLSRelay.
	ZmeshTwoRoutersTLS = "zmesh-2routers-tls"
	// ZmeshTwoRoutersQUIC is ZmeshTwoRoutersTLS over a quic: link listener.
	ZmeshTwoRoutersQUIC = "zmesh-2routers-quic"
)

// Zmesh returns the zmesh scenarios, in the order they run. Every router is its own process,
// `zmesh router run ROUTER.yml [--controller CONTROLLER.yml]`, started from Exec.Path.
func Zmesh() []Scenario {
	return []Scenario{
		Define(ZmeshOneRouter, BaselineProxy, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, oneRouter())
		}),
		Define(ZmeshTwoRoutersTLS, BaselineTLSRelay, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, twoRouters(config.TransportTLS))
		}),
		Define(ZmeshTwoRoutersQUIC, BaselineTLSRelay, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, twoRouters(config.TransportQUIC))
		}),
	}
}

// benchService is the service the zmesh scenarios carry to the sink.
const benchService = "bench"

// routerSpec describes one router of a zmesh scenario.
type routerSpec struct {
	// name is the edge router's name, its directory and its process's name.
	name string
	// controller: the controller runs co-located in this router's process.
	controller bool
	// ingress: the router runs the tunnel proxy on-ramp of benchService, as its own identity
	// (so it is tunneler-enabled and the Dial policy grants that identity).
	ingress bool
	// egress: the router hosts benchService's terminator (binding proxy, address the sink).
	egress bool
	// linkListen, when set, is the transport of a link listener ("tls" or "quic");
	// linkDial gives the router a link dialer (split links).
	linkListen string
	linkDial   bool
}

// oneRouter is the single router of ZmeshOneRouter: controller, on-ramp and terminator.
func oneRouter() []routerSpec {
	return []routerSpec{{name: "router", controller: true, ingress: true, egress: true}}
}

// twoRouters is router A (controller, on-ramp, link dialer) and router B (link listener over
// transport, terminator).
func twoRouters(transport string) []routerSpec {
	return []routerSpec{
		{name: "router-a", controller: true, ingress: true, linkDial: true},
		{name: "router-b", egress: true, linkListen: transport},
	}
}

// preparedMesh is a zmesh network ready to start: the controller's data directory with the
// routers enrolled and the service, its terminator and its policy created, and the files the
// processes read.
type preparedMesh struct {
	ctrlFile string
	routers  []preparedRouter
	// proxyAddr is where the ingress's tunnel proxy listens for benchService.
	proxyAddr string
}

type preparedRouter struct {
	routerSpec
	id   string // the edge router's id, its certificates' CommonName
	file string // its configuration
}

// role says what the router does on the path.
func (r preparedRouter) role() string {
	switch {
	case r.ingress && r.egress:
		return "ingress+egress"
	case r.ingress:
		return "ingress"
	case r.egress:
		return "egress"
	}
	return "transit"
}

// args are the router's command line.
func (r preparedRouter) args(ctrlFile string) []string {
	args := []string{"router", "run", r.file, "--log-level", "warn"}
	if r.controller {
		args = append(args, "--controller", ctrlFile)
	}
	return args
}

// readyLine is what the router prints once it runs.
func (r preparedRouter) readyLine() string { return "router " + r.id + " running" }

// setupMesh prepares the network of specs, starts its routers in order (the one with the
// controller first) and waits until a circuit carries a byte to the sink and back.
func setupMesh(ctx context.Context, env *Env, specs []routerSpec) (Target, error) {
	mesh, err := prepareMesh(env.Dir, env.Sink, specs, env.Log)
	if err != nil {
		return Target{}, err
	}
	target := Target{Addr: mesh.proxyAddr, Circuits: true}
	var procs []*Process
	for _, r := range mesh.routers {
		p, err := env.Start(ctx, Command{Name: r.name, Args: r.args(mesh.ctrlFile), Relay: true})
		if err != nil {
			return Target{}, err
		}
		if err := p.WaitOutput(ctx, r.readyLine(), readyTimeout); err != nil {
			return Target{}, err
		}
		procs = append(procs, p)
		target.IdleRouters = append(target.IdleRouters, Router{Role: r.role(), Process: p})
	}
	// A router that holds both ends of every circuit would need a file descriptor per end:
	// its idle circuits are not measured.
	if len(procs) < 2 {
		target.IdleRouters = nil
	}
	if err := WaitListening(ctx, mesh.proxyAddr, readyTimeout); err != nil {
		return Target{}, err
	}
	if err := probeCircuit(ctx, mesh.proxyAddr, readyTimeout, procs...); err != nil {
		return Target{}, err
	}
	return target, nil
}

// probeCircuit opens circuits to addr until one carries a byte to the sink and back: links
// form, and are reported to the controller, only after the routers connected, so the first
// circuits may find no path. It fails early when one of procs exits.
func probeCircuit(ctx context.Context, addr string, timeout time.Duration, procs ...*Process) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := &net.Dialer{Timeout: circuitTimeout}
	for tries := 1; ; tries++ {
		conn, _, err := openCircuit(ctx, d, addr)
		if err == nil {
			return conn.Close()
		}
		for _, p := range procs {
			if !p.Running() {
				return p.Err()
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no circuit through %s carried a byte to the sink and back within %s (%d tries): %w (last: %w)", addr, timeout, tries, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prepareMesh writes, in dir, the controller's configuration and data directory and each
// router's identity and configuration. The controller is opened here, in this process, to
// enroll the routers and create benchService, its terminator on the egress (binding proxy,
// address sink) and a Dial policy for the ingress router's identity, and closed again, so
// that the router process that runs it can open the data directory.
func prepareMesh(dir, sink string, specs []routerSpec, log *slog.Logger) (_ *preparedMesh, err error) {
	ctrlAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	apiAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	password := make([]byte, 16)
	rand.Read(password)
	mesh := &preparedMesh{ctrlFile: filepath.Join(dir, "controller.yml")}
	ctrlYAML := fmt.Sprintf("v: 1\ndataDir: controller\napi:\n  listen: %s\nctrl:\n  listen: tls:%s\nadmin:\n  username: admin\n  password: %s\n",
		apiAddr, ctrlAddr, hex.EncodeToString(password))
	if err := os.WriteFile(mesh.ctrlFile, []byte(ctrlYAML), 0o600); err != nil {
		return nil, fmt.Errorf("write the controller configuration: %w", err)
	}
	cfg, _, err := config.LoadController(mesh.ctrlFile, noEnv)
	if err != nil {
		return nil, fmt.Errorf("the bench's controller configuration: %w", err)
	}
	ctrl, err := controlplane.Open(cfg, log.With("role", "controller"), controlplane.Build{Version: "bench"})
	if err != nil {
		return nil, fmt.Errorf("open the controller to prepare it: %w", err)
	}
	defer func() {
		if cerr := ctrl.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close the prepared controller: %w", cerr))
		}
	}()
	m := ctrl.Model()
	var ingress, egress *preparedRouter
	for _, spec := range specs {
		r, err := enrollRouter(m, dir, spec)
		if err != nil {
			return nil, fmt.Errorf("router %s: %w", spec.name, err)
		}
		mesh.routers = append(mesh.routers, r)
	}
	for i := range mesh.routers {
		r := &mesh.routers[i]
		if r.ingress {
			ingress = r
		}
		if r.egress {
			egress = r
		}
	}
	if ingress == nil || egress == nil {
		return nil, errors.New("prepare the mesh: it needs an ingress and an egress router")
	}
	if mesh.proxyAddr, err = writeRouterConfigs(mesh.routers, "tls:"+ctrlAddr); err != nil {
		return nil, err
	}
	svc := &model.Service{Name: benchService}
	if err := m.CreateService(svc); err != nil {
		return nil, fmt.Errorf("create service %s: %w", benchService, err)
	}
	if err := m.CreateTerminator(&model.Terminator{ServiceID: svc.ID, RouterID: egress.id, Binding: config.DialerProxy, Address: sink}); err != nil {
		return nil, fmt.Errorf("create the terminator of %s on %s: %w", benchService, egress.name, err)
	}
	if err := m.CreateServicePolicy(&model.ServicePolicy{Name: "bench-dial", Type: model.PolicyDial, Semantic: model.SemanticAny,
		IdentityRoles: []string{"@" + ingress.id}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		return nil, fmt.Errorf("create the Dial policy of %s for %s: %w", benchService, ingress.name, err)
	}
	return mesh, nil
}

// noEnv resolves no ${VAR}: the bench's configuration files use none.
func noEnv(string) (string, bool) { return "", false }

// enrollRouter creates the edge router of spec, enrolls it with a new key and writes its key,
// certificates and CA in dir/<name>.
func enrollRouter(m *model.Model, dir string, spec routerSpec) (preparedRouter, error) {
	er := &model.EdgeRouter{Name: spec.name, IsTunnelerEnabled: spec.ingress}
	if err := m.CreateEdgeRouter(er); err != nil {
		return preparedRouter{}, fmt.Errorf("create edge router: %w", err)
	}
	e, err := m.RouterEnrollment(er.ID)
	if err != nil {
		return preparedRouter{}, fmt.Errorf("enrollment of edge router %s: %w", er.ID, err)
	}
	if e == nil {
		return preparedRouter{}, fmt.Errorf("edge router %s has no pending enrollment", er.ID)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return preparedRouter{}, fmt.Errorf("router key: %w", err)
	}
	clientCSR, err := routerCSR(key, spec.name)
	if err != nil {
		return preparedRouter{}, err
	}
	serverCSR, err := routerCSR(key, spec.name, "localhost")
	if err != nil {
		return preparedRouter{}, err
	}
	certs, err := m.EnrollErOtt(e.Token, clientCSR, serverCSR)
	if err != nil {
		return preparedRouter{}, fmt.Errorf("enroll: %w", err)
	}
	rdir := filepath.Join(dir, spec.name)
	if err := os.Mkdir(rdir, 0o700); err != nil {
		return preparedRouter{}, fmt.Errorf("router directory: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return preparedRouter{}, fmt.Errorf("router key: %w", err)
	}
	for name, data := range map[string][]byte{
		"key.pem":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"client.cert": certs.Cert,
		"server.cert": certs.ServerCert,
		"ca.cert":     certs.CA,
	} {
		if err := os.WriteFile(filepath.Join(rdir, name), data, 0o600); err != nil {
			return preparedRouter{}, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return preparedRouter{routerSpec: spec, id: er.ID, file: filepath.Join(rdir, "router.yml")}, nil
}

// routerCSR is a certificate request for key; a server request also names 127.0.0.1.
func routerCSR(key *ecdsa.PrivateKey, name string, dns ...string) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}, DNSNames: dns}
	if len(dns) > 0 {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// writeRouterConfigs writes each router's configuration (v3) and returns where the ingress's
// tunnel proxy will listen.
func writeRouterConfigs(routers []preparedRouter, ctrlEndpoint string) (string, error) {
	var proxyAddr string
	for _, r := range routers {
		var b strings.Builder
		fmt.Fprintf(&b, "v: 3\nidentity:\n  cert: client.cert\n  server_cert: server.cert\n  key: key.pem\n  ca: ca.cert\n")
		fmt.Fprintf(&b, "ctrl:\n  endpoint: %s\n", ctrlEndpoint)
		if r.egress {
			fmt.Fprintf(&b, "dialers:\n  - binding: %s\n", config.DialerProxy)
		}
		if r.linkListen != "" || r.linkDial {
			b.WriteString("link:\n")
		}
		if r.linkListen != "" {
			port, err := freePort(r.linkListen)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "  listeners:\n    - binding: transport\n      bind: %[1]s:127.0.0.1:%[2]d\n      advertise: %[1]s:127.0.0.1:%[2]d\n      groups: [bench]\n",
				r.linkListen, port)
		}
		if r.linkDial {
			b.WriteString("  dialers:\n    - binding: transport\n      groups: [bench]\n      split: true\n")
		}
		if r.ingress {
			addr, err := FreeAddr()
			if err != nil {
				return "", err
			}
			_, port, _ := net.SplitHostPort(addr)
			b.WriteString("edge:\n  csr:\n    sans:\n      dns: [localhost]\n      ip: [127.0.0.1]\n")
			fmt.Fprintf(&b, "listeners:\n  - binding: tunnel\n    options:\n      mode: proxy\n      services: [%s:%s]\n", benchService, port)
			proxyAddr = addr
		}
		if err := os.WriteFile(r.file, []byte(b.String()), 0o600); err != nil {
			return "", fmt.Errorf("write the configuration of router %s: %w", r.name, err)
		}
		if _, _, err := config.LoadRouter(r.file, noEnv); err != nil {
			return "", fmt.Errorf("the bench's configuration of router %s: %w", r.name, err)
		}
	}
	return proxyAddr, nil
}

// freePort returns a 127.0.0.1 port that was free a moment ago for transport: a TCP port for
// tls, a UDP port for quic.
func freePort(transport string) (int, error) {
	if transport != config.TransportQUIC {
		addr, err := FreeAddr()
		if err != nil {
			return 0, err
		}
		_, port, _ := net.SplitHostPort(addr)
		return strconv.Atoi(port)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free UDP port: %w", err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if err := pc.Close(); err != nil {
		return 0, fmt.Errorf("find a free UDP port: %w", err)
	}
	return port, nil
}
