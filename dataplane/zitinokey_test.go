package dataplane

import (
	"bytes"
	"io"
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

// A client that offers a key for a service that does not require end-to-end encryption
// (sdk-golang makes none for it) gets the circuit the service allows: StateConnected without
// a key, and bytes carried as they are.
func TestZitiKeyOfferOnPlainService(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 2*testutil.Patience)
	n, svc, e, cl := s.n, s.svc, s.e, s.cl
	zc, reply, err := cl.connect(n.zitiSession(cl, e.r, svc.ID, "Dial"), bytes.Repeat([]byte{'d'}, 32), nil)
	if err != nil {
		t.Fatalf("a key offered on a service without end-to-end encryption: %v", err)
	}
	if key, ok := reply.Header(zitiproto.HeaderPublicKey); ok {
		t.Fatalf("StateConnected carries a host key (%d bytes) on a service without end-to-end encryption", len(key))
	}
	c, _, err := s.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := zc.write([]byte("plain"), 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "plain" {
		t.Fatalf("the host read %q (%v), want %q", got, err, "plain")
	}
}
