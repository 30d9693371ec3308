package dataplane

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	"github.com/zmesh/zmesh/internal/certid"
)

// Links are made only with other routers' current certificates, as the controller announces
// them (PeerState): a certificate of the network that is not a router's, or that a router no
// longer holds (re-enrolled, extended), cannot make a link. A peer's certificates are kept
// while it is offline, so that links keep forming between routers when the controller is away.

// trustWait is how long a link handshake waits to learn a peer's certificates: the
// controller's announcement may come just after the peer's dial, or just after the peer
// renewed them.
const trustWait = 3 * time.Second

// trustPeer records the current certificates of a router.
func (r *Router) trustPeer(routerID string, fingerprints []string) {
	r.mu.Lock()
	r.trust[routerID] = slices.Clone(fingerprints)
	r.trusted.Broadcast()
	r.mu.Unlock()
}

// authorizePeer accepts a peer's certificate when it is one of the router's current ones.
func (r *Router) authorizePeer(routerID string, leaf *x509.Certificate) error {
	fp := certid.Fingerprint(leaf)
	deadline := time.Now().Add(trustWait)
	timer := time.AfterFunc(trustWait, func() {
		r.mu.Lock()
		r.trusted.Broadcast()
		r.mu.Unlock()
	})
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		fps, known := r.trust[routerID]
		if slices.Contains(fps, fp) {
			return nil
		}
		// An unknown certificate may be one the peer just renewed, announced by the
		// controller a moment later: wait for that, as for a peer not known yet.
		if !time.Now().Before(deadline) {
			if known {
				return fmt.Errorf("certificate %s is not a current certificate of router %s", fp, routerID)
			}
			return fmt.Errorf("router %s is not known to this router's controller", routerID)
		}
		r.trusted.Wait()
	}
}
