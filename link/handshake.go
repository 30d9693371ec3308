package link

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// After TLS, the dialer sends a hello naming itself, the link and the connection's role
// (and, for a payload connection, which of the link's payload connections it is); the
// listener checks it against the certificate the dialer presented and answers with its own
// id, or with the reason it refuses, and then closes. Both messages are JSON preceded by
// their length as a big-endian uint16, and both are read under a deadline.

// Role is what a connection of a link carries.
type Role string

const (
	RoleSingle  Role = "single"  // every frame (split: false)
	RolePayload Role = "payload" // Payload and Close frames
	RoleAck     Role = "ack"     // Ack, Probe and ProbeReply frames
)

const (
	helloVersion = 1
	maxHello     = 16 << 10
	maxLinkID    = 64
)

type hello struct {
	V        int      `json:"v"`
	RouterID string   `json:"routerId"`
	LinkID   string   `json:"linkId"`
	Role     Role     `json:"role"`
	Groups   []string `json:"groups"`
	// Payloads is the number of payload connections of a split link; 0 means 1, which is
	// what routers that predate striping dial. Index says which one a payload connection is.
	Payloads int `json:"payloads,omitempty"`
	Index    int `json:"index,omitempty"`
}

// payloads is the number of payload connections the hello announces.
func (h hello) payloads() int { return max(h.Payloads, 1) }

type helloReply struct {
	V        int    `json:"v"`
	RouterID string `json:"routerId"`
	Error    string `json:"error,omitempty"`
}

// clientHandshake sends h on s and reads the answer, which must come from router peerID.
func clientHandshake(s stream, h hello, peerID string, timeout time.Duration) error {
	if err := s.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if err := writeMessage(s, h); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	var r helloReply
	if err := readMessage(s, &r); err != nil {
		return fmt.Errorf("read hello reply: %w", err)
	}
	switch {
	case r.Error != "":
		return fmt.Errorf("%w by router %q: %s", ErrRefused, peerID, r.Error)
	case r.V != helloVersion:
		return fmt.Errorf("router %q answered with handshake version %d; this router speaks %d", peerID, r.V, helloVersion)
	case r.RouterID != peerID:
		return fmt.Errorf("%w: dialed router %q but %q answered", ErrWrongPeer, peerID, r.RouterID)
	}
	return s.SetDeadline(time.Time{})
}

// serverHandshake reads the hello of a dialing router and answers it. A hello that does not
// match the certificate, names this router, or shares no group with groups is refused.
func serverHandshake(s stream, self string, groups []string, timeout time.Duration) (hello, error) {
	if err := s.SetDeadline(time.Now().Add(timeout)); err != nil {
		return hello{}, err
	}
	var h hello
	if err := readMessage(s, &h); err != nil {
		return h, fmt.Errorf("read hello: %w", err)
	}
	reply := helloReply{V: helloVersion, RouterID: self}
	if err := h.check(s.peerCertificate().Subject.CommonName, self, groups); err != nil {
		reply.Error = err.Error()
		if writeMessage(s, reply) == nil { // best effort: the dialer learns why
			lingerForPeer(s)
		}
		return h, err
	}
	if err := writeMessage(s, reply); err != nil {
		return h, fmt.Errorf("send hello reply: %w", err)
	}
	return h, s.SetDeadline(time.Time{})
}

// lingerForPeer ends the sending direction of s and waits, briefly, for the peer to close,
// so that a refusal reaches the dialer before the connection goes (closing a QUIC connection
// drops the data it has not sent yet).
func lingerForPeer(s stream) {
	s.CloseWrite()
	s.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(s, maxHello))
}

// check validates a hello received from the holder of a certificate naming certID.
func (h hello) check(certID, self string, groups []string) error {
	switch {
	case h.V != helloVersion:
		return fmt.Errorf("handshake version %d; this router speaks %d", h.V, helloVersion)
	case h.RouterID != certID:
		return fmt.Errorf("the hello claims router %q but the certificate names %q", h.RouterID, certID)
	case h.RouterID == self:
		return fmt.Errorf("router %q dialed itself", self)
	case h.LinkID == "" || len(h.LinkID) > maxLinkID:
		return fmt.Errorf("link id of %d bytes; want 1 to %d", len(h.LinkID), maxLinkID)
	case h.Role != RoleSingle && h.Role != RolePayload && h.Role != RoleAck:
		return fmt.Errorf("unknown connection role %q", h.Role)
	case h.Payloads < 0 || h.Payloads > MaxPayloadConns || (h.Role == RoleSingle && h.Payloads > 1):
		return fmt.Errorf("%d payload connections; want 1 to %d on a split link", h.Payloads, MaxPayloadConns)
	case h.Index < 0 || h.Index >= h.payloads() || (h.Role != RolePayload && h.Index != 0):
		return fmt.Errorf("%s connection with index %d of %d payload connections", h.Role, h.Index, h.payloads())
	case !intersect(h.Groups, groups):
		return fmt.Errorf("groups %q share none with the listener's %q", h.Groups, groups)
	}
	return nil
}

func intersect(a, b []string) bool {
	for _, g := range a {
		if slices.Contains(b, g) {
			return true
		}
	}
	return false
}

func writeMessage(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > maxHello {
		return fmt.Errorf("handshake message of %d bytes, more than %d", len(body), maxHello)
	}
	msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(body)), uint16(len(body)))
	_, err = w.Write(append(msg, body...))
	return err
}

func readMessage(r io.Reader, v any) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size == 0 || size > maxHello {
		return fmt.Errorf("handshake message of %d bytes; want 1 to %d", size, maxHello)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("handshake message: %w", err)
	}
	return nil
}
