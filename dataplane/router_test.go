package dataplane

import (
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// exchange is a server that sends its own data while it reads the client's, then reports
// the digest of what it read.
type exchange struct {
	ln   net.Listener
	down []byte
	got  chan [32]byte
}

func newExchange(t testing.TB, size int) *exchange {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	x := &exchange{ln: ln, down: make([]byte, size), got: make(chan [32]byte, 16)}
	rand.Read(x.down)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var wg sync.WaitGroup
				wg.Go(func() { c.Write(x.down); c.(*net.TCPConn).CloseWrite() })
				h := sha256.New()
				io.Copy(h, c)
				wg.Wait() // close only once both directions are done
				var sum [32]byte
				copy(sum[:], h.Sum(nil))
				x.got <- sum
			}()
		}
	}()
	return x
}

// run connects through addr, sends size random bytes while reading the server's, and checks
// both directions arrived intact.
func (x *exchange) run(t testing.TB, addr string, size int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	up := make([]byte, size)
	rand.Read(up)
	var wg sync.WaitGroup
	wg.Go(func() { c.Write(up); c.(*net.TCPConn).CloseWrite() })
	h := sha256.New()
	n, err := io.Copy(h, c)
	wg.Wait()
	if err != nil || n != int64(len(x.down)) || [32]byte(h.Sum(nil)) != sha256.Sum256(x.down) {
		t.Fatalf("downstream: %d of %d bytes, %v", n, len(x.down), err)
	}
	select {
	case sum := <-x.got:
		if sum != sha256.Sum256(up) {
			t.Fatal("upstream data differs")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not finish reading")
	}
}

// line builds routers A–B–C: A dials B (group ab) and runs the proxy tunnel, C dials B
// (group bc), B listens for both; there is no A–C link.
func line(t testing.TB, transport string, split bool) (*testNet, *exchange, string) {
	n := newTestNet(t)
	splitText := "false"
	if split {
		splitText = "true"
	}
	n.addRouter("B", false, `link:
  listeners:
    - binding: transport
      bind: `+transport+`:127.0.0.1:{{port}}
      advertise: `+transport+`:127.0.0.1:{{same}}
      groups: [ab, bc]
`)
	n.addRouter("A", true, `link:
  dialers:
    - binding: transport
      groups: [ab]
      split: `+splitText+`
listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [data:{{port}}]
`)
	n.addRouter("C", false, `link:
  dialers:
    - binding: transport
      groups: [bc]
      split: `+splitText+`
`)
	waitFor(t, "links A–B and C–B", func() bool { return n.linked("A", "B") && n.linked("C", "B") })
	x := newExchange(t, 64<<20)
	n.service("data", "C", x.ln.Addr().String())
	return n, x, n.routers["A"].r.ProxyAddress("data")
}

func TestLineCarriesBothWays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		transport string
		split     bool
	}{{"tls-split", "tls", true}, {"tls-single", "tls", false}, {"quic-split", "quic", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n, x, addr := line(t, tc.transport, tc.split)
			x.run(t, addr, 64<<20)
			_ = n
		})
	}
}
