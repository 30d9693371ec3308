package e2ee

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"

	"github.com/zmesh/zmesh/internal/testutil"
)

// countingSigner counts the signatures its key makes: a resumed handshake makes none.
type countingSigner struct {
	crypto.Signer
	n *atomic.Int64
}

func (s countingSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.n.Add(1)
	return s.Signer.Sign(r, digest, opts)
}

// resumeEnds is a dialing and a hosting identity, each with its ticket store and a count of
// its signatures.
type resumeEnds struct {
	ccfg, scfg           Config
	client, server       *Tickets
	clientSigs, hostSigs atomic.Int64
}

func newResumeEnds(t testing.TB) *resumeEnds {
	p := newPKI(t)
	e := &resumeEnds{client: NewTickets(0), server: NewTickets(0)}
	dialer := p.identity(t, "dialer", testutil.NewKey(t))
	host := p.identity(t, "host", testutil.NewKey(t))
	dialer.key = countingSigner{dialer.key, &e.clientSigs}
	host.key = countingSigner{host.key, &e.hostSigs}
	e.ccfg, e.scfg = p.config(dialer, "host"), p.config(host, "dialer")
	e.ccfg.FalseStart = true
	e.scfg.Tickets = e.server
	return e
}

// dial runs one folded handshake with resumption (the client's hello edited by toServer and
// the server's by toClient, when set) and, when both ends succeed, an exchange both ways.
func (e *resumeEnds) dial(t testing.TB, toServer, toClient func([]byte) []byte) (resumed bool, clientErr, serverErr error) {
	t.Helper()
	cc, sc := tcpPair(t)
	start, err := StartResumable(e.ccfg.Cipher, e.client, "service-1")
	if err != nil {
		t.Fatal(err)
	}
	hello := start.Hello()
	if toServer != nil {
		hello = toServer(hello)
	}
	ss, answer, err := AcceptHello(sc, e.scfg, hello)
	if err != nil {
		return false, nil, err
	}
	if toClient != nil {
		answer = toClient(answer)
	}
	var server *Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		server, serverErr = ss.Finish()
		if serverErr == nil {
			buf := make([]byte, 64)
			if n, err := server.Read(buf); err == nil {
				server.Write(bytes.ToUpper(buf[:n]))
			}
		}
	}()
	client, clientErr := start.Finish(cc, e.ccfg, answer)
	if clientErr == nil {
		if _, err := client.Write([]byte("again")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := client.Read(buf)
		if err != nil || string(buf[:n]) != "AGAIN" {
			clientErr = errors.Join(errors.New("exchange failed"), err)
		}
	} else {
		cc.Close()
	}
	<-done
	return ss.h.resumed, clientErr, serverErr
}

// TestResumption: the first handshake between two identities is full and gives the client a
// ticket; the next ones resume (no signature on either end), each giving a new ticket, and
// carry data both ways; both ends see the identity of the full handshake.
func TestResumption(t *testing.T) {
	e := newResumeEnds(t)
	for i := range 4 {
		resumed, cerr, serr := e.dial(t, nil, nil)
		if cerr != nil || serr != nil {
			t.Fatalf("handshake %d: client: %v; server: %v", i, cerr, serr)
		}
		if resumed != (i > 0) {
			t.Fatalf("handshake %d: resumed %v", i, resumed)
		}
	}
	if c, h := e.clientSigs.Load(), e.hostSigs.Load(); c != 1 || h != 1 {
		t.Fatalf("signatures: dialer %d, host %d; want 1 each (the full handshake)", c, h)
	}
	if n := len(e.client.held["service-1"]); n != 1 {
		t.Fatalf("the client holds %d tickets, want 1 (each spent one replaced)", n)
	}
	if n := len(e.server.issued); n != 1 {
		t.Fatalf("the server knows %d tickets, want 1", n)
	}
}

// TestResumptionTicketsSpentOnce: a ClientHello that spent a ticket, replayed, gets a full
// handshake (the server forgot the ticket when it was named), which the replayer cannot
// finish without the dialer's key; a ticket the server does not know gets a full handshake
// too, which succeeds, replaces it, and burns the spare key share it agreed a secret with.
func TestResumptionTicketsSpentOnce(t *testing.T) {
	e := newResumeEnds(t)
	if _, cerr, serr := e.dial(t, nil, nil); cerr != nil || serr != nil {
		t.Fatalf("first handshake: %v, %v", cerr, serr)
	}
	var replay []byte
	keep := func(h []byte) []byte { replay = h; return h }
	if resumed, cerr, serr := e.dial(t, keep, nil); !resumed || cerr != nil || serr != nil {
		t.Fatalf("resumption: resumed %v, %v, %v", resumed, cerr, serr)
	}
	_, sc := tcpPair(t)
	ss, answer, err := AcceptHello(sc, e.scfg, replay)
	if err != nil {
		t.Fatal(err)
	}
	if ss.h.resumed || answer[headerLen+1] != serverHelloFull {
		t.Fatal("a replayed ClientHello resumed its spent ticket")
	}

	e.server = NewTickets(0) // a host that never issued the client's ticket
	e.scfg.Tickets = e.server
	spare := e.client.spare
	resumed, cerr, serr := e.dial(t, nil, nil)
	if resumed || cerr != nil || serr != nil {
		t.Fatalf("unknown ticket: resumed %v, %v, %v", resumed, cerr, serr)
	}
	if spare == nil || e.client.spare == spare {
		t.Fatal("the spare key share that took part in a key agreement is offered again")
	}
	if resumed, cerr, serr := e.dial(t, nil, nil); !resumed || cerr != nil || serr != nil {
		t.Fatalf("after the full handshake: resumed %v, %v, %v", resumed, cerr, serr)
	}
}

// TestResumptionRefusals: a resumed handshake fails when either end no longer expects the
// ticket's identity, when either MAC is altered, or when the server resumes a ticket the
// client did not spend; an expired ticket is not spent.
func TestResumptionRefusals(t *testing.T) {
	flip := func(at func([]byte) int) func([]byte) []byte {
		return func(m []byte) []byte {
			m = bytes.Clone(m)
			m[at(m)] ^= 1
			return m
		}
	}
	last := func(m []byte) int { return len(m) - 1 }
	for _, tc := range []struct {
		name     string
		edit     func(e *resumeEnds)
		toClient func([]byte) []byte
		wantErr  bool
	}{
		{name: "server expects another dialer", edit: func(e *resumeEnds) {
			e.scfg.VerifyPeer = func(chain []*x509.Certificate) error { return errWrongIdentity }
		}, wantErr: true},
		{name: "client expects another host", edit: func(e *resumeEnds) {
			e.ccfg.VerifyPeer = func(chain []*x509.Certificate) error { return errWrongIdentity }
		}, wantErr: true},
		{name: "server MAC altered", toClient: flip(last), wantErr: true},
		{name: "server nonce altered", toClient: flip(func([]byte) int { return headerLen + 2 }), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newResumeEnds(t)
			if _, cerr, serr := e.dial(t, nil, nil); cerr != nil || serr != nil {
				t.Fatalf("first handshake: %v, %v", cerr, serr)
			}
			if tc.edit != nil {
				tc.edit(e)
			}
			_, cerr, serr := e.dial(t, nil, tc.toClient)
			if err := errors.Join(cerr, serr); (err != nil) != tc.wantErr || err != nil && !errors.Is(err, ErrAuthentication) {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
		})
	}

	t.Run("resumed answer to a full hello", func(t *testing.T) {
		e := newResumeEnds(t)
		if _, cerr, serr := e.dial(t, nil, nil); cerr != nil || serr != nil {
			t.Fatalf("first handshake: %v, %v", cerr, serr)
		}
		start, err := StartResumable(e.ccfg.Cipher, e.client, "service-1")
		if err != nil {
			t.Fatal(err)
		}
		_, sc := tcpPair(t)
		_, answer, err := AcceptHello(sc, e.scfg, start.Hello())
		if err != nil || answer[headerLen+1] != serverHelloResumed {
			t.Fatalf("resumption: %v", err)
		}
		other, err := StartResumable(e.ccfg.Cipher, NewTickets(0), "service-1") // spends nothing
		if err != nil {
			t.Fatal(err)
		}
		cc, _ := tcpPair(t)
		if _, err := other.Finish(cc, e.ccfg, answer); !errors.Is(err, ErrAuthentication) {
			t.Fatalf("a resumed ServerHello for a hello that spent nothing: %v", err)
		}
	})

	t.Run("expired ticket", func(t *testing.T) {
		e := newResumeEnds(t)
		if _, cerr, serr := e.dial(t, nil, nil); cerr != nil || serr != nil {
			t.Fatalf("first handshake: %v, %v", cerr, serr)
		}
		e.client.now = func() time.Time { return time.Now().Add(TicketLifetime + time.Minute) }
		start, err := StartResumable(e.ccfg.Cipher, e.client, "service-1")
		if err != nil {
			t.Fatal(err)
		}
		if start.Resumed() {
			t.Fatal("an expired ticket was spent")
		}
	})
}

// TestResumptionMixedVersions: a client that asks for tickets and a server that keeps none
// (or knows nothing of them) run the first version's full handshake; so do a client that
// does not ask and a server that keeps tickets, which then issues none.
func TestResumptionMixedVersions(t *testing.T) {
	e := newResumeEnds(t)
	e.scfg.Tickets = nil
	for range 2 {
		resumed, cerr, serr := e.dial(t, nil, nil)
		if resumed || cerr != nil || serr != nil {
			t.Fatalf("server without tickets: resumed %v, %v, %v", resumed, cerr, serr)
		}
	}
	if len(e.client.held) != 0 {
		t.Fatal("the client holds a ticket no server issued")
	}

	ccfg, scfg := configs(t)
	scfg.Tickets = NewTickets(0)
	if _, _, cerr, serr := foldedBoth(t, ccfg, scfg, nil, nil); cerr != nil || serr != nil {
		t.Fatalf("client without tickets: %v, %v", cerr, serr)
	}
	if len(scfg.Tickets.issued) != 0 {
		t.Fatal("the server issued a ticket nobody asked for")
	}
}

// TestTicketsBounds: a client holds at most maxTicketsPerKey tickets per key and a store at
// most its size, keeping count; a server at most maxTicketsPerKey per peer certificate and
// its size, the oldest going first, and none for a peer whose chain is too long to keep.
func TestTicketsBounds(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	peer := func(i int, size int) []*x509.Certificate {
		return []*x509.Certificate{{Raw: append([]byte{byte(i), byte(i >> 8)}, make([]byte, size)...)}}
	}
	id := func(i int) [ticketIDLen]byte { return [ticketIDLen]byte{byte(i), byte(i >> 8)} }
	idb := func(i int) []byte { b := id(i); return b[:] }

	s := NewTickets(3)
	for i := range 5 {
		s.issue(&ticket{id: id(i), peerChain: peer(i, 10), expires: exp})
	}
	if len(s.issued) != 3 || s.redeem(idb(1)) != nil || s.redeem(idb(4)) == nil {
		t.Fatalf("server store: %d tickets, or the wrong ones kept", len(s.issued))
	}
	one := NewTickets(0)
	for i := range maxTicketsPerKey + 5 {
		one.issue(&ticket{id: id(i), peerChain: peer(7, 10), expires: exp})
	}
	one.issue(&ticket{id: id(1000), peerChain: peer(8, maxTicketChain), expires: exp})
	if len(one.issued) != maxTicketsPerKey || one.redeem(idb(4)) != nil || one.redeem(idb(5)) == nil {
		t.Fatalf("one peer has %d tickets, or not its newest", len(one.issued))
	}
	if one.redeem(idb(1000)) != nil {
		t.Fatal("a ticket was kept for a chain over the bound")
	}

	for i := range 5 {
		s.hold(&ticket{id: id(i), key: string(rune('a' + i)), expires: exp})
	}
	for range 100 {
		s.hold(&ticket{id: id(9), key: "e", expires: exp})
	}
	count := 0
	for _, l := range s.held {
		count += len(l)
	}
	if s.nheld != count || count > 3 || len(s.held["e"]) == 0 {
		t.Fatalf("client store counts %d tickets, holds %d (at most 3), %d of the key just added", s.nheld, count, len(s.held["e"]))
	}
	big := NewTickets(0)
	for i := range maxTicketsPerKey + 5 {
		big.hold(&ticket{id: id(i), key: "k", expires: exp})
	}
	if n := len(big.held["k"]); n != maxTicketsPerKey || big.nheld != n || big.take("k").id[0] != 5 {
		t.Fatalf("one key holds %d tickets (counted %d), or not the oldest kept first", n, big.nheld)
	}
}

// TestResumptionFallsBack: a host whose check refuses the identity a ticket was issued for
// runs the full exchange instead, which succeeds when the dialer's own chain passes; a
// dialer the host refuses keeps no ticket from that handshake.
func TestResumptionFallsBack(t *testing.T) {
	e := newResumeEnds(t)
	if _, cerr, serr := e.dial(t, nil, nil); cerr != nil || serr != nil {
		t.Fatalf("first handshake: %v, %v", cerr, serr)
	}
	verify := e.scfg.VerifyPeer
	refused := false
	e.scfg.VerifyPeer = func(chain []*x509.Certificate) error {
		if !refused {
			refused = true
			return errWrongIdentity
		}
		return verify(chain)
	}
	if resumed, cerr, serr := e.dial(t, nil, nil); resumed || !refused || cerr != nil || serr != nil {
		t.Fatalf("resumed %v, refused %v, %v, %v; want a full handshake", resumed, refused, cerr, serr)
	}

	e.client = NewTickets(0)
	e.scfg.VerifyPeer = func([]*x509.Certificate) error { return errWrongIdentity }
	if _, cerr, serr := e.dial(t, nil, nil); cerr == nil || serr == nil {
		t.Fatalf("a refused dialer: %v, %v", cerr, serr)
	}
	if len(e.client.held) != 0 {
		t.Fatal("the dialer keeps a ticket of a handshake the host refused")
	}
}

// TestResumingHelloParsesAsFirstVersion: a ClientHello that asks for a ticket and spends one
// is, to a server of the first version (which refuses anything after the cipher list and
// ignores ciphers it does not know), a hello with ciphers it ignores.
func TestResumingHelloParsesAsFirstVersion(t *testing.T) {
	e := newResumeEnds(t)
	if _, cerr, serr := e.dial(t, nil, nil); cerr != nil || serr != nil {
		t.Fatalf("first handshake: %v, %v", cerr, serr)
	}
	start, err := StartResumable(CipherAuto, e.client, "service-1")
	if err != nil || !start.Resumed() {
		t.Fatalf("no ticket spent: %v", err)
	}
	s := cryptobyte.String(start.hello)
	var version uint8
	var key, offered []byte
	if !s.ReadUint8(&version) || !s.ReadBytes(&key, keyLen) || !s.ReadUint8LengthPrefixed((*cryptobyte.String)(&offered)) || !s.Empty() {
		t.Fatal("a first-version server would refuse the hello as malformed")
	}
	if _, err := chooseCipher(CipherAuto, offered); err != nil || Cipher(offered[0]) != cipherPreference(CipherAuto)[0] {
		t.Fatalf("a first-version server would not choose a cipher: %v", err)
	}
}
