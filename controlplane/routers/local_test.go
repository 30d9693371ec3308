package routers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/testutil"
)

// A co-located router's channel over ConnectLocal is admitted by its certificate, shows the
// router online, refuses a certificate that is not the router's current one, ends when the
// controller stops, and cannot be opened afterwards.
func TestConnectLocal(t *testing.T) {
	t.Parallel()
	e := start(t)
	id, cert := e.enroll(t, "er1")
	local := func(t *testing.T, certIndex int) *ctrlproto.Channel {
		t.Helper()
		leaf := cert.Leaf
		if certIndex != 0 {
			leaf = testutil.CA{CA: e.ctrl.CA()}.Cert(t, id, pki.Client).Leaf
		}
		conn, err := e.ctrl.ConnectLocal(leaf)
		if err != nil {
			t.Fatal(err)
		}
		ch := ctrlproto.New(context.Background(), conn, quietLog(), ctrlproto.Options{RequestTimeout: 5 * time.Second})
		ch.Start()
		t.Cleanup(func() { ch.Close() })
		return ch
	}

	// A certificate of another CA is refused before any channel, as the TLS listener would.
	other := testutil.NewCA(t)
	if conn, err := e.ctrl.ConnectLocal(other.Cert(t, id, pki.Client).Leaf); err == nil {
		conn.Close()
		t.Fatal("ConnectLocal admitted a certificate of a CA the controller does not trust")
	}

	foreign := local(t, 1)
	if reply, err := hello(foreign, id); err == nil {
		t.Fatalf("Hello of a certificate that is not the router's answered: %+v", reply)
	}
	testutil.Eventually(t, "the refusal logged", func() bool {
		return strings.Contains(e.logs.String(), "not the current certificate of an enrolled edge router")
	})

	ch := local(t, 0)
	if reply, err := hello(ch, id); err != nil || !reply.Accepted {
		t.Fatalf("Hello over the in-process channel: %+v, %v", reply, err)
	}
	if !e.view(t, id).IsOnline {
		t.Fatal("the co-located router is not online")
	}
	e.stop()
	if err := waitClosed(t, ch); !errors.Is(err, ctrlproto.ErrPeerClosed) {
		t.Fatalf("Err = %v after the controller stopped", err)
	}
	if _, err := e.ctrl.ConnectLocal(cert.Leaf); err == nil {
		t.Fatal("ConnectLocal succeeded after the controller stopped")
	}
}
