// Package xgress implements the ends of a circuit on a router: the frame wire format and its
// pools, endpoints that join a connection to a circuit with end-to-end flow control (or splice
// two local ends), and the dial pool with its proxy and transport dialers.
package xgress
