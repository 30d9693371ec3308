package e2ee

import (
	"container/list"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"slices"
	"sync"
	"time"
)

// Resumption. A full handshake costs each end an X25519 key pair, an X25519 agreement, a
// signature and the verification of the peer's: most of an encrypted circuit's setup. After
// one, the same dialer can set up its next circuits to the same service, when they reach the
// same host, with a MAC over the transcript instead, keyed by a secret only the two ends
// derived from the earlier handshake, as TLS 1.3 resumes a session with a pre-shared key
// without a new key exchange (psk_ke).
//
// Tickets are single-use. Every handshake in which the client asked for one gives it a new
// ticket: an id the server chose, sent in ServerHello, and a secret both ends expand from
// that handshake's key schedule, never sent. A client spends a ticket by naming it in a
// ClientHello; the server forgets a ticket when it is named, whatever happens next, and the
// client takes it out of its store. So the secret that keyed a circuit is gone from both
// ends once it is used, and a later theft of an end's memory reveals no finished circuit.
// It reveals the outstanding tickets, and each of them the rest of its line: whoever holds
// one and sees the hellos and the circuits that follow (a router on the path and the
// controller, together) can derive the keys of every later resumption in that line, until
// the line ends at most SessionLifetime after the full handshake it started with. A full
// handshake, by contrast, needs an active attacker who holds an identity's key.
//
// A resumed handshake authenticates nobody afresh: each end hands the peer chain the ticket
// was issued for (verified in the full handshake) to Config.VerifyPeer again, so the peer
// must still be the identity this circuit expects, and the chain still valid; a server
// whose check refuses a ticket's chain runs the full handshake instead. Every ticket lasts
// at most TicketLifetime, at most SessionLifetime after the full handshake its line started
// with, and never past the peer's certificate.
//
// A client that wants tickets says so by listing offerTickets among its ciphers, with the
// id of the ticket it spends and its nonce after it in the same list: a server that knows
// nothing of resumption takes them for ciphers it does not know and ignores them. Only a
// server that keeps tickets answers with the resumption form of ServerHello.

const (
	// TicketLifetime is how long a ticket can be spent after it was issued.
	TicketLifetime = 10 * time.Minute
	// SessionLifetime is how long after a full handshake the tickets it led to, through
	// any number of resumptions, can be spent: it bounds what the theft of one ticket
	// reveals (see the package's documentation).
	SessionLifetime = time.Hour
	// DefaultMaxTickets bounds the tickets a Tickets holds in each role.
	DefaultMaxTickets = 16384
	// maxTicketsPerKey bounds the tickets a client holds for one key, and a server for one
	// peer certificate: enough for as many concurrent dials of one service without a full
	// handshake, and few enough that one peer cannot push out everyone else's.
	maxTicketsPerKey = 64
	// maxTicketChain bounds the DER bytes of the peer chain a ticket keeps: a peer with a
	// longer one gets no ticket, so that padded chains cannot make the store large.
	maxTicketChain = 8 << 10
	// spareLifetime bounds how long the spare key share of resuming ClientHellos is offered.
	spareLifetime = time.Minute

	ticketIDLen   = 16
	helloNonceLen = 32
	macLen        = sha256.Size

	// offerTickets, among a ClientHello's ciphers, asks for a ticket; the id of the ticket
	// spent and the client's nonce, if any, follow it in the list.
	offerTickets = 0xFE

	serverHelloFull    = 0
	serverHelloResumed = 1
)

// ticket is a secret shared with one peer, and what the full handshake learnt of it.
type ticket struct {
	id        [ticketIDLen]byte
	secret    []byte
	peerChain []*x509.Certificate
	sessionAt time.Time // the full handshake this ticket descends from
	expires   time.Time
	key       string // the client's key it is held under; empty on the server
	peer      [sha256.Size]byte
}

// Tickets holds an end's resumption tickets: those a server issued and has not seen spent
// (at most maxTicketsPerKey per peer certificate), and those a client holds, by the key it
// dials under (a service; at most maxTicketsPerKey each). One Tickets serves both roles, as
// an SDK client both dials and hosts. It is safe for concurrent use. The zero value is not
// usable; make one with NewTickets.
type Tickets struct {
	max int
	now func() time.Time // time.Now but in tests

	mu     sync.Mutex
	issued map[[ticketIDLen]byte]*list.Element   // of *ticket, the server's
	order  list.List                             // the server's tickets, oldest first
	byPeer map[[sha256.Size]byte][]*list.Element // the server's tickets per peer leaf, oldest first
	held   map[string][]*ticket                  // the client's, oldest first
	nheld  int
	// spare is the key share of the ClientHellos that spend a ticket, made at spareAt: only
	// a server that does not resume uses it, and then it is burnt (burnSpare), so that a
	// key that took part in a key agreement is not offered again; it is replaced after
	// spareLifetime in any case, which bounds the life of a key that agreed a secret whose
	// answer was lost.
	spare   *ecdh.PrivateKey
	spareAt time.Time
}

// NewTickets returns an empty ticket store that holds at most max tickets in each role
// (DefaultMaxTickets when max is not positive); past that, the oldest go first.
func NewTickets(max int) *Tickets {
	if max <= 0 {
		max = DefaultMaxTickets
	}
	return &Tickets{max: max, now: time.Now, issued: map[[ticketIDLen]byte]*list.Element{},
		byPeer: map[[sha256.Size]byte][]*list.Element{}, held: map[string][]*ticket{}}
}

// issue records a ticket the server gave a client, unless the client's chain is too long
// to keep. A peer over its share loses its oldest ticket; a full store, its oldest one.
func (s *Tickets) issue(t *ticket) {
	size := 0
	for _, c := range t.peerChain {
		size += len(c.Raw)
	}
	if size > maxTicketChain {
		return
	}
	t.peer = sha256.Sum256(t.peerChain[0].Raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if peer := s.byPeer[t.peer]; len(peer) >= maxTicketsPerKey {
		s.forget(peer[0])
	}
	for s.order.Len() >= s.max {
		s.forget(s.order.Front())
	}
	e := s.order.PushBack(t)
	s.issued[t.id] = e
	s.byPeer[t.peer] = append(s.byPeer[t.peer], e)
}

// forget removes one of the server's tickets. s.mu is held.
func (s *Tickets) forget(e *list.Element) {
	t := e.Value.(*ticket)
	delete(s.issued, t.id)
	s.order.Remove(e)
	if peer := slices.DeleteFunc(s.byPeer[t.peer], func(p *list.Element) bool { return p == e }); len(peer) == 0 {
		delete(s.byPeer, t.peer)
	} else {
		s.byPeer[t.peer] = peer
	}
}

// redeem takes the ticket id out of the server's store and returns it, or nil when it is
// unknown or expired.
func (s *Tickets) redeem(id []byte) *ticket {
	if len(id) != ticketIDLen {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.issued[[ticketIDLen]byte(id)]
	if !ok {
		return nil
	}
	s.forget(e)
	if t := e.Value.(*ticket); s.now().Before(t.expires) {
		return t
	}
	return nil
}

// hold keeps a ticket the client got, under its key: the key's oldest goes when it has its
// share, and when the store is full, expired tickets, then other keys' tickets.
func (s *Tickets) hold(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.held[t.key]
	if limit := min(maxTicketsPerKey, s.max); len(kept) >= limit {
		kept = slices.Clone(kept[len(kept)-limit+1:])
		s.nheld -= len(s.held[t.key]) - len(kept)
	}
	s.held[t.key] = append(kept, t)
	s.nheld++
	if s.nheld > s.max {
		s.dropHeld(t.key)
	}
}

// dropHeld makes room in the client's store: it drops expired tickets, then every ticket
// of keys other than keep, until the store holds at most its size. s.mu is held.
func (s *Tickets) dropHeld(keep string) {
	now := s.now()
	for key, list := range s.held {
		live := slices.DeleteFunc(slices.Clone(list), func(t *ticket) bool { return !now.Before(t.expires) })
		s.setHeld(key, live)
		s.nheld -= len(list) - len(live)
	}
	for key, list := range s.held {
		if s.nheld <= s.max {
			return
		}
		if key != keep {
			delete(s.held, key)
			s.nheld -= len(list)
		}
	}
}

// take hands the client its oldest unexpired ticket under key, out of the store, or nil:
// the newest may be of a handshake the server has not finished yet, and so not know yet.
func (s *Tickets) take(key string) *ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.held[key]
	now := s.now()
	for len(list) > 0 {
		t := list[0]
		list = list[1:]
		s.nheld--
		if now.Before(t.expires) {
			s.setHeld(key, list)
			return t
		}
	}
	s.setHeld(key, list)
	return nil
}

func (s *Tickets) setHeld(key string, list []*ticket) {
	if len(list) == 0 {
		delete(s.held, key)
	} else {
		s.held[key] = list
	}
}

// spareKey returns the spare key share, made when there is none or it is too old.
func (s *Tickets) spareKey() (*ecdh.PrivateKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.now(); s.spare == nil || now.Sub(s.spareAt) > spareLifetime {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		s.spare, s.spareAt = k, now
	}
	return s.spare, nil
}

// burnSpare forgets k if it is the spare key share: a server used it in a key agreement.
func (s *Tickets) burnSpare(k *ecdh.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == k {
		s.spare = nil
	}
}

// newTicketID returns a fresh random ticket id.
func newTicketID() ([ticketIDLen]byte, error) {
	var id [ticketIDLen]byte
	_, err := rand.Read(id[:])
	return id, err
}

// ticketExpiry is when a ticket issued now, in a line of tickets that started at sessionAt
// with a peer whose leaf is leaf, stops being usable.
func ticketExpiry(now, sessionAt time.Time, leaf *x509.Certificate) time.Time {
	exp := now.Add(TicketLifetime)
	if end := sessionAt.Add(SessionLifetime); end.Before(exp) {
		exp = end
	}
	if leaf != nil && leaf.NotAfter.Before(exp) {
		exp = leaf.NotAfter
	}
	return exp
}

// resumeMAC proves knowledge of a ticket's secret over the transcript so far, as role.
func resumeMAC(secret []byte, role string, transcriptHash []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	m.Write([]byte{0})
	m.Write(transcriptHash)
	return m.Sum(nil)
}
