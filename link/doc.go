// Package link builds and keeps the router mesh: link listeners and dialers, the handshake
// that authenticates both routers, split payload and ack connections, groups, the dial queue
// and workers with backoff, over TLS (TCP) and QUIC transports. A Registry holds a router's
// links, one per peer, and resolves duplicates; each Link carries xgress frames with batched
// writes, hands what it receives to the runtime's Handler, and measures its latency with
// probes.
package link
