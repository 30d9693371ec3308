// Package dataplane is the router itself: the forwarder (circuit tables, faults, idle
// circuits) and the wiring of links, xgress, tunnels and the control channel, with health
// checks, metrics and the router's web listeners.
package dataplane
