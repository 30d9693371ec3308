package e2ee

import (
	"container/list"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"slices"
	"sync"
	"time"
)

// DefaultChainCacheSize is how many chains a ChainCache remembers unless told otherwise.
const DefaultChainCacheSize = 1024

// ChainCache verifies peer identity chains against a network's CAs, as client certificates
// (x509.ExtKeyUsageClientAuth), and remembers up to its size of those it accepted (least
// recently used out first), keyed by the SHA-256 of their exact DER bytes. A chain presented
// again is then neither parsed again by a handshake whose Config.Chains is the cache, nor
// verified again by Verify, for as long as every certificate of the path to a root that
// Verify found is valid; at any other time it is verified afresh. Only the bytes that passed
// verification hit: another chain, even of the same identity or one byte apart, is verified
// in full. It checks no names: the identity a chain must name is checked on every handshake
// by Config.VerifyPeer, which calls Verify. It checks no revocation either (nothing in the
// end-to-end handshake does: a revoked or deleted identity gets no session and so no
// circuit). It is safe for concurrent use; the certificates it returns are shared and must
// not be modified.
type ChainCache struct {
	roots *x509.CertPool
	size  int
	now   func() time.Time // time.Now but in tests

	mu       sync.Mutex
	entries  map[[sha256.Size]byte]*list.Element // of *chainEntry
	lru      list.List                           // most recently used first
	verified int                                 // full verifications, for tests
}

// chainEntry is a chain that passed verification, and when its verified path is valid.
type chainEntry struct {
	key                 [sha256.Size]byte
	chain               []*x509.Certificate
	notBefore, notAfter time.Time
}

// NewChainCache returns a cache of chains verified against roots that holds at most size
// chains (DefaultChainCacheSize when size is not positive).
func NewChainCache(roots *x509.CertPool, size int) *ChainCache {
	if size <= 0 {
		size = DefaultChainCacheSize
	}
	return &ChainCache{roots: roots, size: size, now: time.Now, entries: map[[sha256.Size]byte]*list.Element{}}
}

// Verify checks that chain (leaf first, the leaf's intermediates after it) leads from a
// client certificate to one of the cache's roots at the current time, from the cache when
// these exact certificates passed before and their verified path is still valid.
func (c *ChainCache) Verify(chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	key := chainKey(chain)
	now := c.now()
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		entry := e.Value.(*chainEntry)
		if !now.Before(entry.notBefore) && !now.After(entry.notAfter) {
			c.lru.MoveToFront(e)
			c.mu.Unlock()
			return nil
		}
		c.remove(e)
	}
	c.verified++
	c.mu.Unlock()

	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	paths, err := chain[0].Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return err
	}
	// Verify returned only paths valid now; the first stays valid, and so the chain with it,
	// while now is within the validity of each of its certificates.
	entry := &chainEntry{key: key, chain: chain, notBefore: paths[0][0].NotBefore, notAfter: paths[0][0].NotAfter}
	for _, cert := range paths[0][1:] {
		if cert.NotBefore.After(entry.notBefore) {
			entry.notBefore = cert.NotBefore
		}
		if cert.NotAfter.Before(entry.notAfter) {
			entry.notAfter = cert.NotAfter
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok { // verified meanwhile by another handshake
		c.remove(e)
	}
	c.entries[key] = c.lru.PushFront(entry)
	for c.lru.Len() > c.size {
		c.remove(c.lru.Back())
	}
	return nil
}

// parsed returns the certificates of a chain that passed Verify whose wire encoding (each
// certificate's DER prefixed by its uint24 length, as a handshake message carries it) is
// encoded, if the cache holds it, whatever their validity now: parsing does not depend on
// the time, and Verify is still called on them. A nil cache holds nothing.
func (c *ChainCache) parsed(encoded []byte) ([]*x509.Certificate, bool) {
	if c == nil {
		return nil, false
	}
	key := sha256.Sum256(encoded)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	return slices.Clone(e.Value.(*chainEntry).chain), true
}

// Len returns the number of chains the cache holds.
func (c *ChainCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// remove drops an entry; c.mu is held.
func (c *ChainCache) remove(e *list.Element) {
	delete(c.entries, e.Value.(*chainEntry).key)
	c.lru.Remove(e)
}

// chainKey is the SHA-256 of chain's wire encoding: each certificate's DER prefixed by its
// uint24 length.
func chainKey(chain []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	for _, cert := range chain {
		n := len(cert.Raw)
		h.Write([]byte{byte(n >> 16), byte(n >> 8), byte(n)})
		h.Write(cert.Raw)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}
