package e2ee

import (
	"crypto/x509"
	"net"
	"testing"

	"github.com/zmesh/zmesh/internal/testutil"
)

// BenchmarkHandshake runs whole handshakes, both ends, over net.Pipe, with P-256 identities
// as the network's PKI issues: an op is one handshake (its CPU on both ends: key exchange,
// signatures, parsing and verification of the peer chains), verified in full every time or
// with a ChainCache on each end.
func BenchmarkHandshake(b *testing.B) {
	for _, cached := range []bool{false, true} {
		name := "verify"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			p := newPKI(b)
			ccfg := p.config(p.identity(b, "dialer", testutil.NewKey(b)), "host")
			scfg := p.config(p.identity(b, "host", testutil.NewKey(b)), "dialer")
			if cached {
				useChainCaches(p, &ccfg, &scfg)
			}
			b.ReportAllocs()
			for b.Loop() {
				cc, sc := net.Pipe()
				_, _, cerr, serr := handshakeBoth(cc, sc, ccfg, scfg)
				if cerr != nil || serr != nil {
					b.Fatalf("handshake: client: %v; server: %v", cerr, serr)
				}
				cc.Close()
				sc.Close()
			}
		})
	}
}

// BenchmarkResumption runs whole folded handshakes (the hellos outside the conn, as in a
// dial), both ends, over net.Pipe, with cached chains: in full every time, or resuming the
// previous handshake's session with its ticket.
func BenchmarkResumption(b *testing.B) {
	for _, resume := range []bool{false, true} {
		name := "full"
		if resume {
			name = "resumed"
		}
		b.Run(name, func(b *testing.B) {
			p := newPKI(b)
			ccfg := p.config(p.identity(b, "dialer", testutil.NewKey(b)), "host")
			scfg := p.config(p.identity(b, "host", testutil.NewKey(b)), "dialer")
			useChainCaches(p, &ccfg, &scfg)
			clientTickets := NewTickets(0)
			if resume {
				scfg.Tickets = NewTickets(0)
			}
			b.ReportAllocs()
			for b.Loop() {
				cc, sc := net.Pipe()
				start, err := StartResumable(ccfg.Cipher, clientTickets, "service")
				if err != nil {
					b.Fatal(err)
				}
				ss, answer, err := AcceptHello(sc, scfg, start.Hello())
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					_, err := ss.Finish()
					done <- err
				}()
				if _, err := start.Finish(cc, ccfg, answer); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				cc.Close()
				sc.Close()
			}
		})
	}
}

// useChainCaches gives the client's and the server's configuration a ChainCache each, which
// their VerifyPeer verifies with, as the SDK and routers do.
func useChainCaches(p *testPKI, ccfg, scfg *Config) {
	for _, end := range []struct {
		cfg  *Config
		peer string
	}{{ccfg, "host"}, {scfg, "dialer"}} {
		cache, peer := NewChainCache(p.roots, 0), end.peer
		end.cfg.Chains = cache
		end.cfg.VerifyPeer = func(chain []*x509.Certificate) error {
			if err := cache.Verify(chain); err != nil {
				return err
			}
			if chain[0].Subject.CommonName != peer {
				return errWrongIdentity
			}
			return nil
		}
	}
}
