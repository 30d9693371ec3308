package e2ee

import (
	"container/list"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"time"
)

// Resumption. A full handshake costs each end an X25519 key pair, an X25519 agreement, a
// signature and the verification of the peer's: most of an encrypted circuit's setup. After
// one, both ends can set up the next circuit between the same two identities with a MAC
// over the transcript instead, keyed by a secret only they derived from the earlier
// handshake, as TLS 1.3 resumes a session with a pre-shared key (psk_ke).
//
// Tickets are single-use. Every handshake in which the client asked for one gives it a new
// ticket: an id the server chose, sent in ServerHello, and a secret both ends expand from
// that handshake's key schedule, never sent. A client spends a ticket by naming it in a
// ClientHello; the server forgets a ticket when it is named, whatever happens next, and the
// client takes it out of its store. So the secret that keyed a circuit is gone from both
// ends once it is used, and a later theft of an end's memory reveals no earlier circuit
// (forward secrecy, ratcheted through the tickets rather than through a key exchange per
// circuit). What such a theft reveals are the outstanding tickets: at most
// Tickets' bounds, each expiring after TicketLifetime.
//
// A resumed handshake authenticates nobody afresh: each end hands the peer chain the ticket
// was issued for (verified in the full handshake) to Config.VerifyPeer again, so the peer
// must still be the identity this circuit expects, and the chain still valid. Every ticket
// lasts at most TicketLifetime and at most SessionLifetime after the full handshake its
// line of tickets started with, and never past the peer's certificate.
//
// A client that wants tickets says so by listing offerTickets among its ciphers, which
// servers that know nothing of resumption ignore; only then does a server answer with the
// resumption form of ServerHello. A client names a ticket only to the server that issued
// it, which therefore reads the ClientHello's ticket fields.

const (
	// TicketLifetime is how long a ticket can be spent after it was issued.
	TicketLifetime = time.Hour
	// SessionLifetime is how long after a full handshake the tickets it led to, through
	// any number of resumptions, can be spent.
	SessionLifetime = 24 * time.Hour
	// DefaultMaxTickets bounds the tickets a Tickets holds in each role.
	DefaultMaxTickets = 65536
	// maxTicketsPerKey bounds the tickets a client holds for one key: enough for as many
	// concurrent dials of one service without a full handshake.
	maxTicketsPerKey = 64

	ticketIDLen = 16
	nonceLen32  = 32
	macLen      = sha256.Size

	// offerTickets, among a ClientHello's ciphers, asks for a ticket.
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
}

// Tickets holds an end's resumption tickets: those a server issued and has not seen spent,
// and those a client holds, by the key it dials under (a service). One Tickets serves both
// roles, as an SDK client both dials and hosts. It is safe for concurrent use. The zero
// value is not usable; make one with NewTickets.
type Tickets struct {
	max int
	now func() time.Time // time.Now but in tests

	mu     sync.Mutex
	issued map[[ticketIDLen]byte]*list.Element // of *ticket, the server's
	held   map[string][]*ticket                // the client's, oldest first
	order  list.List                           // the server's tickets, oldest first
	nheld  int
	// spare is the key share of the ClientHellos that spend a ticket, made once: only a
	// server that does not resume uses it, and then it is burnt (burnSpare), so that a key
	// that took part in a key agreement is not offered again. Until then it has agreed no
	// secret, and offering it again reveals nothing.
	spare *ecdh.PrivateKey
}

// NewTickets returns an empty ticket store that holds at most max tickets in each role
// (DefaultMaxTickets when max is not positive); past that, the oldest go first.
func NewTickets(max int) *Tickets {
	if max <= 0 {
		max = DefaultMaxTickets
	}
	return &Tickets{max: max, now: time.Now, issued: map[[ticketIDLen]byte]*list.Element{}, held: map[string][]*ticket{}}
}

// issue records a ticket the server gave a client.
func (s *Tickets) issue(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.order.Len() >= s.max {
		oldest := s.order.Front()
		delete(s.issued, oldest.Value.(*ticket).id)
		s.order.Remove(oldest)
	}
	s.issued[t.id] = s.order.PushBack(t)
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
	delete(s.issued, [ticketIDLen]byte(id))
	s.order.Remove(e)
	if t := e.Value.(*ticket); s.now().Before(t.expires) {
		return t
	}
	return nil
}

// hold keeps a ticket the client got, under its key.
func (s *Tickets) hold(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.held[t.key]
	if len(list) >= maxTicketsPerKey {
		list = list[1:]
		s.nheld--
	}
	if s.nheld >= s.max {
		s.dropHeld()
	}
	s.held[t.key] = append(list, t)
	s.nheld++
}

// dropHeld drops expired tickets, or else every ticket of one key, to make room. s.mu is held.
func (s *Tickets) dropHeld() {
	now := s.now()
	for key, list := range s.held {
		kept := list[:0]
		for _, t := range list {
			if now.Before(t.expires) {
				kept = append(kept, t)
			}
		}
		s.nheld -= len(list) - len(kept)
		if len(kept) == 0 {
			delete(s.held, key)
		} else {
			s.held[key] = kept
		}
	}
	for key, list := range s.held {
		if s.nheld < s.max {
			return
		}
		s.nheld -= len(list)
		delete(s.held, key)
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

// spareKey returns the spare key share, made when there is none.
func (s *Tickets) spareKey() (*ecdh.PrivateKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == nil {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		s.spare = k
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
