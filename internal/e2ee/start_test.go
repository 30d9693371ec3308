package e2ee

import (
	"bytes"
	"crypto/x509"
	"errors"
	"io"
	"strings"
	"testing"
)

// foldedBoth runs a handshake whose hellos travel outside the conns, as in a dial request and
// its answer: StartClient, AcceptHello with the client's hello (edited by toServer, if set),
// then both Finishes with the server's hello (edited by toClient, if set).
func foldedBoth(t *testing.T, ccfg, scfg Config, toServer, toClient func([]byte) []byte) (client, server *Conn, clientErr, serverErr error) {
	t.Helper()
	cc, sc := tcpPair(t)
	start, err := StartClient(ccfg.Cipher)
	if err != nil {
		t.Fatal(err)
	}
	hello := start.Hello()
	if toServer != nil {
		hello = toServer(hello)
	}
	ss, answer, err := AcceptHello(sc, scfg, hello)
	if err != nil {
		return nil, nil, nil, err
	}
	if toClient != nil {
		answer = toClient(answer)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		server, serverErr = ss.Finish()
	}()
	client, clientErr = start.Finish(cc, ccfg, answer)
	if clientErr != nil {
		cc.Close() // Finish closed it; the server's Finish ends too
	}
	<-done
	return client, server, clientErr, serverErr
}

// TestFoldedHandshake: with the hellos carried outside the conn, both ends agree on keys and
// identities and carry data both ways, with and without false start.
func TestFoldedHandshake(t *testing.T) {
	for _, falseStart := range []bool{false, true} {
		ccfg, scfg := configs(t)
		ccfg.FalseStart = falseStart
		client, server, cerr, serr := foldedBoth(t, ccfg, scfg, nil, nil)
		if cerr != nil || serr != nil {
			t.Fatalf("false start %v: client: %v; server: %v", falseStart, cerr, serr)
		}
		if got := client.PeerCertificates()[0].Subject.CommonName; got != "host" {
			t.Fatalf("client sees peer %q", got)
		}
		if got := server.PeerCertificates()[0].Subject.CommonName; got != "dialer" {
			t.Fatalf("server sees peer %q", got)
		}
		go func() {
			buf := make([]byte, 100)
			n, err := server.Read(buf)
			if err == nil {
				server.Write(bytes.ToUpper(buf[:n]))
			}
		}()
		if _, err := client.Write([]byte("folded")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		if n, err := client.Read(buf); err != nil || string(buf[:n]) != "FOLDED" {
			t.Fatalf("false start %v: read %q, %v", falseStart, buf[:n], err)
		}
	}
}

// TestFoldedHandshakeFailures: what the in-band handshake protects, the folded one does too.
// A hello altered on its way, a hello of the wrong type or length, a context that differs
// between the ends (a hello moved to another circuit), or an identity either end rejects
// fails the handshake.
func TestFoldedHandshakeFailures(t *testing.T) {
	flip := func(at int) func([]byte) []byte {
		return func(m []byte) []byte {
			m = bytes.Clone(m)
			m[at] ^= 0x10
			return m
		}
	}
	for _, tc := range []struct {
		name               string
		edit               func(ccfg, scfg *Config)
		toServer, toClient func([]byte) []byte
		accept             string // AcceptHello fails with this in its error
		client             string // else the client's Finish fails with this
		authn              bool   // ... wrapping ErrAuthentication
	}{
		{name: "ClientHello key altered", toServer: flip(headerLen + 3), client: "signature", authn: true},
		{name: "ClientHello truncated", toServer: func(m []byte) []byte { return m[:len(m)-1] }, accept: "its header says"},
		{name: "ServerHello in place of ClientHello", toServer: func([]byte) []byte { return frame(msgServerHello, nil) }, accept: "expected 1"},
		{name: "ServerHello altered", toClient: flip(headerLen + 5), client: "", authn: true},
		{name: "ServerHello trailing byte", toClient: func(m []byte) []byte { return append(bytes.Clone(m), 0) }, client: "its header says"},
		{name: "context differs", edit: func(_, s *Config) { s.Context = "circuit-43" }, client: "signature", authn: true},
		{name: "client rejects the server", edit: func(c, _ *Config) { c.VerifyPeer = newPKI(t).verifier("host") }, client: "rejected", authn: true},
		{name: "server rejects the client", edit: func(_, s *Config) {
			s.VerifyPeer = func([]*x509.Certificate) error { return errWrongIdentity }
		}, client: "may have rejected this identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ccfg, scfg := configs(t)
			if tc.edit != nil {
				tc.edit(&ccfg, &scfg)
			}
			client, server, cerr, serr := foldedBoth(t, ccfg, scfg, tc.toServer, tc.toClient)
			if tc.accept != "" {
				if serr == nil || !strings.Contains(serr.Error(), tc.accept) {
					t.Fatalf("AcceptHello: %v; want an error with %q", serr, tc.accept)
				}
				return
			}
			if cerr == nil || !strings.Contains(cerr.Error(), tc.client) || errors.Is(cerr, ErrAuthentication) != tc.authn {
				t.Fatalf("client's Finish: %v; want an error with %q (ErrAuthentication: %v)", cerr, tc.client, tc.authn)
			}
			if client != nil || serr == nil || server != nil {
				t.Fatalf("the server's Finish: %v (Conn %v)", serr, server != nil)
			}
		})
	}
}

// TestFoldedHandshakeClosesConn: a Finish that fails closes its conn, so that the circuit
// ends rather than stalls.
func TestFoldedHandshakeClosesConn(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	start, err := StartClient(ccfg.Cipher)
	if err != nil {
		t.Fatal(err)
	}
	ss, _, err := AcceptHello(sc, scfg, start.Hello())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start.Finish(cc, ccfg, frame(msgServerHello, []byte{1})); err == nil {
		t.Fatal("a malformed ServerHello was accepted")
	}
	if _, err := ss.Finish(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the server's Finish: %v; want the client's close (unexpected EOF)", err)
	}
	if _, err := sc.Write([]byte("x")); err == nil {
		t.Fatal("the server's conn is still open after its Finish failed")
	}
}

// TestFoldedHandshakeMatchesInBand: a ClientStart finishes with the ServerHello an in-band
// Server sends for its hello, so the two paths are the same messages and transcript; a
// ClientStart is finished once, with the cipher its hello offered.
func TestFoldedHandshakeMatchesInBand(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	start, err := StartClient(ccfg.Cipher)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		server, err := Server(sc, scfg)
		if err == nil {
			if _, err = io.Copy(server, server); err == nil {
				err = server.CloseWrite()
			}
		}
		served <- err
	}()
	if _, err := cc.Write(start.Hello()); err != nil {
		t.Fatal(err)
	}
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(cc, header); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(header[1])<<16|int(header[2])<<8|int(header[3]))
	if _, err := io.ReadFull(cc, body); err != nil {
		t.Fatal(err)
	}
	client, err := start.Finish(cc, ccfg, append(header, body...))
	if err != nil {
		t.Fatalf("Finish with the in-band server's ServerHello: %v", err)
	}
	client.Write([]byte("same"))
	client.CloseWrite()
	if back, err := io.ReadAll(client); err != nil || string(back) != "same" {
		t.Fatalf("read %q, %v", back, err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	c2, _ := tcpPair(t)
	if _, err := start.Finish(c2, ccfg, append(header, body...)); err == nil || !strings.Contains(err.Error(), "finished already") {
		t.Fatalf("a second Finish: %v", err)
	}
	other, err := StartClient(CipherChaCha20Poly1305)
	if err != nil {
		t.Fatal(err)
	}
	c3, _ := tcpPair(t)
	if _, err := other.Finish(c3, ccfg, append(header, body...)); err == nil || !strings.Contains(err.Error(), "ClientHello was made for") {
		t.Fatalf("Finish with another cipher: %v", err)
	}
}

// TestCanFinish: Finish may run once the buffered bytes hold the whole ClientAuth, or a
// header Finish refuses without reading on.
func TestCanFinish(t *testing.T) {
	var s ServerStart
	auth := frame(msgClientAuth, make([]byte, 100))
	for _, c := range []struct {
		name string
		buf  []byte
		want bool
	}{
		{"nothing", nil, false},
		{"part of the header", auth[:3], false},
		{"the header", auth[:headerLen], false},
		{"all but a byte", auth[:len(auth)-1], false},
		{"the whole message", auth, true},
		{"the message and records after it", append(append([]byte{}, auth...), 1, 2, 3), true},
		{"another message's header", frame(msgServerFinished, nil)[:headerLen], true},
		{"a header over the bound", []byte{msgClientAuth, 0xff, 0xff, 0xff}, true},
	} {
		if got := s.CanFinish(c.buf); got != c.want {
			t.Errorf("%s: CanFinish = %v, want %v", c.name, got, c.want)
		}
	}
}
