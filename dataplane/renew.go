package dataplane

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/atomicfile"
	"github.com/zmesh/zmesh/internal/certid"
)

// Certificate renewal. Once identity.renew_at of its client certificate's lifetime has
// passed, the router extends its client and server certificates itself: it sends CSRs of its
// current keys to the controller's client API (POST /enroll/extend/router, authenticated by
// its current client certificate, at the address the controller gave in its HelloReply),
// writes the new certificates over the identity files, and puts them in force for every
// later handshake. Connections made before keep theirs: the controller keeps the control
// channel the router opened with the previous certificate, and tells the other routers the
// new ones before their next link.

// Waits between failed renewals: doubling from the first to the last, give or take a tenth
// so that routers enrolled together do not retry together.
const (
	renewFirstRetry = 5 * time.Second
	renewLastRetry  = 10 * time.Minute
	// renewTimeout bounds the wait for the controller's address, then the extension.
	renewTimeout = 30 * time.Second
	// tornPair is how far apart the client and server certificates' starts may be: they are
	// issued together, so more means a renewal wrote one file and not the other.
	tornPair = time.Minute
)

// renewal is the state of the router's certificate renewal, for its metrics and health check.
type renewal struct {
	mu      sync.Mutex
	lastErr error // of the latest attempt; nil after a success
	renewed int   // renewals done since the start
	failed  int   // attempts failed since the start
	// unsaved are renewed certificates in use that could not be written yet (PEM); the next
	// attempt writes them instead of extending again.
	unsaved *[2][]byte
	// lastNotAfter is when the certificates of the previous renewal end.
	lastNotAfter time.Time
	// changed wakes the loop to compute the due time again: the certificates were replaced
	// other than by renewal (a reload).
	changed chan struct{}
}

// reschedule makes the renewal loop compute its due time again.
func (rn *renewal) reschedule() {
	select {
	case rn.changed <- struct{}{}:
	default:
	}
}

// renewLoop renews the router's certificates whenever they are due, until ctx ends.
func (r *Router) renewLoop(ctx context.Context) {
	retry := renewFirstRetry
	due, torn := r.renewalDue()
	if torn {
		client, server := r.ident.Certs.Pair()
		r.log.Warn("the client and server certificates were not issued together; renewing both now",
			"clientIssued", client.Leaf.NotBefore.UTC().Format(time.RFC3339), "serverIssued", server.Leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	wait := time.Until(due)
	for {
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.renewal.changed:
			t.Stop()
			due, _ := r.renewalDue()
			wait = time.Until(due)
			continue
		case <-t.C:
		}
		err := r.renew(ctx)
		if ctx.Err() != nil {
			return
		}
		r.renewal.mu.Lock()
		r.renewal.lastErr = err
		if err != nil {
			r.renewal.failed++
		} else {
			r.renewal.renewed++
		}
		r.renewal.mu.Unlock()
		if err != nil {
			r.log.Warn("certificate renewal failed", "err", err, "retryIn", retry,
				"expires", r.ident.Certs.Client().Leaf.NotAfter.UTC().Format(time.RFC3339))
			wait = time.Duration(float64(retry) * (0.9 + 0.2*rand.Float64()))
			retry = min(2*retry, renewLastRetry)
			continue
		}
		retry = renewFirstRetry
		wait = r.nextRenewal()
	}
}

// nextRenewal is the wait after a renewal: until the new certificates are due, but at least
// renew_at of what is left of them, since certificates whose start the controller backdated
// by more than renew_at of their lifetime are due at once. Certificates that end no later
// than their predecessors (capped at the network CA's own expiry) are not renewed again.
func (r *Router) nextRenewal() time.Duration {
	leaf := r.ident.Certs.Client().Leaf
	due, _ := r.renewalDue()
	wait := max(time.Until(due), time.Duration(float64(time.Until(leaf.NotAfter))*r.cfg.Identity.RenewAt))
	r.renewal.mu.Lock()
	defer r.renewal.mu.Unlock()
	if r.renewal.lastNotAfter.IsZero() || leaf.NotAfter.After(r.renewal.lastNotAfter) {
		r.renewal.lastNotAfter = leaf.NotAfter
		return wait
	}
	r.log.Error("the renewed certificates end when the previous ones did: the network's CA expires then and cannot issue later ones",
		"expires", leaf.NotAfter.UTC().Format(time.RFC3339))
	return time.Until(leaf.NotAfter)
}

// renewalDue is when the current certificates are to be renewed: identity.renew_at of the
// client certificate's lifetime, or now when the server certificate is not of the same
// issue (torn).
func (r *Router) renewalDue() (due time.Time, torn bool) {
	clientCert, serverCert := r.ident.Certs.Pair()
	client, server := clientCert.Leaf, serverCert.Leaf
	if r.cfg.Identity.ServerCert != "" && client != server {
		if d := client.NotBefore.Sub(server.NotBefore); d > tornPair || d < -tornPair {
			return time.Now(), true
		}
	}
	life := client.NotAfter.Sub(client.NotBefore)
	return client.NotBefore.Add(time.Duration(float64(life) * r.cfg.Identity.RenewAt)), false
}

// renew extends the router's certificates once.
func (r *Router) renew(ctx context.Context) error {
	r.renewal.mu.Lock()
	unsaved := r.renewal.unsaved
	r.renewal.mu.Unlock()
	if unsaved != nil {
		if err := r.saveIdentity(unsaved[0], unsaved[1]); err != nil {
			return fmt.Errorf("the renewed certificates in use are still not saved, and a restart would present the previous ones, which the controller no longer accepts: %w", err)
		}
		r.setUnsaved(nil)
		r.log.Info("renewed certificates saved")
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, renewTimeout)
	_, err := r.ctrl.channel(waitCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("the controller's address is not known yet: %w", err)
	}
	host := r.ctrl.clientAPIHost()
	if host == "" {
		return errors.New("the controller did not give its client API's address")
	}
	client, server := r.ident.Certs.Pair()
	clientKey, ok := client.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("identity.key cannot sign a certificate request")
	}
	serverKey, ok := server.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("the server key cannot sign a certificate request")
	}
	var csr *config.CSR
	if r.cfg.Edge != nil {
		csr = r.cfg.Edge.CSR
	}
	clientCSR, err := apiclient.RouterCSR(clientKey, r.id, csr, false)
	if err != nil {
		return err
	}
	serverCSR, err := apiclient.RouterCSR(serverKey, r.id, csr, true)
	if err != nil {
		return err
	}
	// Not cut short by the router's stop: the controller may have put new certificates in
	// force already, and this is the one answer that carries them.
	extendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renewTimeout)
	defer cancel()
	certs, err := apiclient.ExtendRouter(extendCtx, host, r.ident.CAs, client, clientCSR, serverCSR)
	if err != nil {
		return fmt.Errorf("extend the certificates at %s: %w", host, err)
	}
	newClient, err := certid.Issued([]byte(certs.Cert), clientKey, r.id, r.ident.CAs, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return fmt.Errorf("the controller's client certificate: %w", err)
	}
	newServer, err := certid.Issued([]byte(certs.ServerCert), serverKey, r.id, r.ident.CAs, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return fmt.Errorf("the controller's server certificate: %w", err)
	}
	// The controller holds the new certificates as the router's from now on: the files
	// come first, so that a router restarted at any point finds them. The client certificate
	// first: with it alone, the router still reaches the controller and renews again.
	id := r.cfg.Identity
	if id.ServerCert == "" {
		newServer = newClient // as loadIdentity does when there is no server certificate
	}
	saveErr := r.saveIdentity([]byte(certs.Cert), []byte(certs.ServerCert))
	// In use even when they could not be saved: the previous ones no longer are the
	// router's. The next attempts write them, without extending again.
	r.ident.Certs.Set(newClient, newServer)
	if saveErr != nil {
		r.setUnsaved(&[2][]byte{[]byte(certs.Cert), []byte(certs.ServerCert)})
		return fmt.Errorf("the renewed certificates are in use but not saved, and a restart would present the previous ones, which the controller no longer accepts: %w", saveErr)
	}
	r.log.Info("certificates renewed", "expires", newClient.Leaf.NotAfter.UTC().Format(time.RFC3339),
		"fingerprint", certid.Fingerprint(newClient.Leaf))
	return nil
}

func (r *Router) setUnsaved(pems *[2][]byte) {
	r.renewal.mu.Lock()
	r.renewal.unsaved = pems
	r.renewal.mu.Unlock()
}

// saveIdentity writes renewed certificates over identity.cert and identity.server_cert.
func (r *Router) saveIdentity(clientPEM, serverPEM []byte) error {
	id := r.cfg.Identity
	if err := atomicfile.Write(id.Cert, clientPEM, 0o644); err != nil {
		return fmt.Errorf("identity.cert: %w", err)
	}
	if id.ServerCert == "" {
		return nil
	}
	if err := atomicfile.Write(id.ServerCert, serverPEM, 0o644); err != nil {
		return fmt.Errorf("identity.server_cert: %w", err)
	}
	return nil
}

// certMetrics are the renewal's metrics: when each certificate expires, and the renewals.
func (r *Router) certMetrics() []prometheus.Collector {
	expiry := func(which string, leaf func() *x509.Certificate) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zmesh_certificate_expiry_timestamp_seconds",
			Help:        "When the router's certificate expires, in seconds since the epoch: client (to the controller and other routers) or server (its listeners). The router renews both at identity.renew_at of their lifetime.",
			ConstLabels: prometheus.Labels{"certificate": which}},
			func() float64 { return float64(leaf().NotAfter.Unix()) })
	}
	renewals := func(result string, n func() int) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "zmesh_certificate_renewals_total",
			Help:        "Renewals of the router's certificates since it started, by result: ok or failed (retried).",
			ConstLabels: prometheus.Labels{"result": result}},
			func() float64 {
				r.renewal.mu.Lock()
				defer r.renewal.mu.Unlock()
				return float64(n())
			})
	}
	return []prometheus.Collector{
		expiry("client", func() *x509.Certificate { return r.ident.Certs.Client().Leaf }),
		expiry("server", func() *x509.Certificate { return r.ident.Certs.Server().Leaf }),
		renewals("ok", func() int { return r.renewal.renewed }),
		renewals("failed", func() int { return r.renewal.failed }),
	}
}

// certificatesCheck fails once the client certificate's renewal is overdue by half the time
// that was left for it, when a certificate expired, and while renewed certificates in use
// are not saved; its details say when each expires.
func (r *Router) certificatesCheck(context.Context) (any, error) {
	type certDetail struct {
		NotAfter time.Time `json:"notAfter"`
		DaysLeft float64   `json:"daysLeft"`
	}
	now := time.Now()
	clientCert, serverCert := r.ident.Certs.Pair()
	client, server := clientCert.Leaf, serverCert.Leaf
	detail := func(c *x509.Certificate) certDetail {
		return certDetail{NotAfter: c.NotAfter.UTC(), DaysLeft: float64(c.NotAfter.Sub(now)) / float64(24*time.Hour)}
	}
	details := map[string]certDetail{"client": detail(client), "server": detail(server)}
	due, _ := r.renewalDue()
	r.renewal.mu.Lock()
	lastErr, unsaved := r.renewal.lastErr, r.renewal.unsaved != nil
	r.renewal.mu.Unlock()
	soonest := client.NotAfter
	if server.NotAfter.Before(soonest) {
		soonest = server.NotAfter
	}
	switch {
	case unsaved:
		return details, fmt.Errorf("the renewed certificates in use are not saved: %v", lastErr)
	case !now.Before(soonest):
		return details, fmt.Errorf("a certificate expired at %s", soonest.UTC().Format(time.RFC3339))
	case now.After(due.Add(soonest.Sub(due) / 2)):
		return details, fmt.Errorf("renewal overdue since %s; last attempt: %v", due.UTC().Format(time.RFC3339), lastErr)
	}
	return details, nil
}
