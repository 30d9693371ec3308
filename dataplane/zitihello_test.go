package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// A hello larger than OpenZiti's cap (4192 bytes of body) is not admitted, even with a
// valid API session: the router closes the connection without a result.
func TestZitiHelloCapped(t *testing.T) {
	t.Parallel()
	n, _, dialerCert, _ := zitiNet(t, false)
	addr := n.routers["E"].r.SDKAddresses()[0]
	cl, err := n.connectZiti(addr, dialerCert) // the router knows the API session from here on
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(n.dir, "ca.pem"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{dialerCert}, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var h zitiproto.Message
	h.Reset(zitiproto.ContentHello)
	h.Sequence = -1
	h.Body = make([]byte, zitiproto.MaxHello+1)
	h.PutString(zitiproto.HeaderSessionToken, cl.api.Token)
	// The write may fail: the router closes once it read the cap, before the rest arrives.
	zitiproto.NewWriter(c).Write(&h)
	c.SetReadDeadline(time.Now().Add(testutil.Patience))
	var res zitiproto.Message
	if err := zitiproto.NewReader(c, nil).Read(&res); err == nil {
		t.Fatalf("a hello of %d bytes of body was answered: content type %d, success %v", len(h.Body), res.ContentType, res.Bool(zitiproto.HeaderResultSuccess))
	}
}
