package e2ee

import (
	"bytes"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// TestFalseStart: a client with FalseStart writes as soon as Client returns, before the
// server's ServerFinished, and reads the server's answer after it, in stream and datagram
// mode, directly and through a relay that passes everything.
func TestFalseStart(t *testing.T) {
	for _, datagram := range []bool{false, true} {
		name := "stream"
		if datagram {
			name = "datagram"
		}
		t.Run(name, func(t *testing.T) {
			ccfg, scfg := configs(t)
			ccfg.FalseStart, ccfg.Datagram, scfg.Datagram = true, datagram, datagram
			r := startRelay(t, datagram, nil, nil)
			client, server := mustHandshake(t, r.client, r.server, ccfg, scfg)
			if client.finished == nil {
				t.Fatal("the client checked ServerFinished during the handshake")
			}
			go func() {
				buf := make([]byte, 100)
				n, err := server.Read(buf)
				if err == nil {
					server.Write(bytes.ToUpper(buf[:n]))
				}
			}()
			if _, err := client.Write([]byte("early")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 100)
			n, err := client.Read(buf)
			if err != nil || string(buf[:n]) != "EARLY" {
				t.Fatalf("read %q, %v; want EARLY", buf[:n], err)
			}
			if client.finished != nil {
				t.Fatal("ServerFinished still pending after the first Read")
			}
		})
	}
}

// TestFalseStartFailures: with FalseStart, what the client no longer waits for still fails the
// Conn, at its first Read: a server that rejects the client's identity (the client's data is
// never delivered), an altered ClientAuth, an altered or missing ServerFinished, a record in
// its place (a server that closes the circuit before Client returns may fail Client
// instead). What ServerHello protects (the server's identity, the cipher choice) still fails
// Client itself.
func TestFalseStartFailures(t *testing.T) {
	type ends struct {
		ccfg, scfg         Config
		toServer, toClient editFunc
	}
	flip := func(index int, offset func([]byte) int) editFunc {
		return func(i int, frame []byte) [][]byte {
			if i == index {
				frame[offset(frame)] ^= 0x10
			}
			return [][]byte{frame}
		}
	}
	last := func(f []byte) int { return len(f) - 1 }
	for _, tc := range []struct {
		name       string
		setup      func(*ends)
		clientErr  bool   // Client itself fails
		readErr    string // else the client's first Read fails with this in its error
		wantAuthnE bool   // ... wrapping ErrAuthentication
	}{
		{"server rejects the client", func(e *ends) {
			e.scfg.VerifyPeer = func([]*x509.Certificate) error { return errWrongIdentity }
		}, false, "may have rejected this identity", false},
		{"ClientAuth altered", func(e *ends) { e.toServer = flip(1, last) }, false, "may have rejected this identity", false},
		{"ServerFinished altered", func(e *ends) { e.toClient = flip(1, last) }, false, "wrong ServerFinished", true},
		{"ServerFinished dropped", func(e *ends) {
			e.toClient = func(i int, frame []byte) [][]byte {
				if i == 1 {
					return nil
				}
				return [][]byte{frame}
			}
		}, false, "expected ServerFinished", true},
		{"ServerHello altered", func(e *ends) { e.toClient = flip(0, func([]byte) int { return headerLen + 5 }) }, true, "", false},
		{"server of another identity", func(e *ends) {
			e.ccfg.VerifyPeer = newPKI(t).verifier("host")
		}, true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e ends
			e.ccfg, e.scfg = configs(t)
			e.ccfg.FalseStart = true
			tc.setup(&e)
			r := startRelay(t, false, e.toServer, e.toClient)
			delivered := make(chan []byte, 1)
			go func() {
				server, err := Server(r.server, e.scfg)
				if err != nil {
					delivered <- nil
					return
				}
				server.Write([]byte("answer"))
				got, _ := io.ReadAll(server)
				delivered <- got
			}()
			client, err := Client(r.client, e.ccfg)
			if err != nil && tc.readErr == "may have rejected this identity" {
				// The server may have closed the circuit before Client returned.
				if got := <-delivered; got != nil {
					t.Fatalf("the server delivered %q", got)
				}
				t.Logf("Client: %v", err)
				return
			}
			if tc.clientErr {
				if err == nil {
					t.Fatal("Client succeeded")
				}
				<-delivered
				return
			}
			if err != nil {
				t.Fatalf("Client: %v", err)
			}
			client.Write([]byte("secret"))
			n, err := client.Read(make([]byte, 100))
			if err == nil || !strings.Contains(err.Error(), tc.readErr) || errors.Is(err, ErrAuthentication) != tc.wantAuthnE {
				t.Fatalf("first Read: %d bytes, %v; want an error with %q (ErrAuthentication: %v)", n, err, tc.readErr, tc.wantAuthnE)
			}
			if _, again := client.Read(make([]byte, 100)); again == nil {
				t.Fatal("the Conn recovered")
			}
			client.Close()
			if got := <-delivered; len(got) > 0 && tc.name != "ServerFinished altered" && tc.name != "ServerFinished dropped" {
				t.Fatalf("the server delivered %q", got)
			}
			t.Logf("client's Read: %v", err)
		})
	}
}

var _ net.Conn = (*Conn)(nil)
