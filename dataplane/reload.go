package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/certid"
)

// Reload applies what of cfg, the router's configuration file read again, can change while
// the router runs, and returns the fields it applied, named as config.Changed names them; the
// caller reports the other changes as taking effect at the next start. It applies the
// services of each proxy tunnel (listeners[i].options.services) whose listener is otherwise
// unchanged: ports of new pairs open, those of removed pairs close, connections in progress
// go on. It reads the identity's certificate and key files again, at the paths the router
// started with, and presents what they now hold from the next handshake on (certificates an
// operator replaced); other paths, and the CA bundle, take effect at the next start. An error
// names what could not be applied; the rest is applied still.
func (r *Router) Reload(cfg *config.Router) (applied []string, err error) {
	var errs []error
	if err := r.reloadIdentity(); err != nil {
		errs = append(errs, err)
	}
	r.mu.Lock()
	indexes := make([]int, 0, len(r.proxies))
	for i := range r.proxies {
		indexes = append(indexes, i)
	}
	r.mu.Unlock()
	slices.Sort(indexes)
	for _, i := range indexes {
		if i >= len(cfg.Listeners) {
			continue
		}
		old, l := r.cfg.Listeners[i], cfg.Listeners[i]
		if l.Binding != config.BindingTunnel || l.Tunnel == nil || l.Tunnel.Mode != config.TunnelProxy || !sameAddress(old.Bind, l.Bind) {
			continue // another listener now: that takes a restart
		}
		field := fmt.Sprintf("listeners[%d].options.services", i)
		r.mu.Lock()
		p := r.proxies[i]
		r.mu.Unlock()
		added, removed, err := p.Update(l.Tunnel.Services)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			continue
		}
		applied = append(applied, field)
		r.mu.Lock()
		for _, s := range removed {
			delete(r.proxyAddr, s.Service)
		}
		for _, s := range p.Services() {
			r.proxyAddr[s.Service] = p.Addr(s.Service)
		}
		r.mu.Unlock()
		for _, s := range removed {
			r.log.Info("tunnel proxy port closed", "service", s.Service, "port", s.Port)
		}
		for _, s := range added {
			r.log.Info("tunnel proxy port open", "service", s.Service, "listen", p.Addr(s.Service))
		}
	}
	return applied, errors.Join(errs...)
}

// reloadIdentity reads the identity files again and puts their certificates in use when they
// changed and are still this router's.
func (r *Router) reloadIdentity() error {
	id, err := loadIdentity(r.cfg.Identity)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if id.RouterID != r.id {
		return fmt.Errorf("identity.cert %s now names router %q, not this router %q: the files were not reloaded", r.cfg.Identity.Cert, id.RouterID, r.id)
	}
	if err := id.Certs.Check(r.id); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	newClient, newServer := id.Certs.Pair()
	client, server := r.ident.Certs.Pair()
	if newClient.Leaf.Equal(client.Leaf) && newServer.Leaf.Equal(server.Leaf) {
		return nil
	}
	r.renewal.mu.Lock()
	unsaved := r.renewal.unsaved != nil
	r.renewal.mu.Unlock()
	switch {
	case unsaved:
		return fmt.Errorf("identity.cert %s: the certificates in use were renewed and are not saved yet, so the files hold older ones; the files were not reloaded (the renewal loop writes them)", r.cfg.Identity.Cert)
	case newClient.Leaf.NotAfter.Before(client.Leaf.NotAfter):
		return fmt.Errorf("identity.cert %s ends %s, before the certificate in use (%s), which the controller accepts in its place: the files were not reloaded",
			r.cfg.Identity.Cert, newClient.Leaf.NotAfter.UTC().Format(time.RFC3339), client.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	for _, c := range []struct {
		file  string
		cert  tls.Certificate
		usage x509.ExtKeyUsage
	}{{r.cfg.Identity.Cert, newClient, x509.ExtKeyUsageClientAuth}, {r.cfg.Identity.ServerCert, newServer, x509.ExtKeyUsageServerAuth}} {
		if err := verifyIssued(c.cert, r.ident.CAs, c.usage); err != nil {
			return fmt.Errorf("%s: not issued by the network's CA for this use: %w; the files were not reloaded", c.file, err)
		}
	}
	r.ident.Certs.Set(newClient, newServer)
	r.renewal.reschedule()
	r.log.Info("identity certificates reloaded from their files", "expires", newClient.Leaf.NotAfter.UTC().Format(time.RFC3339),
		"fingerprint", certid.Fingerprint(newClient.Leaf))
	return nil
}

// verifyIssued checks that cert's leaf chains, through the certificates after it, to one of
// roots for usage.
func verifyIssued(cert tls.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// sameAddress reports whether two optional addresses are the same.
func sameAddress(a, b *config.Address) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
