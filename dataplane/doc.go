// Package dataplane is the router itself: the forwarder (circuit tables, faults, idle
// circuits) and the wiring of links, xgress, tunnels and the control channel, with health
// checks, metrics and the router's web listeners.
//
// # A frame's journey
//
// The steps a client's bytes take to the service, and the ack takes back, each with the
// function that does it, in order. Router A is the ingress, router B the egress; a router
// between them takes steps 5 and 6, with a linkHop as the hop toward the terminator, and
// then steps 3 and 4 again. Paths are from the module's root.
//
// Once per circuit, before any frame:
//
//   - A client connection arrives, from the tunnel's proxy mode (Router.dialProxy,
//     dataplane/overlay.go), an SDK client's dial stream (sdkServer.dial,
//     dataplane/sdkclients.go) or an OpenZiti client's Connect (zitiConn.connect,
//     dataplane/ziticlients.go), and A asks the controller for a circuit
//     (Router.requestCircuit, dataplane/circuits.go).
//   - On B, the controller's Route reaches Router.route (dataplane/circuits.go): it dials the
//     service (Router.dial: the dial pool, or, for a service the tunnel hosts with end-to-end
//     encryption, routerOverlay.connectSealed in dataplane/overlay.go, whose sealedTarget in
//     dataplane/sealed.go is the target's connection with the records and the key exchange's
//     end layered over it), makes the terminator's xgress.Endpoint, routes the circuit with Forwarder.Route
//     (dataplane/forwarder.go) and starts the end with Endpoint.StartWithin
//     (xgress/endpoint.go), which reads the service only once the opening payload arrives.
//   - On A, the reply reaches Router.attachIngress (dataplane/circuits.go): it makes the
//     initiator's Endpoint, routes the circuit (EndpointHop toward the initiator, linkHop toward
//     the terminator) and calls Endpoint.Start, which sends the opening payload.
//
// A payload, client to service:
//
//  1. Endpoint.readLoop (xgress/endpoint.go) on A waits for room in the circuit's window
//     (window.acquire, xgress/window.go) and for the client's connection to be readable
//     (Endpoint.waitReadable), reads into a pooled frame's Room, takes what it read with
//     Frame.Extend (xgress/wire.go), numbers it (window.recordSent) and hands it to its Hop,
//     the router's forwarder.
//  2. Forwarder.Forward (dataplane/forwarder.go) looks the circuit's route up, and
//     Forwarder.next notes the payload's time for idle checks and returns the hop toward the
//     terminator: a link, which gets the frame with Link.SendNow.
//  3. Link.SendNow (link/send.go) writes a small frame itself when nothing is queued or being
//     written on the link's payload connections (conn.writeNow, behind a batch header of
//     one frame on a striped link), and otherwise queues it on the link's payload queue
//     (Link.queue), as Link.Send always does.
//  4. The payload connection's writer writes a queued frame with the frames queued behind it: on a link
//     of one payload connection, Link.writeLoop and conn.writeBatch (link/send.go), which
//     gathers them with batcher.next; on a striped link, Link.writeStripedLoop,
//     stripe.take and stripe.batch (link/stripe.go) and conn.writeStripeBatch, behind a batch
//     header. conn.writeFrame encodes each frame (Frame.Bytes, xgress/wire.go) into the
//     buffered writer and conn.flush sends the batch.
//  5. On B, the payload connection's reader reads the frame (xgress.Reader.Read,
//     xgress/wire.go) and hands it to the link Handler: Link.readLoop (link/receive.go) at
//     once; on a striped link Link.readStripedLoop and conn.readStripeBatch
//     (link/receive.go), then stripe.deposit and stripe.handOver (link/stripe.go), in order.
//  6. Router.HandleFrame (dataplane/circuits.go) calls Forwarder.ForwardFrom
//     (dataplane/forwarder.go), which looks the route up once, drops the frame unless it came
//     from the circuit's hop toward its origin, and passes it to the hop Forwarder.next
//     returns: toward the terminator, EndpointHop.Forward (dataplane/forwarder.go). A frame
//     for another link is queued with Link.Send: a link's reader never writes to a link.
//  7. Endpoint.Receive (xgress/endpoint.go) takes the payload; the first opens the
//     terminator (endState.open), which starts its Endpoint.readLoop for the other
//     direction. A small payload that finds no writer running is written at once, without
//     waiting (Endpoint.canWriteNow, Endpoint.writeNow); what the connection does not take
//     goes to a writer. Otherwise the payload is queued, and a writer starts unless one
//     runs (endState.startWriter).
//  8. Endpoint.writeLoop writes the queued payloads to the service's connection in order.
//
// The ack, back to the client's side:
//
//  9. Endpoint.writeLoop on B, once ackAfter bytes are written and not yet acknowledged
//     (Endpoint.owesAck), or at the other end's EOF, hands an Ack (every byte below its Seq
//     was written) to the forwarder with Endpoint.sendAck; it takes steps 2 to 6 toward the
//     initiator, where Link.SendNow puts it on the link's ack connection when the link is
//     split. The bytes Endpoint.writeNow wrote are acknowledged by the same rule, by a writer
//     started for it once ackAfter bytes are owed.
//  10. On A, EndpointHop.Forward hands it to Endpoint.Receive, whose window.ack
//     (xgress/window.go) frees window and wakes Endpoint.readLoop in window.acquire (step 1).
//
// The service's bytes take the same steps the other way, from B's Endpoint.readLoop.
package dataplane
