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
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/quickstart"
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
	// ZmeshSDKEncrypted is an SDK client, `zmesh tunnel proxy --identity F`, dialing through
	// router A (co-located controller, SDK listener, link dialer) and router B (tls: link
	// listener, tunnel host mode dialing the sink from the service's host.v1 config), with
	// end-to-end encryption between the SDK and B's tunnel: compared with BaselineE2ERelay.
	ZmeshSDKEncrypted = "zmesh-sdk-e2ee"
	// ZmeshSDKEncryptedInProcess is ZmeshSDKEncrypted with the SDK embedded in the load
	// generator, as applications embed it, instead of a tunneler process between them:
	// compared with BaselineE2ERelay, whose load generator also does both layers of TLS.
	ZmeshSDKEncryptedInProcess = "zmesh-sdk-e2ee-inproc"
)

// Zmesh returns the zmesh scenarios, in the order they run. Every router is its own process,
// `zmesh router run ROUTER.yml [--controller CONTROLLER.yml]`, started from Exec.Path.
func Zmesh() []Scenario {
	return []Scenario{
		Define(ZmeshOneRouter, BaselineProxy, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, oneRouter(), false)
		}),
		Define(ZmeshTwoRoutersTLS, BaselineTLSRelay, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, twoRouters(config.TransportTLS), false)
		}),
		Define(ZmeshTwoRoutersQUIC, BaselineTLSRelay, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, twoRouters(config.TransportQUIC), false)
		}),
		Define(ZmeshSDKEncrypted, BaselineE2ERelay, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, sdkEncrypted(), false)
		}),
		Define(ZmeshSDKEncryptedInProcess, BaselineE2ERelay, func(ctx context.Context, env *Env) (Target, error) {
			return setupMesh(ctx, env, sdkEncrypted(), true)
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
	// edge: the router has an SDK listener, where the bench's SDK client (a standalone
	// tunneler in proxy mode) dials benchService.
	edge bool
	// host: the router's tunnel in host mode hosts benchService, which requires end-to-end
	// encryption and has a host.v1 config with the sink's address (the router is
	// tunneler-enabled and the Bind policy grants its identity).
	host bool
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

// sdkEncrypted is router A (controller, SDK listener, link dialer) and router B (tls: link
// listener, tunnel host mode), with the bench's SDK client as the on-ramp.
func sdkEncrypted() []routerSpec {
	return []routerSpec{
		{name: "router-a", controller: true, edge: true, linkDial: true},
		{name: "router-b", host: true, linkListen: config.TransportTLS},
	}
}

// preparedMesh is a zmesh network ready to start: the controller's data directory with the
// routers enrolled and the service, its terminator and its policy created, and the files the
// processes read.
type preparedMesh struct {
	ctrlFile string
	routers  []preparedRouter
	// proxyAddr is where the on-ramp's tunnel proxy listens for benchService.
	proxyAddr string
	// clientFile, when set, is the identity file of the SDK client whose standalone tunneler
	// is the on-ramp.
	clientFile string
}

type preparedRouter struct {
	routerSpec
	id   string // the edge router's id, its certificates' CommonName
	file string // its configuration
}

// onRamp says whether circuits enter the mesh at this router.
func (r preparedRouter) onRamp() bool { return r.ingress || r.edge }

// offRamp says whether circuits leave the mesh at this router.
func (r preparedRouter) offRamp() bool { return r.egress || r.host }

// role says what the router does on the path.
func (r preparedRouter) role() string {
	switch {
	case r.onRamp() && r.offRamp():
		return "ingress+egress"
	case r.onRamp():
		return "ingress"
	case r.offRamp():
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
// controller first), then the SDK client's tunneler if the mesh has one and the SDK is not
// embedded in the load generator, and waits until a circuit carries a byte to the sink and
// back.
func setupMesh(ctx context.Context, env *Env, specs []routerSpec, embedded bool) (Target, error) {
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
	// its idle circuits are not measured. Nor are those of a mesh with an SDK client: the
	// host-mode router holds three descriptors per circuit (both ends of the socket pair to
	// its tunnel, and the connection to the sink), so the default 10,000 circuits would
	// exceed the usual limit of 20,000 descriptors.
	if len(procs) < 2 || mesh.clientFile != "" {
		target.IdleRouters = nil
	}
	if mesh.clientFile != "" && embedded {
		target.Addr = ""
		target.Via = []string{"--via", ViaSDK, "--identity", mesh.clientFile, "--service", benchService}
		c, err := newConnector(connectorConfig{via: ViaSDK, identity: mesh.clientFile, service: benchService})
		if err != nil {
			return Target{}, err
		}
		defer c.close()
		return target, probeCircuit(ctx, c, readyTimeout, procs...)
	}
	if mesh.clientFile != "" {
		_, port, _ := net.SplitHostPort(mesh.proxyAddr)
		p, err := env.Start(ctx, Command{Name: "sdk-client", Relay: true, Args: []string{"tunnel", "proxy",
			"--identity", mesh.clientFile, "--service", benchService + ":" + port, "--log-level", "warn"}})
		if err != nil {
			return Target{}, err
		}
		if err := p.WaitOutput(ctx, "service "+benchService+" on ", readyTimeout); err != nil {
			return Target{}, err
		}
		procs = append(procs, p)
	}
	if err := WaitListening(ctx, mesh.proxyAddr, readyTimeout); err != nil {
		return Target{}, err
	}
	c, err := newConnector(connectorConfig{addr: mesh.proxyAddr})
	if err != nil {
		return Target{}, err
	}
	if err := probeCircuit(ctx, c, readyTimeout, procs...); err != nil {
		return Target{}, err
	}
	return target, nil
}

// probeCircuit opens circuits through c until one carries a byte to the sink and back: links
// form, and are reported to the controller, only after the routers connected, so the first
// circuits may find no path. It fails early when one of procs exits.
func probeCircuit(ctx context.Context, c *connector, timeout time.Duration, procs ...*Process) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for tries := 1; ; tries++ {
		conn, _, err := openCircuit(ctx, c)
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
			return fmt.Errorf("no circuit through %s carried a byte to the sink and back within %s (%d tries): %w (last: %w)", c.target, timeout, tries, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prepareMesh writes, in dir, the controller's configuration and data directory and each
// router's identity and configuration. The controller is opened here, in this process, to
// enroll the routers, create benchService with the way it leaves the mesh (a proxy
// terminator on the egress router, address sink; or, for a host-mode router, end-to-end
// encryption and a host.v1 config with the sink's address and a Bind policy for that
// router) and the way it enters it (a Dial policy for the ingress router's identity; or, for
// an edge router, an SDK client identity with its identity file and the policies that let it
// dial through that router), and closed again, so that the router process that runs it can
// open the data directory.
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
		if r.onRamp() {
			ingress = r
		}
		if r.offRamp() {
			egress = r
		}
	}
	if ingress == nil || egress == nil {
		return nil, errors.New("prepare the mesh: it needs an ingress and an egress router")
	}
	if mesh.proxyAddr, err = writeRouterConfigs(mesh.routers, "tls:"+ctrlAddr); err != nil {
		return nil, err
	}
	svc := &model.Service{Name: benchService, EncryptionRequired: egress.host}
	if egress.host {
		if svc.Configs, err = hostConfig(m, sink); err != nil {
			return nil, err
		}
	}
	if err := m.CreateService(svc); err != nil {
		return nil, fmt.Errorf("create service %s: %w", benchService, err)
	}
	if egress.host {
		if err := m.CreateServicePolicy(&model.ServicePolicy{Name: "bench-bind", Type: model.PolicyBind, Semantic: model.SemanticAny,
			IdentityRoles: []string{"@" + egress.id}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
			return nil, fmt.Errorf("create the Bind policy of %s for %s: %w", benchService, egress.name, err)
		}
	} else if err := m.CreateTerminator(&model.Terminator{ServiceID: svc.ID, RouterID: egress.id, Binding: config.DialerProxy, Address: sink}); err != nil {
		return nil, fmt.Errorf("create the terminator of %s on %s: %w", benchService, egress.name, err)
	}
	dialer := ingress.id
	if ingress.edge {
		if dialer, err = enrollClient(ctrl, dir, "https://"+apiAddr, mesh); err != nil {
			return nil, err
		}
		if err := m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: "bench-client", Semantic: model.SemanticAny,
			IdentityRoles: []string{"@" + dialer}, EdgeRouterRoles: []string{"@" + ingress.id}}); err != nil {
			return nil, fmt.Errorf("create the edge router policy of the SDK client: %w", err)
		}
		if err := m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: "bench", Semantic: model.SemanticAny,
			ServiceRoles: []string{"@" + svc.ID}, EdgeRouterRoles: []string{"#all"}}); err != nil {
			return nil, fmt.Errorf("create the service edge router policy of %s: %w", benchService, err)
		}
	}
	if err := m.CreateServicePolicy(&model.ServicePolicy{Name: "bench-dial", Type: model.PolicyDial, Semantic: model.SemanticAny,
		IdentityRoles: []string{"@" + dialer}, ServiceRoles: []string{"@" + svc.ID}}); err != nil {
		return nil, fmt.Errorf("create the Dial policy of %s for %s: %w", benchService, dialer, err)
	}
	return mesh, nil
}

// hostConfig creates the host.v1 config that sends benchService's circuits to sink, and
// returns it as a service's config list.
func hostConfig(m *model.Model, sink string) ([]string, error) {
	host, port, err := net.SplitHostPort(sink)
	if err != nil {
		return nil, fmt.Errorf("the sink's address %q: %w", sink, err)
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("the sink's port %q: %w", port, err)
	}
	types, err := m.ConfigTypes()
	if err != nil {
		return nil, fmt.Errorf("config types: %w", err)
	}
	for _, ct := range types {
		if ct.Name != "host.v1" {
			continue
		}
		cfg := &model.Config{Name: "bench-host", ConfigTypeID: ct.ID, Data: map[string]any{"protocol": "tcp", "address": host, "port": portNum}}
		if err := m.CreateConfig(cfg); err != nil {
			return nil, fmt.Errorf("create the host.v1 config of %s: %w", benchService, err)
		}
		return []string{cfg.ID}, nil
	}
	return nil, errors.New("the controller has no host.v1 config type")
}

// enrollClient creates the SDK client's identity, enrolls it with a new key and writes its
// identity file, as `zmesh enroll` would, in dir; it returns the identity's id.
func enrollClient(ctrl *controlplane.Controller, dir, apiURL string, mesh *preparedMesh) (string, error) {
	m := ctrl.Model()
	id, err := m.CreateIdentity(model.IdentityCreate{Name: "bench-client", Enrollment: &model.EnrollmentRequest{OTT: true}})
	if err != nil {
		return "", fmt.Errorf("create the SDK client's identity: %w", err)
	}
	ens, err := m.EnrollmentsOf(id.ID)
	if err != nil || len(ens) != 1 {
		return "", fmt.Errorf("the SDK client's enrollment: %d, %w", len(ens), err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("SDK client key: %w", err)
	}
	csr, err := clientCSR(key, "bench-client")
	if err != nil {
		return "", err
	}
	cert, err := m.EnrollOTT(ens[0].Token, csr)
	if err != nil {
		return "", fmt.Errorf("enroll the SDK client: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("SDK client key: %w", err)
	}
	f := apiclient.NewIdentityFile(apiURL)
	f.ID.Cert = "pem:" + string(cert)
	f.ID.Key = "pem:" + string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	f.ID.CA = "pem:" + string(ctrl.CA().PEM())
	mesh.clientFile = filepath.Join(dir, "bench-client.json")
	if err := f.Save(mesh.clientFile); err != nil {
		return "", err
	}
	return id.ID, nil
}

// noEnv resolves no ${VAR}: the bench's configuration files use none.
func noEnv(string) (string, bool) { return "", false }

// enrollRouter creates the edge router of spec and enrolls it as quickstart does: a new key
// and certificates in dir/<name> (quickstart.EnrollRouter's files: the server certificate
// names localhost and 127.0.0.1, where the bench's routers listen).
func enrollRouter(m *model.Model, dir string, spec routerSpec) (preparedRouter, error) {
	er := &model.EdgeRouter{Name: spec.name, IsTunnelerEnabled: spec.ingress || spec.host}
	if err := m.CreateEdgeRouter(er); err != nil {
		return preparedRouter{}, fmt.Errorf("create edge router: %w", err)
	}
	rdir := filepath.Join(dir, spec.name)
	if err := os.Mkdir(rdir, 0o700); err != nil {
		return preparedRouter{}, fmt.Errorf("router directory: %w", err)
	}
	if err := quickstart.EnrollRouter(m, er.ID, rdir); err != nil {
		return preparedRouter{}, err
	}
	return preparedRouter{routerSpec: spec, id: er.ID, file: filepath.Join(rdir, "router.yml")}, nil
}

// clientCSR is a certificate request for key.
func clientCSR(key *ecdsa.PrivateKey, name string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// writeRouterConfigs writes each router's configuration (v3) and returns where the on-ramp's
// tunnel proxy will listen: the ingress router's, or the SDK client's for an edge router.
func writeRouterConfigs(routers []preparedRouter, ctrlEndpoint string) (string, error) {
	var proxyAddr string
	for _, r := range routers {
		var b strings.Builder
		fmt.Fprintf(&b, "v: 3\nidentity:\n  cert: %s\n  server_cert: %s\n  key: %s\n  ca: %s\n",
			quickstart.RouterCertFile, quickstart.RouterServerCertFile, quickstart.RouterKeyFile, quickstart.RouterCAFile)
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
		var listeners []string
		if r.ingress || r.edge {
			addr, err := FreeAddr()
			if err != nil {
				return "", err
			}
			proxyAddr = addr
			_, port, _ := net.SplitHostPort(addr)
			if r.ingress {
				listeners = append(listeners, fmt.Sprintf("  - binding: tunnel\n    options:\n      mode: proxy\n      services: [%s:%s]\n", benchService, port))
			}
		}
		if r.edge {
			port, err := freePort(config.TransportTLS)
			if err != nil {
				return "", err
			}
			listeners = append(listeners, fmt.Sprintf("  - binding: edge\n    bind: tls:127.0.0.1:%[1]d\n    advertise: tls:127.0.0.1:%[1]d\n", port))
		}
		if r.host {
			listeners = append(listeners, "  - binding: tunnel\n    options:\n      mode: host\n")
		}
		if len(listeners) > 0 {
			b.WriteString("edge:\n  csr:\n    sans:\n      dns: [localhost]\n      ip: [127.0.0.1]\n")
			b.WriteString("listeners:\n" + strings.Join(listeners, ""))
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
	if transport == config.TransportQUIC {
		return freeLoopbackPort("udp")
	}
	return freeLoopbackPort("tcp")
}
