package controlplane

import (
	"crypto/x509"
	"fmt"
	"net"

	"github.com/zmesh/zmesh/internal/socketpair"
)

// ConnectLocal opens the control channel of a router co-located in this process: one end of
// a socket pair is served as the control channel of the router whose client certificate is
// cert (admitted as over TLS, see routers.Server.ServeLocal), the other is returned for the
// router. Messages skip TLS and the TCP stack; the channel protocol is the same. It fails
// while the controller does not serve its control channel.
func (c *Controller) ConnectLocal(cert *x509.Certificate) (net.Conn, error) {
	ours, theirs, err := socketpair.New()
	if err != nil {
		return nil, fmt.Errorf("in-process control channel: %w", err)
	}
	if err := c.routers.ServeLocal(ours, cert); err != nil {
		ours.Close()
		theirs.Close()
		return nil, fmt.Errorf("in-process control channel: %w", err)
	}
	return theirs, nil
}
