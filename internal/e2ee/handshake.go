package e2ee

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"slices"
	"time"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/sys/cpu"
)

const (
	protocolVersion = 1
	// resumptionVersion marks the ServerHello of a server that answers a client asking for
	// tickets (see resume.go).
	resumptionVersion = 2
	protocolLabel     = "zmesh e2ee v1"

	msgClientHello    = 1
	msgServerHello    = 2
	msgClientAuth     = 3
	msgServerFinished = 4

	// maxHandshakeMessage caps a handshake message body, certificate chain included.
	maxHandshakeMessage = 32 << 10
	// maxChainLength caps the number of certificates a peer may present.
	maxChainLength = 8

	keyLen      = 32
	finishedLen = 32
)

// Client runs the handshake as the dialing end of conn and returns the encrypted Conn. It
// returns once the server has authenticated this end and confirmed the keys (with
// Config.FalseStart, once the server has authenticated itself). On error, conn
// is closed. conn's deadline is set for the handshake and cleared after it.
func Client(conn net.Conn, cfg Config) (*Conn, error) {
	return handshake(conn, &cfg, true)
}

// Server runs the handshake as the hosting end of conn and returns the encrypted Conn. On
// error, conn is closed. conn's deadline is set for the handshake and cleared after it.
func Server(conn net.Conn, cfg Config) (*Conn, error) {
	return handshake(conn, &cfg, false)
}

func handshake(conn net.Conn, cfg *Config, client bool) (*Conn, error) {
	if err := cfg.check(); err != nil {
		conn.Close()
		return nil, err
	}
	h := newHandshake(conn, cfg)
	run := h.runServer
	if client {
		run = h.runClient
	}
	return h.complete(run, client)
}

// ClientStart is a client handshake whose ClientHello travels outside the circuit, in the
// dial request, and whose ServerHello comes back in the answer: the key exchange then costs
// the dial no round trip of its own. The messages and the transcript are those of Client,
// which is why the context (the circuit id) need not be known when the hello is made.
type ClientStart struct {
	ephemeral *ecdh.PrivateKey // nil once finished
	cipher    Cipher
	offer     []Cipher
	hello     []byte // the ClientHello body

	tickets *Tickets // where the ticket the server gives goes, or nil
	key     string   // the key it goes under
	spent   *ticket  // the ticket the ClientHello names, or nil
}

// StartClient makes a ClientHello offering the ciphers cipher allows (as Config.Cipher does).
func StartClient(cipher Cipher) (*ClientStart, error) {
	return StartResumable(cipher, nil, "")
}

// StartResumable is StartClient with resumption: the ClientHello asks the server for a
// ticket, which Finish keeps in tickets under key, and spends the oldest ticket held there
// under key, if any, so that the server that issued it can answer with a resumed handshake
// (no signatures, no key agreement). key names what the tickets are good for: the service
// dialed, whose host may be any of its terminators' identities; a resumed answer stands
// for the identity the ticket came from, which Config.VerifyPeer must accept. tickets nil
// is StartClient.
func StartResumable(cipher Cipher, tickets *Tickets, key string) (*ClientStart, error) {
	if cipher > CipherChaCha20Poly1305 {
		return nil, fmt.Errorf("e2ee: unknown cipher %v; allowed: %v, %v, %v", cipher, CipherAuto, CipherAES256GCM, CipherChaCha20Poly1305)
	}
	s := &ClientStart{cipher: cipher, offer: cipherPreference(cipher), tickets: tickets, key: key}
	var nonce []byte
	var err error
	if tickets != nil {
		if s.spent = tickets.take(key); s.spent != nil {
			nonce = make([]byte, helloNonceLen)
			if _, err := rand.Read(nonce); err != nil {
				return nil, fmt.Errorf("e2ee: client nonce: %w", err)
			}
			// A key share only for a server that does not resume: the store's spare one.
			s.ephemeral, err = tickets.spareKey()
		}
	}
	if s.ephemeral == nil && err == nil {
		s.ephemeral, err = ecdh.X25519().GenerateKey(rand.Reader)
	}
	if err != nil {
		return nil, fmt.Errorf("e2ee: generate ephemeral key: %w", err)
	}
	ephemeral := s.ephemeral
	var hello cryptobyte.Builder
	hello.AddUint8(protocolVersion)
	hello.AddBytes(ephemeral.PublicKey().Bytes())
	hello.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, c := range s.offer {
			b.AddUint8(uint8(c))
		}
		if tickets != nil {
			// Inside the list, where a server that does not resume ignores them.
			b.AddUint8(offerTickets)
			if s.spent != nil {
				b.AddBytes(s.spent.id[:])
				b.AddBytes(nonce)
			}
		}
	})
	s.hello = hello.BytesOrPanic()
	return s, nil
}

// Resumed reports whether the ClientHello spends a ticket: the server that issued it may
// answer with a resumed handshake.
func (s *ClientStart) Resumed() bool { return s.spent != nil }

// Hello returns the ClientHello message, framed as on the circuit, for the server's
// AcceptHello.
func (s *ClientStart) Hello() []byte { return frame(msgClientHello, s.hello) }

// Finish checks serverHello, the server's answer from AcceptHello, and runs the rest of the
// handshake over conn as Client does: it sends ClientAuth and, unless cfg.FalseStart, waits
// for ServerFinished. cfg.Cipher must be the one StartClient was given. On error, conn is
// closed. A ClientStart is finished at most once.
func (s *ClientStart) Finish(conn net.Conn, cfg Config, serverHello []byte) (*Conn, error) {
	err := cfg.check()
	switch {
	case err != nil:
	case s.ephemeral == nil:
		err = errors.New("e2ee: the ClientStart was finished already")
	case cfg.Cipher != s.cipher:
		err = fmt.Errorf("e2ee: the config forces cipher %v, the ClientHello was made for %v", cfg.Cipher, s.cipher)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	h := newHandshake(conn, &cfg)
	h.ephemeral, h.offer = s.ephemeral, s.offer
	h.tickets, h.ticketKey, h.spent, h.askedTicket = s.tickets, s.key, s.spent, s.tickets != nil
	s.ephemeral, s.spent = nil, nil
	h.addToTranscript(msgClientHello, s.hello)
	return h.complete(func() error {
		body, err := unframe(msgServerHello, serverHello)
		if err != nil {
			return err
		}
		return h.clientAfterHello(body)
	}, true)
}

// ServerStart is a server handshake that answered a ClientHello which came outside conn.
type ServerStart struct{ h *handshakeState }

// AcceptHello answers clientHello (a ClientStart's Hello) with the ServerHello message to
// return outside conn, as Server would have sent it; ServerStart.Finish runs the rest over
// conn. conn is not used, nor closed on error, before Finish.
func AcceptHello(conn net.Conn, cfg Config, clientHello []byte) (*ServerStart, []byte, error) {
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	h := newHandshake(conn, &cfg)
	body, err := unframe(msgClientHello, clientHello)
	if err != nil {
		return nil, nil, err
	}
	if body, err = h.serverHello(body); err != nil {
		return nil, nil, err
	}
	if err := checkBody(msgServerHello, body); err != nil {
		return nil, nil, err
	}
	return &ServerStart{h}, frame(msgServerHello, body), nil
}

// Finish receives and verifies ClientAuth over conn and sends ServerFinished, as Server does.
// On error, conn is closed.
func (s *ServerStart) Finish() (*Conn, error) {
	return s.h.complete(s.h.serverAfterHello, false)
}

// CanFinish reports whether Finish, over a conn whose next bytes are buffered, reads no more
// than them: they hold the whole ClientAuth message, or enough of it for Finish to refuse it
// (a header of another type or over the bound). An end that is fed the circuit's bytes as
// they come, and cannot wait for more inside Finish, calls Finish once it holds that much.
// Stream mode only.
func (s *ServerStart) CanFinish(buffered []byte) bool {
	if len(buffered) < headerLen {
		return false
	}
	length, err := checkHeader(msgClientAuth, buffered[:headerLen])
	return err != nil || len(buffered) >= headerLen+length
}

func newHandshake(conn net.Conn, cfg *Config) *handshakeState {
	h := &handshakeState{conn: conn, cfg: cfg, transcript: sha256.New()}
	h.transcript.Write([]byte(protocolLabel))
	h.transcript.Write(binary.BigEndian.AppendUint16(nil, uint16(len(cfg.Context))))
	h.transcript.Write([]byte(cfg.Context))
	return h
}

// complete runs the part of the handshake that uses conn under the handshake's deadline and
// sets up the record layer; on error it closes conn.
func (h *handshakeState) complete(run func() error, client bool) (c *Conn, err error) {
	defer func() {
		if err != nil {
			h.conn.Close()
		}
	}()
	if err := h.conn.SetDeadline(time.Now().Add(h.cfg.HandshakeTimeout)); err != nil {
		return nil, fmt.Errorf("e2ee: set handshake deadline: %w", err)
	}
	if err := run(); err != nil {
		return nil, err
	}
	if err := h.conn.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("e2ee: clear handshake deadline: %w", err)
	}
	return newConn(h.conn, h.cfg, h, client)
}

// handshakeState is one end's view of a handshake in progress.
type handshakeState struct {
	conn       net.Conn
	cfg        *Config
	transcript hash.Hash

	ephemeral *ecdh.PrivateKey
	offer     []Cipher // the client's
	shared    []byte   // the X25519 shared secret, or the spent ticket's secret
	cipher    Cipher
	peerChain []*x509.Certificate

	// Resumption: the client's store and key, whether the client asked for a ticket, the
	// ticket spent (the client's offer, or the server's redeemed one), whether the
	// server resumed it, and the ticket this handshake issues.
	tickets     *Tickets
	ticketKey   string
	askedTicket bool
	spent       *ticket
	resumed     bool
	newTicket   []byte

	// Results of the key schedule.
	clientKey, clientIV, serverKey, serverIV, finished, resumption []byte
}

// runClient: send ClientHello, receive and verify ServerHello, send ClientAuth, receive and
// check ServerFinished.
func (h *handshakeState) runClient() error {
	start, err := StartClient(h.cfg.Cipher)
	if err != nil {
		return err
	}
	h.ephemeral, h.offer = start.ephemeral, start.offer
	h.addToTranscript(msgClientHello, start.hello)
	if err := h.writeMessage(msgClientHello, start.hello); err != nil {
		return err
	}
	body, err := h.readMessage(msgServerHello)
	if err != nil {
		return err
	}
	return h.clientAfterHello(body)
}

// clientAfterHello verifies ServerHello, sends ClientAuth and, without false start, checks
// ServerFinished.
func (h *handshakeState) clientAfterHello(body []byte) error {
	s := cryptobyte.String(body)
	var version, mode, chosen uint8
	var serverKey []byte
	if !s.ReadUint8(&version) {
		return errors.New("e2ee: malformed ServerHello")
	}
	switch {
	case version == protocolVersion:
	case version == resumptionVersion && h.askedTicket:
		if !s.ReadUint8(&mode) || mode != serverHelloFull && mode != serverHelloResumed {
			return errors.New("e2ee: malformed ServerHello")
		}
	default:
		return fmt.Errorf("e2ee: server speaks protocol version %d, not %d", version, protocolVersion)
	}
	if mode == serverHelloResumed {
		return h.clientResumed(body, s)
	}
	if !s.ReadBytes(&serverKey, keyLen) || !s.ReadUint8(&chosen) {
		return errors.New("e2ee: malformed ServerHello")
	}
	if h.cipher = Cipher(chosen); !slices.Contains(h.offer, h.cipher) {
		return fmt.Errorf("e2ee: server chose %v, which was not offered", h.cipher)
	}
	if version == resumptionVersion && !s.ReadUint8LengthPrefixed((*cryptobyte.String)(&h.newTicket)) {
		return errors.New("e2ee: malformed ServerHello")
	}
	if h.spent != nil {
		h.tickets.burnSpare(h.ephemeral) // it takes part in a key agreement now
	}
	if err := h.computeShared(serverKey); err != nil {
		return err
	}
	if err := h.verifyPeer(msgServerHello, body, len(body)-len(s), serverRole); err != nil {
		return err
	}
	h.spent = nil // the server did not know it
	var auth cryptobyte.Builder
	addChain(&auth, h.cfg.Certificates)
	body, err := h.sign(msgClientAuth, auth.BytesOrPanic(), clientRole)
	if err != nil {
		return err
	}
	return h.clientFinish(body)
}

// clientResumed checks a resumed ServerHello (s is what follows its mode) and finishes the
// handshake from the spent ticket.
func (h *handshakeState) clientResumed(body []byte, s cryptobyte.String) error {
	var nonce, mac []byte
	var chosen uint8
	if !s.ReadBytes(&nonce, helloNonceLen) || !s.ReadUint8(&chosen) ||
		!s.ReadUint8LengthPrefixed((*cryptobyte.String)(&h.newTicket)) || !s.ReadBytes(&mac, macLen) || !s.Empty() {
		return errors.New("e2ee: malformed ServerHello")
	}
	if h.spent == nil {
		return fmt.Errorf("%w: the server resumed a session this end did not offer", ErrAuthentication)
	}
	if h.cipher = Cipher(chosen); !slices.Contains(h.offer, h.cipher) {
		return fmt.Errorf("e2ee: server chose %v, which was not offered", h.cipher)
	}
	h.addToTranscript(msgServerHello, body[:len(body)-macLen])
	if !hmac.Equal(mac, resumeMAC(h.spent.secret, serverResumeRole, h.transcript.Sum(nil))) {
		return fmt.Errorf("%w: wrong resumed ServerHello", ErrAuthentication)
	}
	h.transcript.Write(mac)
	h.resumed, h.shared, h.peerChain = true, h.spent.secret, h.spent.peerChain
	if err := h.cfg.VerifyPeer(h.peerChain); err != nil {
		return fmt.Errorf("%w: peer identity rejected: %w", ErrAuthentication, err)
	}
	auth := resumeMAC(h.shared, clientResumeRole, h.transcript.Sum(nil))
	h.addToTranscript(msgClientAuth, auth)
	return h.clientFinish(auth)
}

// clientFinish sends ClientAuth (its body, already in the transcript), derives the keys,
// keeps the ticket the server gave and, without false start, checks ServerFinished.
func (h *handshakeState) clientFinish(auth []byte) error {
	if err := h.writeMessage(msgClientAuth, auth); err != nil {
		return err
	}
	if err := h.deriveKeys(); err != nil {
		return err
	}
	if h.cfg.FalseStart {
		return nil // the Conn's first Read checks ServerFinished, then keeps the ticket
	}

	finished, err := h.readMessage(msgServerFinished)
	if err != nil {
		return fmt.Errorf("%w (the server may have rejected this identity)", err)
	}
	if !hmac.Equal(finished, h.finished) {
		return fmt.Errorf("%w: wrong ServerFinished", ErrAuthentication)
	}
	if t := h.ticket(true); t != nil {
		h.tickets.hold(t)
	}
	return nil
}

// ticket is the ticket this handshake issued, if any, as the client or the server keeps it:
// a client holds it (once ServerFinished showed the server accepted it, and so stored it
// too) under the key its ClientStart named; a server issues it into Config.Tickets once it
// verified ClientAuth.
func (h *handshakeState) ticket(client bool) *ticket {
	tickets := h.cfg.Tickets
	if client {
		tickets = h.tickets
	}
	if len(h.newTicket) != ticketIDLen || tickets == nil {
		return nil
	}
	now := tickets.now()
	sessionAt := now
	if h.resumed {
		sessionAt = h.spent.sessionAt
	}
	t := &ticket{id: [ticketIDLen]byte(h.newTicket), secret: h.resumption, peerChain: h.peerChain,
		sessionAt: sessionAt, expires: ticketExpiry(now, sessionAt, h.peerChain[0])}
	if client {
		t.key = h.ticketKey
	}
	return t
}

// runServer: receive ClientHello, send ServerHello, receive and verify ClientAuth, send
// ServerFinished.
func (h *handshakeState) runServer() error {
	body, err := h.readMessage(msgClientHello)
	if err != nil {
		return err
	}
	if body, err = h.serverHello(body); err != nil {
		return err
	}
	if err := h.writeMessage(msgServerHello, body); err != nil {
		return err
	}
	return h.serverAfterHello()
}

// serverHello checks a ClientHello body and returns the ServerHello body: signed, or, when
// the client spent a ticket of this server's, resumed.
func (h *handshakeState) serverHello(body []byte) ([]byte, error) {
	s := cryptobyte.String(body)
	var version uint8
	var clientKey, offered []byte
	if !s.ReadUint8(&version) || !s.ReadBytes(&clientKey, keyLen) ||
		!s.ReadUint8LengthPrefixed((*cryptobyte.String)(&offered)) || !s.Empty() {
		return nil, errors.New("e2ee: malformed ClientHello")
	}
	offered, asked, spent, ok := splitOffer(offered)
	if !ok {
		return nil, errors.New("e2ee: malformed ClientHello")
	}
	if version != protocolVersion {
		return nil, fmt.Errorf("e2ee: client speaks protocol version %d, not %d", version, protocolVersion)
	}
	h.addToTranscript(msgClientHello, body)
	var err error
	if h.cipher, err = chooseCipher(h.cfg.Cipher, offered); err != nil {
		return nil, err
	}
	// Tickets only when the client asked and this end keeps them: else the first version's
	// ServerHello, which a client that knows nothing of resumption expects.
	h.askedTicket = h.cfg.Tickets != nil && asked
	var hello cryptobyte.Builder
	if h.askedTicket {
		id, err := newTicketID()
		if err != nil {
			return nil, fmt.Errorf("e2ee: ticket id: %w", err)
		}
		h.newTicket = id[:]
		if h.spent = h.cfg.Tickets.redeem(spent); h.spent != nil {
			// A ticket whose identity this circuit does not expect (or whose chain no longer
			// verifies) gets the full exchange, which the dialer's own chain decides.
			if h.cfg.VerifyPeer(h.spent.peerChain) == nil {
				return h.serverResumed()
			}
			h.spent = nil
		}
		hello.AddUint8(resumptionVersion)
		hello.AddUint8(serverHelloFull)
	} else {
		hello.AddUint8(protocolVersion)
	}
	if h.ephemeral, err = ecdh.X25519().GenerateKey(rand.Reader); err != nil {
		return nil, fmt.Errorf("e2ee: generate ephemeral key: %w", err)
	}
	if err := h.computeShared(clientKey); err != nil {
		return nil, err
	}
	hello.AddBytes(h.ephemeral.PublicKey().Bytes())
	hello.AddUint8(uint8(h.cipher))
	if h.askedTicket {
		hello.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(h.newTicket) })
	}
	addChain(&hello, h.cfg.Certificates)
	return h.sign(msgServerHello, hello.BytesOrPanic(), serverRole)
}

// serverResumed answers a ClientHello that spent the ticket h.spent, whose peer is the
// identity this end expects: the ServerHello proves this end knows the ticket's secret.
func (h *handshakeState) serverResumed() ([]byte, error) {
	h.resumed, h.shared, h.peerChain = true, h.spent.secret, h.spent.peerChain
	nonce := make([]byte, helloNonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("e2ee: server nonce: %w", err)
	}
	var hello cryptobyte.Builder
	hello.AddUint8(resumptionVersion)
	hello.AddUint8(serverHelloResumed)
	hello.AddBytes(nonce)
	hello.AddUint8(uint8(h.cipher))
	hello.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(h.newTicket) })
	body := hello.BytesOrPanic()
	h.addToTranscript(msgServerHello, body)
	mac := resumeMAC(h.shared, serverResumeRole, h.transcript.Sum(nil))
	h.transcript.Write(mac)
	return append(body, mac...), nil
}

// serverAfterHello receives and verifies ClientAuth and sends ServerFinished.
func (h *handshakeState) serverAfterHello() error {
	body, err := h.readMessage(msgClientAuth)
	if err != nil {
		return err
	}
	if h.resumed {
		if !hmac.Equal(body, resumeMAC(h.shared, clientResumeRole, h.transcript.Sum(nil))) {
			return fmt.Errorf("%w: wrong resumed ClientAuth", ErrAuthentication)
		}
		h.addToTranscript(msgClientAuth, body)
	} else if err := h.verifyPeer(msgClientAuth, body, 0, clientRole); err != nil {
		return err
	}
	if err := h.deriveKeys(); err != nil {
		return err
	}
	if t := h.ticket(false); t != nil {
		h.cfg.Tickets.issue(t)
	}
	return h.writeMessage(msgServerFinished, h.finished)
}

// computeShared computes the X25519 shared secret with the peer's ephemeral key.
func (h *handshakeState) computeShared(peerKey []byte) error {
	pub, err := ecdh.X25519().NewPublicKey(peerKey)
	if err != nil {
		return fmt.Errorf("%w: peer ephemeral key: %w", ErrAuthentication, err)
	}
	// ECDH fails on a low-order peer key, which would make the secret predictable.
	if h.shared, err = h.ephemeral.ECDH(pub); err != nil {
		return fmt.Errorf("%w: key exchange: %w", ErrAuthentication, err)
	}
	return nil
}

// Role labels, signed with the transcript so that one end's signature never passes for the
// other's.
const (
	serverRole = protocolLabel + " server signature"
	clientRole = protocolLabel + " client signature"

	serverResumeRole = protocolLabel + " server resumption"
	clientResumeRole = protocolLabel + " client resumption"
)

// sign adds the message of type typ whose body so far is body (this end's chain at its end) to
// the transcript, signs the transcript as role, and returns body with the signature appended,
// also added to the transcript.
func (h *handshakeState) sign(typ uint8, body []byte, role string) ([]byte, error) {
	h.addToTranscript(typ, body)
	sig, err := signContent(h.cfg.PrivateKey, h.signedContent(role))
	if err != nil {
		return nil, fmt.Errorf("e2ee: sign the handshake: %w", err)
	}
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(sig) })
	tail := b.BytesOrPanic()
	h.transcript.Write(tail)
	return append(body, tail...), nil
}

// verifyPeer reads the chain and signature that fill body from offset chainAt, checks that the
// signature over the transcript (with body up to the signature) was made, as role, with the
// key of the chain's leaf, then has Config.VerifyPeer check the chain.
func (h *handshakeState) verifyPeer(typ uint8, body []byte, chainAt int, role string) error {
	s := cryptobyte.String(body[chainAt:])
	var chain, sig cryptobyte.String
	if !s.ReadUint24LengthPrefixed(&chain) {
		return fmt.Errorf("e2ee: malformed handshake message %d", typ)
	}
	sigAt := len(body) - len(s)
	if !s.ReadUint16LengthPrefixed(&sig) || !s.Empty() {
		return fmt.Errorf("e2ee: malformed handshake message %d", typ)
	}
	if cached, ok := h.cfg.Chains.parsed(chain); ok {
		h.peerChain, chain = cached, nil
	}
	for !chain.Empty() {
		var der []byte
		if len(h.peerChain) == maxChainLength || !chain.ReadUint24LengthPrefixed((*cryptobyte.String)(&der)) {
			return fmt.Errorf("e2ee: malformed or too long peer certificate chain")
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("e2ee: peer certificate %d: %w", len(h.peerChain), err)
		}
		h.peerChain = append(h.peerChain, cert)
	}
	if len(h.peerChain) == 0 {
		return fmt.Errorf("%w: the peer presented no certificate", ErrAuthentication)
	}

	h.addToTranscript(typ, body[:sigAt])
	if err := verifySignature(h.peerChain[0].PublicKey, h.signedContent(role), sig); err != nil {
		return fmt.Errorf("%w: peer handshake signature: %w", ErrAuthentication, err)
	}
	h.transcript.Write(body[sigAt:])
	if err := h.cfg.VerifyPeer(h.peerChain); err != nil {
		return fmt.Errorf("%w: peer identity rejected: %w", ErrAuthentication, err)
	}
	return nil
}

// deriveKeys runs the key schedule over the shared secret and the whole transcript.
func (h *handshakeState) deriveKeys() error {
	secret, err := hkdf.Extract(sha256.New, h.shared, h.transcript.Sum(nil))
	if err != nil {
		return fmt.Errorf("e2ee: derive keys: %w", err)
	}
	for _, k := range []struct {
		out   *[]byte
		label string
		size  int
	}{
		{&h.clientKey, "c2s key", keyLen},
		{&h.clientIV, "c2s iv", nonceLen},
		{&h.serverKey, "s2c key", keyLen},
		{&h.serverIV, "s2c iv", nonceLen},
		{&h.finished, "server finished", finishedLen},
		{&h.resumption, "resumption", keyLen},
	} {
		if *k.out, err = hkdf.Expand(sha256.New, secret, protocolLabel+" "+k.label, k.size); err != nil {
			return fmt.Errorf("e2ee: derive keys: %w", err)
		}
	}
	return nil
}

func (h *handshakeState) addToTranscript(typ uint8, body []byte) {
	h.transcript.Write([]byte{typ})
	h.transcript.Write(body)
}

// signedContent is what a signature as role covers: the role label and the transcript hash.
func (h *handshakeState) signedContent(role string) []byte {
	return h.transcript.Sum(append([]byte(role), 0))
}

// writeMessage sends one handshake message in one Write, which datagram mode relies on.
func (h *handshakeState) writeMessage(typ uint8, body []byte) error {
	if err := checkBody(typ, body); err != nil {
		return err
	}
	if _, err := h.conn.Write(frame(typ, body)); err != nil {
		return fmt.Errorf("e2ee: send handshake message %d: %w", typ, err)
	}
	return nil
}

// readMessage receives the handshake message of type want and returns its body: in stream
// mode a header then the body; in datagram mode one whole message.
func (h *handshakeState) readMessage(want uint8) ([]byte, error) {
	if h.cfg.Datagram {
		buf := make([]byte, headerLen+maxHandshakeMessage+1)
		n, err := h.conn.Read(buf)
		if err != nil {
			return nil, handshakeReadError(want, err)
		}
		return unframe(want, buf[:n])
	}
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(h.conn, header); err != nil {
		return nil, handshakeReadError(want, err)
	}
	length, err := checkHeader(want, header)
	if err != nil {
		return nil, err
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(h.conn, body); err != nil {
		return nil, handshakeReadError(want, err)
	}
	return body, nil
}

// checkBody refuses a handshake message body of this end's over the bound.
func checkBody(typ uint8, body []byte) error {
	if len(body) > maxHandshakeMessage {
		return fmt.Errorf("e2ee: handshake message %d of %d bytes exceeds %d (certificate chain too long?)", typ, len(body), maxHandshakeMessage)
	}
	return nil
}

// frame returns the handshake message of type typ with body, header first.
func frame(typ uint8, body []byte) []byte {
	return append([]byte{typ, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

// checkHeader checks a handshake message's header against the type expected and the bound,
// and returns the body's length.
func checkHeader(want uint8, header []byte) (int, error) {
	typ, length := header[0], int(header[1])<<16|int(header[2])<<8|int(header[3])
	switch {
	case typ != want:
		return 0, fmt.Errorf("e2ee: got handshake message %d, expected %d", typ, want)
	case length > maxHandshakeMessage:
		return 0, fmt.Errorf("e2ee: handshake message %d of %d bytes exceeds %d", typ, length, maxHandshakeMessage)
	}
	return length, nil
}

// unframe checks that msg (from a datagram, or from outside the circuit) is one whole
// handshake message of type want, and returns its body.
func unframe(want uint8, msg []byte) ([]byte, error) {
	if len(msg) < headerLen {
		return nil, fmt.Errorf("e2ee: short handshake message")
	}
	length, err := checkHeader(want, msg[:headerLen])
	if err != nil {
		return nil, err
	}
	if len(msg) != headerLen+length {
		return nil, fmt.Errorf("e2ee: handshake message %d has %d bytes, its header says %d", want, len(msg)-headerLen, length)
	}
	return msg[headerLen:], nil
}

func handshakeReadError(want uint8, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("e2ee: receive handshake message %d: %w", want, err)
}

func addChain(b *cryptobyte.Builder, chain []*x509.Certificate) {
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, cert := range chain {
			b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(cert.Raw) })
		}
	})
}

// signContent signs content with key: Ed25519 directly, ECDSA and RSA-PSS over its SHA-256.
func signContent(key crypto.Signer, content []byte) ([]byte, error) {
	digest := sha256.Sum256(content)
	switch key.Public().(type) {
	case ed25519.PublicKey:
		return key.Sign(rand.Reader, content, crypto.Hash(0))
	case *ecdsa.PublicKey:
		return key.Sign(rand.Reader, digest[:], crypto.SHA256)
	case *rsa.PublicKey:
		return key.Sign(rand.Reader, digest[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256})
	default:
		return nil, fmt.Errorf("unsupported key type %T", key.Public())
	}
}

// verifySignature checks a signature made by signContent.
func verifySignature(pub crypto.PublicKey, content, sig []byte) error {
	digest := sha256.Sum256(content)
	switch pub := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(pub, content, sig) {
			return errors.New("invalid Ed25519 signature")
		}
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(pub, digest[:], sig) {
			return errors.New("invalid ECDSA signature")
		}
	case *rsa.PublicKey:
		return rsa.VerifyPSS(pub, crypto.SHA256, digest[:], sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	default:
		return fmt.Errorf("unsupported key type %T", pub)
	}
	return nil
}

// splitOffer splits a ClientHello's cipher list into the ciphers offered and what follows
// the offerTickets marker, if there is one: nothing, or the id of the ticket spent and the
// client's nonce (which needs no reading: the transcript holds the whole hello). ok is false
// when what follows the marker is neither.
func splitOffer(list []byte) (ciphers []byte, asked bool, spent []byte, ok bool) {
	i := slices.Index(list, offerTickets)
	if i < 0 {
		return list, false, nil, true
	}
	switch rest := list[i+1:]; len(rest) {
	case 0:
		return list[:i], true, nil, true
	case ticketIDLen + helloNonceLen:
		return list[:i], true, rest[:ticketIDLen], true
	}
	return nil, false, nil, false
}

// cipherPreference is what a client offers, preferred first.
func cipherPreference(forced Cipher) []Cipher {
	switch {
	case forced != CipherAuto:
		return []Cipher{forced}
	case hasAESHardware():
		return []Cipher{CipherAES256GCM, CipherChaCha20Poly1305}
	default:
		return []Cipher{CipherChaCha20Poly1305, CipherAES256GCM}
	}
}

// chooseCipher is the server's pick among the client's offer: the forced cipher if any, else
// AES-256-GCM only if both ends prefer it (both have AES hardware), else ChaCha20-Poly1305.
func chooseCipher(forced Cipher, offered []byte) (Cipher, error) {
	offer := make([]Cipher, len(offered))
	for i, c := range offered {
		offer[i] = Cipher(c)
	}
	var pick []Cipher
	switch {
	case forced != CipherAuto:
		pick = []Cipher{forced}
	case len(offer) > 0 && offer[0] == CipherAES256GCM && hasAESHardware():
		pick = []Cipher{CipherAES256GCM, CipherChaCha20Poly1305}
	default:
		pick = []Cipher{CipherChaCha20Poly1305, CipherAES256GCM}
	}
	for _, c := range pick {
		if slices.Contains(offer, c) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("e2ee: no common cipher: the client offers %v, this server accepts %v", offer, pick)
}

// hasAESHardware reports whether AES-GCM runs in hardware here, which makes it faster than
// ChaCha20-Poly1305.
func hasAESHardware() bool {
	return cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ || cpu.ARM64.HasAES
}
