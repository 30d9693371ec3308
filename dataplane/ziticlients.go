package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/edgeproto"
	"github.com/zmesh/zmesh/internal/tlscork"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// OpenZiti's clients (sdk-golang, the ziti tunneler) reach the same edge listener as zmesh's
// SDK: a connection whose first four bytes are channel v2's magic is theirs (package
// zitiproto). After the channel's hello, which carries an API session of the identity whose
// certificate the client presented, the client multiplexes its connections over the channel,
// each named by a connection id: Connect dials a service (the connection becomes a circuit's
// initiator end), Bind hosts one (the router creates a terminator of binding edge at address
// ziti/<channel id>/<bind connection id>, and sends the client a Dial, with a connection id
// of its own, for every circuit that reaches it). Data messages carry the bytes of a
// connection; a Data with the FIN flag half-closes it, StateClosed closes it. A channel, and
// each of its circuits and binds, ends as a zmesh SDK client's does (sdkServer.removed,
// certsChanged): when its API session or session goes away, or its API session stops
// admitting its certificate.

// zitiAddressPrefix starts the terminator addresses of OpenZiti clients' binds.
const zitiAddressPrefix = "ziti/"

// zitiWriteTimeout bounds each write of at most zitiWriteChunk bytes to an OpenZiti client's
// channel, as smux bounds a stream's close: a client that reads nothing for that long is
// closed as unresponsive, so that it holds no circuit's writer, nor any caller of Close,
// longer. A slow client that keeps reading is not: each chunk gets the whole timeout.
const (
	zitiWriteTimeout = 30 * time.Second
	zitiWriteChunk   = 256 << 10
)

// zitiQueueLen and zitiQueueBytes bound the Data messages queued toward a circuit from one
// client connection, in messages and in body bytes (a larger body is queued alone), and
// zitiChannelBytes the body bytes queued toward all the circuits of a channel; when one is
// reached, the channel's reader waits, as OpenZiti's router does.
const (
	zitiQueueLen     = 32
	zitiQueueBytes   = 4 << 20
	zitiChannelBytes = 64 << 20
)

// zitiMaxRequests bounds the Connect and Bind requests of a channel in progress at once;
// beyond it they are refused, as the reader must go on (a Connect may wait for the
// DialSuccess of a bind on the same channel).
const zitiMaxRequests = 64

// zitiMaxRequestBody bounds the body (a session token) of a Connect, Bind or UpdateBind.
const zitiMaxRequestBody = 16 << 10

// zitiMaxData bounds the body of a Data message the router sends on an unframed circuit.
const zitiMaxData = 64 << 10

// zitiMaxFrame is the largest frame of a circuit using OpenZiti's end-to-end encryption.
const zitiMaxFrame = e2ee.MaxZitiFrame

// firstRouterConnID is the first connection id the router assigns: clients number theirs
// below it, as sdk-golang does.
const firstRouterConnID = math.MaxUint32/2 + 1

// zitiServer holds the OpenZiti clients connected to the router's edge listeners.
type zitiServer struct {
	r            *Router
	pool         zitiproto.Pool
	writeTimeout atomic.Int64 // zitiWriteTimeout; tests shorten it

	mu    sync.Mutex
	conns map[*zitiConn]struct{}
	binds map[string]*zitiBind // by terminator address
}

func newZitiServer(r *Router) *zitiServer {
	s := &zitiServer{r: r, conns: map[*zitiConn]struct{}{}, binds: map[string]*zitiBind{}}
	s.writeTimeout.Store(int64(zitiWriteTimeout))
	return s
}

// zitiConn is one OpenZiti client's channel.
type zitiConn struct {
	s          *zitiServer
	id         string // random; part of its binds' terminator addresses
	identityID string
	certFP     string
	c          net.Conn // the client's TLS connection (a tlscork.Batched)
	log        *slog.Logger
	done       chan struct{} // closed when the channel ends
	cancel     context.CancelFunc
	closeOnce  sync.Once

	wsem chan struct{} // held (one token) while a message is written: one at a time
	reqs chan struct{} // a token per request in progress, at most zitiMaxRequests
	w    *zitiproto.Writer
	seq  atomic.Int32 // sequence of the messages the router sends

	// Body bytes queued toward the channel's open circuits, at most budget (a larger body is
	// queued alone); room is signalled when some are read. qmu also guards the circuits'
	// counts (zitiCircuit.qbytes).
	qmu    sync.Mutex
	qbytes int
	budget int
	room   chan struct{}

	mu       sync.Mutex
	apiToken string
	circuits map[uint32]*zitiCircuit // by connection id
	binds    map[uint32]*zitiBind    // by the bind's connection id
	pending  map[int32]chan *zitiproto.Message
	nextID   uint32 // the last connection id the router assigned
}

// zitiBind is a service an OpenZiti client hosts through this router.
type zitiBind struct {
	zc           *zitiConn
	connID       uint32
	address      string
	token        string // the Bind session's
	serviceID    string
	hostKey      []byte // the host's crypto_kx public key, nil without end-to-end encryption
	terminatorID string // set once created; with zitiServer.mu
	gone         bool   // unbound or its channel ended; with zitiServer.mu
	// The client's updates not yet sent to the controller, merged (the latest value of each
	// field wins), and whether a goroutine sends them; with zitiServer.mu.
	update   ctrlproto.TerminatorUpdate
	updating bool
}

// serve runs an OpenZiti client's channel until it ends or ctx does; pre are the bytes the
// listener read to tell the protocol.
func (s *zitiServer) serve(ctx context.Context, c *tlscork.Batched, pre []byte, identityID, certFP string) {
	log := s.r.log.With("zitiClient", c.RemoteAddr().String())
	ctx, zc := s.newConn(ctx, c, identityID, certFP)
	zc.log = log
	defer zc.close()
	stop := context.AfterFunc(ctx, zc.close)
	defer stop()
	rd := zitiproto.NewReader(c, pre)
	if err := zc.hello(rd); err != nil {
		log.Info("OpenZiti client refused", "identity", identityID, "err", err)
		return
	}
	zc.log = log.With("identity", identityID, "conn", zc.id)
	zc.log.Debug("OpenZiti client connected")
	s.mu.Lock()
	s.conns[zc] = struct{}{}
	s.mu.Unlock()
	// The certificate may have stopped being current between hello and now.
	if api, ok := s.r.sessionCache.apiSession(zc.token()); !ok || !api.AdmitsCert(certFP) {
		zc.log.Info("OpenZiti client disconnected: its API session ended or no longer admits its certificate")
		return
	}
	zc.run(ctx, rd)
}

func (s *zitiServer) newConn(ctx context.Context, c net.Conn, identityID, certFP string) (context.Context, *zitiConn) {
	var idb [8]byte
	rand.Read(idb[:])
	ctx, cancel := context.WithCancel(ctx)
	return ctx, &zitiConn{s: s, cancel: cancel, id: hex.EncodeToString(idb[:]), identityID: identityID, certFP: certFP, c: c,
		done: make(chan struct{}), wsem: make(chan struct{}, 1), reqs: make(chan struct{}, zitiMaxRequests), w: zitiproto.NewWriter(progressWriter{c, &s.writeTimeout}), circuits: map[uint32]*zitiCircuit{},
		binds: map[uint32]*zitiBind{}, pending: map[int32]chan *zitiproto.Message{}, nextID: firstRouterConnID - 1,
		budget: zitiChannelBytes, room: make(chan struct{}, 1)}
}

// run reads the client's messages until the channel ends; the channel is closed then.
func (zc *zitiConn) run(ctx context.Context, rd *zitiproto.Reader) {
	s := zc.s
	var work sync.WaitGroup
	defer work.Wait()
	defer zc.close()
	for {
		m := s.pool.Get()
		if err := rd.Read(m); err != nil {
			s.pool.Put(m)
			zc.readEnded(err)
			return
		}
		if hb, ok := m.Uint64(zitiproto.HeaderHeartbeat); ok {
			zc.heartbeatResponse(hb)
		}
		zc.handle(ctx, m, &work)
	}
}

// readEnded logs why the channel's reader stopped.
func (zc *zitiConn) readEnded(err error) {
	switch {
	case errors.Is(err, zitiproto.ErrTooLarge), errors.Is(err, zitiproto.ErrMalformed), errors.Is(err, zitiproto.ErrBadMagic):
		zc.log.Warn("OpenZiti client disconnected: protocol error", "err", err)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		zc.log.Debug("OpenZiti client gone")
	default:
		zc.log.Debug("OpenZiti client gone", "err", err)
	}
}

// hello admits the client: its first message must be a hello with an API session of the
// identity whose certificate it presented, that admits that certificate.
func (zc *zitiConn) hello(rd *zitiproto.Reader) error {
	r := zc.s.r
	zc.c.SetDeadline(time.Now().Add(edgeproto.HandshakeTimeout))
	defer zc.c.SetDeadline(time.Time{})
	req := zc.s.pool.Get()
	defer zc.s.pool.Put(req)
	if err := rd.ReadMax(req, zitiproto.MaxHello, zitiproto.MaxHello); err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	refuse := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		m := zc.s.pool.Get()
		m.SetResult(req, false, msg)
		zc.send(m)
		zc.s.pool.Put(m)
		return errors.New(msg)
	}
	if req.ContentType != zitiproto.ContentHello {
		return refuse("the first message must be a hello (content type %d), not content type %d", zitiproto.ContentHello, req.ContentType)
	}
	token, ok := req.String(zitiproto.HeaderSessionToken)
	if !ok || token == "" {
		return refuse("the hello has no API session token (header %d)", zitiproto.HeaderSessionToken)
	}
	if err := r.admitAPISession(token, zc.identityID, zc.certFP); err != nil {
		return refuse("%s", err)
	}
	zc.apiToken = token
	m := zc.s.pool.Get()
	defer zc.s.pool.Put(m)
	m.SetResult(req, true, "")
	m.PutString(zitiproto.HeaderConnectionID, zc.id)
	m.PutString(zitiproto.HeaderID, r.id)
	m.PutBool(zitiproto.HeaderSupportsBindSuccess, true)
	if err := zc.send(m); err != nil {
		return fmt.Errorf("answer hello: %w", err)
	}
	return nil
}

// handle dispatches a message the client sent; it owns m. Work that waits for the controller
// runs on its own goroutine, counted in work.
func (zc *zitiConn) handle(ctx context.Context, m *zitiproto.Message, work *sync.WaitGroup) {
	s := zc.s
	switch m.ContentType {
	case zitiproto.ContentData:
		zc.data(m)
		return
	case zitiproto.ContentLatency:
		reply := s.pool.Get()
		reply.SetResult(m, true, "")
		zc.send(reply)
		s.pool.Put(reply)
	case zitiproto.ContentConnect, zitiproto.ContentBind:
		zc.startRequest(ctx, m, work)
		return
	case zitiproto.ContentUpdateBind:
		zc.updateBind(ctx, m)
	case zitiproto.ContentUnbind:
		if id, ok := m.Uint32(zitiproto.HeaderConnID); ok {
			zc.unbind(ctx, id, "unbound by the client")
		}
	case zitiproto.ContentStateClosed:
		if id, ok := m.Uint32(zitiproto.HeaderConnID); ok && zc.closedByClient(ctx, id, m) {
			return
		}
	case zitiproto.ContentDialSuccess, zitiproto.ContentDialFailed:
		if rf, ok := m.ReplyFor(); ok {
			zc.mu.Lock()
			ch := zc.pending[rf]
			delete(zc.pending, rf)
			zc.mu.Unlock()
			if ch != nil {
				ch <- m // buffered
				return
			}
		}
	case zitiproto.ContentUpdateToken:
		zc.updateToken(m)
	case zitiproto.ContentHeartbeat, zitiproto.ContentResult:
	default:
		zc.log.Debug("OpenZiti client message ignored", "contentType", m.ContentType)
	}
	s.pool.Put(m)
}

// startRequest runs a Connect or Bind on a goroutine of its own, counted in work; it
// owns m. At most zitiMaxRequests run at once: beyond, the request is refused. Each works on
// a copy sized to the request, so that m's storage, which may be large, is reused at once.
func (zc *zitiConn) startRequest(ctx context.Context, m *zitiproto.Message, work *sync.WaitGroup) {
	s := zc.s
	refuse := func(code uint32, msg string) {
		id, _ := m.Uint32(zitiproto.HeaderConnID)
		zc.log.Info("OpenZiti request refused", "connId", id, "err", msg)
		zc.sendState(zitiproto.ContentStateClosed, id, m, msg, code)
		s.pool.Put(m)
	}
	if len(m.Body) > zitiMaxRequestBody {
		refuse(zitiproto.ErrorInvalidSession, fmt.Sprintf("a session token of %d bytes (the body of content type %d); at most %d", len(m.Body), m.ContentType, zitiMaxRequestBody))
		return
	}
	select {
	case zc.reqs <- struct{}{}:
	default:
		refuse(zitiproto.ErrorInternal, fmt.Sprintf("%d connects and binds are in progress on this channel, the most it runs at once: try again when one is answered", zitiMaxRequests))
		return
	}
	req := m.Clone()
	s.pool.Put(m)
	work.Go(func() {
		defer func() { <-zc.reqs }()
		if req.ContentType == zitiproto.ContentConnect {
			zc.connect(ctx, req)
		} else {
			zc.bind(ctx, req)
		}
	})
}

// send writes m to the client with the channel's next sequence number.
func (zc *zitiConn) send(m *zitiproto.Message) error {
	zc.wsem <- struct{}{}
	defer func() { <-zc.wsem }()
	m.Sequence = zc.seq.Add(1)
	return zc.write(m)
}

// write writes m, each chunk within the write timeout; a write that fails closes the
// channel, as the client is unresponsive or gone. It holds wsem.
func (zc *zitiConn) write(m *zitiproto.Message) error {
	err := zc.w.Write(m)
	if err == nil {
		return nil
	}
	select {
	case <-zc.done:
	default:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			zc.log.Warn("OpenZiti client disconnected: unresponsive, a write made no progress in time",
				"timeout", time.Duration(zc.s.writeTimeout.Load()), "chunk", zitiWriteChunk)
		} else {
			zc.log.Debug("OpenZiti client gone: write failed", "err", err)
		}
		go zc.close() // not under wsem: close ends circuits whose writers may wait for it
	}
	return err
}

// progressWriter writes to c in chunks of at most zitiWriteChunk bytes, each with a deadline
// of its own *timeout from its start.
type progressWriter struct {
	c       net.Conn
	timeout *atomic.Int64
}

func (w progressWriter) Write(p []byte) (n int, err error) {
	timeout := time.Duration(w.timeout.Load())
	for n < len(p) {
		w.c.SetWriteDeadline(time.Now().Add(timeout))
		k, err := w.c.Write(p[n:min(len(p), n+zitiWriteChunk)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// heartbeatResponse answers a heartbeat the client's channel put on one of its messages.
func (zc *zitiConn) heartbeatResponse(v uint64) {
	m := zc.s.pool.Get()
	m.Reset(zitiproto.ContentHeartbeat)
	m.PutUint64(zitiproto.HeaderHeartbeatResponse, v)
	zc.send(m)
	zc.s.pool.Put(m)
}

// sendState sends a connection state message (StateConnected, StateClosed, BindSuccess) for
// connection id, as a reply to req when set; errCode, when not zero, names the refusal.
func (zc *zitiConn) sendState(ct int32, id uint32, req *zitiproto.Message, text string, errCode uint32) error {
	m := zc.s.pool.Get()
	defer zc.s.pool.Put(m)
	m.SetState(ct, id, text)
	if req != nil {
		m.ReplyTo(req)
	}
	if errCode != 0 {
		m.PutUint32(zitiproto.HeaderErrorCode, errCode)
	}
	return zc.send(m)
}

func (zc *zitiConn) token() string {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	return zc.apiToken
}

// close ends the channel: its circuits and binds end with it.
func (zc *zitiConn) close() {
	zc.closeOnce.Do(func() {
		zc.cancel()
		close(zc.done)
		zc.c.Close()
		zc.s.mu.Lock()
		delete(zc.s.conns, zc)
		zc.s.mu.Unlock()
		zc.mu.Lock()
		circuits := make([]*zitiCircuit, 0, len(zc.circuits))
		for _, c := range zc.circuits {
			circuits = append(circuits, c)
		}
		binds := make([]uint32, 0, len(zc.binds))
		for id := range zc.binds {
			binds = append(binds, id)
		}
		zc.mu.Unlock()
		for _, c := range circuits {
			c.closeRemote(errZitiChannelEnded)
		}
		for _, id := range binds {
			zc.unbind(context.Background(), id, "its channel ended")
		}
	})
}

// errZitiChannelEnded ends the circuits of a channel that ended.
var errZitiChannelEnded = errors.New("the OpenZiti client's channel ended")

// data queues a Data message for the circuit of its connection id; the reader waits while
// the circuit's queue is full.
func (zc *zitiConn) data(m *zitiproto.Message) {
	id, _ := m.Uint32(zitiproto.HeaderConnID)
	zc.mu.Lock()
	c := zc.circuits[id]
	zc.mu.Unlock()
	if c == nil {
		zc.s.pool.Put(m)
		return
	}
	c.push(m)
}

// signalRoom wakes the reader waiting for room in a circuit's queue or the budget.
func (zc *zitiConn) signalRoom() {
	select {
	case zc.room <- struct{}{}:
	default:
	}
}

// closedByClient ends what the client's connection id names, a circuit or a bind, for its
// StateClosed m; it tells whether it kept m.
func (zc *zitiConn) closedByClient(ctx context.Context, id uint32, m *zitiproto.Message) bool {
	zc.mu.Lock()
	c, b := zc.circuits[id], zc.binds[id]
	zc.mu.Unlock()
	if b != nil {
		zc.unbind(ctx, id, "closed by the client")
	}
	if c != nil {
		c.closedByClient(m)
		return true
	}
	return false
}

// errZitiClientClosed: the client sent StateClosed for a circuit's connection.
var errZitiClientClosed = errors.New("the OpenZiti client closed the connection")

// session checks that token is a session of type typ made in the client's API session.
func (zc *zitiConn) session(token, typ string) (ctrlproto.Session, uint32, error) {
	se, err := zc.s.r.checkSession(zc.token(), token, typ, "")
	if err != nil {
		code := zitiproto.ErrorInvalidSession
		if se.Token != "" && se.Type != typ {
			code = zitiproto.ErrorWrongSessionType
		}
		return se, code, err
	}
	return se, 0, nil
}

// updateToken takes the client's new API session token, when it is of the same identity and
// admits the client's certificate.
func (zc *zitiConn) updateToken(m *zitiproto.Message) {
	r := zc.s.r
	token := string(m.Body)
	err := r.admitAPISession(token, zc.identityID, zc.certFP)
	reply := zc.s.pool.Get()
	defer zc.s.pool.Put(reply)
	if err != nil {
		reply.SetState(zitiproto.ContentUpdateTokenFailure, 0, err.Error())
	} else {
		zc.mu.Lock()
		zc.apiToken = token
		zc.mu.Unlock()
		reply.Reset(zitiproto.ContentUpdateTokenSuccess)
	}
	reply.ReplyTo(m)
	zc.send(reply)
}

// admit reads the connection id and the session of a Connect or Bind (request names it, typ
// is the session's type), refusing it with StateClosed when either is missing or invalid;
// ok is false then. refuse refuses it later.
func (zc *zitiConn) admit(req *zitiproto.Message, request, typ string) (id uint32, se ctrlproto.Session, refuse func(code uint32, msg string), ok bool) {
	id, ok = req.Uint32(zitiproto.HeaderConnID)
	if !ok {
		zc.sendState(zitiproto.ContentStateClosed, 0, req, fmt.Sprintf("the %s has no connection id (header %d)", request, zitiproto.HeaderConnID), zitiproto.ErrorInternal)
		return 0, se, nil, false
	}
	refused := "OpenZiti " + strings.ToLower(typ) + " refused"
	refuse = func(code uint32, msg string) {
		zc.log.Info(refused, "connId", id, "err", msg)
		zc.sendState(zitiproto.ContentStateClosed, id, req, msg, code)
	}
	se, code, err := zc.session(string(req.Body), typ)
	if err != nil {
		refuse(code, err.Error())
		return id, se, refuse, false
	}
	return id, se, refuse, true
}

// connect dials the service of the Connect's session; the client's connection becomes the
// circuit's initiator end. It owns req.
func (zc *zitiConn) connect(ctx context.Context, req *zitiproto.Message) {
	r := zc.s.r
	defer zc.s.pool.Put(req)
	id, se, refuse, ok := zc.admit(req, "connect", "Dial")
	if !ok {
		return
	}
	appData, _ := req.Header(zitiproto.HeaderAppData)
	switch {
	case len(appData) > ctrlproto.MaxAppData:
		refuse(zitiproto.ErrorInternal, fmt.Sprintf("the app data (header %d) is %d bytes; at most %d", zitiproto.HeaderAppData, len(appData), ctrlproto.MaxAppData))
		return
	case len(appData) > 0 && !json.Valid(appData):
		refuse(zitiproto.ErrorInternal, fmt.Sprintf("the app data (header %d) is not valid JSON", zitiproto.HeaderAppData))
		return
	}
	identity, _ := req.String(zitiproto.HeaderTerminatorIdentity)
	creq := &ctrlproto.CircuitRequest{SessionToken: se.Token, ServiceID: se.ServiceID, TerminatorIdentity: identity}
	if len(appData) > 0 {
		creq.AppData = json.RawMessage(append([]byte(nil), appData...))
	}
	// The client's key, when it has one, is its offer of OpenZiti's end-to-end encryption.
	if key, ok := req.Header(zitiproto.HeaderPublicKey); ok && len(key) > 0 {
		creq.E2EE = &ctrlproto.E2EEOffer{ZitiKey: append([]byte(nil), key...)}
	}
	// The connection is registered with its session before the circuit is requested, so
	// that a session that goes meanwhile ends it (removed); it answers nothing until then.
	c := newZitiCircuit(zc, id, false)
	c.sessionToken = se.Token
	c.pending = true
	if !zc.addCircuit(c) {
		refuse(zitiproto.ErrorInternal, fmt.Sprintf("connection id %d is in use", id))
		return
	}
	// The cache drops a session before removed runs: one that went since the check is seen
	// here, or by removed.
	if _, ok := r.sessionCache.session(se.Token); !ok {
		c.closeQuiet()
		refuse(zitiproto.ErrorInvalidSession, errZitiSessionEnded.Error())
		return
	}
	reply, err := r.requestCircuit(ctx, creq)
	if err != nil {
		c.closeQuiet()
		code := zitiproto.ErrorInternal
		var ce *ctrlproto.Error
		if errors.As(err, &ce) {
			switch ce.Code {
			case ctrlproto.ErrCodeInvalidSession:
				code = zitiproto.ErrorInvalidSession
			case ctrlproto.ErrCodeEncryptionRequired, ctrlproto.ErrCodeInvalidE2EEOffer:
				code = zitiproto.ErrorEncryptionMissing
			}
		}
		refuse(code, err.Error())
		return
	}
	// The client offered a key for a service that requires encryption: without the host's,
	// sdk-golang would send plaintext. (A service that does not gets no offer, and sdk-golang
	// makes none for it.)
	if creq.E2EE != nil && reply.EncryptionRequired && reply.HostZitiKey == nil {
		c.closeQuiet()
		msg := "the hosting end answered without a key (hostZitiKey): the circuit would not be end-to-end encrypted"
		r.fault(reply.CircuitID, msg)
		refuse(zitiproto.ErrorEncryptionMissing, msg)
		return
	}
	// The hosting end took OpenZiti's scheme: the circuit carries frames.
	c.framed = reply.HostZitiKey != nil
	m := zc.s.pool.Get()
	m.SetState(zitiproto.ContentStateConnected, id, "")
	m.ReplyTo(req)
	m.PutString(zitiproto.HeaderCircuitID, strconv.FormatUint(reply.CircuitID, 10))
	if reply.HostZitiKey != nil {
		m.Put(zitiproto.HeaderPublicKey, reply.HostZitiKey)
		m.PutByte(zitiproto.HeaderCryptoMethod, zitiproto.CryptoLibsodium)
	}
	// Under wmu, against end's StateClosed: the client gets StateConnected before it, or
	// only the refusal when the circuit ended while it was requested.
	c.wmu.Lock()
	if ended := c.writable(); ended != nil {
		c.wmu.Unlock()
		zc.s.pool.Put(m)
		why := "the OpenZiti client's connection ended while its circuit was made"
		if errors.Is(ended, errZitiSessionEnded) {
			why = errZitiSessionEnded.Error()
		}
		r.fault(reply.CircuitID, why)
		refuse(zitiproto.ErrorInvalidSession, why)
		return
	}
	c.pending = false
	err = zc.send(m)
	c.wmu.Unlock()
	zc.s.pool.Put(m)
	if err != nil {
		c.Close()
		r.fault(reply.CircuitID, "the OpenZiti client left before its circuit started")
		return
	}
	if err := r.attachIngress(reply, c); err != nil {
		zc.log.Warn("circuit failed at the ingress", "circuit", reply.CircuitID, "err", err)
		c.Close()
		r.fault(reply.CircuitID, err.Error())
	}
}

// addCircuit registers c under its connection id, unless the id is taken or the channel
// ended.
func (zc *zitiConn) addCircuit(c *zitiCircuit) bool {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	select {
	case <-zc.done:
		return false
	default:
	}
	if zc.circuits[c.id] != nil || zc.binds[c.id] != nil {
		return false
	}
	zc.circuits[c.id] = c
	return true
}

func (zc *zitiConn) dropCircuit(c *zitiCircuit) {
	zc.mu.Lock()
	if zc.circuits[c.id] == c {
		delete(zc.circuits, c.id)
	}
	zc.mu.Unlock()
}

// zitiPrecedences maps a bind's precedence header to the terminator's precedence.
var zitiPrecedences = [...]string{zitiproto.PrecedenceDefault: "default", zitiproto.PrecedenceRequired: "required", zitiproto.PrecedenceFailed: "failed"}

// bind hosts the service of the Bind's session for the client; it owns req. The client gets
// its answer at once, and BindSuccess once the terminator exists (if it says it understands
// it), or StateClosed when it cannot be made.
func (zc *zitiConn) bind(ctx context.Context, req *zitiproto.Message) {
	r, s := zc.s.r, zc.s
	defer s.pool.Put(req)
	id, se, refuse, ok := zc.admit(req, "bind", "Bind")
	if !ok {
		return
	}
	t := &ctrlproto.TerminatorCreate{Service: se.ServiceID, Binding: BindingEdge, SessionToken: se.Token}
	t.Identity, _ = req.String(zitiproto.HeaderTerminatorIdentity)
	if v, ok := req.Uint16(zitiproto.HeaderCost); ok {
		t.Cost = int(v)
	}
	if p, ok := req.Byte(zitiproto.HeaderPrecedence); ok {
		if int(p) >= len(zitiPrecedences) {
			refuse(zitiproto.ErrorInternal, fmt.Sprintf("precedence %d (header %d): allowed are 0 (default), 1 (required), 2 (failed)", p, zitiproto.HeaderPrecedence))
			return
		}
		t.Precedence = zitiPrecedences[p]
	}
	b := &zitiBind{zc: zc, connID: id, token: se.Token, serviceID: se.ServiceID,
		address: zitiAddressPrefix + zc.id + "/" + strconv.FormatUint(uint64(id), 10)}
	if key, ok := req.Header(zitiproto.HeaderPublicKey); ok && len(key) > 0 {
		b.hostKey = append([]byte(nil), key...)
	}
	t.Address = b.address
	zc.mu.Lock()
	taken := zc.circuits[id] != nil || zc.binds[id] != nil
	if !taken {
		zc.binds[id] = b
	}
	zc.mu.Unlock()
	if taken {
		refuse(zitiproto.ErrorInternal, fmt.Sprintf("connection id %d is in use", id))
		return
	}
	s.mu.Lock()
	s.binds[b.address] = b
	s.mu.Unlock()
	m := s.pool.Get()
	m.SetState(zitiproto.ContentStateConnected, id, "")
	m.ReplyTo(req)
	if req.Bool(zitiproto.HeaderRouterProvidedConnID) {
		m.PutBool(zitiproto.HeaderRouterProvidedConnID, true)
	}
	zc.send(m)
	s.pool.Put(m)

	tctx, cancel := context.WithTimeout(ctx, edgeproto.HandshakeTimeout)
	tid, err := r.CreateTerminator(tctx, t)
	cancel()
	if err != nil {
		code := zitiproto.ErrorInternal
		var ce *ctrlproto.Error
		if errors.As(err, &ce) && ce.Code == ctrlproto.ErrCodeInvalidSession {
			code = zitiproto.ErrorInvalidSession
		}
		zc.log.Info("OpenZiti bind failed", "connId", id, "service", se.ServiceID, "err", err)
		zc.forgetBind(b)
		zc.sendState(zitiproto.ContentStateClosed, id, nil, err.Error(), code)
		return
	}
	s.mu.Lock()
	gone := b.gone
	b.terminatorID = tid
	s.mu.Unlock()
	if gone { // unbound while the terminator was being made
		go zc.removeTerminator(ctx, tid)
		return
	}
	zc.applyUpdates(ctx, b) // those that came while the terminator was being made
	zc.log.Debug("OpenZiti bind hosted", "connId", id, "service", se.ServiceID, "terminator", tid)
	if req.Bool(zitiproto.HeaderSupportsBindSuccess) {
		zc.sendState(zitiproto.ContentBindSuccess, id, nil, "", 0)
	}
}

// updateBind takes an UpdateBind of the client (cost, precedence) for one of its binds; the
// reader calls it, so a bind's updates are taken in order. They are merged into what is
// still to be sent and sent by one goroutine per bind, in order, once its terminator exists.
func (zc *zitiConn) updateBind(ctx context.Context, req *zitiproto.Message) {
	id, _ := req.Uint32(zitiproto.HeaderConnID)
	var cost *int
	if v, ok := req.Uint16(zitiproto.HeaderCost); ok {
		c := int(v)
		cost = &c
	}
	var prec string
	if p, ok := req.Byte(zitiproto.HeaderPrecedence); ok {
		if int(p) >= len(zitiPrecedences) {
			zc.log.Info("OpenZiti bind update refused", "connId", id, "err",
				fmt.Sprintf("precedence %d (header %d): allowed are 0 (default), 1 (required), 2 (failed)", p, zitiproto.HeaderPrecedence))
			return
		}
		prec = zitiPrecedences[p]
	}
	if cost == nil && prec == "" {
		return
	}
	zc.mu.Lock()
	b := zc.binds[id]
	zc.mu.Unlock()
	if b == nil || b.token != string(req.Body) {
		zc.log.Info("OpenZiti bind update ignored: no such bind", "connId", id)
		return
	}
	s := zc.s
	s.mu.Lock()
	if cost != nil {
		b.update.Cost = cost
	}
	if prec != "" {
		b.update.Precedence = prec
	}
	s.mu.Unlock()
	zc.applyUpdates(ctx, b)
}

// applyUpdates starts sending b's pending updates, unless they are being sent or its
// terminator does not exist yet.
func (zc *zitiConn) applyUpdates(ctx context.Context, b *zitiBind) {
	s := zc.s
	s.mu.Lock()
	start := !b.updating && !b.gone && b.terminatorID != "" && (b.update.Cost != nil || b.update.Precedence != "")
	if start {
		b.updating = true
	}
	s.mu.Unlock()
	if !start {
		return
	}
	go func() {
		for {
			s.mu.Lock()
			u := b.update
			b.update = ctrlproto.TerminatorUpdate{}
			u.TerminatorID = b.terminatorID
			if b.gone || (u.Cost == nil && u.Precedence == "") {
				b.updating = false
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			tctx, cancel := context.WithTimeout(ctx, edgeproto.HandshakeTimeout)
			if err := s.r.UpdateTerminator(tctx, &u); err != nil {
				zc.log.Warn("OpenZiti bind update failed", "connId", b.connID, "terminator", u.TerminatorID, "err", err)
			}
			cancel()
		}
	}()
}

// forgetBind removes b from the tables and marks it gone; it returns b's terminator id.
func (zc *zitiConn) forgetBind(b *zitiBind) string {
	zc.mu.Lock()
	if zc.binds[b.connID] == b {
		delete(zc.binds, b.connID)
	}
	zc.mu.Unlock()
	s := zc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.binds[b.address] == b {
		delete(s.binds, b.address)
	}
	b.gone = true
	return b.terminatorID
}

// unbind ends the bind of connection id, removing its terminator.
func (zc *zitiConn) unbind(ctx context.Context, id uint32, why string) {
	zc.mu.Lock()
	b := zc.binds[id]
	zc.mu.Unlock()
	if b == nil {
		return
	}
	if tid := zc.forgetBind(b); tid != "" {
		zc.log.Debug("OpenZiti bind ended", "connId", id, "terminator", tid, "reason", why)
		go zc.removeTerminator(ctx, tid)
	}
}

// removeTerminator removes a bind's terminator, even when the router is stopping: a later
// start creates its own. Callers run it on a goroutine of its own, as they may be the
// channel's reader or the control channel's.
func (zc *zitiConn) removeTerminator(ctx context.Context, tid string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), edgeproto.HandshakeTimeout)
	defer cancel()
	if err := zc.s.r.RemoveTerminator(rctx, tid); err != nil {
		zc.log.Warn("OpenZiti bind ended; its terminator stays until the controller removes it", "terminator", tid, "err", err)
	}
}

// terminators returns the ids of the terminators of the clients' binds.
func (s *zitiServer) terminators() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return terminatorIDs(s.binds, func(b *zitiBind) string { return b.terminatorID })
}

// dial connects a circuit to the client hosting the terminator at x.Address: the client gets
// a Dial with a connection id the router assigns and answers DialSuccess or DialFailed. A
// host with a key (its service requires encryption) takes OpenZiti's scheme: the initiator
// must have offered its ZitiKey, and the host's key is returned.
func (s *zitiServer) dial(ctx context.Context, x *ctrlproto.Xgress, circuitID uint64) (net.Conn, []byte, error) {
	s.mu.Lock()
	b := s.binds[x.Address]
	var tid string
	if b != nil {
		tid = b.terminatorID
	}
	s.mu.Unlock()
	if b == nil || tid == "" {
		return nil, nil, fmt.Errorf("no OpenZiti client hosts %s here any more", x.Address)
	}
	var offered []byte
	if x.E2EE != nil {
		offered = x.E2EE.ZitiKey
	}
	if b.hostKey != nil && offered == nil {
		return nil, nil, fmt.Errorf("the OpenZiti client hosting %s requires end-to-end encryption: the circuit's initiator offered no zitiKey", x.Address)
	}
	// An offer means the service requires end-to-end encryption: a host bound without a key
	// would have the circuit carry plaintext.
	if x.E2EE != nil && b.hostKey == nil {
		return nil, nil, fmt.Errorf("the OpenZiti client hosting %s bound without a key (header %d), but the circuit requires end-to-end encryption", x.Address, zitiproto.HeaderPublicKey)
	}
	framed := b.hostKey != nil
	zc := b.zc
	c := newZitiCircuit(zc, 0, framed)
	c.sessionToken = b.token
	zc.mu.Lock()
	for {
		zc.nextID++
		if zc.nextID < firstRouterConnID {
			zc.nextID = firstRouterConnID
		}
		if zc.circuits[zc.nextID] == nil && zc.binds[zc.nextID] == nil {
			break
		}
	}
	c.id = zc.nextID
	zc.mu.Unlock()
	if !zc.addCircuit(c) {
		return nil, nil, errors.New("the hosting OpenZiti client's channel ended")
	}
	m := s.pool.Get()
	m.SetState(zitiproto.ContentDial, b.connID, b.token)
	m.PutUint32(zitiproto.HeaderRouterProvidedConnID, c.id)
	m.PutString(zitiproto.HeaderCircuitID, strconv.FormatUint(circuitID, 10))
	if x.InitiatorID != "" {
		m.PutString(zitiproto.HeaderCallerID, x.InitiatorID)
	}
	if len(x.AppData) > 0 {
		m.Put(zitiproto.HeaderAppData, x.AppData)
	}
	if framed {
		m.Put(zitiproto.HeaderPublicKey, offered)
		m.PutByte(zitiproto.HeaderCryptoMethod, zitiproto.CryptoLibsodium)
	}
	reply, err := zc.request(ctx, m)
	s.pool.Put(m)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("dial the hosting OpenZiti client: %w", err)
	}
	defer s.pool.Put(reply)
	if reply.ContentType != zitiproto.ContentDialSuccess {
		c.closeQuiet()
		return nil, nil, fmt.Errorf("the hosting OpenZiti client refused: %s", reply.Body)
	}
	return c, b.hostKey, nil // nil when not framed
}

// request sends m and waits for its reply (DialSuccess or DialFailed), within ctx.
func (zc *zitiConn) request(ctx context.Context, m *zitiproto.Message) (*zitiproto.Message, error) {
	ch := make(chan *zitiproto.Message, 1)
	select {
	case zc.wsem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("the channel's writer is busy: %w", ctx.Err())
	case <-zc.done:
		return nil, errZitiChannelEnded
	}
	m.Sequence = zc.seq.Add(1)
	zc.mu.Lock()
	zc.pending[m.Sequence] = ch
	zc.mu.Unlock()
	err := zc.write(m)
	<-zc.wsem
	forget := func() {
		zc.mu.Lock()
		delete(zc.pending, m.Sequence)
		zc.mu.Unlock()
	}
	if err != nil {
		forget()
		return nil, err
	}
	select {
	case reply := <-ch:
		return reply, nil
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("no answer: %w", ctx.Err())
	case <-zc.done:
		forget()
		return nil, errZitiChannelEnded
	}
}

// removed closes what used API sessions and sessions that went away.
func (s *zitiServer) removed(apiTokens, sessionTokens []string) {
	gone := map[string]bool{}
	for _, t := range sessionTokens {
		gone[t] = true
	}
	goneAPI := map[string]bool{}
	for _, t := range apiTokens {
		goneAPI[t] = true
	}
	for _, zc := range s.clients() {
		if goneAPI[zc.token()] {
			zc.log.Info("OpenZiti client disconnected: its API session ended")
			go zc.close() // off the control channel's goroutine: TLS close_notify may wait up to 5 s
			continue
		}
		if len(gone) == 0 {
			continue
		}
		zc.mu.Lock()
		var circuits []*zitiCircuit
		for _, c := range zc.circuits {
			if gone[c.sessionToken] {
				circuits = append(circuits, c)
			}
		}
		var binds []uint32
		for id, b := range zc.binds {
			if gone[b.token] {
				binds = append(binds, id)
			}
		}
		zc.mu.Unlock()
		for _, c := range circuits { // the client is told, off the control channel's goroutine
			go c.end(errZitiSessionEnded, true)
		}
		for _, id := range binds {
			zc.unbind(context.Background(), id, "its session ended")
		}
		if len(binds) > 0 { // not on the control channel's goroutine: the client may be slow
			go func() {
				for _, id := range binds {
					zc.sendState(zitiproto.ContentStateClosed, id, nil, "the session ended", zitiproto.ErrorInvalidSession)
				}
			}()
		}
	}
}

// errZitiSessionEnded ends the circuits of a session that went away.
var errZitiSessionEnded = errors.New("the session of the OpenZiti client's connection ended")

// certsChanged closes the channels whose API session no longer admits their certificate.
func (s *zitiServer) certsChanged(apis []ctrlproto.APISession) {
	byToken := make(map[string]*ctrlproto.APISession, len(apis))
	for i := range apis {
		byToken[apis[i].Token] = &apis[i]
	}
	for _, zc := range s.clients() {
		if a, ok := byToken[zc.token()]; ok && !a.AdmitsCert(zc.certFP) {
			zc.log.Info("OpenZiti client disconnected: its certificate is no longer current")
			go zc.close() // as in removed
		}
	}
}

// clients returns the admitted channels.
func (s *zitiServer) clients() []*zitiConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*zitiConn, 0, len(s.conns))
	for zc := range s.conns {
		out = append(out, zc)
	}
	return out
}

// clientCount returns the number of admitted channels.
func (s *zitiServer) clientCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// isZitiAddress tells whether a terminator address of binding edge is an OpenZiti client's.
func isZitiAddress(address string) bool { return strings.HasPrefix(address, zitiAddressPrefix) }
