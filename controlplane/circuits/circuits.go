// Package circuits is the controller's side of circuits: it answers a router's request for a
// circuit (who may dial the service, which terminator, which path), installs the routes on the
// routers of the path egress first, so that the ingress's first byte finds the whole path
// ready, and keeps the circuits it made so that faults and idle checks can be answered and
// circuits removed from every router.
package circuits

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/paths"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Routers gives the control channels of the connected routers.
type Routers interface {
	// Channel returns the channel of a connected router.
	Channel(routerID string) (*ctrlproto.Channel, bool)
}

// maxCircuits bounds the circuit table, so that routers cannot make the controller hold
// unbounded memory by reporting circuits.
const maxCircuits = 2_000_000

// RouteTimeout bounds the work of one router on a Route, a dial at the egress included.
const RouteTimeout = 10 * time.Second

// Circuit is a circuit the controller made.
type Circuit struct {
	ID         uint64
	ServiceID  string
	Path       []string // router ids, ingress first
	Terminator string
	Initiator  string // the identity that dialed
	// clientCert is the certificate a transport listener's client presented (DER), for
	// circuits dialed with one: they end when it stops authenticating Initiator.
	clientCert []byte
	appData    []byte               // for the egress; not kept after the route
	offer      *ctrlproto.E2EEOffer // the initiator's, for the egress; not kept after the route
	encrypted  bool                 // the service requires end-to-end encryption
	// serviceName is the service's name when the circuit was made, for the routers' events.
	serviceName string
	Created     time.Time
	// Adopted: made by an earlier run of the controller and reported by routers since; Path
	// holds only the routers that reported it.
	Adopted bool
}

// Service creates and removes circuits.
type Service struct {
	m       *model.Model
	graph   *paths.Graph
	routers Routers
	log     *slog.Logger

	mu       sync.Mutex
	circuits map[uint64]*Circuit
	// ended remembers, for endedMemory, the circuits removed, in removal order, so that a
	// router reconnecting with one of them in its Hello does not bring it back.
	// Both hold no pointers, so that the garbage collector does not scan the minute of
	// circuits they hold (hundreds of thousands on a busy network).
	ended      map[uint64]struct{}
	endedOrder []endedCircuit
	epoch      time.Time // endedCircuit.at counts from here

	// Counters, read by metrics.
	created, failed uint64
}

// New returns the circuit service.
func New(m *model.Model, graph *paths.Graph, routers Routers, log *slog.Logger) *Service {
	s := &Service{m: m, graph: graph, routers: routers, log: log, circuits: map[uint64]*Circuit{}, ended: map[uint64]struct{}{}, epoch: time.Now()}
	m.OnCredentialsChange(func(identityID string) { go s.endRevoked(identityID) })
	// A snapshot installed tells no identity's change: every certificate is checked again.
	m.OnContentReplaced(func() { go s.endRevokedAll() })
	return s
}

// Create answers a router's CircuitRequest.
func (s *Service) Create(ctx context.Context, ingress string, req *ctrlproto.CircuitRequest) *ctrlproto.CircuitReply {
	reply := &ctrlproto.CircuitReply{RequestID: req.RequestID}
	c, term, host, err := s.create(ctx, ingress, req)
	if err != nil {
		var ce *ctrlproto.Error
		if !errors.As(err, &ce) {
			ce = &ctrlproto.Error{Code: ctrlproto.ErrCodeRouteFailed, Message: err.Error()}
		}
		reply.Outcome = ctrlproto.Failed(ce.Code, ce.Message)
		s.mu.Lock()
		s.failed++
		s.mu.Unlock()
		s.log.Debug("circuit refused", "ingress", ingress, "service", req.ServiceID+req.ServiceName, "err", err)
		return reply
	}
	reply.CircuitID, reply.Path = c.ID, c.Path
	reply.ServiceID, reply.EncryptionRequired, reply.HostAnswer = c.ServiceID, c.encrypted, host
	reply.ServiceName, reply.InitiatorID = c.serviceName, c.Initiator
	reply.Terminator = ctrlproto.TerminatorRef{ID: term.ID, RouterID: term.RouterID, Binding: term.Binding, Address: term.Address, HostID: term.HostID}
	return reply
}

func fail(code, format string, args ...any) error {
	return &ctrlproto.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// create makes the circuit; it returns, besides, the hosting end's answer to the
// end-to-end offer.
func (s *Service) create(ctx context.Context, ingress string, req *ctrlproto.CircuitRequest) (*Circuit, *model.Terminator, ctrlproto.HostAnswer, error) {
	svc, err := s.service(req)
	if err != nil {
		return nil, nil, ctrlproto.HostAnswer{}, err
	}
	initiator, err := s.authorize(ingress, svc, req)
	if err != nil {
		return nil, nil, ctrlproto.HostAnswer{}, err
	}
	if svc.EncryptionRequired && len(req.ClientCert) > 0 {
		return nil, nil, ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeInvalid, "service %q requires end-to-end encryption, which a client of a transport listener cannot do: use an SDK or a tunnel", svc.Name)
	}
	offer, err := checkOffer(svc, req.E2EE)
	if err != nil {
		return nil, nil, ctrlproto.HostAnswer{}, err
	}
	if len(req.AppData) > ctrlproto.MaxAppData {
		return nil, nil, ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeInvalid, "app data of %d bytes; at most %d", len(req.AppData), ctrlproto.MaxAppData)
	}
	terms, err := s.m.CachedTerminatorsOf(svc.ID)
	if err != nil {
		return nil, nil, ctrlproto.HostAnswer{}, err
	}
	byID := map[string]*model.Terminator{}
	var candidates []paths.Terminator
	for _, t := range terms {
		if _, online := s.routers.Channel(t.RouterID); !online {
			continue
		}
		if req.TerminatorIdentity != "" && t.Identity != req.TerminatorIdentity {
			continue
		}
		if svc.EncryptionRequired && !model.EndToEndCapable(t.Binding) {
			continue // made before the rule; it cannot do end-to-end encryption
		}
		byID[t.ID] = t
		candidates = append(candidates, paths.Terminator{ID: t.ID, Router: t.RouterID, Cost: t.Cost, Precedence: t.Precedence})
	}
	if len(candidates) == 0 {
		return nil, nil, ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeNoTerminator, "service %q has no terminator on a connected router", svc.Name)
	}
	choice, err := s.graph.Choose(ingress, svc.TerminatorStrategy, candidates)
	if err != nil {
		return nil, nil, ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeNoPath, "service %q: %v", svc.Name, err)
	}
	term := byID[choice.Terminator.ID]
	c := &Circuit{ID: newCircuitID(), ServiceID: svc.ID, Terminator: term.ID, Initiator: initiator, Created: time.Now(), clientCert: req.ClientCert}
	c.appData, c.offer, c.encrypted, c.serviceName = req.AppData, offer, svc.EncryptionRequired, svc.Name
	for _, h := range choice.Path {
		c.Path = append(c.Path, h.Router)
	}
	host, err := s.install(ctx, c, term)
	if err != nil {
		return nil, nil, ctrlproto.HostAnswer{}, err
	}
	c.appData, c.offer = nil, nil
	s.mu.Lock()
	s.circuits[c.ID] = c
	s.created++
	s.mu.Unlock()
	// A revocation that committed after authorize and before the line above found no
	// circuit to end; this check, after it, does.
	if len(c.clientCert) > 0 && !s.certStillAuthenticates(c) {
		s.Remove(c.ID, "the client certificate was revoked")
		return nil, nil, ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeInvalidSession, "the client certificate no longer authenticates identity %s", c.Initiator)
	}
	return c, term, host, nil
}

// checkOffer applies the service's policy to the initiator's end-to-end offer and returns
// what the egress gets. A malformed offer is refused. A service without end-to-end
// encryption gets no offer. For one that requires it, a missing offer means zmesh's scheme
// (what a zmesh end that makes no offers runs); an offer of no scheme is refused; unless
// the service's openZitiEncryption allows OpenZiti's scheme, whose keys routers relay
// unsigned, an offer of only that is refused and its key dropped from one that also offers
// zmesh's, so that no router can steer two zmesh ends onto it.
func checkOffer(svc *model.Service, o *ctrlproto.E2EEOffer) (*ctrlproto.E2EEOffer, error) {
	switch {
	case o != nil && len(o.ZitiKey) != 0 && len(o.ZitiKey) != ctrlproto.ZitiKeySize:
		return nil, fail(ctrlproto.ErrCodeInvalidE2EEOffer, "e2ee.zitiKey is %d bytes; a crypto_kx public key is %d", len(o.ZitiKey), ctrlproto.ZitiKeySize)
	case o != nil && len(o.ZmeshHello) > ctrlproto.MaxZmeshHello:
		return nil, fail(ctrlproto.ErrCodeInvalidE2EEOffer, "e2ee.zmeshHello is %d bytes; at most %d", len(o.ZmeshHello), ctrlproto.MaxZmeshHello)
	case o != nil && len(o.ZmeshHello) != 0 && !o.Zmesh:
		return nil, fail(ctrlproto.ErrCodeInvalidE2EEOffer, "e2ee.zmeshHello without e2ee.zmesh: a ClientHello needs zmesh's scheme offered (set e2ee.zmesh to true, or leave e2ee.zmeshHello out)")
	}
	switch {
	case !svc.EncryptionRequired:
		return nil, nil
	case o == nil:
		return &ctrlproto.E2EEOffer{Zmesh: true}, nil
	case !o.Zmesh && len(o.ZitiKey) == 0:
		return nil, fail(ctrlproto.ErrCodeEncryptionRequired, "service %q requires end-to-end encryption and the dial offered no scheme (e2ee.zmesh or e2ee.zitiKey)", svc.Name)
	case svc.OpenZitiEncryption:
		return o, nil
	case !o.Zmesh:
		return nil, fail(ctrlproto.ErrCodeOpenZitiEncryptionNotAllowed, "openZitiEncryption is false: OpenZiti's end-to-end encryption is not allowed on service %q", svc.Name)
	}
	return &ctrlproto.E2EEOffer{Zmesh: true, ZmeshHello: o.ZmeshHello}, nil
}

// endRevoked ends the circuits dialed with a certificate that no longer authenticates the
// identity: its authenticator deleted or replaced, its CA no longer trusted, the identity
// disabled or deleted.
func (s *Service) endRevoked(identityID string) {
	s.endRevokedOf(func(c *Circuit) bool { return c.Initiator == identityID })
}

// endRevokedAll is endRevoked for every identity: the store's whole content was replaced (a
// cluster member installing a snapshot).
func (s *Service) endRevokedAll() { s.endRevokedOf(func(*Circuit) bool { return true }) }

// endRevokedOf ends the circuits that of selects, dialed with a client certificate that no
// longer authenticates their initiator.
func (s *Service) endRevokedOf(of func(c *Circuit) bool) {
	var held []*Circuit
	s.mu.Lock()
	for _, c := range s.circuits {
		if len(c.clientCert) > 0 && of(c) {
			held = append(held, c)
		}
	}
	s.mu.Unlock()
	for _, c := range held {
		if !s.certStillAuthenticates(c) {
			s.Remove(c.ID, "the client certificate was revoked")
			s.log.Info("circuit ended: its client certificate no longer authenticates its identity", "circuit", c.ID, "identity", c.Initiator)
		}
	}
}

// certStillAuthenticates tells whether c's client certificate still authenticates its
// initiator. A store failure keeps the circuit: the next change of the identity's
// credentials checks again.
func (s *Service) certStillAuthenticates(c *Circuit) bool {
	cert, err := x509.ParseCertificate(c.clientCert)
	if err != nil {
		return false
	}
	id, err := s.m.IdentityByCert([]*x509.Certificate{cert})
	switch code := model.CodeOf(err); {
	case err == nil:
		return id.ID == c.Initiator
	case code == model.CodeInvalidAuth || code == model.CodeNotFound:
		return false
	default:
		s.log.Error("cannot check a circuit's client certificate; the circuit stays", "circuit", c.ID, "err", err)
		return true
	}
}

func (s *Service) service(req *ctrlproto.CircuitRequest) (*model.Service, error) {
	var svc *model.Service
	var err error
	switch {
	case req.ServiceID != "":
		svc, err = s.m.CachedService(req.ServiceID)
	case req.ServiceName != "":
		svc, err = s.m.CachedServiceByName(req.ServiceName)
	default:
		return nil, fail(ctrlproto.ErrCodeInvalid, "the request names no service")
	}
	if model.CodeOf(err) == model.CodeNotFound {
		return nil, fail(ctrlproto.ErrCodeServiceNotFound, "service %q not found", req.ServiceID+req.ServiceName)
	}
	return svc, err
}

// authorize checks that the circuit's initiator may dial the service and returns its identity: the SDK client's dial
// session; the identity of the client certificate presented at a transport listener; or, for
// the router's own tunnel, the router's identity.
func (s *Service) authorize(ingress string, svc *model.Service, req *ctrlproto.CircuitRequest) (string, error) {
	if req.SessionToken != "" {
		sess, err := s.m.DialSession(req.SessionToken, svc.ID, model.PolicyDial)
		if err != nil {
			if model.CodeOf(err) == model.CodeNotFound {
				return "", fail(ctrlproto.ErrCodeInvalidSession, "no dial session of service %q has this token", svc.Name)
			}
			return "", err
		}
		return sess.IdentityID, s.checkEdgeRouter(sess.IdentityID, ingress, svc)
	}
	identity := ingress
	if len(req.ClientCert) > 0 {
		cert, err := x509.ParseCertificate(req.ClientCert)
		if err != nil {
			return "", fail(ctrlproto.ErrCodeInvalid, "the client certificate: %v", err)
		}
		id, err := s.m.IdentityByCert([]*x509.Certificate{cert})
		if err != nil {
			return "", fail(ctrlproto.ErrCodeInvalidSession, "the client certificate authenticates no identity: %v", err)
		}
		identity = id.ID
	} else if req.IngressIdentityID != ingress {
		return "", fail(ctrlproto.ErrCodeInvalid, "a router's tunnel dials as the router's identity %s, not %q", ingress, req.IngressIdentityID)
	}
	// Without an API session there is no posture data: only policies that ask for none count.
	ok, err := s.m.AllowedWithoutPosture(identity, svc.ID, model.PolicyDial)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fail(ctrlproto.ErrCodeServiceNotFound, "no service policy without posture checks lets identity %s dial service %q", identity, svc.Name)
	}
	if identity != ingress {
		// A client at a transport listener.
		return identity, s.checkEdgeRouter(identity, ingress, svc)
	}
	return identity, nil
}

// checkEdgeRouter checks that the edge router policies let a client identity use the router
// for the service.
func (s *Service) checkEdgeRouter(identity, router string, svc *model.Service) error {
	ok, err := s.m.EdgeRouterAllows(identity, router, svc.ID)
	if err != nil {
		return err
	}
	if !ok {
		return fail(ctrlproto.ErrCodeServiceNotFound, "no edge router policy lets identity %s use router %s for service %q", identity, router, svc.Name)
	}
	return nil
}

// install routes the circuit on every router of its path, egress first. The ingress gets no
// Route unless it is also the egress: it installs its entry when the reply arrives. On a
// failure the routes already installed are removed. It returns the egress's answer to the
// end-to-end offer.
func (s *Service) install(ctx context.Context, c *Circuit, term *model.Terminator) (ctrlproto.HostAnswer, error) {
	n := len(c.Path)
	var done []string
	var host ctrlproto.HostAnswer
	for i := n - 1; i >= 0; i-- {
		if i == 0 && n > 1 {
			break
		}
		r := &ctrlproto.Route{CircuitID: c.ID, Timeout: RouteTimeout}
		if i == n-1 {
			r.Forward.Xgress = &ctrlproto.Xgress{Binding: term.Binding, Address: term.Address, InitiatorID: c.Initiator, AppData: c.appData, E2EE: c.offer,
				ServiceID: c.ServiceID, ServiceName: c.serviceName}
		} else {
			r.Forward.Router = c.Path[i+1]
		}
		if i == 0 {
			r.Reverse.Xgress = &ctrlproto.Xgress{Binding: "ingress"}
		} else {
			r.Reverse.Router = c.Path[i-1]
		}
		reply, err := s.route(ctx, c.Path[i], r)
		if err == nil {
			done = append(done, c.Path[i])
			if i == n-1 {
				host, err = checkHostAnswer(c.Path[i], c.offer, reply)
			}
		}
		if err != nil {
			s.unroute(c.ID, done, "the circuit could not be set up")
			return ctrlproto.HostAnswer{}, err
		}
	}
	return host, nil
}

// checkHostAnswer checks the egress's answer to the end-to-end offer: at most one of an
// OpenZiti key (checkHostKey) and a ServerHello, which must answer the offer's ClientHello.
func checkHostAnswer(egress string, offer *ctrlproto.E2EEOffer, reply *ctrlproto.RouteReply) (ctrlproto.HostAnswer, error) {
	key, err := checkHostKey(egress, offer, reply.HostZitiKey)
	if err != nil || len(reply.HostHello) == 0 {
		return ctrlproto.HostAnswer{HostZitiKey: key}, err
	}
	switch {
	case len(key) > 0:
		return ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeRouteFailed, "router %s: the hosting end answered with both an OpenZiti key and a ServerHello", egress)
	case offer == nil || len(offer.ZmeshHello) == 0:
		return ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeRouteFailed, "router %s: the hosting end answered with a ServerHello (hostHello), but the circuit's offer had no ClientHello", egress)
	case len(reply.HostHello) > ctrlproto.MaxHostHello:
		return ctrlproto.HostAnswer{}, fail(ctrlproto.ErrCodeRouteFailed, "router %s: the hosting end's ServerHello is %d bytes; at most %d", egress, len(reply.HostHello), ctrlproto.MaxHostHello)
	}
	return ctrlproto.HostAnswer{HostHello: reply.HostHello}, nil
}

// checkHostKey checks the egress's HostZitiKey: a crypto_kx public key, answering the offer
// of OpenZiti's scheme the egress got (none when the service's policy dropped it). An offer
// of only OpenZiti's scheme needs one: without it the initiator would send plaintext.
func checkHostKey(egress string, offer *ctrlproto.E2EEOffer, key []byte) ([]byte, error) {
	switch {
	case len(key) == 0 && offer != nil && !offer.Zmesh:
		return nil, fail(ctrlproto.ErrCodeEncryptionRequired, "router %s: the hosting end answered without an OpenZiti key (hostZitiKey), "+
			"but the circuit's offer was only OpenZiti's scheme: it would run unencrypted", egress)
	case len(key) == 0:
		return nil, nil
	case offer == nil || len(offer.ZitiKey) == 0:
		return nil, fail(ctrlproto.ErrCodeRouteFailed, "router %s: the hosting end answered with an OpenZiti key, but the circuit's offer had none "+
			"(the service does not require end-to-end encryption, its openZitiEncryption is false, or the dialing end offered only zmesh's scheme)", egress)
	case len(key) != ctrlproto.ZitiKeySize:
		return nil, fail(ctrlproto.ErrCodeRouteFailed, "router %s: the hosting end's OpenZiti key is %d bytes, not %d", egress, len(key), ctrlproto.ZitiKeySize)
	}
	return key, nil
}

func (s *Service) route(ctx context.Context, router string, r *ctrlproto.Route) (*ctrlproto.RouteReply, error) {
	ch, ok := s.routers.Channel(router)
	if !ok {
		return nil, fail(ctrlproto.ErrCodeRouteFailed, "router %s is not connected", router)
	}
	ctx, cancel := context.WithTimeout(ctx, RouteTimeout+time.Second)
	defer cancel()
	reply, err := ctrlproto.Call[*ctrlproto.RouteReply](ctx, ch, r)
	if err != nil {
		return nil, fail(ctrlproto.ErrCodeRouteFailed, "router %s: %v", router, err)
	}
	if err := reply.Err(); err != nil {
		var ce *ctrlproto.Error
		if errors.As(err, &ce) && ce.Code == ctrlproto.ErrCodeDialFailed {
			return nil, err
		}
		return nil, fail(ctrlproto.ErrCodeRouteFailed, "router %s: %v", router, err)
	}
	return reply, nil
}

// unroute removes a circuit from routers, without waiting.
func (s *Service) unroute(id uint64, routers []string, reason string) {
	for _, r := range routers {
		if ch, ok := s.routers.Channel(r); ok {
			if err := ch.SendWithin(RouteTimeout, &ctrlproto.Unroute{CircuitID: id, Reason: reason}); err != nil {
				s.log.Debug("unroute", "circuit", id, "router", r, "err", err)
			}
		}
	}
}

// endedMemory is how long removed circuits are remembered: longer than a router takes to
// reconnect and say Hello after the fault that removed the circuit.
const endedMemory = time.Minute

type endedCircuit struct {
	id uint64
	at time.Duration // since Service.epoch (a time.Time would hold a pointer)
}

// Remove ends a circuit on every router of its path; it reports whether the circuit was
// known.
func (s *Service) Remove(id uint64, reason string) bool { return s.remove(id, reason, nil) }

// remove is Remove without telling the routers of the path for which skip, if not nil, is
// true (at is the router's place on the path).
func (s *Service) remove(id uint64, reason string, skip func(c *Circuit, at int) bool) bool {
	now := time.Since(s.epoch)
	s.mu.Lock()
	c, ok := s.circuits[id]
	delete(s.circuits, id)
	if _, seen := s.ended[id]; !seen {
		s.ended[id] = struct{}{}
		s.endedOrder = append(s.endedOrder, endedCircuit{id, now})
	}
	drop := 0
	for drop < len(s.endedOrder) && now-s.endedOrder[drop].at > endedMemory {
		delete(s.ended, s.endedOrder[drop].id)
		drop++
	}
	s.endedOrder = s.endedOrder[drop:]
	s.mu.Unlock()
	if ok {
		for at, r := range c.Path {
			if skip == nil || !skip(c, at) {
				s.unroute(id, []string{r}, reason)
			}
		}
	}
	return ok
}

// Fault handles a router's report that a circuit ended there: one of its ends finished or
// failed, or a link it used went down. The circuit is removed from the other routers, but for
// the terminator's after a clean end at the initiator on a two-router path (Fault.Clean). Ends
// are logged at debug level: a busy network ends thousands of circuits a second.
func (s *Service) Fault(router string, f *ctrlproto.Fault) {
	s.mu.Lock()
	c, ok := s.circuits[f.CircuitID]
	onPath := ok && (c.Adopted || slices.Contains(c.Path, router)) // an adopted path is partial
	s.mu.Unlock()
	if ok && !onPath {
		s.log.Warn("fault ignored: the router is not on the circuit's path", "circuit", f.CircuitID, "router", router)
		return
	}
	skip := func(c *Circuit, at int) bool {
		switch {
		case f.Unrouted && c.Path[at] == router:
			return true // it removed the circuit itself
		case f.Clean && !c.Adopted && len(c.Path) == 2 && c.Path[0] == router && at == 1:
			// A clean end at the initiator is one at the terminator too, whose router
			// removes the circuit by itself once the initiator's EOF, sent before this
			// fault on the link between them, arrives. (With routers between, an Unroute
			// could reach one of them before that EOF passed: the terminator is unrouted
			// as before.)
			return true
		}
		return false
	}
	if s.remove(f.CircuitID, "ended at router "+router+": "+f.Reason, skip) {
		s.log.Debug("circuit ended", "circuit", f.CircuitID, "router", router, "reason", f.Reason)
	}
}

// Adopt records the circuits a router reports when it connects: circuits this controller did
// not make (it restarted since) become known, with the routers that report them as their path,
// so that idle checks keep them and faults unroute them everywhere. A reported circuit that
// was removed meanwhile (its fault came first) is unrouted from the router at once.
func (s *Service) Adopt(router string, ids []uint64) {
	var stale []uint64
	defer func() {
		for _, id := range stale {
			s.unroute(id, []string{router}, "the circuit ended while the router was away")
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if _, gone := s.ended[id]; gone {
			stale = append(stale, id)
			continue
		}
		if _, known := s.circuits[id]; !known && len(s.circuits) >= maxCircuits {
			s.log.Warn("circuits reported by a router not adopted: the controller's circuit table is full", "router", router, "max", maxCircuits)
			return
		}
		c, ok := s.circuits[id]
		if !ok {
			c = &Circuit{ID: id, Created: time.Now(), Adopted: true}
			s.circuits[id] = c
		}
		if !slices.Contains(c.Path, router) {
			c.Path = append(c.Path, router)
		}
	}
}

// Valid returns the ids among ids of circuits the controller knows.
func (s *Service) Valid(ids []uint64) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	valid := []uint64{}
	for _, id := range ids {
		if _, ok := s.circuits[id]; ok {
			valid = append(valid, id)
		}
	}
	return valid
}

// Circuits returns the circuits the controller knows.
func (s *Service) Circuits() []Circuit {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Circuit, 0, len(s.circuits))
	for _, c := range s.circuits {
		out = append(out, *c)
	}
	return out
}

// Stats returns how many circuits were created and refused.
func (s *Service) Stats() (created, failed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created, s.failed
}

func newCircuitID() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}
