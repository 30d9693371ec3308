// Package e2ee encrypts a circuit end to end, between the dialing end (an SDK Dial, or a router
// intercepting a client's traffic) and the hosting end (an SDK Listen, or a router in host
// mode), so that the routers forwarding the circuit can neither read nor undetectably alter,
// drop, reorder, replay or truncate what the ends exchange.
//
// Client and Server run a signed ephemeral-X25519 key exchange over the circuit (or resume an
// earlier one's session with a ticket, resume.go): each end
// proves it holds the private key of its identity certificate by signing the handshake
// transcript, which names both ephemeral keys, both roles, the protocol version and a context
// string (the circuit or service id), and each end hands the peer's chain to Config.VerifyPeer.
// The resulting Conn carries the stream as AEAD records (AES-256-GCM or ChaCha20-Poly1305)
// whose nonces are per-direction sequence numbers, and ends it with an authenticated
// close-write record, so that a truncated stream is told apart from a finished one. In
// datagram mode each Write is one record in one underlying message, for UDP services.
//
// Wire format. Every handshake message and every stream record is a frame
//
//	type uint8 | length uint24 (big endian) | body [length]byte
//
// The handshake is four messages, strictly alternating:
//
//	ClientHello    (C→S, type 1): version=1 uint8 | client X25519 key [32] | ciphers (uint8-prefixed list, preferred first)
//	ServerHello    (S→C, type 2): version=1 uint8 | server X25519 key [32] | cipher uint8 | chain | signature
//	ClientAuth     (C→S, type 3): chain | signature
//	ServerFinished (S→C, type 4): finished [32]
//
// where chain is a uint24-prefixed list of uint24-prefixed DER certificates (leaf first) and
// signature is uint16-prefixed. The transcript hash is SHA-256 over the protocol label, the
// uint16-prefixed context string, then the type byte and body of each message in order; a
// signature covers the role label ("... server signature" or "... client signature") and the
// transcript hash up to, not including, the signature itself (ECDSA and RSA-PSS over SHA-256 of
// that, Ed25519 over it directly). After ClientAuth, HKDF-SHA256 extracts a secret from the
// X25519 shared secret with the transcript hash as salt, and expands it into a key and an IV
// per direction and the server's finished value, which confirms to the client that the server
// accepted it and derived the same keys. A client with Config.FalseStart sends records right
// after ClientAuth and checks ServerFinished, which precedes the server's first record, in its
// first Read.
//
// ClientHello and ServerHello may instead travel outside the circuit, in the dial request and
// its answer (StartClient, AcceptHello, then each end's Finish), so that the key exchange adds
// no round trip to the dial. The messages and the transcript are the same: ClientHello names no
// context, so the client can make it before the circuit (whose id is the context) exists. What
// carries the hellos learns nothing a router on the circuit would not: they hold public keys,
// certificates and signatures.
//
// Resumption (resume.go): a ClientHello made by StartResumable ends its cipher list with the
// pseudo-cipher 0xFE, asking for a ticket, followed in the same list, when it spends one, by
// the ticket's id and a nonce (servers that do not resume ignore all of them as ciphers
// they do not know):
//
//	ciphers = offered ciphers | 0xFE | [ticket id [16] | client nonce [32]]
//
// A server with Config.Tickets answers such a hello with a ServerHello of version 2:
//
//	full:    version=2 | mode=0 | server X25519 key [32] | cipher | new ticket id (uint8-prefixed) | chain | signature
//	resumed: version=2 | mode=1 | server nonce [32] | cipher | new ticket id (uint8-prefixed) | mac [32]
//
// and a resumed ClientAuth is a mac [32]. Each mac is HMAC-SHA256 keyed by the spent ticket's
// secret over the role label ("... server resumption" or "... client resumption") and the
// transcript hash up to it; the key schedule then runs as after a full handshake, with the
// ticket's secret in place of the X25519 shared secret, and both ends expand the new ticket's
// secret from it ("resumption").
//
// A stream record is a frame of type data (0x20) or close-write (0x21) whose body is the AEAD
// ciphertext and tag of at most RecordSize plaintext bytes; its 4-byte header is the additional
// data and its nonce is the direction's IV XOR the record's implicit 64-bit sequence number. A
// datagram record is one message
//
//	type uint8 | sequence uint64 (big endian) | ciphertext and tag
//
// whose 9-byte header is the additional data; sequence numbers must strictly increase, so a
// lost datagram is tolerated but a replayed or reordered one is not.
package e2ee

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrAuthentication is wrapped by every error that reports a failed authentication: a record
// or handshake message altered, dropped, reordered or replayed on the path, a bad signature, or
// a peer identity rejected by Config.VerifyPeer. A Conn that reports it is unusable.
var ErrAuthentication = errors.New("e2ee: authentication failed")

// RecordSize is the most plaintext a stream record carries. Write splits larger buffers.
const RecordSize = 16 << 10

// DatagramOverhead is what datagram mode adds to each message: header and AEAD tag.
const DatagramOverhead = datagramHeaderLen + tagSize

// DefaultMaxDatagram is the largest datagram Write accepts unless Config.MaxDatagram says
// otherwise: what fits, sealed, in a 65535-byte message.
const DefaultMaxDatagram = 65535 - DatagramOverhead

// DefaultHandshakeTimeout bounds the handshake unless Config.HandshakeTimeout says otherwise.
const DefaultHandshakeTimeout = 10 * time.Second

// Cipher selects the AEAD that protects records.
type Cipher uint8

const (
	// CipherAuto lets the ends choose: AES-256-GCM when both have AES hardware, else
	// ChaCha20-Poly1305.
	CipherAuto Cipher = iota
	// CipherAES256GCM forces AES-256-GCM.
	CipherAES256GCM
	// CipherChaCha20Poly1305 forces ChaCha20-Poly1305.
	CipherChaCha20Poly1305
)

func (c Cipher) String() string {
	switch c {
	case CipherAuto:
		return "auto"
	case CipherAES256GCM:
		return "AES-256-GCM"
	case CipherChaCha20Poly1305:
		return "ChaCha20-Poly1305"
	}
	return fmt.Sprintf("Cipher(%d)", uint8(c))
}

// Config is one end's identity and expectations. Both ends must use the same Context,
// Datagram mode and (in datagram mode) MaxDatagram.
type Config struct {
	// Certificates is this end's identity chain, leaf first, sent to the peer as is.
	Certificates []*x509.Certificate
	// PrivateKey is the leaf's key (ECDSA, Ed25519 or RSA); it signs the handshake.
	PrivateKey crypto.Signer
	// VerifyPeer checks the peer's chain, leaf first: that it chains to the network's CA and
	// names the identity this end expects. It is required. Before calling it, the package has
	// checked that the peer holds the leaf's private key, and nothing else.
	VerifyPeer func(chain []*x509.Certificate) error
	// Chains, when set, is the cache VerifyPeer verifies chains with (ChainCache.Verify): a
	// peer chain it accepted before is taken from it instead of being parsed again.
	// VerifyPeer is still called on every handshake.
	Chains *ChainCache
	// Tickets, for a server, is where it keeps the resumption tickets it issues to clients
	// that ask for them (StartResumable) and redeems those they spend; nil issues none and
	// runs every handshake in full. A client's tickets go where its StartResumable said.
	Tickets *Tickets
	// FalseStart, for a client, ends the handshake once ClientAuth is sent, without waiting
	// for ServerFinished, as a TLS 1.3 client sends data after its Finished: Client returns
	// a round trip earlier, and what it writes is encrypted to the server that proved its
	// identity in ServerHello, which alone can decrypt it. The first Read checks the
	// ServerFinished that precedes the server's records, so that a server that rejected this
	// end (and sends none), or a path that altered the handshake, fails that Read (and every
	// later one) rather than Client. The server ignores it.
	FalseStart bool
	// Context binds the handshake to its purpose, e.g. the circuit or service id, so that a
	// handshake cannot be replayed into another.
	Context string
	// HandshakeTimeout bounds the handshake; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Cipher forces a record AEAD; CipherAuto chooses by hardware support. A client forcing
	// one offers only it; a server forcing one accepts only it.
	Cipher Cipher
	// Datagram selects datagram mode: the underlying conn keeps message boundaries, and each
	// Write and Read of the Conn is one message.
	Datagram bool
	// MaxDatagram is the largest datagram Write accepts in datagram mode and Read expects;
	// zero means DefaultMaxDatagram.
	MaxDatagram int
}

// check validates c and fills in its defaults.
func (c *Config) check() error {
	switch {
	case len(c.Certificates) == 0:
		return errors.New("e2ee: config has no certificate")
	case c.PrivateKey == nil:
		return errors.New("e2ee: config has no private key")
	case c.VerifyPeer == nil:
		return errors.New("e2ee: config has no VerifyPeer")
	case c.Cipher > CipherChaCha20Poly1305:
		return fmt.Errorf("e2ee: config has unknown cipher %v", c.Cipher)
	case len(c.Context) > 0xFFFF:
		return fmt.Errorf("e2ee: context of %d bytes is too long", len(c.Context))
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("e2ee: negative handshake timeout %v", c.HandshakeTimeout)
	case c.MaxDatagram < 0 || c.MaxDatagram > maxMaxDatagram:
		return fmt.Errorf("e2ee: MaxDatagram %d out of range [1, %d]", c.MaxDatagram, maxMaxDatagram)
	}
	leafKey, ok := c.Certificates[0].PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !leafKey.Equal(c.PrivateKey.Public()) {
		return errors.New("e2ee: the private key does not match the leaf certificate")
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.MaxDatagram == 0 {
		c.MaxDatagram = DefaultMaxDatagram
	}
	return nil
}
