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
				for _, end := range []struct {
					cfg  *Config
					peer string
				}{{&ccfg, "host"}, {&scfg, "dialer"}} {
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
