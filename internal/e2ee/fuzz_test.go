package e2ee

import (
	"net"
	"testing"
)

// FuzzHellos feeds arbitrary ClientHellos to a server that keeps tickets (AcceptHello) and
// arbitrary ServerHellos to a client that spent a ticket (ClientStart.Finish): each must
// answer or fail, never panic, and a ServerHello it did not verify must not finish the
// handshake.
func FuzzHellos(f *testing.F) {
	e := newResumeEnds(f)
	var helloToServer, helloToClient []byte
	e.dial(f, func(h []byte) []byte { helloToServer = h; return h }, func(h []byte) []byte { helloToClient = h; return h })
	f.Add(helloToServer, helloToClient)
	f.Add([]byte{msgClientHello, 0, 0, 0}, []byte{msgServerHello, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, clientHello, serverHello []byte) {
		sc, cc := net.Pipe()
		defer sc.Close()
		defer cc.Close()
		AcceptHello(sc, e.scfg, clientHello)

		e.client.hold(&ticket{id: [ticketIDLen]byte{1}, secret: make([]byte, keyLen), key: "service-1",
			peerChain: e.ccfg.Certificates, expires: e.client.now().Add(TicketLifetime)})
		start, err := StartResumable(CipherAuto, e.client, "service-1")
		if err != nil {
			t.Fatal(err)
		}
		cc.Close() // Finish writes nothing before the ServerHello checks out
		if _, err := start.Finish(cc, e.ccfg, serverHello); err == nil {
			t.Fatalf("a ServerHello made by no server finished the handshake: %x", serverHello)
		}
	})
}
