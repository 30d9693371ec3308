package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/xtaci/smux"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/tlscork"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// The SDK listener (listener binding edge) is where SDK clients connect (protocol in
// package edgeproto). A client presents its identity's certificate over TLS 1.3, then runs an
// smux session whose first stream says hello with an API session of that identity, known
// from the router's session cache. Each further stream it opens dials a service (the stream
// becomes the circuit's initiator end) or binds one (the router creates a terminator of
// binding edge for it, and opens a connect stream to the client for every circuit that
// reaches it). A client's session, and each of its circuits and binds, ends when the API
// session or session that admitted it goes away, or when its API session stops admitting
// the certificate it presented (the certificate was revoked or replaced).

// BindingEdge is the terminator binding of services hosted by SDK clients.
const BindingEdge = "edge"

// sdkServer holds the SDK clients connected to the router's SDK listeners.
type sdkServer struct {
	r *Router

	mu    sync.Mutex
	conns map[*sdkConn]struct{}
	binds map[string]*sdkBind // by terminator address, <connection id>/<stream id>
}

// sdkConn is one SDK client's connection.
type sdkConn struct {
	id         string // random; part of its binds' terminator addresses
	identityID string // from the client certificate
	certFP     string // the client certificate's fingerprint
	apiToken   string
	sess       *smux.Session

	mu sync.Mutex
	// streams holds every stream accepted or opened until it is closed: streams must stay
	// referenced while in use (older smux releases close unreachable accepted streams from a
	// finalizer, mid-transfer; see TestEdgeStreamsSurviveGC).
	streams map[*smux.Stream]string // → the session token it uses, "" for none
}

// sdkBind is a service an SDK client hosts through this router.
type sdkBind struct {
	conn         *sdkConn
	stream       *smux.Stream
	terminatorID string
	sessionToken string
}

func newSDKServer(r *Router) *sdkServer {
	return &sdkServer{r: r, conns: map[*sdkConn]struct{}{}, binds: map[string]*sdkBind{}}
}

// startSDKListeners opens the SDK listeners.
func (r *Router) startSDKListeners(ctx context.Context, wg *sync.WaitGroup) error {
	for _, l := range r.cfg.Listeners {
		if l.Binding != config.BindingEdge || l.Bind == nil {
			continue
		}
		addr, err := r.listenClients(ctx, wg, "edge", l.Bind, r.sdk.serve)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.sdkAddr = append(r.sdkAddr, addr)
		r.mu.Unlock()
	}
	return nil
}

// SDKAddresses returns where the SDK listeners listen, once ready.
func (r *Router) SDKAddresses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sdkAddr...)
}

// serve runs one client's connection until it ends or ctx does.
func (s *sdkServer) serve(ctx context.Context, c *tlscork.Batched) {
	log := s.r.log.With("edgeClient", c.RemoteAddr().String())
	c.SetDeadline(time.Now().Add(edgeproto.HandshakeTimeout))
	if err := c.HandshakeContext(ctx); err != nil {
		log.Debug("SDK listener: TLS handshake failed", "err", err)
		c.Close()
		return
	}
	c.ReadAhead(edgeproto.ReadAhead)
	leaf := c.ConnectionState().PeerCertificates[0]
	identityID, certFP := leaf.Subject.CommonName, certid.Fingerprint(leaf)
	// The first bytes tell the protocol: OpenZiti's channel, or zmesh's smux session, which
	// gets them replayed.
	var first [4]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		log.Debug("SDK listener: nothing read after the TLS handshake", "err", err)
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if zitiproto.IsMagic(first[:]) {
		s.r.ziti.serve(ctx, c, first[:], identityID, certFP)
		return
	}
	sess, err := smux.Server(&replayConn{Batched: c, pre: first}, edgeproto.Smux())
	if err != nil {
		log.Warn("SDK listener: smux", "err", err)
		c.Close()
		return
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	ec, control, err := s.hello(sess, identityID, certFP)
	if err != nil {
		log.Info("edge client refused", "identity", identityID, "err", err)
		// The client closes once it has read the refusal: closing first, with its last
		// bytes unread, would make the kernel reset the connection and lose the answer.
		t := time.NewTimer(edgeproto.HandshakeTimeout)
		defer t.Stop()
		select {
		case <-sess.CloseChan():
		case <-t.C:
		case <-ctx.Done():
		}
		return
	}
	log = log.With("identity", identityID, "conn", ec.id)
	log.Debug("edge client connected")
	s.mu.Lock()
	s.conns[ec] = struct{}{}
	s.mu.Unlock()
	// The certificate may have stopped being current between hello and now.
	if api, ok := s.r.sessionCache.apiSession(ec.apiToken); !ok || !api.AdmitsCert(certFP) {
		log.Info("edge client disconnected: its API session ended or no longer admits its certificate")
		ec.sess.Close()
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, ec)
		s.mu.Unlock()
		log.Debug("edge client gone")
	}()
	var streams sync.WaitGroup
	defer streams.Wait()
	streams.Go(func() { s.controlLoop(ec, control) })
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		ec.keep(st, "")
		streams.Go(func() { s.stream(ctx, ec, st) })
	}
}

// hello admits a client: its first stream must say hello with an API session of the
// identity whose certificate it presented, that admits that certificate.
func (s *sdkServer) hello(sess *smux.Session, identityID, certFP string) (*sdkConn, *smux.Stream, error) {
	sess.SetDeadline(time.Now().Add(edgeproto.HandshakeTimeout))
	st, err := sess.AcceptStream()
	if err != nil {
		return nil, nil, fmt.Errorf("no hello stream: %w", err)
	}
	sess.SetDeadline(time.Time{})
	st.SetDeadline(time.Now().Add(edgeproto.HandshakeTimeout))
	var req edgeproto.Request
	if err := edgeproto.Read(st, &req); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("read hello: %w", err)
	}
	refuse := func(code, format string, args ...any) (*sdkConn, *smux.Stream, error) {
		msg := fmt.Sprintf(format, args...)
		edgeproto.Write(st, &edgeproto.Response{Code: code, Error: msg})
		st.Close()
		return nil, nil, errors.New(msg)
	}
	switch {
	case req.Op != edgeproto.OpHello:
		return refuse(edgeproto.CodeInvalid, "the first stream must say hello, not %q", req.Op)
	case req.Version != edgeproto.ProtocolVersion:
		return refuse(edgeproto.CodeInvalid, "edge protocol version %d; this router speaks %d", req.Version, edgeproto.ProtocolVersion)
	}
	if err := s.r.admitAPISession(req.APISessionToken, identityID, certFP); err != nil {
		return refuse(edgeproto.CodeInvalidSession, "%s", err)
	}
	if err := edgeproto.Write(st, &edgeproto.Response{OK: true, RouterID: s.r.id}); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("answer hello: %w", err)
	}
	st.SetDeadline(time.Time{})
	var idb [8]byte
	rand.Read(idb[:])
	ec := &sdkConn{id: hex.EncodeToString(idb[:]), identityID: identityID, certFP: certFP, apiToken: req.APISessionToken, sess: sess,
		streams: map[*smux.Stream]string{}}
	ec.keep(st, "")
	return ec, st, nil
}

// controlLoop answers the client's pings on its control stream; the connection ends with it.
func (s *sdkServer) controlLoop(ec *sdkConn, st *smux.Stream) {
	defer ec.sess.Close()
	for {
		var req edgeproto.Request
		if err := edgeproto.Read(st, &req); err != nil {
			return
		}
		if req.Op != edgeproto.OpPing {
			edgeproto.Write(st, &edgeproto.Response{Code: edgeproto.CodeInvalid, Error: fmt.Sprintf("%q on the control stream", req.Op)})
			return
		}
		if err := edgeproto.Write(st, &edgeproto.Response{OK: true, Seq: req.Seq}); err != nil {
			return
		}
	}
}

// stream serves a stream the client opened: a dial or a bind.
func (s *sdkServer) stream(ctx context.Context, ec *sdkConn, st *smux.Stream) {
	st.SetDeadline(time.Now().Add(edgeproto.HandshakeTimeout))
	var req edgeproto.Request
	if err := edgeproto.Read(st, &req); err != nil {
		ec.drop(st)
		st.Close()
		return
	}
	switch req.Op {
	case edgeproto.OpDial:
		s.dial(ctx, ec, st, &req)
	case edgeproto.OpBind:
		s.bind(ctx, ec, st, &req)
	default:
		refuseStream(ec, st, edgeproto.CodeInvalid, fmt.Sprintf("a client opens dial or bind streams, not %q", req.Op))
	}
}

func refuseStream(ec *sdkConn, st *smux.Stream, code, msg string) {
	edgeproto.Write(st, &edgeproto.Response{Code: code, Error: msg})
	ec.drop(st)
	st.Close()
}

// admitAPISession checks that token is an API session the router knows (waiting a moment
// for the controller's update) of the identity identityID, that admits the client
// certificate of fingerprint certFP: what an edge client's hello and token update need.
func (r *Router) admitAPISession(token, identityID, certFP string) error {
	api, ok := r.sessionCache.awaitAPISession(token, r.ctrl.isConnected)
	switch {
	case !ok:
		return errors.New("unknown or ended API session")
	case api.IdentityID != identityID:
		return fmt.Errorf("the API session is not of the identity %s of the client certificate", identityID)
	case !api.AdmitsCert(certFP):
		return fmt.Errorf("the client certificate is not a current certificate of identity %s", identityID)
	}
	return nil
}

// checkSession checks that token is a session of type typ (of service serviceID, if set)
// made in the API session apiToken.
func (r *Router) checkSession(apiToken, token, typ, serviceID string) (ctrlproto.Session, error) {
	se, ok := r.sessionCache.awaitSession(token, r.ctrl.isConnected)
	api, apiOK := r.sessionCache.apiSession(apiToken)
	switch {
	case !ok || !apiOK:
		return se, errors.New("unknown or ended session")
	case se.APISessionID != api.ID:
		return se, errors.New("the session was not made in this client's API session")
	case se.Type != typ:
		return se, fmt.Errorf("a %s session cannot %s", se.Type, typ)
	case serviceID != "" && se.ServiceID != serviceID:
		return se, errors.New("the session is of another service")
	}
	return se, nil
}

// dial carries the stream as a circuit to the session's service.
func (s *sdkServer) dial(ctx context.Context, ec *sdkConn, st *smux.Stream, req *edgeproto.Request) {
	se, err := s.r.checkSession(ec.apiToken, req.SessionToken, "Dial", req.ServiceID)
	if err != nil {
		refuseStream(ec, st, edgeproto.CodeInvalidSession, err.Error())
		return
	}
	ec.keep(st, se.Token)
	reply, err := s.r.requestCircuit(ctx, &ctrlproto.CircuitRequest{SessionToken: se.Token, ServiceID: se.ServiceID, TerminatorIdentity: req.Identity,
		AppData: req.AppData, E2EE: ctrlOffer(req.E2EE)})
	if err != nil {
		code := edgeproto.CodeFailed
		var ce *ctrlproto.Error
		if errors.As(err, &ce) && ce.Code == ctrlproto.ErrCodeInvalidSession {
			code = edgeproto.CodeInvalidSession
		}
		refuseStream(ec, st, code, err.Error())
		return
	}
	if err := edgeproto.Write(st, &edgeproto.Response{OK: true, CircuitID: reply.CircuitID, HostID: reply.Terminator.HostID,
		HostZitiKey: s.r.overlay.tamperedHostKey(reply.HostZitiKey), HostHello: reply.HostHello}); err != nil {
		ec.drop(st)
		st.Close()
		s.r.fault(reply.CircuitID, "the SDK client left before its circuit started")
		return
	}
	st.SetDeadline(time.Time{})
	c := &sdkStreamConn{Stream: st, ec: ec}
	if err := s.r.attachIngress(reply, c); err != nil {
		s.r.log.Warn("circuit failed at the ingress", "circuit", reply.CircuitID, "err", err)
		c.Close()
		s.r.fault(reply.CircuitID, err.Error())
	}
}

// bind hosts the session's service for the client while the stream lasts.
func (s *sdkServer) bind(ctx context.Context, ec *sdkConn, st *smux.Stream, req *edgeproto.Request) {
	se, err := s.r.checkSession(ec.apiToken, req.SessionToken, "Bind", req.ServiceID)
	if err != nil {
		refuseStream(ec, st, edgeproto.CodeInvalidSession, err.Error())
		return
	}
	ec.keep(st, se.Token)
	address := ec.id + "/" + strconv.FormatUint(uint64(st.ID()), 10)
	b := &sdkBind{conn: ec, stream: st, sessionToken: se.Token}
	s.mu.Lock()
	s.binds[address] = b
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.binds, address)
		s.mu.Unlock()
		ec.drop(st)
		st.Close()
	}()
	tctx, cancel := context.WithTimeout(ctx, edgeproto.HandshakeTimeout)
	id, err := s.r.CreateTerminator(tctx, &ctrlproto.TerminatorCreate{Service: se.ServiceID, Binding: BindingEdge, Address: address,
		Identity: req.Identity, Cost: req.Cost, Precedence: req.Precedence, SessionToken: se.Token})
	cancel()
	if err != nil {
		code := edgeproto.CodeFailed
		var ce *ctrlproto.Error
		if errors.As(err, &ce) && ce.Code == ctrlproto.ErrCodeInvalidSession {
			code = edgeproto.CodeInvalidSession
		}
		edgeproto.Write(st, &edgeproto.Response{Code: code, Error: err.Error()})
		return
	}
	s.mu.Lock()
	b.terminatorID = id
	s.mu.Unlock()
	if err := edgeproto.Write(st, &edgeproto.Response{OK: true, TerminatorID: id}); err == nil {
		st.SetDeadline(time.Time{})
		io.Copy(io.Discard, st) // until the client closes the bind, or the connection ends
	}
	// The terminator goes even when the router is stopping: a later start creates its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), edgeproto.HandshakeTimeout)
	defer cancel()
	if err := s.r.RemoveTerminator(rctx, id); err != nil {
		s.r.log.Warn("edge bind ended; its terminator stays until the controller removes it", "terminator", id, "err", err)
	}
}

// terminators returns the ids of the terminators of the clients' binds.
func (s *sdkServer) terminators() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return terminatorIDs(s.binds, func(b *sdkBind) string { return b.terminatorID })
}

// clientCount returns the number of admitted clients.
func (s *sdkServer) clientCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// connect opens a stream, for a circuit, to the SDK client hosting the terminator at
// x.Address; it returns the stream and the client's answer to the end-to-end offer.
func (s *sdkServer) connect(ctx context.Context, x *ctrlproto.Xgress, circuitID uint64) (net.Conn, ctrlproto.HostAnswer, error) {
	s.mu.Lock()
	b := s.binds[x.Address]
	var termID string
	if b != nil {
		termID = b.terminatorID
	}
	s.mu.Unlock()
	if b == nil || termID == "" {
		return nil, ctrlproto.HostAnswer{}, fmt.Errorf("no SDK client hosts %s here any more", x.Address)
	}
	st, err := b.conn.sess.OpenStream()
	if err != nil {
		return nil, ctrlproto.HostAnswer{}, fmt.Errorf("open a stream to the hosting client: %w", err)
	}
	b.conn.keep(st, b.sessionToken)
	fail := func(err error) (net.Conn, ctrlproto.HostAnswer, error) {
		b.conn.drop(st)
		st.Close()
		return nil, ctrlproto.HostAnswer{}, err
	}
	deadline := time.Now().Add(edgeproto.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	st.SetDeadline(deadline)
	if err := edgeproto.Write(st, &edgeproto.Request{Op: edgeproto.OpConnect, TerminatorID: termID, CircuitID: circuitID, InitiatorID: x.InitiatorID,
		AppData: x.AppData, E2EE: edgeOffer(s.r.overlay.tamperedOffer(x.E2EE))}); err != nil {
		return fail(fmt.Errorf("connect to the hosting client: %w", err))
	}
	var resp edgeproto.Response
	if err := edgeproto.Read(st, &resp); err != nil {
		return fail(fmt.Errorf("the hosting client did not answer: %w", err))
	}
	if err := resp.Err(); err != nil {
		return fail(err)
	}
	st.SetDeadline(time.Time{})
	return &sdkStreamConn{Stream: st, ec: b.conn}, ctrlproto.HostAnswer{HostZitiKey: resp.HostZitiKey, HostHello: resp.HostHello}, nil
}

// removed closes what used API sessions and sessions that went away.
func (s *sdkServer) removed(apiTokens, sessionTokens []string) {
	gone := map[string]bool{}
	for _, t := range sessionTokens {
		gone[t] = true
	}
	goneAPI := map[string]bool{}
	for _, t := range apiTokens {
		goneAPI[t] = true
	}
	s.mu.Lock()
	conns := make([]*sdkConn, 0, len(s.conns))
	for ec := range s.conns {
		conns = append(conns, ec)
	}
	s.mu.Unlock()
	for _, ec := range conns {
		if goneAPI[ec.apiToken] {
			s.r.log.Info("edge client disconnected: its API session ended", "identity", ec.identityID, "conn", ec.id)
			go ec.sess.Close() // off the control channel's goroutine: TLS close_notify may wait up to 5 s
			continue
		}
		if len(gone) == 0 {
			continue
		}
		ec.mu.Lock()
		var closing []*smux.Stream
		for st, token := range ec.streams {
			if gone[token] {
				closing = append(closing, st)
			}
		}
		ec.mu.Unlock()
		for _, st := range closing {
			go st.Close() // its FIN waits for the session's writer, stuck on a client that reads nothing
		}
	}
}

// certsChanged closes the connections whose API session no longer admits their certificate.
func (s *sdkServer) certsChanged(apis []ctrlproto.APISession) {
	byToken := make(map[string]*ctrlproto.APISession, len(apis))
	for i := range apis {
		byToken[apis[i].Token] = &apis[i]
	}
	s.mu.Lock()
	var closing []*sdkConn
	for ec := range s.conns {
		if a, ok := byToken[ec.apiToken]; ok && !a.AdmitsCert(ec.certFP) {
			closing = append(closing, ec)
		}
	}
	s.mu.Unlock()
	for _, ec := range closing {
		s.r.log.Info("edge client disconnected: its certificate is no longer current", "identity", ec.identityID, "conn", ec.id)
		go ec.sess.Close() // as in removed
	}
}

// keep references a stream until drop; token is the session it uses.
func (ec *sdkConn) keep(st *smux.Stream, token string) {
	ec.mu.Lock()
	ec.streams[st] = token
	ec.mu.Unlock()
}

func (ec *sdkConn) drop(st *smux.Stream) {
	ec.mu.Lock()
	delete(ec.streams, st)
	ec.mu.Unlock()
}

// sdkStreamConn is a circuit's end on a client's stream; closing it forgets the stream.
type sdkStreamConn struct {
	*smux.Stream
	ec   *sdkConn
	once sync.Once
}

func (c *sdkStreamConn) Close() error {
	c.once.Do(func() { c.ec.drop(c.Stream) })
	return c.Stream.Close()
}

// replayConn is a client's connection whose first bytes, read to tell the protocol, are read
// again; everything else (Write's batching included) is the connection's own.
type replayConn struct {
	*tlscork.Batched
	pre  [4]byte
	done int // bytes of pre read again
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.done < len(c.pre) {
		n := copy(p, c.pre[c.done:])
		c.done += n
		return n, nil
	}
	return c.Batched.Read(p)
}

// edgeOffer is an initiator's end-to-end offer as a hosting client takes it.
func edgeOffer(o *ctrlproto.E2EEOffer) *edgeproto.E2EEOffer {
	if o == nil {
		return nil
	}
	return &edgeproto.E2EEOffer{Zmesh: o.Zmesh, ZitiKey: o.ZitiKey, ZmeshHello: o.ZmeshHello}
}

// ctrlOffer is a client's end-to-end offer as the controller takes it.
func ctrlOffer(o *edgeproto.E2EEOffer) *ctrlproto.E2EEOffer {
	if o == nil {
		return nil
	}
	return &ctrlproto.E2EEOffer{Zmesh: o.Zmesh, ZitiKey: o.ZitiKey, ZmeshHello: o.ZmeshHello}
}
