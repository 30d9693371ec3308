package e2ee

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// TestHandshakeKeyTypes: identities with ECDSA, Ed25519 and RSA keys authenticate each other
// and see each other's chains.
func TestHandshakeKeyTypes(t *testing.T) {
	p := newPKI(t)
	keys := map[string]crypto.Signer{"ecdsa": testutil.NewKey(t), "ed25519": newEd25519Key(t), "rsa": newRSAKey(t)}
	for clientType, clientKey := range keys {
		for serverType, serverKey := range keys {
			t.Run(clientType+"-"+serverType, func(t *testing.T) {
				ccfg := p.config(p.identity(t, "dialer", clientKey), "host")
				scfg := p.config(p.identity(t, "host", serverKey), "dialer")
				cc, sc := net.Pipe()
				client, server := mustHandshake(t, cc, sc, ccfg, scfg)
				if got := client.PeerCertificates()[0].Subject.CommonName; got != "host" {
					t.Errorf("client sees %q", got)
				}
				if got := server.PeerCertificates()[0].Subject.CommonName; got != "dialer" {
					t.Errorf("server sees %q", got)
				}
				go client.Write([]byte("hello"))
				buf := make([]byte, 5)
				if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "hello" {
					t.Fatalf("server read %q, %v", buf, err)
				}
			})
		}
	}
}

func TestCipherNegotiation(t *testing.T) {
	auto := CipherChaCha20Poly1305
	if hasAESHardware() {
		auto = CipherAES256GCM
	}
	for _, tc := range []struct {
		client, server, want Cipher // want CipherAuto: the handshake fails
	}{
		{CipherAuto, CipherAuto, auto},
		{CipherChaCha20Poly1305, CipherAuto, CipherChaCha20Poly1305},
		{CipherAES256GCM, CipherAuto, CipherAES256GCM},
		{CipherAuto, CipherChaCha20Poly1305, CipherChaCha20Poly1305},
		{CipherAuto, CipherAES256GCM, CipherAES256GCM},
		{CipherAES256GCM, CipherChaCha20Poly1305, CipherAuto},
	} {
		t.Run(tc.client.String()+"-"+tc.server.String(), func(t *testing.T) {
			ccfg, scfg := configs(t)
			ccfg.Cipher, scfg.Cipher = tc.client, tc.server
			cc, sc := net.Pipe()
			client, server, cerr, serr := handshakeBoth(cc, sc, ccfg, scfg)
			if tc.want == CipherAuto {
				if cerr == nil || serr == nil || !strings.Contains(serr.Error(), "no common cipher") {
					t.Fatalf("client: %v; server: %v; want both to fail", cerr, serr)
				}
				return
			}
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			defer cc.Close()
			if client.Cipher() != tc.want || server.Cipher() != tc.want {
				t.Fatalf("client %v, server %v; want %v", client.Cipher(), server.Cipher(), tc.want)
			}
		})
	}
}

// TestVerifyPeerRejects: whichever end rejects the other's identity, both handshakes fail,
// the rejecting one with ErrAuthentication and VerifyPeer's error.
func TestVerifyPeerRejects(t *testing.T) {
	for _, rejecter := range []string{"client", "server"} {
		t.Run(rejecter, func(t *testing.T) {
			ccfg, scfg := configs(t)
			if rejecter == "client" {
				ccfg.VerifyPeer = newPKI(t).verifier("host") // another network's CA
			} else {
				verify := scfg.VerifyPeer
				scfg.VerifyPeer = func(chain []*x509.Certificate) error {
					if err := verify(chain); err != nil {
						return err
					}
					return fmt.Errorf("%w: this dialer may not reach this service", errWrongIdentity)
				}
			}
			cc, sc := net.Pipe()
			_, _, cerr, serr := handshakeBoth(cc, sc, ccfg, scfg)
			rejecting, other := cerr, serr
			if rejecter == "server" {
				rejecting, other = serr, cerr
			}
			if !errors.Is(rejecting, ErrAuthentication) || !strings.Contains(rejecting.Error(), "peer identity rejected") {
				t.Errorf("%s: %v; want a rejection", rejecter, rejecting)
			}
			if rejecter == "server" && !errors.Is(rejecting, errWrongIdentity) {
				t.Errorf("%s: %v; want a rejection", rejecter, rejecting)
			}
			if other == nil {
				t.Errorf("the other end's handshake succeeded")
			}
			t.Logf("rejecting end: %v; other end: %v", rejecting, other)
		})
	}
}

// mismatchedSigner presents one key and signs with another, as a peer that stole or forged a
// certificate but not its key would.
type mismatchedSigner struct {
	crypto.Signer
	presented crypto.PublicKey
}

func (s mismatchedSigner) Public() crypto.PublicKey { return s.presented }

func TestSignatureWithWrongKey(t *testing.T) {
	for _, forger := range []string{"client", "server"} {
		t.Run(forger, func(t *testing.T) {
			ccfg, scfg := configs(t)
			if forger == "client" {
				ccfg.PrivateKey = mismatchedSigner{Signer: testutil.NewKey(t), presented: ccfg.PrivateKey.Public()}
			} else {
				scfg.PrivateKey = mismatchedSigner{Signer: newEd25519Key(t), presented: scfg.PrivateKey.Public()}
			}
			cc, sc := net.Pipe()
			_, _, cerr, serr := handshakeBoth(cc, sc, ccfg, scfg)
			verifier, other := serr, cerr
			if forger == "server" {
				verifier, other = cerr, serr
			}
			if !errors.Is(verifier, ErrAuthentication) || !strings.Contains(verifier.Error(), "signature") {
				t.Errorf("verifying end: %v; want a bad signature", verifier)
			}
			if other == nil {
				t.Errorf("the forger's handshake succeeded")
			}
		})
	}
}

func TestContextMismatch(t *testing.T) {
	ccfg, scfg := configs(t)
	scfg.Context = "circuit-43"
	cc, sc := net.Pipe()
	_, _, cerr, serr := handshakeBoth(cc, sc, ccfg, scfg)
	if !errors.Is(cerr, ErrAuthentication) || serr == nil {
		t.Fatalf("client: %v; server: %v; want both to fail, the client with ErrAuthentication", cerr, serr)
	}
}

// TestHandshakeTampering flips a bit in each handshake message on the path: the client always
// notices, and the server either notices or finds the circuit closed by the client.
func TestHandshakeTampering(t *testing.T) {
	for _, tc := range []struct {
		name           string
		clientToServer bool
		index          int
		offset         func(frame []byte) int
	}{
		{"ClientHello", true, 0, func([]byte) int { return headerLen + 5 }}, // ephemeral key
		{"ServerHello", false, 0, func([]byte) int { return headerLen + 5 }},
		{"ClientAuth", true, 1, func(f []byte) int { return len(f) - 1 }}, // signature
		{"ServerFinished", false, 1, func(f []byte) int { return len(f) - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flip := func(i int, frame []byte) [][]byte {
				if i == tc.index {
					frame[tc.offset(frame)] ^= 0x10
				}
				return [][]byte{frame}
			}
			var r *relay
			if tc.clientToServer {
				r = startRelay(t, false, flip, nil)
			} else {
				r = startRelay(t, false, nil, flip)
			}
			ccfg, scfg := configs(t)
			_, server, cerr, serr := handshakeBoth(r.client, r.server, ccfg, scfg)
			t.Logf("client: %v; server: %v", cerr, serr)
			if cerr == nil {
				t.Fatal("the client's handshake succeeded")
			}
			if serr == nil {
				if tc.name != "ServerFinished" {
					t.Fatal("the server's handshake succeeded")
				}
				if _, err := server.Read(make([]byte, 1)); err == nil {
					t.Fatal("the server's Conn works")
				}
			}
		})
	}
}

func TestHandshakeTimeout(t *testing.T) {
	ccfg, _ := configs(t)
	ccfg.HandshakeTimeout = 50 * time.Millisecond
	cc, sc := net.Pipe()
	defer sc.Close()
	go io.Copy(io.Discard, sc) // a server that never answers
	start := time.Now()
	_, err := Client(cc, ccfg)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Client: %v; want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the handshake took %v", d)
	}
}

func TestConfigErrors(t *testing.T) {
	ccfg, scfg := configs(t)
	for name, mutate := range map[string]func(*Config){
		"no VerifyPeer":    func(c *Config) { c.VerifyPeer = nil },
		"no certificate":   func(c *Config) { c.Certificates = nil },
		"key mismatch":     func(c *Config) { c.PrivateKey = scfg.PrivateKey },
		"unknown cipher":   func(c *Config) { c.Cipher = 9 },
		"huge MaxDatagram": func(c *Config) { c.MaxDatagram = 1 << 30 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := ccfg
			mutate(&cfg)
			cc, sc := net.Pipe()
			defer sc.Close()
			if _, err := Client(cc, cfg); err == nil {
				t.Fatal("Client accepted the config")
			}
			if _, err := cc.Write([]byte("x")); err == nil {
				t.Fatal("Client left the conn open")
			}
		})
	}
}
