// Package xgress implements the ends of a circuit: payload framing, end-to-end flow control,
// the edge listener for SDK clients, the proxy and transport dialers with their dial worker
// pool, and the Go SDK applications embed.
package xgress
