package dataplane

import (
	"testing"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/testutil"
)

// lineConfig shapes the line of routers A–B–C.
type lineConfig struct {
	transport string // tls or quic
	split     bool
	// dialer is added to both link dialers (A's and C's), indented as a dialer's keys
	// ("      key: value\n").
	dialer string
	// a, b and c are added to the configuration of each router (top-level sections).
	a, b, c string
	// ctl and renewAt are newTestNetWith's.
	ctl     *config.Controller
	renewAt string
}

// line builds routers A–B–C: A dials B (group ab) and runs the proxy tunnel for service
// "data", C dials B (group bc) and is the egress of "data" to a stream server, B listens for
// both; there is no A–C link. It returns the net, the server and the tunnel's address.
func line(t testing.TB, transport string, split bool) (*testNet, *streamServer, string) {
	return buildLine(t, lineConfig{transport: transport, split: split})
}

func buildLine(t testing.TB, lc lineConfig) (*testNet, *streamServer, string) {
	t.Helper()
	n := newTestNetWith(t, lc.ctl, lc.renewAt)
	splitText := "false"
	if lc.split {
		splitText = "true"
	}
	n.addRouter("B", false, `link:
  listeners:
    - binding: transport
      bind: `+lc.transport+`:127.0.0.1:{{port}}
      advertise: `+lc.transport+`:127.0.0.1:{{same}}
      groups: [ab, bc]
`+lc.b)
	n.addRouter("A", true, `link:
  dialers:
    - binding: transport
      groups: [ab]
      split: `+splitText+`
`+lc.dialer+`listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [data:{{port}}]
`+lc.a)
	n.addRouter("C", false, `link:
  dialers:
    - binding: transport
      groups: [bc]
      split: `+splitText+`
`+lc.dialer+lc.c)
	testutil.Eventually(t, "links A–B and C–B", func() bool { return n.linked("A", "B") && n.linked("C", "B") })
	srv := newStreamServer(t)
	n.service("data", "C", srv.addr())
	return n, srv, n.routers["A"].r.ProxyAddress("data")
}

// The line carries 256 MiB each way, every byte checked, over tls with split and single
// links and over quic.
func TestLineCarriesBothWays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		transport string
		split     bool
	}{{"tls-split", "tls", true}, {"tls-single", "tls", false}, {"quic-split", "quic", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, srv, addr := line(t, tc.transport, tc.split)
			const size = 256 << 20
			start := time.Now()
			if err := transfer(srv, addr, size, size, 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d MiB each way in %s", size>>20, time.Since(start).Round(time.Millisecond))
		})
	}
}
