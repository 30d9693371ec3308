package dataplane

import (
	"io"
	"testing"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// A client that half-closes, then closes (as `ziti tunnel` does: CloseWrite, then Close)
// ends its circuit: the host reads what it sent, then its writes fail once the linger
// passed.
func TestZitiFINThenClosedEndsCircuit(t *testing.T) {
	t.Parallel()
	s := newZitiTunnelHosted(t, 3*testutil.Patience)
	n, svc, ln, e, cl := s.n, s.svc, s.ln, s.e, s.cl
	zc, _, err := cl.connect(n.zitiSession(cl, e.r, svc.ID, "Dial"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	zc.write([]byte("last words"), 0)
	zc.write(nil, zitiproto.FlagFIN)
	var closeMsg zitiproto.Message
	closeMsg.SetState(zitiproto.ContentStateClosed, zc.id, "")
	if err := cl.send(&closeMsg); err != nil {
		t.Fatal(err)
	}
	c, _, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "last words" {
		t.Fatalf("the host read %q (%v)", b, err)
	}
	testutil.Eventually(t, "the host's writes to fail once the client closed", func() bool {
		_, err := c.Write([]byte("into the void"))
		return err != nil
	})
}
