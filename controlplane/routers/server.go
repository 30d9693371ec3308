// Package routers is the controller's end of the control channel. It listens on
// ctrl.listen with TLS 1.3, admits a router only when its client certificate chains to the
// controller's CA and is the current certificate of an enrolled edge router, takes the
// router's Hello, and keeps the registry of connected routers that the API (isOnline) and
// circuit setup consult. A router that connects again replaces its older connection; one
// deleted or re-enrolled while connected is disconnected. Reconnecting is the router's job.
package routers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// DefaultHandshakeTimeout bounds the TLS handshake and the Hello that must follow it.
const DefaultHandshakeTimeout = 10 * time.Second

// Config is what the server needs from the controller.
type Config struct {
	Model *model.Model
	CA    *pki.CA
	// Cert is the listener's server certificate, issued by CA for the ctrl address.
	Cert tls.Certificate
	// ControllerID, Endpoints and ClientAPI are sent in every HelloReply; Endpoints is
	// called at each (a cluster's members change).
	ControllerID string
	Endpoints    func() []string
	ClientAPI    string
	// Channel tunes each router's channel (request timeout, heartbeats).
	Channel ctrlproto.Options
	// HandshakeTimeout: DefaultHandshakeTimeout when zero.
	HandshakeTimeout time.Duration
	Log              *slog.Logger
	// Handlers, when set, registers the handlers of a router's messages on its channel
	// before the channel starts.
	Handlers func(routerID string, ch *ctrlproto.Channel)
	// OnConnect and OnDisconnect, when set, are called after a router's Hello was accepted
	// and after its connection ended (unless a newer connection replaced it).
	OnConnect, OnDisconnect func(*Router)
	// OnExtended, when set, is called after a connected router extended its certificates:
	// its Fingerprints are the new ones.
	OnExtended func(*Router)
}

// Server accepts routers' control channels and keeps the registry of connected routers.
type Server struct {
	cfg Config
	log *slog.Logger
	tls *tls.Config
	reg registry
	wg  sync.WaitGroup
	// changeMu makes routerChanged decide on one change at a time.
	changeMu sync.Mutex

	// serving is Serve's context while it runs, for channels served in this process
	// (ServeLocal); closed is set once Serve stops taking them.
	mu      sync.Mutex
	serving context.Context
	closed  bool
	// reports keeps each router's latest metrics report across its reconnections, until
	// the router is deleted.
	reports reports
}

// New builds the server and subscribes it to the model's edge router changes.
func New(cfg Config) *Server {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	s := &Server{
		cfg: cfg,
		log: cfg.Log,
		tls: &tls.Config{
			Certificates: []tls.Certificate{cfg.Cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    cfg.CA.Pool(),
			MinVersion:   tls.VersionTLS13,
		},
		reg:     registry{conns: make(map[string]*Router)},
		reports: reports{latest: make(map[string]*ctrlproto.Metrics)},
	}
	cfg.Model.OnEdgeRouterChange(s.routerChanged)
	cfg.Model.OnContentReplaced(s.recheckAll)
	return s
}

// recheckAll decides on every connected router again once the store's whole content was
// replaced (a cluster member installing a snapshot), which reports no record's change: a
// router deleted, re-enrolled or extended in the snapshot is handled as routerChanged
// handles its record's change.
func (s *Server) recheckAll() {
	for _, rt := range s.All() {
		change := model.RouterChange{}
		if r, err := s.cfg.Model.EdgeRouter(rt.ID); err == nil {
			change = r.RecordedChange()
		}
		s.routerChanged(rt.ID, change)
	}
}

// Serve accepts control connections on ln until ctx ends, then closes ln and every
// router's channel and returns once they are all released. It returns an error only
// when accepting fails for another reason.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	s.mu.Lock()
	s.serving = ctx
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.wg.Wait()
	}()
	s.log.Info("control channel listening", "listen", ln.Addr().String())
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("control channel: accept on %s: %w", ln.Addr(), err)
		}
		s.wg.Go(func() { s.serveConn(ctx, conn) })
	}
}

// ServeLocal serves, over conn, the control channel of a router that runs in the controller's
// own process (co-located): conn is one end of an in-process connection, so there is no TLS
// to authenticate the router, and cert, the client certificate the router would present, is
// checked as the TLS listener checks one (issued by the controller's CA for client
// authentication, and valid now), then admitted by the same lookup. The channel ends with
// Serve.
func (s *Server) ServeLocal(conn net.Conn, cert *x509.Certificate) error {
	if _, err := cert.Verify(x509.VerifyOptions{Roots: s.tls.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the router's client certificate: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving == nil || s.closed {
		return errors.New("the control channel is not being served")
	}
	s.wg.Go(func() { s.serveRouter(s.serving, conn, cert, s.log.With("remote", "in-process")) })
	return nil
}

// serveConn authenticates one connection, runs its channel and unregisters it at the end.
func (s *Server) serveConn(ctx context.Context, raw net.Conn) {
	log := s.log.With("remote", raw.RemoteAddr().String())
	conn := tls.Server(raw, s.tls)
	hctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	err := conn.HandshakeContext(hctx)
	cancel()
	if err != nil {
		log.Info("control channel refused: TLS handshake failed", "err", err)
		conn.Close()
		return
	}
	s.serveRouter(ctx, conn, conn.ConnectionState().PeerCertificates[0], log)
}

// serveRouter admits the router whose client certificate is leaf, runs its channel over conn
// and unregisters it at the end.
func (s *Server) serveRouter(ctx context.Context, conn net.Conn, leaf *x509.Certificate, log *slog.Logger) {
	r, err := s.cfg.Model.EdgeRouterByCert(leaf)
	if err != nil {
		log.Warn("control channel refused: the client certificate is not the current certificate of an enrolled edge router",
			"subject", leaf.Subject.CommonName, "fingerprint", certid.Fingerprint(leaf), "err", err)
		conn.Close()
		return
	}
	ch := ctrlproto.New(ctx, conn, s.log.With("router", r.ID), s.cfg.Channel)
	log = log.With("router", r.ID, "name", r.Name)
	rt := &Router{ID: r.ID, Name: r.Name, Channel: ch}
	rt.certs.Store(&[2]string{r.Fingerprint, r.ServerFingerprint})
	hello := make(chan struct{})
	greeted := false // the handler runs on the channel's reader only: no lock needed
	ch.Handle(ctrlproto.TypeHello, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		if greeted {
			return s.refuse(log, "a second Hello on one connection"), nil
		}
		greeted = true
		defer close(hello)
		return s.hello(rt, m.(*ctrlproto.Hello), log), nil
	})
	ch.Handle(ctrlproto.TypeMetrics, func(_ context.Context, m ctrlproto.Message) (ctrlproto.Message, error) {
		report := m.(*ctrlproto.Metrics)
		rt.metrics.Store(report)
		// The router's current connection's reports are kept in the order they arrive (the
		// router's clock may step); a replaced connection's late ones are not.
		if s.reg.get(rt.ID) == rt {
			s.reports.put(rt.ID, report)
		}
		return nil, nil
	})
	if s.cfg.Handlers != nil {
		s.cfg.Handlers(r.ID, ch)
	}
	ch.Start()
	timer := time.NewTimer(s.cfg.HandshakeTimeout)
	select {
	case <-hello:
		timer.Stop()
	case <-timer.C:
		log.Warn("control channel closed: no Hello within the handshake timeout", "timeout", s.cfg.HandshakeTimeout)
		ch.Close()
	case <-ch.Done():
		timer.Stop()
	}
	<-ch.Done()
	if rt.Metrics() != nil {
		// A report that arrived after the router's deletion dropped its reports is dropped
		// now, so deleted routers hold no memory.
		if _, err := s.cfg.Model.EdgeRouter(rt.ID); model.CodeOf(err) == model.CodeNotFound {
			s.reports.drop(rt.ID)
		}
	}
	if s.reg.remove(rt) {
		log.Info("router disconnected", "reason", ch.Err())
		if s.cfg.OnDisconnect != nil {
			s.cfg.OnDisconnect(rt)
		}
	}
}

// hello answers a router's Hello, registering the router when it is accepted.
func (s *Server) hello(rt *Router, h *ctrlproto.Hello, log *slog.Logger) ctrlproto.Message {
	if h.RouterID != rt.ID {
		return s.refuse(log, "the Hello names router %q but the certificate is router %q's", h.RouterID, rt.ID)
	}
	if h.Protocol != ctrlproto.ProtocolVersion {
		return s.refuse(log, "protocol version %d is not supported; this controller speaks %d", h.Protocol, ctrlproto.ProtocolVersion)
	}
	rt.Hello, rt.Since, rt.protocols = *h, time.Now(), edgeProtocols(h.Listeners)
	if old := s.reg.add(rt); old != nil {
		log.Info("closing the router's older control channel: replaced by a newer connection", "older", old.Channel.RemoteAddr().String())
		go old.Channel.Close()
	}
	// The router's record may have changed between authentication and registration,
	// with no connection registered yet to close: check again.
	if cur, err := s.cfg.Model.EdgeRouter(rt.ID); err != nil || cur.Fingerprint != rt.fingerprint() {
		s.reg.remove(rt)
		return s.refuse(log, "the certificate stopped identifying the router while it connected")
	}
	if s.cfg.OnConnect != nil {
		// After the reply, since it may send the router messages; Serve waits for it, so
		// that it never outlives the controller's store. The channel's reader, which runs
		// this, may outlive serveRouter once Serve is ending: then the router is refused, as
		// ServeLocal refuses, rather than counted after Serve's Wait began.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.reg.remove(rt)
			return s.refuse(log, "the controller is stopping")
		}
		s.wg.Go(func() { s.cfg.OnConnect(rt) })
		s.mu.Unlock()
	}
	log.Info("router connected", "version", h.Version, "hostname", h.Hostname)
	return &ctrlproto.HelloReply{Accepted: true, ControllerID: s.cfg.ControllerID, Endpoints: s.cfg.Endpoints(), ClientAPI: s.cfg.ClientAPI}
}

// refuse answers a Hello with a refusal and closes the channel once it is sent.
func (s *Server) refuse(log *slog.Logger, format string, args ...any) ctrlproto.Message {
	reason := fmt.Sprintf(format, args...)
	log.Warn("control channel refused", "reason", reason)
	return ctrlproto.ReplyAndClose(&ctrlproto.HelloReply{Reason: reason, ControllerID: s.cfg.ControllerID})
}

// routerChanged is called by the model after an edge router's credentials changed; a
// connection made with a certificate that is no longer the router's is closed, unless the
// router extended that certificate itself, and a deleted router's metrics report is
// forgotten.
func (s *Server) routerChanged(id string, change model.RouterChange) {
	// Hooks of transactions committed one after the other may run in either order: each
	// decides on the record as it is now, one at a time.
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	r, err := s.cfg.Model.EdgeRouter(id)
	deleted := model.CodeOf(err) == model.CodeNotFound
	if deleted {
		s.reports.drop(id)
	}
	rt := s.reg.get(id)
	if rt == nil {
		return
	}
	reason := ""
	switch {
	case deleted:
		reason = "the edge router was deleted"
	case err != nil:
		s.log.Error("check a connected edge router after a change", "router", id, "err", err)
		return
	case r.Fingerprint == "":
		reason = "the edge router was re-enrolled"
	case r.Fingerprint == rt.fingerprint():
		return
	case change.Extended && change.Previous == rt.fingerprint() && r.Fingerprint == change.Current[0]:
		// The router renewed the certificates of this connection, and they are still its
		// own: the connection stays, under the new ones, and the other routers learn them.
		rt.certs.Store(&[2]string{change.Current[0], change.Current[1]})
		s.log.Info("router extended its certificates; its control channel stays", "router", id, "fingerprint", r.Fingerprint)
		if s.cfg.OnExtended != nil {
			go s.cfg.OnExtended(rt)
		}
		return
	default:
		reason = "the certificate it connected with is no longer the router's"
	}
	s.log.Info("closing a router's control channel", "router", id, "reason", reason)
	rt.revoked = true
	if s.reg.remove(rt) && s.cfg.OnDisconnect != nil { // offline at once, not once the channel has wound down
		go s.cfg.OnDisconnect(rt)
	}
	go rt.Channel.Close()
}
