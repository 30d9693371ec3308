package dataplane

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// On a service that requires encryption, an OpenZiti host bound without a key gets no
// circuit from a client that offered one: the Connect is refused naming the host's missing
// key (router H refuses the dial; the controller passes its failure as a dial failure, so
// the error code is 1), no StateConnected without a key is sent, and the host never sees a
// Dial.
func TestZitiEncryptedRefusedWithoutHostKey(t *testing.T) {
	t.Parallel()
	s := newZitiBound(t, true, nil)
	n, svc, e, host, dialer := s.n, s.svc, s.e, s.host, s.dialer
	_, reply, err := dialer.connect(n.zitiSession(dialer, e.r, svc.ID, "Dial"), bytes.Repeat([]byte{'d'}, 32), nil)
	if err == nil {
		t.Fatalf("connected to a host without a key; StateConnected carries key %v", reply.Bool(zitiproto.HeaderPublicKey))
	}
	if reply == nil || reply.ContentType != zitiproto.ContentStateClosed {
		t.Fatalf("the Connect was answered: %v", err)
	}
	if !strings.Contains(string(reply.Body), "bound without a key") {
		t.Fatalf("refused with %q, which does not name the host's missing key", reply.Body)
	}
	select {
	case d := <-host.dials:
		t.Fatalf("the keyless host got a Dial with key %v", d.Bool(zitiproto.HeaderPublicKey))
	case <-time.After(0):
	}
	testutil.Eventually(t, "no circuit left at router E", func() bool {
		for _, zc := range e.r.ziti.clients() {
			zc.mu.Lock()
			k := len(zc.circuits)
			zc.mu.Unlock()
			if k > 0 {
				return false
			}
		}
		return true
	})
}

// A client that offered a key is refused with error code 11 (encryption data missing) when
// its circuit comes back without the host's key, here a service without end-to-end
// encryption hosted by a tunneler: the client asked for encryption and would not get it.
func TestZitiKeyOfferAnsweredWithoutKeyRefused(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 2*testutil.Patience)
	n, svc, e, cl := s.n, s.svc, s.e, s.cl
	_, reply, err := cl.connect(n.zitiSession(cl, e.r, svc.ID, "Dial"), bytes.Repeat([]byte{'d'}, 32), nil)
	if err == nil {
		t.Fatal("a client that offered a key got StateConnected without the host's")
	}
	if code, _ := reply.Uint32(zitiproto.HeaderErrorCode); reply.ContentType != zitiproto.ContentStateClosed || code != zitiproto.ErrorEncryptionMissing {
		t.Fatalf("refused with content type %d, error code %d (%s); want StateClosed, code %d", reply.ContentType, code, reply.Body, zitiproto.ErrorEncryptionMissing)
	}
	h := n.routers["H"].r
	testutil.Eventually(t, "the refused circuit to end at router H", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.ends) == 0
	})
}
