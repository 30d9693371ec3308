package config

import (
	"slices"
	"strings"
	"testing"
)

const idABC = "identity: {cert: a, key: b, ca: c}\n"

// listeningRouter is a minimal router with a server certificate, as a listening router needs.
const listeningRouter = "v: 3\nctrl: {endpoint: 'tls:a:1'}\nidentity: {cert: a, key: b, ca: c, server_cert: s}\n"

// TestRouterErrors checks the exact errors of broken files: every problem is reported, in line
// order, with file, line, key path and the rule.
func TestRouterErrors(t *testing.T) {
	t.Parallel()
	edgeListener := func(extra string) string {
		return minimalRouter + "listeners:\n  - binding: edge\n    bind: tls:0.0.0.0:3022\n" + extra
	}
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"version 2", "v: 2\nctrl: {endpoint: 'tls:a:1'}\n",
			[]string{"r.yml:1: v: version 2 is not supported; supported: 3"}},
		{"version word", "v: three\n",
			[]string{"r.yml:1: v: version three is not supported; supported: 3"}},
		{"no version", "ctrl: {endpoint: 'tls:a:1'}\n",
			[]string{"r.yml:1: v: is required: the configuration version; supported: 3"}},
		{"required sections", "v: 3\n", []string{
			"r.yml:1: ctrl: is required: the controller's address (ctrl.endpoint or ctrl.endpoints)",
			"r.yml:1: identity: is required: the router's certificate, key and CA files",
		}},
		{"required identity keys", "v: 3\nctrl: {endpoint: 'tls:a:1'}\nidentity: {cert: a}\n", []string{
			"r.yml:3: identity.key: is required: path of the router's private key",
			"r.yml:3: identity.ca: is required: path of the CA bundle the router trusts",
		}},
		{"empty file", "", []string{"r.yml: file is empty; a configuration is a YAML mapping of sections"}},
		{"top level list", "- a\n", []string{"r.yml:1: the top level must be a mapping of sections, found a list"}},
		{"bad yaml", "v: 3\nctrl: [\n", []string{"r.yml:2: invalid YAML: did not find expected node content"}},
		{"duplicate key", "v: 3\nctrl:\n  endpoint: tls:a:6262\n  endpoint: tls:b:1\n" + idABC,
			[]string{"r.yml:4: ctrl.endpoint: key appears twice (first at line 3)"}},
		{"no endpoint", "v: 3\nctrl:\n  endpoints: []\n" + idABC,
			[]string{"r.yml:3: ctrl: one of ctrl.endpoint or ctrl.endpoints is required"}},
		{"transport", "v: 3\nctrl:\n  endpoint: ftp:a:1\n" + idABC,
			[]string{`r.yml:3: ctrl.endpoint: "ftp:a:1": transport "ftp" is not allowed here; allowed: tls`}},
		{"no transport", "v: 3\nctrl:\n  endpoint: a:6262\n" + idABC,
			[]string{`r.yml:3: ctrl.endpoint: "a:6262": transport "a" is not allowed here; allowed: tls`}},
		{"port 0", "v: 3\nctrl:\n  endpoint: tls:a:0\n" + idABC,
			[]string{`r.yml:3: ctrl.endpoint: "tls:a:0": port "0" is not a number from 1 to 65535`}},
		{"port 65536", "v: 3\nctrl:\n  endpoint: tls:a:65536\n" + idABC,
			[]string{`r.yml:3: ctrl.endpoint: "tls:a:65536": port "65536" is not a number from 1 to 65535`}},
		{"ipv6 without brackets", "v: 3\nctrl:\n  endpoint: tls:::1:6262\n" + idABC,
			[]string{`r.yml:3: ctrl.endpoint: "tls:::1:6262": an IPv6 host must be written in brackets, e.g. [::1]:6262`}},
		{"bad ctrl bind", "v: 3\nctrl:\n  endpoint: tls:a:1\n  bind: 10.0.0.300\n" + idABC,
			[]string{`r.yml:4: ctrl.bind: "10.0.0.300" is neither a local IP address, an interface name, nor <transport>:<ip>:<port>`}},
		{"unset variables", "v: 3\nctrl:\n  endpoint: tls:a:6262\nidentity:\n  cert: ${NOPE}/a\n  key: $ALSO_NOT\n  ca: c\n  server_cert: ${BAD\n", []string{
			"r.yml:5: identity.cert: environment variable NOPE is not set",
			"r.yml:6: identity.key: environment variable ALSO_NOT is not set",
			`r.yml:8: identity.server_cert: unterminated ${ in "${BAD"`,
		}},
		{"server_cert with unset variable", "v: 3\nctrl:\n  endpoint: tls:a:6262\nidentity:\n  cert: a\n  key: b\n  ca: c\n  server_cert: ${NOPE}/s\n" +
			"link:\n  listeners:\n    - {binding: transport, bind: 'tls:0.0.0.0:6000', advertise: 'h:6000'}\n", []string{
			"r.yml:8: identity.server_cert: environment variable NOPE is not set",
		}},
		{"empty server_cert", listeningRouter[:len(listeningRouter)-len("server_cert: s}\n")] + "server_cert: ''}\nlink:\n  listeners:\n    - {binding: transport, bind: 'tls:0.0.0.0:6000', advertise: 'h:6000'}\n", []string{
			"r.yml:3: identity.server_cert: is required because the router listens (link.listeners[0]): path of the server certificate",
		}},
		{"duration without unit", "v: 3\nctrl:\n  endpoint: tls:a:6262\n  defaultRequestTimeout: 5\n" + idABC,
			[]string{`r.yml:4: ctrl.defaultRequestTimeout: "5" has no unit; write a duration with a unit suffix (ms, s, m, h), e.g. 5s`}},
		{"not a duration", "v: 3\nctrl:\n  endpoint: tls:a:6262\n  defaultRequestTimeout: soon\n" + idABC,
			[]string{`r.yml:4: ctrl.defaultRequestTimeout: "soon" is not a duration; write a number with a unit suffix (ms, s, m, h), e.g. 5s or 1m30s`}},
		{"not a whole number", "v: 3\nctrl:\n  endpoint: tls:a:6262\n  options: {connectTimeoutMs: 1.5}\n" + idABC,
			[]string{`r.yml:4: ctrl.options.connectTimeoutMs: "1.5" is not a whole number`}},
		{"link dialer", minimalRouter + "link:\n  dialers:\n    - binding: transport\n      split: maybe\n      healthyDialBackoff: {minRetryInterval: 10m, maxRetryInterval: 1m}\n", []string{
			`r.yml:11: link.dialers[0].split: "maybe" is not a boolean; allowed: true, false`,
			"r.yml:12: link.dialers[0].healthyDialBackoff.minRetryInterval: 10m is above maxRetryInterval 1m",
		}},
		{"link listener", minimalRouter + "link:\n  listeners:\n    - binding: edge\n      bind: tcp:0.0.0.0:6000\n", []string{
			"r.yml:5: identity.server_cert: is required because the router listens (link.listeners[0]): path of the server certificate",
			`r.yml:10: link.listeners[0].binding: "edge" is not allowed; allowed: transport`,
			"r.yml:10: link.listeners[0].advertise: is required: the <host>:<port> other routers use to reach this listener",
			`r.yml:11: link.listeners[0].bind: "tcp:0.0.0.0:6000": transport "tcp" is not allowed here; allowed: tls, quic`,
		}},
		{"edge listener without edge", edgeListener("    advertise: quic:h:3022\n"), []string{
			"r.yml:5: identity.server_cert: is required because the router listens (listeners[0]): path of the server certificate",
			"r.yml:9: listeners[0].binding: the edge listener needs the edge section, which turns edge functionality on",
			`r.yml:11: listeners[0].advertise: "quic:h:3022": transport quic does not match the bind address's tls`,
		}},
		{"edge listener without advertise", listeningRouter + "edge: {csr: {sans: {dns: [h]}}}\nlisteners:\n  - binding: edge\n    bind: tls:0.0.0.0:3022\n", []string{
			"r.yml:6: listeners[0].advertise: is required: the <host>:<port> clients use to reach this listener (advertise or options.advertise)",
		}},
		{"edge listener without SANs", listeningRouter + "edge: {csr: {country: US}}\nlisteners:\n  - binding: edge\n    bind: tls:0.0.0.0:3022\n    advertise: h:3022\n", []string{
			"r.yml:4: edge.csr.sans: at least one SAN (dns, ip, uri or email) is required to accept connections from SDKs or other routers",
		}},
		{"proxy services", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options: {mode: proxy, services: ['a:80', 'b:80', 'c', ':81', 'd:0']}\n  - binding: tunnel\n", []string{
			"r.yml:11: listeners[0].options.services[1]: port 80 is already used by services[0]",
			`r.yml:11: listeners[0].options.services[2]: "c" is not <service>:<port>`,
			`r.yml:11: listeners[0].options.services[3]: ":81" is not <service>:<port>`,
			`r.yml:11: listeners[0].options.services[4]: "d:0": port "0" is not a number from 1 to 65535`,
			"r.yml:12: listeners[1].binding: only one tunnel listener is allowed",
		}},
		{"proxy without services", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options: {mode: proxy}\n", []string{
			"r.yml:11: listeners[0].options.services: is required in mode proxy: a list of <service>:<port>",
		}},
		{"tproxy options", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options: {mode: tproxy, resolver: 'tcp://1.2.3.4:53', dnsSvcIpRange: 10.0.0.1/32}\n", []string{
			`r.yml:11: listeners[0].options.resolver: "tcp://1.2.3.4:53" is not a resolver address; write udp://<host>:<port>, e.g. udp://127.0.0.1:53`,
			`r.yml:11: listeners[0].options.dnsSvcIpRange: "10.0.0.1/32" holds a single address; give a range such as 100.64.0.1/10`,
		}},
		{"tproxy names", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options: {mode: tproxy, resolver: 'udp://dns.local:53', dnsSvcIpRange: nonsense}\n", []string{
			`r.yml:11: listeners[0].options.resolver: "udp://dns.local:53": the resolver listens on an IP address, not a name`,
			`r.yml:11: listeners[0].options.dnsSvcIpRange: "nonsense" is not a CIDR range such as 100.64.0.1/10`,
		}},
		{"tproxy upstreams", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options: {mode: tproxy, upstreams: [192.0.2.53, '192.0.2.54:5353', dns.example]}\n", []string{
			`r.yml:11: listeners[0].options.upstreams[2]: "dns.example" is not an upstream resolver; write an IP address with an optional port, e.g. 192.0.2.53 or 192.0.2.53:5353`,
		}},
		{"tunnel mode", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    options: {mode: tun}\n", []string{
			`r.yml:11: listeners[0].options.mode: "tun" is not allowed; allowed: host, tproxy, proxy`,
		}},
		{"dialers", minimalRouter + "dialers:\n  - binding: proxy\n  - binding: proxy\n  - binding: http\n", []string{
			"r.yml:10: dialers[1].binding: proxy is already configured by dialers[0]",
			`r.yml:11: dialers[2].binding: "http" is not allowed; allowed: proxy, proxy_udp, transport, transport_udp`,
		}},
		{"web", minimalRouter + "web:\n  - name: a\n    bindPoints: [{interface: '0.0.0.0:80'}]\n    apis: [{binding: fabric}, {binding: metrics}, {binding: metrics}]\n  - name: a\n", []string{
			"r.yml:10: web[0].bindPoints[0].address: is required when interface 0.0.0.0:80 listens on every address: the <host>:<port> clients use",
			`r.yml:11: web[0].apis[0].binding: "fabric" is not allowed; allowed: health-checks, metrics`,
			`r.yml:11: web[0].apis[2].binding: "metrics" is already served by web[0].apis[1]`,
			`r.yml:12: web[1].name: "a" is already the name of web[0]`,
			"r.yml:12: web[1].bindPoints: is required: at least one {interface, address}",
			"r.yml:12: web[1].apis: is required: at least one {binding}; allowed bindings: health-checks, metrics",
		}},
		{"csr", minimalRouter + "edge:\n  csr:\n    country: usa\n    sans: {ip: [1.2.3], uri: [nope], email: [a], dns: ['bad host']}\n", []string{
			`r.yml:10: edge.csr.country: "usa" is not a two-letter ISO 3166 country code such as US or DE`,
			`r.yml:11: edge.csr.sans.dns[0]: host "bad host" is neither an IP address nor a DNS name`,
			`r.yml:11: edge.csr.sans.ip[0]: "1.2.3" is not an IP address`,
			`r.yml:11: edge.csr.sans.uri[0]: "nope" is not an absolute URI such as spiffe://example.org/router`,
			`r.yml:11: edge.csr.sans.email[0]: "a" is not an e-mail address`,
		}},
		{"duplicate binds", minimalRouter + "listeners:\n  - binding: edge\n    bind: tls:0.0.0.0:3022\n    advertise: h:3022\n  - binding: transport\n    address: tls:0.0.0.0:3022\n    options: {advertise: h:3022}\nlink:\n  listeners:\n    - {binding: transport, bind: 'quic:0.0.0.0:3022', advertise: 'h:3022'}\n", []string{
			"r.yml:5: identity.server_cert: is required because the router listens (link.listeners[0]): path of the server certificate",
			"r.yml:9: listeners[0].binding: the edge listener needs the edge section, which turns edge functionality on",
			"r.yml:12: listeners[1].bind: tls:0.0.0.0:3022 is already bound by listeners[0].bind",
		}},
		{"paths required", minimalRouter + "trace: {}\nprofile: {cpu: {}, memory: {}}\n", []string{
			"r.yml:8: trace.path: is required: the file decoded messages are written to",
			"r.yml:9: profile.cpu.path: is required: the file the CPU profile is written to",
			"r.yml:9: profile.memory.path: is required: the file the heap profile is written to",
		}},
		{"wrong shapes", minimalRouter + "forwarder: [1]\nlink: {dialers: {binding: transport}}\nmetrics: {reportInterval: [1s]}\n", []string{
			"r.yml:8: forwarder: must be a mapping of keys, found a list",
			"r.yml:9: link.dialers: must be a list, found a mapping",
			"r.yml:10: metrics.reportInterval: must be a single value, found a list",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := ParseRouter("r.yml", []byte(tt.doc), testEnv)
			if err == nil {
				t.Fatalf("no error; want:\n%s", strings.Join(tt.want, "\n"))
			}
			if got := strs(err.(Errors)); !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestRouterWarnings checks what is accepted with a warning, in validate as well: keys that
// have no effect where they stand, and options of other components in the options maps that
// the spec leaves open. Warnings never fail a file.
func TestRouterWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"options of other components", minimalRouter + "edge: {csr: {}}\nlisteners:\n  - binding: tunnel\n    options: {mode: host, lanIf: lo}\n" +
			"dialers: [{binding: proxy, options: {mtu: 1500, txQueueSize: 8}}]\n", []string{
			"r.yml:11: listeners[0].options.lanIf: unknown key, ignored",
			"r.yml:12: dialers[0].options.txQueueSize: unknown key, ignored",
		}},
		{"channel options and ctrl keys under ctrl.options", "v: 3\nctrl:\n  endpoint: tls:a:1\n  options: {connectTimeoutMs: 100, outQueueSize: 4, defaultRequestTimeout: 5s}\n" + idABC, []string{
			"r.yml:4: ctrl.options.outQueueSize: unknown key, ignored",
			"r.yml:4: ctrl.options.defaultRequestTimeout: unknown key, ignored",
		}},
		{"endpoint wins", "v: 3\nctrl:\n  endpoint: tls:a:6262\n  endpoints: [tls:b:1]\n" + idABC, []string{
			"r.yml:4: ctrl.endpoints: ignored because ctrl.endpoint is set",
		}},
		{"tunnel host options", minimalRouter + "edge: {}\nlisteners:\n  - binding: tunnel\n    bind: tls:1.2.3.4:5\n    options: {mode: host, resolver: 'udp://1.1.1.1:53', services: [a:1]}\n", []string{
			"r.yml:8: edge.csr: absent: the router cannot enroll or extend its certificates",
			"r.yml:11: listeners[0].bind: ignored: the tunnel listener takes its addresses from its mode and services",
			"r.yml:12: listeners[0].options.resolver: ignored: it applies to mode tproxy only, and the mode is host",
			"r.yml:12: listeners[0].options.services: ignored: it applies to mode proxy only, and the mode is host",
		}},
		{"aliases both set", listeningRouter + "listeners:\n  - binding: transport\n    bind: tls:0.0.0.0:1\n    address: tls:0.0.0.0:2\n    advertise: h:1\n    options: {advertise: h:2}\n", []string{
			"r.yml:7: listeners[0].address: ignored because bind is set (address is an alias of bind)",
			"r.yml:9: listeners[0].options.advertise: ignored because advertise is set (options.advertise is an alias of advertise)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, warns, err := ParseRouter("r.yml", []byte(tt.doc), testEnv)
			if warns, err = Strict(warns, err); err != nil {
				t.Fatalf("errors: %v", err)
			}
			if got := strs(warns); !slices.Equal(got, tt.want) {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestRouterAccepted checks values that must be read as written.
func TestRouterAccepted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, snippet, path, want string
	}{
		{"env braces", "ctrl: {endpoint: 'tls:${HOST}:6262'}", "ctrl.endpoint", `"tls:edge.example.com:6262"`},
		{"env bare", "identity: {cert: $ZITI_DATA/client.cert}", "identity.cert", `"/var/lib/zmesh/client.cert"`},
		{"dollar escape", "identity: {key: /keys/a$$b}", "identity.key", `"/keys/a$b"`},
		{"absolute path", "identity: {ca: /etc/pki/ca.pem}", "identity.ca", `"/etc/pki/ca.pem"`},
		{"ipv6 endpoint", "ctrl: {endpoint: 'tls:[2001:db8::1]:6262'}", "ctrl.endpoint", `"tls:[2001:db8::1]:6262"`},
		{"endpoints list", "ctrl: {endpoint: null, endpoints: ['tls:a:1', 'tls:b:2']}", "ctrl.endpoints", `["tls:a:1","tls:b:2"]`},
		{"bind interface", "ctrl: {bind: eth0}", "ctrl.bind", `"eth0"`},
		{"bind address", "ctrl: {bind: 'tls:192.0.2.1:0'}", "ctrl.bind", `"tls:192.0.2.1:0"`},
		{"groups as string", "link: {dialers: [{binding: transport, groups: dmz}]}", "link.dialers[0].groups", `["dmz"]`},
		{"split off", "link: {dialers: [{binding: transport, split: false}]}", "link.dialers[0].split", `false`},
		{"quic link", "identity: {server_cert: s}\nlink: {listeners: [{binding: transport, bind: 'quic:0.0.0.0:6001', advertise: 'quic:h:6001'}]}", "link.listeners[0].advertise", `"quic:h:6001"`},
		{"address alias", "identity: {server_cert: s}\nlisteners: [{binding: transport, address: 'tls:[::]:7099', options: {advertise: 'h:7099'}}]", "listeners[0]", `{"advertise":"tls:h:7099","bind":"tls:[::]:7099","binding":"transport"}`},
		{"proxy services", "edge: {}\nlisteners: [{binding: tunnel, options: {mode: proxy, services: ['echo:7000', 'my svc:7001']}}]", "listeners[0].options", `{"mode":"proxy","services":["echo:7000","my svc:7001"],"udpIdleTimeout":"5m"}`},
		{"ipv6 resolver", "edge: {}\nlisteners: [{binding: tunnel, options: {mode: tproxy, resolver: 'udp://[::1]:5353'}}]", "listeners[0].options.resolver", `"udp://[::1]:5353"`},
		{"alt server certs", "identity: {alt_server_certs: [{server_cert: a.cert, server_key: /k/a.key}]}", "identity.alt_server_certs", `[{"server_cert":"/etc/zmesh/a.cert","server_key":"/k/a.key"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := parseRouter(t, withSnippet(t, minimalRouter, tt.snippet))
			if got := lookup(t, cfg, tt.path); got != tt.want {
				t.Errorf("%s = %s, want %s", tt.path, got, tt.want)
			}
		})
	}
}
