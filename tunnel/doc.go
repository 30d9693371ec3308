// Package tunnel implements the tunnel listener modes over an Overlay (the router's own
// identity, or an SDK client in the standalone tunneler): host (Host: hosts the services
// with host.v1/host.v2 configs, dialing their targets), tproxy (TProxy: transparently
// intercepts the services with intercept.v1 configs, answers DNS for their names, and runs
// host mode too) and proxy (Proxy: one TCP port per service). UDP flows cross a circuit as
// length-prefixed datagrams (DatagramConn).
package tunnel
