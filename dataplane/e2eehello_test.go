package dataplane

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/e2ee"
	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/sdk"
	"github.com/zmesh/zmesh/tunnel"
)

// helloTamper makes the egress router rewrite the ClientHello of every offer it passes on:
// nil drops it, as a router that does not know the field would.
func helloTamper(rewrite func([]byte) []byte) *e2eeTamper {
	return &e2eeTamper{offer: func(o *ctrlproto.E2EEOffer) *ctrlproto.E2EEOffer {
		if o == nil {
			return nil
		}
		c := *o
		c.ZmeshHello = rewrite(o.ZmeshHello)
		return &c
	}}
}

// dialed checks a dial's outcome in case name: it reports whether the dial succeeded, as
// it must when ok; else it must fail on the host's signature, which does not verify at the
// dialer when a router altered the ClientHello the host answered.
func dialed(t *testing.T, name string, ok bool, err error) bool {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Fatalf("%s: %v", name, err)
	case !ok && (err == nil || !strings.Contains(err.Error(), "signature")):
		t.Fatalf("%s: dial: %v; want a failed signature", name, err)
	}
	return ok
}

// The hellos of zmesh's key exchange travel in the circuit request and its answer; where
// the host gets no ClientHello it runs the key exchange in-band, and where a router alters
// the key in it the host's signature fails at the dialer (which shows the host answered
// the hello it got). Both for an SDK dialing an SDK host through routers E and H, and for
// router A's tunnel dialing router H's tunnel host.
func TestE2EEHellos(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		tamper  *e2eeTamper
		ok      bool
		resumed bool // the tunnel's: the first dial's ticket spent
	}{
		{"carried in the dial", nil, true, false},
		{"carried again: resumed", nil, true, true},
		{"dropped: in-band", helloTamper(func([]byte) []byte { return nil }), true, false},
		{"altered", helloTamper(func(h []byte) []byte {
			h = bytes.Clone(h)
			h[4+1+5] ^= 1 // a byte of the client's X25519 key (after header and version)
			return h
		}), false, false},
	}

	t.Run("sdk", func(t *testing.T) {
		t.Parallel()
		n, svc, dialerCert, ctx, got := sdkEchoNet(t, false)
		dialer := openSDK(t, n, dialerCert)
		h := n.routers["H"].r
		for _, c := range cases {
			h.overlay.tamper.Store(c.tamper)
			conn, err := dialer.Dial(ctx, svc.Name)
			if !dialed(t, c.name, c.ok, err) {
				continue
			}
			conn.Write([]byte("zmesh to zmesh"))
			conn.CloseWrite()
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			back, err := io.ReadAll(conn)
			conn.Close()
			if err != nil || string(back) != "ZMESH TO ZMESH" || conn.Scheme() != sdk.SchemeZmesh {
				t.Fatalf("%s: read %q (%v) with scheme %q", c.name, back, err, conn.Scheme())
			}
			select {
			case a := <-got:
				if a.err != nil || a.conn.(*sdk.Conn).Scheme() != sdk.SchemeZmesh {
					t.Fatalf("%s: the host's end: %v, scheme %q", c.name, a.err, a.conn.(*sdk.Conn).Scheme())
				}
			case <-ctx.Done():
				t.Fatalf("%s: the host accepted nothing", c.name)
			}
		}
	})

	t.Run("tunnel", func(t *testing.T) {
		t.Parallel()
		ctx, n, svc, got := tunnelNet(t, false)
		a, h := n.routers["A"].r, n.routers["H"].r
		for _, c := range cases {
			h.overlay.tamper.Store(c.tamper)
			conn, err := a.overlay.Dial(ctx, tunnel.Service{ID: svc.ID, Name: svc.Name, EncryptionRequired: true, Dial: true}, tunnel.AppData{})
			if !dialed(t, c.name, c.ok, err) {
				continue
			}
			if ec, ok := conn.(*e2ee.Conn); !ok || ec.Resumed() != c.resumed {
				t.Fatalf("%s: the tunnel's dial is a %T, not zmesh's scheme resumed %v", c.name, conn, c.resumed)
			}
			conn.Write([]byte("tunnel to tunnel"))
			conn.(interface{ CloseWrite() error }).CloseWrite()
			back, err := io.ReadAll(conn)
			conn.Close()
			if err != nil || string(back) != "TUNNEL TO TUNNEL" {
				t.Fatalf("%s: read %q (%v)", c.name, back, err)
			}
			testutil.Eventually(t, c.name+": the host's end", func() bool {
				select {
				case r := <-got:
					if ec, ok := r.conn.(*e2ee.Conn); !ok || ec.Resumed() != c.resumed || r.err != nil || string(r.data) != "tunnel to tunnel" {
						t.Fatalf("%s: the host's end is a %T and read %q (%v)", c.name, r.conn, r.data, r.err)
					}
					return true
				default:
					return false
				}
			})
		}
	})
}
