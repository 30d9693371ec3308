package bench

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeLoopbackPort: the ports handed out lie below the kernel's ephemeral range, where no
// outgoing connection can take them, and can be bound.
func TestFreeLoopbackPort(t *testing.T) {
	low := ephemeralLow()
	for _, network := range []string{"tcp", "udp"} {
		port, err := freeLoopbackPort(network)
		if err != nil {
			t.Fatal(err)
		}
		if port < 1024 || port >= low {
			t.Fatalf("%s port %d is outside [1024, %d)", network, port, low)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if network == "udp" {
			pc, err := net.ListenPacket(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			pc.Close()
		} else {
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			ln.Close()
		}
	}
}
