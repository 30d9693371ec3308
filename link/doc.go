// Package link builds and keeps the router mesh: link listeners and dialers, the handshake
// that authenticates both routers, split payload and ack connections, payload striping,
// groups, the dial queue and workers with backoff, over TLS (TCP) and QUIC transports. A
// Registry holds a router's links, one per peer, and resolves duplicates; each Link carries
// xgress frames with batched writes, hands what it receives to the runtime's Handler, and
// measures its latency with probes.
//
// # Connections
//
// A link that is not split is one connection carrying every frame. A split link has
// payload connections, for Payload and Close frames, and an ack connection, for Ack, Probe
// and ProbeReply frames, so that acks never wait behind payloads. The dialing router opens
// Options.PayloadConns payload connections (DefaultPayloadConns) and then the ack
// connection, each with its own TLS or QUIC handshake, and says hello on each: its router
// id, which the listener checks against its certificate, the link id, the connection's role
// and, for a payload connection, the number of payload connections and its index
// (handshake.go). The listener gathers the connections of a split link by the dialing
// router's id and the link id, so that no other router can join or disturb the pairing;
// every connection must present the certificate the first one presented, and each role and
// payload index is taken once: a connection that does not fit is refused alone, and the
// link is made once all have arrived, within Options.PairTimeout (listener.go). When a link
// dialer's bind names an interface, the dialer binds the interface's first address of the
// peer's family.
//
// # Sending and receiving
//
// Each connection has a writer and a reader goroutine (send.go, receive.go, which read in
// the order frames flow). A writer takes a frame from its queue with every frame queued
// behind it and writes them as one batch through a buffered writer. TLS writes each record
// of at most 16 KiB with a system call of its own; under TLS a tlscork.Conn gathers the records
// of a batch and writes them up to 256 KiB at a time, in a buffer borrowed from the
// Registry for the batch, and the reader reads up to 256 KiB at a time (transport.go). The
// payload connections of a link share one queue and carry one ordered stream of frames:
// writers number the batches they take, and the peer's readers hand the batches over in
// number order (stripe.go), so that the Handler sees every frame in the order it was sent
// and circuits share the link as fairly as on one connection, while encryption, decryption
// and system calls run on several goroutines on each side. A sender that may wait on the
// network (an endpoint, not a link's reader) sends with SendNow: a small frame that finds
// nothing queued or being written is written by the sender itself, so that an interactive
// round trip does not wait for a writer goroutine to wake at each hop.
//
// # Latency probes
//
// Every router probes each of its links every forwarder.latencyProbeInterval: a Probe frame
// carrying a random id, remembered with its send time among the last few probes; the peer
// echoes the id in a ProbeReply, and the round trip becomes the link's Latency and is
// reported to Events.Latency. A reply that answers no remembered probe, or one already
// answered, is ignored and counted (Link.IgnoredProbeReplies), so that the peer can delay
// its answers but cannot claim a latency of its choosing.
//
// # Performance
//
// The figures measured with zmesh bench, and the choices they led to, are in
// docs/performance.md.
package link
