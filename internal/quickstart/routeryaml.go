package quickstart

import "fmt"

// webListenerName is the name of each router's web listener.
const webListenerName = "ops"

// routerYAML is router i's configuration (v3), its paths relative to its directory:
//   - the control channel to the co-located controller;
//   - a link listener and a link dialer, so that every pair of routers links (the
//     registry keeps one link per pair when both dial);
//   - an SDK listener for SDK clients such as `zmesh tunnel proxy --identity client.json`;
//   - the tunnel in proxy mode with the echo service on its proxy port; proxy mode also
//     hosts the services the router's identity may bind, which makes router-1 the echo
//     service's host, with end-to-end encryption kept on;
//   - a web listener with the health checks and the Prometheus metrics.
//
// The first controller ping comes after a second rather than the default 15 s, so that the
// health checks report healthy soon after the start.
func routerYAML(p Ports, i int) string {
	return fmt.Sprintf(`# %[1]s of zmesh quickstart, written again on each run of it.
v: 3
identity:
  cert: %[2]s
  server_cert: %[3]s
  key: %[4]s
  ca: %[5]s
ctrl:
  endpoint: tls:%[6]s
edge:
  csr:
    sans:
      dns: [localhost]
      ip: [%[7]s]
link:
  listeners:
    - binding: transport
      bind: tls:%[8]s
      advertise: tls:%[8]s
  dialers:
    - binding: transport
listeners:
  - binding: edge
    bind: tls:%[9]s
    advertise: tls:%[9]s
  - binding: tunnel
    options:
      mode: proxy
      services: [%[10]s:%[11]d]
healthChecks:
  ctrlPingCheck:
    initialDelay: 1s
web:
  - name: %[12]s
    bindPoints:
      - interface: %[13]s
        address: %[13]s
    apis:
      - binding: health-checks
      - binding: metrics
`, RouterName(i), RouterCertFile, RouterServerCertFile, RouterKeyFile, RouterCAFile,
		Addr(p.Ctrl()), Host, Addr(p.Link(i)), Addr(p.Edge(i)), ServiceName, p.Proxy(i), webListenerName, Addr(p.Web(i)))
}
