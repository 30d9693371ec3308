// Package link builds and keeps the router mesh: link listeners and dialers, the handshake
// that authenticates both routers, split payload and ack connections, groups, the dial queue
// and workers with backoff, over TLS (TCP) and QUIC transports.
package link
