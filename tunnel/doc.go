// Package tunnel implements the tunnel listener modes host, tproxy and proxy: transparent
// interception rules and routes, the DNS resolver for intercepted names, and proxy ports.
package tunnel
