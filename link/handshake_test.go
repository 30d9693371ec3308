package link

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
)

var transports = []string{config.TransportTLS, config.TransportQUIC}

func TestHandshake(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		for _, split := range []bool{true, false} {
			name := tr + "/split"
			if !split {
				name = tr + "/single"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ca := newCA(t)
				a := newNode(t, ca, "router-a", releaseAll, nil)
				b := newNode(t, ca, "router-b", releaseAll, nil)
				ln := b.listen(t, tr, 0)
				la, lb := connect(t, a, b, ln, split)

				if la.PeerID() != "router-b" || lb.PeerID() != "router-a" {
					t.Errorf("peer ids: a sees %q, b sees %q", la.PeerID(), lb.PeerID())
				}
				if !la.Dialed() || lb.Dialed() {
					t.Errorf("Dialed: a %v, b %v; want true, false", la.Dialed(), lb.Dialed())
				}
				if la.Transport() != tr || lb.Transport() != tr {
					t.Errorf("transport: a %q, b %q; want %q", la.Transport(), lb.Transport(), tr)
				}
				want := []Role{RoleSingle}
				if split {
					want = []Role{RolePayload, RolePayload, RoleAck} // DefaultPayloadConns
				}
				for _, l := range []*Link{la, lb} {
					if l.Split() != split {
						t.Errorf("%s: Split() = %v", l.reg.opts.Identity.RouterID, l.Split())
					}
					st := l.Stats()
					if len(st) != len(want) {
						t.Fatalf("%d connections, want %d", len(st), len(want))
					}
					for i := range st {
						if st[i].Role != want[i] {
							t.Errorf("connection %d has role %s, want %s", i, st[i].Role, want[i])
						}
						if st[i].Role == RolePayload && st[i].Index != i {
							t.Errorf("payload connection %d has index %d", i, st[i].Index)
						}
					}
					if n := l.PayloadConns(); n != max(len(want)-1, 1) {
						t.Errorf("%d payload connections", n)
					}
				}
				if a.reg.Get("router-b") != la || b.reg.Get("router-a") != lb {
					t.Error("the registries do not hold the links")
				}
			})
		}
	}
}

func TestHandshakeRefusesAnotherCA(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		for _, side := range []string{"dialer", "listener"} {
			t.Run(tr+"/"+side, func(t *testing.T) {
				t.Parallel()
				ca, other := newCA(t), newCA(t)
				aCA, bCA := ca, ca
				if side == "dialer" {
					aCA = other
				} else {
					bCA = other
				}
				a := newNode(t, aCA, "router-a", releaseAll, nil)
				b := newNode(t, bCA, "router-b", releaseAll, nil)
				// Each trusts the network CA only: the router from the other CA is a stranger.
				a.reg.opts.Identity.CAs = ca.ca.Pool()
				b.reg.opts.Identity.CAs = ca.ca.Pool()
				ln := b.listen(t, tr, 0)
				if _, err := a.dialOnce(t, targetOf("router-b", ln), true); err == nil {
					t.Fatal("the dial succeeded")
				} else {
					t.Logf("dial error: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
				if n := len(a.reg.Links()) + len(b.reg.Links()); n != 0 {
					t.Errorf("%d links registered", n)
				}
			})
		}
	}
}

func TestHandshakeRefusesClaimNotMatchingCertificate(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			b := newNode(t, ca, "router-b", releaseAll, nil)
			ln := b.listen(t, tr, 0)
			// Router x holds a valid certificate but claims to be router-a.
			x := ca.identity(t, "router-x")
			addr, _ := config.ParseAddress(targetOf("router-b", ln).Address, tr)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := dialStream(ctx, addr, netip.AddrPort{}, x.clientTLS("router-b"), 5*time.Second, nil)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer s.Close()
			h := hello{V: helloVersion, RouterID: "router-a", LinkID: "l1", Role: RoleSingle, Groups: []string{"default"}}
			err = clientHandshake(s, h, "router-b", 5*time.Second)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `certificate names "router-x"`) {
				t.Fatalf("handshake error %v; want a refusal naming the certificate", err)
			}
			if n := len(b.reg.Links()); n != 0 {
				t.Errorf("%d links registered", n)
			}
		})
	}
}

func TestHandshakeRefusesWrongRouter(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			a := newNode(t, ca, "router-a", releaseAll, nil)
			b := newNode(t, ca, "router-b", releaseAll, nil)
			ln := b.listen(t, tr, 0)
			// a means to dial router-c, but router-b listens at that address.
			_, err := a.dialOnce(t, targetOf("router-c", ln), true)
			if err == nil || !strings.Contains(err.Error(), `dialed router "router-c" but reached router "router-b"`) {
				t.Fatalf("dial error %v; want the wrong router named", err)
			}
			if tr == config.TransportTLS && !errors.Is(err, ErrWrongPeer) {
				t.Errorf("error %v does not wrap ErrWrongPeer", err)
			}
			time.Sleep(50 * time.Millisecond)
			if n := len(a.reg.Links()) + len(b.reg.Links()); n != 0 {
				t.Errorf("%d links registered", n)
			}
		})
	}
}

func TestHelloCheck(t *testing.T) {
	t.Parallel()
	good := hello{V: helloVersion, RouterID: "a", LinkID: "l", Role: RolePayload, Groups: []string{"x", "default"}}
	tests := []struct {
		name string
		edit func(*hello)
		cert string // the CommonName of the dialer's certificate
		want string
	}{
		{"good", func(*hello) {}, "a", ""},
		{"version", func(h *hello) { h.V = 2 }, "a", "version 2"},
		{"claim", func(h *hello) { h.RouterID = "c" }, "a", `claims router "c" but the certificate names "a"`},
		{"self", func(h *hello) { h.RouterID = "b" }, "b", "dialed itself"},
		{"no link id", func(h *hello) { h.LinkID = "" }, "a", "link id of 0 bytes"},
		{"long link id", func(h *hello) { h.LinkID = strings.Repeat("x", maxLinkID+1) }, "a", "link id of 65 bytes"},
		{"role", func(h *hello) { h.Role = "bulk" }, "a", `role "bulk"`},
		{"groups", func(h *hello) { h.Groups = []string{"x"} }, "a", "share none"},
		{"striped", func(h *hello) { h.Payloads, h.Index = 3, 2 }, "a", ""},
		{"payloads", func(h *hello) { h.Payloads = MaxPayloadConns + 1 }, "a", "9 payload connections"},
		{"negative payloads", func(h *hello) { h.Payloads = -1 }, "a", "-1 payload connections"},
		{"striped single", func(h *hello) { h.Role, h.Payloads = RoleSingle, 2 }, "a", "2 payload connections"},
		{"index", func(h *hello) { h.Payloads, h.Index = 2, 2 }, "a", "index 2 of 2"},
		{"negative index", func(h *hello) { h.Index = -1 }, "a", "index -1"},
		{"ack index", func(h *hello) { h.Role, h.Payloads, h.Index = RoleAck, 2, 1 }, "a", "ack connection with index 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := good
			tt.edit(&h)
			err := h.check(tt.cert, "b", []string{"default"})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("check: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("check: %v; want an error with %q", err, tt.want)
			}
		})
	}
}

func TestMessageRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	in := hello{V: 1, RouterID: "a", LinkID: "l", Role: RoleAck, Groups: []string{"g"}}
	if err := writeMessage(&buf, in); err != nil {
		t.Fatal(err)
	}
	var out hello
	if err := readMessage(&buf, &out); err != nil {
		t.Fatal(err)
	}
	if out.RouterID != in.RouterID || out.LinkID != in.LinkID || out.Role != in.Role || len(out.Groups) != 1 {
		t.Fatalf("read %+v, wrote %+v", out, in)
	}
	for _, bad := range [][]byte{{0, 0}, {0xff, 0xff}, {0, 5, '{'}, {0, 1, '['}} {
		if err := readMessage(bytes.NewReader(bad), &out); err == nil {
			t.Errorf("readMessage(%q) succeeded", bad)
		}
	}
}

func FuzzReadMessage(f *testing.F) {
	var buf bytes.Buffer
	writeMessage(&buf, hello{V: 1, RouterID: "a", LinkID: "l", Role: RoleSingle, Groups: []string{"default"}})
	f.Add(buf.Bytes())
	f.Add([]byte{0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h hello
		if err := readMessage(bytes.NewReader(data), &h); err != nil {
			return
		}
		h.check("a", "b", []string{"default"})
	})
}
