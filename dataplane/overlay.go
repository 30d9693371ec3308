package dataplane

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/memconn"
	"github.com/zmesh/zmesh/tunnel"
)

// The router's tunnel reaches the overlay as the router's own identity (tunnel.Overlay):
// it learns the services that identity may dial or bind from the controller, dials circuits
// for what it intercepts and hosts the services it binds with terminators of binding
// tunnel. The tunnel's end of a circuit is one end of an in-process pair (memconn) whose
// other end is the circuit's xgress endpoint; with end-to-end encryption required, the
// tunnel's end is wrapped in the key exchange and record layer of package e2ee, keyed by the
// router's identity certificate.

// BindingTunnel is the terminator binding of services hosted by a router's tunnel.
const BindingTunnel = "tunnel"

// tunnelServicesPoll is how often the tunnel asks whether its services changed.
const tunnelServicesPoll = 5 * time.Second

// routerOverlay is the router's tunnel.Overlay.
type routerOverlay struct {
	r *Router

	mu    sync.Mutex
	binds map[string]*tunnelBind // by terminator address (the service id)

	// own is the router identity's chain, parsed once per client certificate (renewal
	// replaces it); chains caches the peer chains the end-to-end key exchanges verified;
	// sessions keeps their resumption tickets, both those the tunnel's dials hold (by
	// service) and those its hosted services issued.
	own     atomic.Pointer[ownChain]
	chains  *e2ee.ChainCache
	tickets *e2ee.Tickets

	relay tunnel.Relay // of the circuits it encrypts end to end

	// pipes joins the tunnel to its circuits: each circuit's endpoint has one end of an
	// in-process pair, the tunnel the other; their buffers are shared through this pool.
	pipes memconn.Pool
	// sealBufs are the plaintext buffers of the encrypted circuits joined to their targets
	// (sealedTarget), lent for each read and write.
	sealBufs sync.Pool

	// tamper, set by tests only, makes the router tamper with end-to-end offers and answers
	// as a hostile router would.
	tamper atomic.Pointer[e2eeTamper]
}

// e2eeTamper is how a test's router tampers: offer rewrites the initiator's offer before the
// hosting end (an SDK client or the tunnel) sees it; hostKey rewrites the host key in the
// answer to an SDK client's dial. Either may be nil.
type e2eeTamper struct {
	offer   func(*ctrlproto.E2EEOffer) *ctrlproto.E2EEOffer
	hostKey func([]byte) []byte
}

// tamperedOffer returns the offer the hosting end gets.
func (o *routerOverlay) tamperedOffer(offer *ctrlproto.E2EEOffer) *ctrlproto.E2EEOffer {
	if t := o.tamper.Load(); t != nil && t.offer != nil {
		return t.offer(offer)
	}
	return offer
}

// tamperedHostKey returns the host key an SDK client's dial gets.
func (o *routerOverlay) tamperedHostKey(key []byte) []byte {
	if t := o.tamper.Load(); t != nil && t.hostKey != nil {
		return t.hostKey(key)
	}
	return key
}

func newRouterOverlay(r *Router) *routerOverlay {
	return &routerOverlay{r: r, binds: map[string]*tunnelBind{}, chains: e2ee.NewChainCache(r.ident.CAs, 0),
		tickets: e2ee.NewTickets(0)}
}

// ownChain is the router's client certificate as end-to-end encryption presents it.
type ownChain struct {
	leaf  *x509.Certificate // of the certificate parsed, to know when it changed
	chain []*x509.Certificate
	key   crypto.Signer
}

// identity returns the chain and key of the router's current client certificate.
func (o *routerOverlay) identity() (*ownChain, error) {
	cert := o.r.ident.Certs.Client()
	if own := o.own.Load(); own != nil && own.leaf == cert.Leaf {
		return own, nil
	}
	key, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the router's identity key cannot sign")
	}
	own := &ownChain{leaf: cert.Leaf, key: key}
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("the router's identity certificate: %w", err)
		}
		own.chain = append(own.chain, c)
	}
	o.own.Store(own)
	return own, nil
}

// offer is what the router's tunnel offered for end-to-end encryption, with the secrets kept
// for the answer.
type offer struct {
	*ctrlproto.E2EEOffer
	start   *e2ee.ClientStart // zmesh's ClientHello made
	zitiKey *e2ee.ZitiKey     // OpenZiti's key offered, or nil
}

// newOffer is what the router's tunnel offers for end-to-end encryption to service: zmesh's
// scheme with its ClientHello (spending a resumption ticket of an earlier circuit to the
// service, if one is left), and OpenZiti's with a fresh key when the service allows it.
func (o *routerOverlay) newOffer(service string, openZiti bool) (*offer, error) {
	start, err := e2ee.StartResumable(e2ee.CipherAuto, o.tickets, service)
	if err != nil {
		return nil, err
	}
	off := &offer{E2EEOffer: &ctrlproto.E2EEOffer{Zmesh: true, ZmeshHello: start.Hello()}, start: start}
	if openZiti {
		if off.zitiKey, err = e2ee.NewZitiKey(); err != nil {
			return nil, err
		}
		off.ZitiKey = off.zitiKey.Public()
	}
	return off, nil
}

// service looks a service up in the list of the router identity's services the controller
// last gave (or edge.db kept), by id or, when id is empty, by name. The list, never a
// router, tells the tunnel whether a service allows OpenZiti's end-to-end scheme.
func (o *routerOverlay) service(id, name string) (ctrlproto.TunnelService, bool) {
	for _, s := range o.r.sessionCache.tunnelServices() {
		if id != "" && s.ID == id || id == "" && s.Name == name {
			return s, true
		}
	}
	return ctrlproto.TunnelService{}, false
}

// openZiti reports whether the service of that id allows OpenZiti's end-to-end scheme.
func (o *routerOverlay) openZiti(id string) bool {
	s, ok := o.service(id, "")
	return ok && s.OpenZitiEncryption
}

// errOpenZitiNotAllowed fails a dial whose answer carries a host key for OpenZiti's scheme
// that this end did not offer: the service does not allow the scheme, and only a router
// could have answered with it.
func errOpenZitiNotAllowed(service string) error {
	return fmt.Errorf("a router offered OpenZiti's end-to-end scheme on service %q, which does not allow it (openZitiEncryption is false)", service)
}

// WatchServices polls the controller for the services of the router's identity. Until the
// controller first answers, the list saved in edge.db by an earlier run stands, so that a
// router restarted while the controller is away goes on serving what it served.
func (o *routerOverlay) WatchServices(ctx context.Context, f func([]tunnel.Service)) error {
	var since int64
	if saved := o.r.sessionCache.tunnelServices(); saved != nil {
		f(convertServices(saved))
	}
	t := time.NewTicker(tunnelServicesPoll)
	defer t.Stop()
	for {
		if list, last, err := o.services(ctx, since); err != nil {
			o.r.log.Warn("tunnel: cannot list the router identity's services", "err", err)
		} else if list != nil {
			since = last
			f(list)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// services returns the list, or nil when it did not change since the given LastChange.
func (o *routerOverlay) services(ctx context.Context, since int64) ([]tunnel.Service, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.r.requestTimeout())
	defer cancel()
	reply, err := ctrlCall[*ctrlproto.TunnelServicesReply](ctx, o.r.ctrl, &ctrlproto.TunnelServices{Since: since})
	if err == nil {
		err = reply.Err()
	}
	if err != nil || reply.NotModified {
		return nil, 0, err
	}
	o.r.sessionCache.setTunnelServices(reply.Services)
	return convertServices(reply.Services), reply.LastChange, nil
}

// convertServices turns the controller's list into the tunnel's.
func convertServices(in []ctrlproto.TunnelService) []tunnel.Service {
	list := make([]tunnel.Service, 0, len(in))
	for _, s := range in {
		ts := tunnel.Service{ID: s.ID, Name: s.Name, EncryptionRequired: s.EncryptionRequired, Configs: s.Configs}
		for _, p := range s.Permissions {
			switch p {
			case "Dial":
				ts.Dial = true
			case "Bind":
				ts.Bind = true
			}
		}
		list = append(list, ts)
	}
	return list
}

// Dial carries a circuit to the service from one end of an in-process pair and returns the
// other, through the end-to-end encryption when the service requires it.
func (o *routerOverlay) Dial(ctx context.Context, svc tunnel.Service, app tunnel.AppData) (net.Conn, error) {
	appJSON, err := json.Marshal(app)
	if err != nil {
		return nil, err
	}
	req := &ctrlproto.CircuitRequest{ServiceID: svc.ID, IngressIdentityID: o.r.id, AppData: appJSON}
	var off *offer
	if svc.EncryptionRequired {
		if off, err = o.newOffer(svc.ID, o.openZiti(svc.ID)); err != nil {
			return nil, fmt.Errorf("dial service %q: %w", svc.Name, err)
		}
		req.E2EE = off.E2EEOffer
	}
	reply, err := o.r.requestCircuit(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("dial service %q: %w", svc.Name, err)
	}
	c, err := o.attach(reply, off, svc.Name)
	if err != nil {
		return nil, fmt.Errorf("dial service %q: %w", svc.Name, err)
	}
	return c, nil
}

// attach starts the circuit of reply on one end of an in-process pair and returns the other,
// end-to-end encrypted when the service requires it: with OpenZiti's scheme when the host
// answered the offer of a key with its own, else after zmesh's key exchange with the host,
// which the host's ServerHello in the reply started when it answered the offer's
// ClientHello. A host key without an offer of one, or a ServerHello without a ClientHello,
// fails the circuit before anything crosses it.
func (o *routerOverlay) attach(reply *ctrlproto.CircuitReply, off *offer, service string) (net.Conn, error) {
	var err error
	switch {
	case len(reply.HostZitiKey) > 0 && (off == nil || off.zitiKey == nil):
		err = errOpenZitiNotAllowed(service)
	case len(reply.HostHello) > 0 && off == nil:
		err = fmt.Errorf("the circuit's reply has the host's ServerHello, but no end-to-end encryption was offered (service %q)", service)
	}
	if err != nil {
		o.r.fault(reply.CircuitID, err.Error())
		return nil, err
	}
	circuitEnd, tunnelEnd := o.pipes.Pipe()
	if err := o.r.attachIngress(reply, circuitEnd); err != nil {
		circuitEnd.Close()
		tunnelEnd.Close()
		o.r.fault(reply.CircuitID, err.Error())
		return nil, err
	}
	if !reply.EncryptionRequired {
		return tunnelEnd, nil
	}
	if len(reply.HostZitiKey) > 0 {
		c, err := e2ee.ZitiClient(tunnelEnd, off.zitiKey, reply.HostZitiKey)
		if err != nil {
			tunnelEnd.Close()
			return nil, fmt.Errorf("end-to-end encryption with %s: %w", reply.Terminator.HostID, err)
		}
		return c, nil
	}
	cfg, err := o.e2ee(reply.Terminator.HostID, edgeproto.E2EEContext(reply.CircuitID, reply.ServiceID))
	if err != nil {
		tunnelEnd.Close()
		return nil, err
	}
	var c *e2ee.Conn
	if len(reply.HostHello) > 0 {
		c, err = off.start.Finish(tunnelEnd, cfg, reply.HostHello)
	} else {
		c, err = e2ee.Client(tunnelEnd, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("end-to-end key exchange with %s: %w", reply.Terminator.HostID, err)
	}
	return c, nil
}

// dialProxy carries a connection accepted by the tunnel's proxy mode to its service, as
// the router's identity: straight onto the circuit, or through the end-to-end encryption
// when the service requires it.
func (r *Router) dialProxy(ctx context.Context, conn net.Conn, service string) {
	reply, off, err := r.overlay.proxyCircuit(ctx, service)
	if err != nil {
		r.log.Info("circuit refused", "service", service, "err", err)
		conn.Close()
		return
	}
	if !reply.EncryptionRequired && len(reply.HostZitiKey) == 0 && len(reply.HostHello) == 0 {
		if err := r.attachIngress(reply, conn); err != nil {
			r.log.Warn("circuit failed at the ingress", "circuit", reply.CircuitID, "err", err)
			conn.Close()
			r.fault(reply.CircuitID, err.Error())
		}
		return
	}
	c, err := r.overlay.attach(reply, off, service)
	if err != nil {
		r.log.Warn("circuit failed at the ingress", "service", service, "circuit", reply.CircuitID, "err", err)
		conn.Close()
		return
	}
	r.overlay.relay.Join(ctx, conn, c)
}

// proxyCircuit asks for a circuit to a service of the proxy mode, known by name only. The
// router identity's service list tells whether it requires end-to-end encryption and allows
// OpenZiti's scheme; a service not (yet) in it is asked for without an offer, which the
// controller takes as zmesh's scheme (run in-band) when the service requires encryption.
// The offer made, if any, is returned with the reply.
func (o *routerOverlay) proxyCircuit(ctx context.Context, service string) (*ctrlproto.CircuitReply, *offer, error) {
	req := &ctrlproto.CircuitRequest{ServiceName: service, IngressIdentityID: o.r.id}
	var off *offer
	if s, ok := o.service("", service); ok && s.EncryptionRequired {
		var err error
		if off, err = o.newOffer(s.ID, s.OpenZitiEncryption); err != nil {
			return nil, nil, err
		}
		req.E2EE = off.E2EEOffer
	}
	reply, err := o.r.requestCircuit(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return reply, off, nil
}

// e2ee returns the router identity's end-to-end configuration, expecting identity peer.
func (o *routerOverlay) e2ee(peer, context string) (e2ee.Config, error) {
	own, err := o.identity()
	if err != nil {
		return e2ee.Config{}, err
	}
	return e2ee.Config{Certificates: own.chain, PrivateKey: own.key, Context: context, Chains: o.chains, Tickets: o.tickets,
		VerifyPeer: func(peerChain []*x509.Certificate) error { return o.verifyPeer(peerChain, peer) }}, nil
}

// verifyPeer checks that a chain comes from the network's CA and names identity want.
func (o *routerOverlay) verifyPeer(chain []*x509.Certificate, want string) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	if err := o.chains.Verify(chain); err != nil {
		return fmt.Errorf("the peer's certificate is not of this network: %w", err)
	}
	if got := chain[0].Subject.CommonName; got != want {
		return fmt.Errorf("the peer is identity %q, not %q", got, want)
	}
	return nil
}

// tunnelBind is a service the tunnel hosts.
type tunnelBind struct {
	o            *routerOverlay
	svc          tunnel.Service
	address      string
	terminatorID string
	incoming     chan accepted
	done         chan struct{}
	once         sync.Once
	reach        atomic.Pointer[tunnel.Reach] // the host's, once it gave it (SetReach)
}

// SetReach takes the host's Reach: connect then joins the circuits it encrypts end to end
// straight to their targets (sealedTarget).
func (b *tunnelBind) SetReach(r tunnel.Reach) { b.reach.Store(&r) }

type accepted struct {
	c   net.Conn
	app tunnel.AppData
}

// Bind creates the router's terminator of the service; circuits reaching it come out of
// the listener's Accept.
func (o *routerOverlay) Bind(ctx context.Context, svc tunnel.Service) (tunnel.Listener, error) {
	b := &tunnelBind{o: o, svc: svc, address: svc.ID, incoming: make(chan accepted, 64), done: make(chan struct{})}
	o.mu.Lock()
	if _, dup := o.binds[b.address]; dup {
		o.mu.Unlock()
		return nil, fmt.Errorf("service %q is bound already", svc.Name)
	}
	o.binds[b.address] = b
	o.mu.Unlock()
	id, err := o.r.CreateTerminator(ctx, &ctrlproto.TerminatorCreate{Service: svc.ID, Binding: BindingTunnel, Address: b.address})
	if err != nil {
		o.mu.Lock()
		delete(o.binds, b.address)
		o.mu.Unlock()
		return nil, err
	}
	o.mu.Lock()
	b.terminatorID = id
	o.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { b.Close() })
	go func() { <-b.done; stop() }()
	return b, nil
}

// terminators returns the ids of the tunnel's terminators.
func (o *routerOverlay) terminators() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return terminatorIDs(o.binds, func(b *tunnelBind) string { return b.terminatorID })
}

func (b *tunnelBind) Accept() (net.Conn, tunnel.AppData, error) {
	select {
	case a := <-b.incoming:
		return a.c, a.app, nil
	case <-b.done:
		return nil, tunnel.AppData{}, net.ErrClosed
	}
}

// Close removes the terminator and refuses further circuits.
func (b *tunnelBind) Close() error {
	var err error
	b.once.Do(func() {
		close(b.done)
		b.o.mu.Lock()
		delete(b.o.binds, b.address)
		b.o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), edgeproto.HandshakeTimeout)
		defer cancel()
		err = b.o.r.RemoveTerminator(ctx, b.terminatorID)
	})
	return err
}

// connect is the egress dial of binding tunnel: it hands one end of an in-process pair to the
// service's listener and returns the other for the circuit's endpoint. When the service
// requires end-to-end encryption, the tunnel's end takes zmesh's scheme if the initiator
// offered it or made no offer (answering the offer's ClientHello with the ServerHello it
// returns, else running the key exchange in-band), else OpenZiti's, whose public key it
// returns, when the router identity's service list says the service allows it.
func (o *routerOverlay) connect(ctx context.Context, x *ctrlproto.Xgress, circuitID uint64) (net.Conn, ctrlproto.HostAnswer, error) {
	o.mu.Lock()
	b := o.binds[x.Address]
	o.mu.Unlock()
	if b == nil {
		return nil, ctrlproto.HostAnswer{}, fmt.Errorf("the tunnel hosts no service %s here any more", x.Address)
	}
	var app tunnel.AppData
	if len(x.AppData) > 0 {
		if err := json.Unmarshal(x.AppData, &app); err != nil {
			return nil, ctrlproto.HostAnswer{}, fmt.Errorf("the circuit's app data: %w", err)
		}
	}
	offer := o.tamperedOffer(x.E2EE)
	if offer == nil {
		offer = &ctrlproto.E2EEOffer{Zmesh: true} // what an initiator that makes no offers runs
	}
	if b.svc.EncryptionRequired && !offer.Zmesh {
		if len(offer.ZitiKey) == 0 {
			return nil, ctrlproto.HostAnswer{}, fmt.Errorf("service %q requires end-to-end encryption and the initiator offered no scheme (zmesh or zitiKey)", b.svc.Name)
		}
		if !o.openZiti(b.svc.ID) {
			return nil, ctrlproto.HostAnswer{}, fmt.Errorf("openZitiEncryption is false: OpenZiti's end-to-end encryption is not allowed on service %q", b.svc.Name)
		}
	}
	if reach := b.reach.Load(); reach != nil && b.svc.EncryptionRequired && offer.Zmesh && len(offer.ZmeshHello) > 0 {
		c, host, err := o.connectSealed(ctx, *reach, b, x, circuitID, app, offer.ZmeshHello)
		if !errors.Is(err, tunnel.ErrDatagramTarget) {
			return c, host, err
		}
	}
	circuitEnd, tunnelEnd := o.pipes.Pipe()
	hand := func(c net.Conn) {
		select {
		case b.incoming <- accepted{c, app}:
		case <-b.done:
			c.Close()
		}
	}
	if !b.svc.EncryptionRequired {
		go hand(tunnelEnd)
		return circuitEnd, ctrlproto.HostAnswer{}, nil
	}
	if !offer.Zmesh {
		key, err := e2ee.NewZitiKey()
		var c *e2ee.ZitiConn
		if err == nil {
			c, err = e2ee.ZitiServer(tunnelEnd, key, offer.ZitiKey) // sends its header, which the pair buffers
		}
		if err != nil {
			circuitEnd.Close()
			tunnelEnd.Close()
			return nil, ctrlproto.HostAnswer{}, err
		}
		go hand(c)
		return circuitEnd, ctrlproto.HostAnswer{HostZitiKey: key.Public()}, nil
	}
	fail := func(err error) (net.Conn, ctrlproto.HostAnswer, error) {
		circuitEnd.Close()
		tunnelEnd.Close()
		return nil, ctrlproto.HostAnswer{}, err
	}
	cfg, err := o.e2ee(x.InitiatorID, edgeproto.E2EEContext(circuitID, b.svc.ID))
	if err != nil {
		return fail(err)
	}
	// The key exchange goes on once the circuit is up: the initiator speaks first.
	serve := func() (*e2ee.Conn, error) { return e2ee.Server(tunnelEnd, cfg) }
	var host ctrlproto.HostAnswer
	if len(offer.ZmeshHello) > 0 {
		start, hello, err := e2ee.AcceptHello(tunnelEnd, cfg, offer.ZmeshHello)
		if err != nil {
			return fail(fmt.Errorf("end-to-end key exchange with %s: %w", x.InitiatorID, err))
		}
		serve, host.HostHello = start.Finish, hello
	}
	go func() {
		c, err := serve()
		if err != nil {
			o.r.log.Info("tunnel: end-to-end key exchange failed", "service", b.svc.Name, "circuit", circuitID, "initiator", x.InitiatorID, "err", err)
			tunnelEnd.Close()
			return
		}
		hand(c)
	}()
	return circuitEnd, host, nil
}

// connectSealed is connect for a circuit of zmesh's scheme whose ClientHello came with the
// route, to a service of a host that carries circuits through reach: once the hello is
// answered, the host connects to the target, and the circuit's endpoint gets the target's
// connection with the end of the key exchange and the records layered over it
// (sealedTarget), rather than one end of an in-process pair with the tunnel's relay
// goroutines behind it. A UDP target is refused with tunnel.ErrDatagramTarget, before the
// ClientHello is answered (a resumption ticket is spent then), for connect's other way.
func (o *routerOverlay) connectSealed(ctx context.Context, reach tunnel.Reach, b *tunnelBind, x *ctrlproto.Xgress, circuitID uint64, app tunnel.AppData, hello []byte) (net.Conn, ctrlproto.HostAnswer, error) {
	connect, err := reach(app)
	if err != nil {
		return nil, ctrlproto.HostAnswer{}, err
	}
	cfg, err := o.e2ee(x.InitiatorID, edgeproto.E2EEContext(circuitID, b.svc.ID))
	if err != nil {
		return nil, ctrlproto.HostAnswer{}, err
	}
	st := newSealedTarget(&o.sealBufs, o.r.log.With("service", b.svc.Name, "circuit", circuitID, "initiator", x.InitiatorID))
	start, serverHello, err := e2ee.AcceptHello(st.cipher(), cfg, hello)
	if err != nil {
		return nil, ctrlproto.HostAnswer{}, fmt.Errorf("end-to-end key exchange with %s: %w", x.InitiatorID, err)
	}
	conn, done, err := connect(ctx)
	if err != nil {
		return nil, ctrlproto.HostAnswer{}, err
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		done()
		return nil, ctrlproto.HostAnswer{}, fmt.Errorf("the target's connection is a %T, not TCP", conn)
	}
	timeout := cfg.HandshakeTimeout
	if timeout == 0 {
		timeout = e2ee.DefaultHandshakeTimeout
	}
	if err := st.join(tcp, done, start, timeout); err != nil {
		tcp.Close()
		done()
		return nil, ctrlproto.HostAnswer{}, err
	}
	return st, ctrlproto.HostAnswer{HostHello: serverHello}, nil
}
